// Launch interface of the grouped (per-expert) GEMM kernel of the fused MoE (moe_gemm.cu).
// One kernel family does both GEMMs: rows are gathered through moe_align's sorted_token_ids, the
// weights are the prepared atoms of one expert per M-block; the epilogue is GEMM1's activation
// (gate and up are interleaved in the tile) or GEMM2's router weight.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/config.h"

namespace qmoe::cuda {

struct GemmParams {
  // rows
  const void* a = nullptr;          // A [rows][lda], operand dtype (fp8 W8A8 weights: fp16 values
                                    // whatever the model dtype, device_common.cuh OperandOf)
  int lda = 0;
  int a_row_div = 1;                // A row = sorted_id / a_row_div
  const int32_t* sorted_ids = nullptr;
  const int32_t* expert_ids = nullptr;
  const int32_t* num_post = nullptr;
  int numel = 0;                    // sentinel value of sorted_ids (direct routing: any value >= numel)
  int max_blocks = 0;               // M-blocks in the grid
  // direct routing (the sm_90 bulk decode kernel, one token: no align): M-block b holds slot b
  // alone (sorted_ids = direct_rows_table()), its expert is direct_emap[direct_ids[b]] (or
  // direct_ids[b] without a map); expert_ids / num_post are unused
  const int32_t* direct_ids = nullptr;
  const int32_t* direct_emap = nullptr;
  // weights
  const uint8_t* w = nullptr;
  int np = 0, kp = 0;               // padded dims of the atoms
  int n = 0, k = 0;                 // logical
  int interleaved = 0, half = 0;    // w13: rows interleaved by 8, half = I
  const float* col_scale = nullptr; // [E][kg][nsc]
  int kg = 0, kchunk = 0, nsc = 0, n_div = 1;
  const float* zero = nullptr;      // [E][kg][n]
  // DevProj::scale_t / zero_t ([E][np / 32][ceil(kp / kchunk)][32]): the sm_90 bulk decode kernel
  // copies an item's per-chunk scales / zero points from here in one bulk copy each (launch_one90
  // clears them where the chunks are not the groups)
  const float* col_tiled = nullptr;
  const float* zero_tiled = nullptr;
  const int32_t* g_idx = nullptr;   // [E][k]
  const float* bias = nullptr;      // [E][n]
  const float* row_scale = nullptr; // fp8 dynamic: [A rows][rs_groups]
  int rs_groups = 1, rs_kchunk = 0; // rs_kchunk: k-columns per row-scale group (0 = whole row)
  const float* in_scale = nullptr;  // fp8 static: one scale per expert (A quantized with it)
  // fp8 weights with 16-bit activations (FP8 weight-only): A holds the model-dtype activations, no
  // row scales; a bf16 model's fp8 kernels then run on bf16 operands (device_common.cuh BF16A16)
  int a16 = 0;
  // fp8 weights with one scale pair for K (mode 3) on the sm_90 bulk decode kernel: A is GEMM2's h
  // in the model dtype, quantized to e4m3 while the kernel stages it, as act_prep would (1: dynamic
  // per token, 3: static per tensor with in_scale; moe_forward.cu); the kernel writes the rows'
  // scales to row_scale (one per row), where its epilogue reads them
  int q_rows = 0;
  // GEMM1 before a q_rows GEMM2 (dynamic per token): the epilogue keeps each h row's absolute
  // maximum here (atomic, on zeroed memory: act_prep of x clears it); GEMM2 reads it. [rows]
  float* h_amax = nullptr;
  int chunk = 1 << 30;              // accumulation chunk along K (multiple of 16)
  int ids_ready = 0;               // expert ids / num_post complete before pdl_wait (decode90 streams early)
  // GEMM1 on the sm_90 bulk decode kernel before a K-split GEMM2: GEMM2's fp32 output [zero_count],
  // zeroed by this kernel's blocks after their programmatic wait (every earlier kernel of the stream
  // has ended then) instead of by a memset node before the layer; 16-byte aligned (moe_forward.cu)
  float* zero_out = nullptr;
  int64_t zero_count = 0;
  int splits = 1, ktiles_per_split = 0;
  // epilogue
  int stage = 1;                    // 1: GEMM1 + activation, 2: GEMM2 + router weight
  int act = 0;
  void* out = nullptr;              // stage 1: h [slots][ldo] operand dtype; stage 2: f32 [slots][ldo]
  int ldo = 0;
  float* partial = nullptr;         // stage 1 with splits > 1: f32 [slots][np] (atomics)
  const float* topk_w = nullptr;    // stage 2: router weight per slot (null: 1)
};

// mode: 0 plain 16-bit weights, 1 exact operands + per-chunk scales, 2 per-element (g_idx),
// 3 (fp8 only) exact operands + one scale pair for the whole K (no chunk accumulators).
// N extent of one block of `tile` for weights `fmt` (grid sizing is internal; this is for logs).
int tile_bn_for(Tile tile, WFmt fmt);
// Direct routing's sorted ids (GemmParams::direct_ids): block b of kDecodeRows rows holds slot b,
// then sentinels; for up to kDirectMaxSlots slots. A constant device table.
constexpr int kDirectMaxSlots = 32;
const int32_t* direct_rows_table();
void launch_moe_gemm(bool f16, WFmt fmt, int mode, Tile tile, const GemmParams& p, cudaStream_t s);

}  // namespace qmoe::cuda
