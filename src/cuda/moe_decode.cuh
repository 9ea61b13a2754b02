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
// p.max_blocks counts M-blocks of kDecodeRows rows.
void launch_moe_decode(bool f16, WFmt fmt, int mode, int slab_ktiles, const GemmParams& p, cudaStream_t s);

}  // namespace qmoe::cuda
