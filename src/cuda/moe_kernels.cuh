// Launchers of the fused MoE's non-GEMM kernels (moe_kernels.cu): routing, moe_align_block_size,
// activation preparation / fp8 quantization, the split-K activation finish, the top-k sum.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "qmoe/routing.h"

namespace qmoe::cuda {

void launch_route(const float* logits, int64_t m, int num_experts, const RouterConfig& cfg, const float* bias,
                  float* topk_w, int32_t* topk_ids, cudaStream_t s);

// Groups the numel (token, slot) entries by local expert in blocks of `block` rows. Entries whose
// expert is not local (expert_map -> -1) are dropped. sorted_ids holds `capacity` entries
// (sentinel = numel), expert_ids capacity / block entries (-1 past the used blocks).
// Above kAlignMultiMin entries align runs as three kernels over a grid and needs a workspace of
// align_hist_ints(numel, num_local) int32 (`hist`; 0: one block, hist may be null). `zero`, where
// not null, is set to kAlignZeroInts zeros by the same kernels (the Hopper kernels' tile counters:
// no memset launch of their own).
constexpr int kAlignMultiMin = 4096;
constexpr int kAlignZeroInts = 2;
int align_hist_ints(int numel, int num_local);
void launch_align(const int32_t* topk_ids, int numel, const int32_t* expert_map, int num_local, int block,
                  int capacity, int32_t* sorted_ids, int32_t* expert_ids, int32_t* num_post, int32_t* hist,
                  cudaStream_t s, int32_t* zero = nullptr);
inline int align_capacity(int numel, int num_local, int block) {
  int64_t c = static_cast<int64_t>(numel) + static_cast<int64_t>(num_local) * (block - 1);
  return static_cast<int>((c + block - 1) / block * block);
}

// Activation rows for a GEMM: rows = tokens (slot_mode 0) or slots (slot_mode 1, token = slot /
// top_k). a = x (times the slot's router weight when weight_on_input), rounded to the operand
// dtype; then quantized per `quant` (0 none, 1 fp8 per token, 2 fp8 per 1x128 group, 3 fp8 static
// with the scale of the slot's expert in in_scale[local expert]). Quantized rows are written as
// operand-dtype values of the e4m3 codes (exact) plus fp32 scales [rows][groups].
struct ActPrep {
  const void* x = nullptr;
  int ldx = 0, cols = 0;
  int64_t rows = 0;
  int slot_mode = 0, top_k = 1;
  const float* topk_w = nullptr;      // weight on input, or null
  int quant = 0;
  const float* in_scale = nullptr;    // static: per local expert
  const int32_t* topk_ids = nullptr;  // static: expert of each slot
  const int32_t* expert_map = nullptr;
  void* a = nullptr;                  // [rows][cols]
  float* scales = nullptr;            // [rows][groups]
  int groups = 1;
  // quant 1..3: write the quantized values as fp16 whatever the model dtype (exact: e4m3 values
  // lie in fp16's normal range), for the fp8 kernels' fp16 operands (device_common.cuh OperandOf)
  int q_f16 = 0;
  // non-null: the kernel also sets zero[0 .. zero_n) to 0 (after it waited for the previous kernel)
  float* zero = nullptr;
  int64_t zero_n = 0;
};
void launch_act_prep(bool f16, const ActPrep& p, cudaStream_t s);

// h[slot][i] = act(g[slot][gate(i)] + b, g[slot][up(i)] + b) from split-K GEMM1 partials
// (interleaved columns), for slots that belong to a local expert.
void launch_act_finish(bool f16, const float* partial, int np, int64_t slots, int inter, int act,
                       const float* bias, const int32_t* topk_ids, const int32_t* expert_map, void* h, int ldh,
                       cudaStream_t s);

// y[t][n] = round(sum_k o[t * top_k + k][n] + shared[t][n]) (shared may be null).
void launch_reduce(bool f16, const float* o, const float* shared, int64_t m, int top_k, int h, void* y,
                   cudaStream_t s);

}  // namespace qmoe::cuda
