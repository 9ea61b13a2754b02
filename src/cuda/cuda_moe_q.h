// CUDA backend II (issue 5): NVFP4 (W4A4 and A16), MXFP4 A16, INT8 W8A8 and W4A8 (fp8 / int8
// activations) on backend I's align / GEMM / forward pipeline (cuda_moe.h). prepare() and
// prepare_random() forward these scheme kinds here; forward() runs them unchanged.
//  * NVFP4 / MXFP4: weights repacked into "fp4 units" (moe_gemm_fp4.cu), dequantized in registers
//    into exact bf16 / fp16 MMA operands (e2m1 x block scale); the fp32 global scale (and, for
//    W4A4, the activations' 1/G) are applied once per output.
//  * INT8 W8A8 / W4A8: backend I's int8 / int4 atoms with exact integer operands, activations
//    quantized per token (int8 or fp8) into exact operand values; per-group fp32 partial sums.
// C++17-clean; no CUDA headers.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "cuda/cuda_moe.h"

namespace qmoe::cuda {

// The scheme kinds this file's entry points handle.
bool q_scheme(SchemeKind k);
// Why backend II cannot run these weights ("" = it can). Only for q_scheme() kinds.
std::string can_prepare_q(const ExpertWeights& w);
// prepare() / prepare_random() of cuda_moe.h for q_scheme() kinds.
DevExperts prepare_q(const ExpertWeights& w, Activation activation);
DevExperts prepare_random_q(const MoeScheme& scheme, int num_experts, int hidden, int intermediate, int group_size,
                            DType act, Activation activation, bool with_bias, uint64_t seed);
// Bytes of the scales a checkpoint stores for one projection of one expert (N x K), for the
// bench's byte count: e4m3 per 16 (NVFP4), e8m0 per 32 (MXFP4), bf16 per group (int schemes).
double q_scale_bytes(const MoeScheme& scheme, int group_size, int n, int k);

}  // namespace qmoe::cuda
