// Launch interface of the decode (few rows per expert) grouped GEMM of the fused MoE
// (moe_decode.cu): the same GemmParams, prepared atoms and epilogues as moe_gemm.cuh, M-blocks of
// kDecodeRows (config.h) rows from moe_align, K split over the warps of a block (select_decode).
#pragma once
#include <cuda_runtime.h>

#include "cuda/config.h"
#include "cuda/moe_gemm.cuh"

namespace qmoe::cuda {

// Whether the decode kernel runs weights `fmt` in GEMM mode `mode` (moe_gemm.cuh's modes; fp4
// formats pass mode 0): 16-bit, int4 / int8 with per-chunk or channel scales (mode 1), fp8 (modes
// 1 and 3), NVFP4 / MXFP4. g_idx (mode 2) stays on moe_gemm.cu.
bool decode_supports(WFmt fmt, int mode);

// p.splits / p.ktiles_per_split from select_decode (ktiles_per_split a multiple of slab_ktiles);
// p.max_blocks counts M-blocks of kDecodeRows rows; max_rows bounds the valid rows of any M-block
// (<= kDecodeRows; numel is always a bound). sm90: the bulk-streaming kernel (decode90_use), else the
// register-ring one; both compute the same function.
// rows: M-block rows, 8, or 16 (sm90 only: two n8 token operands per dequantized weight fragment).
void launch_moe_decode(bool f16, WFmt fmt, int mode, int slab_ktiles, int max_rows, bool sm90, int rows,
                       const GemmParams& p, cudaStream_t s);
// Whether the sm_90 bulk-streaming kernel runs this GEMM (sm90 = true above): available, and two
// of its blocks fit on an SM (its shared memory: the ring, max_rows staged rows over the K range
// per split, the chunks' scales).
bool decode90_use(WFmt fmt, int mode, int chunk, int kp, int ktiles_per_split, int slab_ktiles, int max_rows,
                  bool zero, int rows = kDecodeRows);
// decode90_use for `d`, else for d's K range split further (2x, then 4x, whole slabs, at most 16
// splits) where that lets the bulk kernel fit two blocks on an SM: its staged rows grow with the K
// range (8 rows x K = 4096 x 2 B = 64 KiB), and a long K range otherwise falls back to the
// register-ring kernel. Updates d when it splits further; QMOE_CUDA_DECODE90_REFIT=0 turns the
// extra splits off (A/B measurements).
bool decode90_fit(WFmt fmt, int mode, int chunk, int kp, DecodeConfig& d, int max_rows, bool zero,
                  int rows = kDecodeRows);
// True on an sm_90 device when this binary holds the sm_90a decode kernel; QMOE_CUDA_DECODE90=0
// turns it off (A/B measurements, and the tests run both kernels).
bool decode90_available();

}  // namespace qmoe::cuda
