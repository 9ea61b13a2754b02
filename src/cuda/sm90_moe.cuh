// The Hopper (sm_90a) prefill path of the fused MoE (sm90_moe_gemm.cu): warp-specialized
// wgmma GEMMs fed by TMA, for 16-bit weights (HGMMA, bf16 / fp16) and fp8 e4m3 weights with fp8
// activations (QGMMA). Used for the large-M regime (Tile::kLarge) when the device is sm_90 and the
// layer's weights have a "plain" copy (prepare: [E][np][kp] rows in the prepared column order).
//
// Data flow of one set of experts:
//   sm90_gather: x (token rows) -> A[pos] in the order of moe_align's sorted ids (rows of one
//     expert contiguous; padding rows are not written): operand-dtype rows, or e4m3 codes + fp32 scales per
//     position (per token, per 1x128 group, or the expert's static scale);
//   GEMM1 (stage 1): h[pos] = act(A[pos] . w13[e]^T (+ b13)) for every position of the M-block;
//   (fp8: sm90_gather again, identity order: h -> e4m3 codes + scales)
//   GEMM2 (stage 2): o[slot] = (h[pos] . w2[e]^T (+ b2)) * router weight, slot = sorted_ids[pos].
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/config.h"

namespace qmoe::cuda {

struct Sm90Gemm {
  // A: rows in sorted order, [rows][a_pitch] elements of the operand type (e4m3 bytes for fp8)
  const void* a = nullptr;
  int a_pitch = 0;
  int a_rows = 0;                   // rows A holds (the align capacity)
  const float* row_scale = nullptr; // fp8: [rows][rs_groups] by sorted position
  int rs_groups = 1;
  // routing blocks (moe_align, block `block`: 128, or 64 for 16-bit / fp8 weights with few rows per
  // expert; the quantized-weight kernel takes 128 only)
  int block = 128;
  const int32_t* sorted_ids = nullptr;
  const int32_t* expert_ids = nullptr;
  const int32_t* num_post = nullptr;
  int numel = 0;
  int max_blocks = 0;
  // 1: a 128-row M-block with at most 64 live rows (an expert's last) runs on one consumer
  // warpgroup (the 16-bit / fp8 / INT8 kernel); 0 (QMOE_CUDA_HALF_TAIL=0, for measurements): on two
  int half_tail = 1;
  // the wq kernel's 128- / 256-row token tiles: 1 multiplies only the M-block's live token columns
  // rounded up to 32 (wgmma n32 .. n256: an expert's last M-block, or one expert's only one, often
  // holds a little more or less than half a tile); 0: the first half where at most half is live
  // (half_tail), else all. Bit-identical either way by construction. On by default since the
  // fifty-first session's H100 A/B (docs/gpu_logs/2026-12-07_s51: 1.031x geomean, up to 1.16x at
  // M = 4096); QMOE_CUDA_WQ_LIVE_COLS=0 turns it off. Its own kernels (sm90_moe_wq_kernel's LIVE), so
  // that the whole / half-tile ones keep their register allocation; now that those run only under
  // the switch, docs/gpu_logs/2026-12-08_s52/decode_smem_and_wq_q8_live_not_run.patch folds them into one
  // (and adds Q8), waiting for a GPU run.
  int live_cols = 0;
  // 1: a weight box that ends past N's rows (the last of N when np is not a multiple of 256, e.g.
  // gpt-oss-120b's N = 2880 / 5760) is loaded only as far as it holds rows: the streaming kernel
  // whole 64-row slices, the n256 tile kernels the first half when the rows end there (multiplied
  // as n128 on 128-row M-blocks, one QGMMA half for fp8). Rows past the loaded ones are past N:
  // whatever the stale shared memory gives them is never stored, so the result is bit-identical;
  // 0 (QMOE_CUDA_TRIM_BOX=0, measurements): whole boxes.
  int trim_box = 1;
  // the tile kernel and the one-CTA wq kernels: non-null, one CTA per SM takes tiles from this
  // counter (zero at launch) and loads the next tile's stages during an epilogue; null
  // (QMOE_CUDA_PERSIST=0, measurements): one CTA per tile
  int32_t* tile_counter = nullptr;
  // streaming kernel: 1 reads each weight box with an L2 evict-first policy (read once), so the
  // M-block's token tiles, read again for every box, stay in L2; 0 (QMOE_CUDA_STREAM_HINT=0): default policy
  int w_evict_first = 1;
  // streaming kernel: 1 loads the token tiles with an L2 evict-last policy (ncu, gpt-oss-120b fp8
  // M = 64 without: 5% of the DRAM bytes were token tiles read again per weight box); 0: default
  // policy (QMOE_CUDA_STREAM_XHINT=0 / 1 overrides the rule, config.h stream_x_evict_last)
  int x_evict_last = 1;
  // plain weights (tiled: sm90_plain_bytes), logical n x k
  const void* w = nullptr;
  int num_experts = 0;
  int np = 0, kp = 0, n = 0, k = 0;
  int interleaved = 0, half = 0;
  const float* col_scale = nullptr; // fp8: [E][kg][nsc] (cuda_moe.h DevProj)
  int kg = 0, kchunk = 0, nsc = 0, n_div = 1;
  const float* bias = nullptr;      // [E][n] original rows
  // quantized-weight kernel (launch_sm90_wq_gemm): the prepared atoms (cuda_moe.h) in `w`
  const float* zero = nullptr;      // [E][kg][n] asym zero points, null = symmetric
  int chunk = 1 << 30;              // k-columns per weight scale group (multiple of 64; 1 << 30 = channel)
  // 1: int4 WNA16 group scales (all exact operand-dtype values: DevProj::scale16) are folded into the
  // dequantized operands, one rounding per weight (numerics.md "Products"); 0: promoted in fp32
  int fold = 0;
  // 1: W4A8 with fp8 per-token activations on QGMMA (int4 atoms converted to e4m3 in registers; `a`
  // holds e4m3 codes in the Sm90Gather::kperm order, a_pitch bytes per row); 0: exact 16-bit values
  // on HGMMA (sm90_moe_gemm.cu "Q8", numerics.md "Products")
  int q8 = 0;
  // 1: fp8 block weight scales by 64-row tile half (sm90_moe_gemm.cu "Block weight scales"), where
  // the blocks allow; 0: per column (QMOE_CUDA_FP8_BLOCK_SLOTS=0). Measured 3.1-6.2x on fp8-block
  // layers at M >= 1024 (docs/perf.md, twentieth session; the default since the twenty-first).
  int block_slots = 0;
  // 1: the tile kernel's epilogue stores 4 consecutive columns per lane (lane pairs swap halves of
  // two column groups: twice the bytes per row per store); 0 (QMOE_CUDA_WIDE_STORE=0, measurements):
  // 2 columns per lane, as the accumulators lie. Bit-identical either way.
  int wide_store = 1;
  // 1: fp8 with one scale pair for all of K (per-tensor / per-channel weights, per-tensor /
  // per-token activations, no CTA pairs) runs n256 tiles: 128 x 256 with each consumer warpgroup's
  // n256 as two n128 QGMMA halves, 64 x 256 with each warpgroup one n128 half (sm90_moe_gemm.cu
  // Sm90Cfg "W8"); 0 (QMOE_CUDA_FP8_WIDE=0, measurements): 128 x 128 / 64 x 128. Bit-identical
  // either way (the same k-block order into fp32). The plan sets it (ExpertsPlan::fp8_wide).
  int fp8_wide = 0;
  // the 16-bit / fp8 tile kernel with 128-row M-blocks and A by TMA: 1 runs CTA pairs (clusters of
  // two) on adjacent N tiles of one M-block, each CTA loading half of the A box's rows into both (TMA
  // multicast: A read from L2 once per pair); 0: every CTA loads its own A. Bit-identical either way
  // (the same operands and arithmetic per tile).
  int cluster2 = 0;
  // the tile kernel, 16-bit A only: non-null, the producer warpgroup copies each M-block's rows
  // straight from the token rows (row sorted_ids[pos] / a_row_div of a_src, a_src_pitch elements
  // apart; cp.async, 16 bytes per copy, zeros past k and for padding positions) into the stages,
  // in the 128B-swizzled layout TMA writes, so the layer needs no gather of x; null: A by TMA.
  const void* a_src = nullptr;
  int a_src_pitch = 0;
  int a_row_div = 1;
  // epilogue
  int stage = 1;                    // 1: h[pos][ldo] = act(...) (operand dtype); 2: o[slot][ldo] f32 * topk_w
  int act = 0;
  void* out = nullptr;
  int ldo = 0;
  const float* topk_w = nullptr;
};

// sm90_gather: one row per sorted position.
struct Sm90Gather {
  const void* x = nullptr;          // source rows (operand dtype), [..][ldx]
  int ldx = 0, cols = 0;
  int by_sorted = 1;                // 1: source row = sorted_ids[pos] / row_div; 0: source row = pos
  int row_div = 1;
  const float* topk_w = nullptr;    // weight on input (Llama 4), by slot; null = none
  const int32_t* sorted_ids = nullptr;
  const int32_t* expert_ids = nullptr;  // align block `block` (as Sm90Gemm::block)
  int block = 128;
  const int32_t* num_post = nullptr;
  int numel = 0;
  int rows = 0;                     // positions (grid)
  // 0 copy, 1 fp8 per token, 2 fp8 per 1x128, 3 fp8 static, 4 int8 per token, 5 NVFP4 per 16
  // (the M-block's expert's static multiplier; out16 only)
  int quant = 0;
  const float* in_scale = nullptr;  // static (3) / NVFP4 multiplier A (5): per local expert
  // quant 1 / 4 / 5: 0 = codes (e4m3 / int8 bytes: QGMMA / IGMMA operands), 1 = each quantized
  // value as an exact operand-dtype value (bf16 / fp16: the quantized-weight kernel's B operand,
  // as act_prep / act_prep_q write them) with its scale (NVFP4: 1 / G) in `scales`
  int out16 = 0;
  // 1 (W4A8 on QGMMA, Sm90Gemm::q8; quant 1 / 3 codes): within each 16 columns, position 4q + 2u + b
  // holds column 8u + 2q + b (the k order of the int4 atoms' words), and a row's codes run to a
  // multiple of 16 columns (zeros for the columns past cols); sm90_kperm_pos
  int kperm = 0;
  void* out = nullptr;              // [rows][out_pitch] operand dtype (quant 0, out16) or bytes
  int out_pitch = 0;
  float* scales = nullptr;          // [rows][groups]
  int groups = 1;
  // Rows quantized once per token (fp8 per token / per 1x128 without weight on input): the first
  // pass quantizes token pos into row pos (sorted_ids and num_post null: every position is live,
  // by_sorted 0); the second copies: codes non-null, position pos takes token sorted_ids[pos] /
  // row_div's e4m3 codes (rows of codes_pitch bytes) and its `groups` scales from code_scales,
  // bit for bit what quantizing the slot's row gives (the same row, the same function).
  const void* codes = nullptr;
  int codes_pitch = 0;
  const float* code_scales = nullptr;
};

// Plain weight copy of the Hopper path, tiled so that every TMA box is one contiguous 32 KiB piece
// of memory (a row-major [N][K] copy made each box 256 strided 128-byte pieces, which streamed from
// HBM at ~40-60% of the read rate): [E][nt][kt][256 rows][128 bytes], nt = ceil(np / 256), kt =
// ceil(kp * bytes / 128); rows in the prepared column order, zeros outside N x K. Each 8-row,
// 1024-byte group is stored 128B-swizzled (row r's 16-byte chunk c at chunk c ^ (r & 7), TMA's
// SWIZZLE_128B pattern), so the kernels load a box with one 1-D bulk copy (a 2-D TMA box of the same
// bytes streamed 4-7% slower on the H200: bench/gpu_ceiling.cu ring2).
__host__ __device__ inline int sm90_plain_nt(int np) { return (np + 255) / 256; }
// fp8 stages read two k tiles: an even count keeps the last stage inside the expert's rows
__host__ __device__ inline int sm90_plain_kt(int kp, int bits) {
  const int kt = (kp * (bits / 8) + 127) / 128;
  return bits == 8 ? (kt + 1) / 2 * 2 : kt;
}
inline size_t sm90_plain_bytes(int E, int np, int kp, int bits) {
  return static_cast<size_t>(E) * sm90_plain_nt(np) * sm90_plain_kt(kp, bits) * 256 * 128;
}

// Columns a Sm90Gather::kperm row holds: cols rounded up to whole 16-column blocks.
__host__ __device__ inline int sm90_kperm_cols(int cols) { return (cols + 15) / 16 * 16; }
// Position of column i in a Sm90Gather::kperm row.
__host__ __device__ inline int sm90_kperm_pos(int i) {
  return (i & ~15) | (((i >> 1) & 3) << 2) | (((i >> 3) & 1) << 1) | (i & 1);
}

// True when this process can run the sm_90a kernels (an sm_90 device and the 90a code present).
// QMOE_CUDA_WGMMA=0 turns the path off.
bool sm90_available();
// An sm_90 device, and `kernel` (a __global__ function) holds sm_90a code in this binary.
bool sm90_kernel_runs(const void* kernel);
// Whether the Hopper path can run this projection (format, mode, accumulation chunk); see the .cu.
bool sm90_supports(WFmt fmt, int mode, int chunk);
// kind: 0 16-bit weights (HGMMA), 1 fp8 (QGMMA), 2 INT8 W8A8 (IGMMA: signed int8 x int8, exact
// int32 sums over all of K, then scaled once as numerics.md's channel case: (part * s_w) * s_a).
void launch_sm90_gemm(bool f16, int kind, const Sm90Gemm& p, cudaStream_t s);
// int4 / int8 weights (prepared atoms: WNA16, W4A8) and fp4 units (NVFP4, MXFP4) on wgmma with the
// weights as the register operand: D^T[n][token] = W[n][:] . X[token][:], 128 weight rows x 128
// tokens per CTA (sm90_moe_gemm.cu). Quantized activations (W4A8, W4A4) arrive as exact 16-bit
// values (Sm90Gather::out16) with row_scale their per-position scales.
void launch_sm90_wq_gemm(bool f16, WFmt fmt, const Sm90Gemm& p, cudaStream_t s);
// Whether the Q8 form (Sm90Gemm::q8) runs M-blocks of `block` rows with channel (or group) scales.
bool sm90_wq_q8_supports(int block, bool channel);
// The streaming kernel for memory-bound M (sm90_moe_gemm.cu): 16-bit (kind 0), fp8 (kind 1) or INT8
// W8A8 weights (kind 2) with one scale pair for all of K, M-blocks of 16 or 64 rows (p.block),
// weights as wgmma's A. Kind 2 with 64-row M-blocks also runs on launch_sm90_gemm.
void launch_sm90_stream(bool f16, int kind, const Sm90Gemm& p, cudaStream_t s);
void launch_sm90_gather(bool f16, const Sm90Gather& p, cudaStream_t s);
// Whether p runs on the one-warp-per-position gather (16-byte aligned rows, quant 0..4).
bool sm90_gather_warp_ok(const Sm90Gather& p);
// Plain weight copy for the Hopper path (tiled, above) from canonical src[e][N][K] (bits 16 or 8),
// rows in the prepared column order (w13 interleaved by 8); dst holds sm90_plain_bytes().
// xor_mask 0x80 turns offset-128 int8 codes u into signed bytes u - 128.
void launch_make_plain(const void* src, int bits, int E, int N, int K, int np, int kp, bool interleaved, int half,
                       void* dst, cudaStream_t s, int xor_mask = 0);

}  // namespace qmoe::cuda
