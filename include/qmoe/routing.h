// Routing: router logits -> (topk_weights fp32 [M, k], topk_ids int32 [M, k]); and
// moe_align_block_size, which groups the M*k (token, slot) pairs by expert in blocks of B rows.
// Ties are broken by the lowest expert index everywhere. Weights are always fp32, ids int32.
#pragma once
#include <cstdint>
#include <vector>

#include "qmoe/tensor.h"

namespace qmoe {

enum class RouterKind {
  kSoftmaxTopK,  // softmax over all E (fp32), top-k, optional renormalize (Mixtral, Qwen3-MoE)
  kSigmoidTopK,  // sigmoid per expert, top-k, optional renormalize
  kTopKSoftmax,  // top-k on raw logits, softmax over the k chosen (gpt-oss)
  kLlama4,       // top-1 on raw logits, weight = sigmoid(chosen logit); applied to the expert INPUT
  kGrouped,      // DeepSeek-V3 noaux_tc: scores (sigmoid|softmax), + bias for selection, n_group /
                 // topk_group group pruning (group score = sum of top-2 biased scores, or max when
                 // no bias), weights from the unbiased scores, renormalize, * routed_scaling_factor
};
const char* router_kind_name(RouterKind k);

struct RouterConfig {
  RouterKind kind = RouterKind::kSoftmaxTopK;
  int top_k = 1;
  bool renormalize = false;
  // kGrouped only:
  bool grouped_sigmoid = true;        // scoring_func: sigmoid (DeepSeek-V3) or softmax (V2)
  int num_groups = 1;                 // n_group
  int topk_group = 1;                 // topk_group
  float routed_scaling_factor = 1.0f;
  // Llama 4: the router weight multiplies the expert input instead of its output.
  bool apply_router_weight_on_input = false;
};

struct RoutingResult {
  Tensor topk_weights;  // [M, k] F32
  Tensor topk_ids;      // [M, k] I32 (global expert ids)
};

// logits [M, E] F32 (or BF16/F16, converted to f32 first); bias [E] F32 or absent (kGrouped).
RoutingResult route(const Tensor& logits, const RouterConfig& cfg, const Tensor& bias = Tensor());

struct AlignResult {
  std::vector<int32_t> sorted_token_ids;  // capacity numel + E*(B-1) (rounded up to B), sentinel = numel
  std::vector<int32_t> expert_ids;        // one per B-row block; local expert id, -1 = not on this rank
                                          // (capacity / B entries; blocks past num_tokens_post_padded are -1)
  int32_t num_tokens_post_padded = 0;     // rows actually used in sorted_token_ids (multiple of B)
};

// moe_align_block_size: topk_ids flat [numel] int32 global ids in [0, num_experts).
// expert_map (optional, [num_experts]): global -> local id or -1. Within an expert, entries keep
// increasing flat index order. Blocks of experts mapped to -1 get expert id -1.
AlignResult align_block_size(const int32_t* topk_ids, int64_t numel, int num_experts, int block_size,
                             const std::vector<int32_t>& expert_map = {});

}  // namespace qmoe
