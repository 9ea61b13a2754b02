// The exact reference MoE forward (docs/numerics.md), callable without building a MoeLayer.
// MoeLayer::create(..., Backend::kReference) wraps the same function. Weights must be validated
// (ExpertWeights::validate). x [M, H] in w.act_dtype; topk_weights F32 [M, k]; topk_ids I32 [M, k]
// global expert ids; cfg.expert_map (EP) maps them to local experts or -1 (contributes nothing).
// Cost: only touched experts are computed; each weight row is dequantized once per call and
// reused for every token routed to that expert (OpenMP over output rows).
#pragma once
#include <vector>

#include "qmoe/moe.h"

namespace qmoe::ref {

Tensor reference_forward_routed(const ExpertWeights& w, const MoeConfig& cfg, const ExpertWeights* shared,
                                const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids);

// The one expert e of `w` on rows a [n, H] (fp32 values exact in w.act_dtype, already scaled by the
// router weight on Llama 4): returns o [n, H] fp32 = GEMM2(round_act(act(GEMM1(a) + b13))) + b2,
// with activation quantization as the scheme says. Exposed for kernel tests of single experts.
std::vector<float> reference_expert(const ExpertWeights& w, Activation act, int64_t e, const float* a, int64_t n);

// The activation functions of numerics.md, in fp32, in the exact operation order the reference uses.
float apply_activation(Activation act, float gate, float up);

}  // namespace qmoe::ref
