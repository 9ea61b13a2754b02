// Architecture adapters, part 2: the byte layouts of expert tensors in published checkpoints and
// their conversion to / from the canonical encoding (qmoe/moe.h). Two directions, one place:
//   decode_*  checkpoint tensors -> canonical pieces (the loader), strict shape / dtype checks
//   encode_*  canonical pieces -> checkpoint tensors (`qmoe gen`, tests)
// Per-module layouts hold one projection of one expert ("out x in" unless the format says
// otherwise, e.g. GPTQ / AWQ "in x out"); fused layouts hold all experts in one tensor (Llama 4
// BF16 / ModelOpt "in x out", gpt-oss interleaved gate/up rows).
#pragma once
#include <functional>
#include <map>
#include <string>

#include "qmoe/checkpoint.h"
#include "qmoe/moe.h"

namespace qmoe::models {

enum class ModuleFormat {
  kDense,          // weight [N, K] bf16/f16/f32
  kCtPacked,       // compressed-tensors pack-quantized: weight_packed I32, weight_scale, [weight_zero_point, weight_g_idx]
  kCtNaive,        // compressed-tensors int-/float-/naive-quantized: weight I8 / F8_E4M3, weight_scale, [input_scale]
  kCtNvfp4,        // compressed-tensors nvfp4-pack-quantized (global scale: divide)
  kCtMxfp4,        // compressed-tensors mxfp4-pack-quantized
  kModeloptFp8,    // ModelOpt FP8 / FP8_PER_CHANNEL_PER_TOKEN / FP8_PB_WO
  kModeloptNvfp4,  // ModelOpt NVFP4 / W4A16_NVFP4 (global scale: multiply)
  kGptq,           // qweight [K/8, N], qzeros (zero - 1), scales [G, N], g_idx
  kGptqV2,         // the same with qzeros holding the zero itself (checkpoint_format gptq_v2)
  kAwq,            // qweight [K, N/8] interleaved, qzeros, scales [G, N]
  kDeepseekFp8,    // weight F8_E4M3, weight_scale_inv F32 [ceil(N/128), ceil(K/128)]
};
const char* module_format_name(ModuleFormat f);

// What a decoder needs to know: where the tensors are and how to name them in errors.
struct ModuleRef {
  const CheckpointDir* ck = nullptr;
  std::string prefix;  // "model.layers.3.mlp.experts.5.gate_proj" (tensor names are prefix + "." + suffix)
  std::string what;    // "layer 3 expert 5 gate_proj" (for errors)
};

// Shape facts of the projection being decoded.
struct ModuleShape {
  int64_t N = 0, K = 0;            // out rows, in columns of this module
  int group_size = 0;              // int / fp4 group, 0 = channel / none
  std::array<int, 2> block = {0, 0};
};

// Decodes one module into canonical pieces with E = 1: weight [1, N, Kb], scale [1, N, g] / [1, nb, kb]
// (tensor-wise: [1, 1]), zero_point [1, N, g], g_idx [1, K], global_scale / input_scale [1, 1]
// (multiplier convention), bias absent. Throws kBadInput naming the file, tensor and module.
ProjWeights decode_module(const ModuleRef& m, ModuleFormat f, const MoeScheme& scheme, const ModuleShape& s);

// Stacks decoded pieces: gate and up rows of one expert -> w13 of that expert (tensor-wise scales
// become [1, 2]); g_idx of gate and up must agree (they read the same input).
ProjWeights merge_gate_up(const ProjWeights& gate, const ProjWeights& up, const std::string& what);
// Stacks per-expert pieces along E.
ProjWeights stack_experts(const std::vector<ProjWeights>& per_expert);

// Writes one canonical projection's rows [row0, row0 + N) of expert e (shard `shard`: 0 = gate or
// w2, 1 = up) as the tensors of `f` under `prefix`. `w` gives the scheme, group and block.
using TensorSink = std::function<void(const std::string& name, const Tensor& t)>;
void encode_module(const TensorSink& out, const std::string& prefix, ModuleFormat f, const ExpertWeights& w,
                   bool is_w13, int e, int shard);

// ---- fused layouts --------------------------------------------------------------------------
// Llama 4 BF16 / ModelOpt: gate_up_proj [E, H, 2I] / down_proj [E, I, H] "in x out". The fp8 /
// nvfp4 variants store e4m3 codes (fp8) or e2m1 pairs packed along the input dim ([E, H/2, 2I]),
// block scales [E, H/16, 2I], and flat per-tensor scales ([], [1] or [E]).
struct FusedRef {
  const CheckpointDir* ck = nullptr;
  std::string experts;  // "model.layers.3.feed_forward.experts"
  std::string what;     // "layer 3"
  // Experts [first, first + count) of the E stored are decoded (EP); count -1 = all. Shapes are
  // checked against the whole tensor, then only the range is read and converted.
  int first = 0, count = -1;
};
// kind: "bf16", "fp8" (ModelOpt FP8, flat scales), "nvfp4" (ModelOpt NVFP4 / W4A16_NVFP4).
// The result holds the decoded range: num_experts = count (E when count is -1).
ExpertWeights decode_llama4_fused(const FusedRef& r, const std::string& kind, const MoeScheme& scheme, int E, int H,
                                  int I, DType act_dtype);
void encode_llama4_fused(const TensorSink& out, const std::string& experts, const std::string& kind,
                         const ExpertWeights& w);

// gpt-oss: MXFP4 gate_up_proj_blocks [E, 2I, H/32, 16] / _scales [E, 2I, H/32] / _bias [E, 2I]
// with gate and up rows interleaved (even rows gate), down_proj_* [E, H, I/32, 16]; or BF16
// gate_up_proj [E, H, 2I] (in x out, interleaved columns), biases alike. kind "mxfp4" or "bf16".
ExpertWeights decode_gpt_oss(const FusedRef& r, const std::string& kind, const MoeScheme& scheme, int E, int H, int I,
                             DType act_dtype);
void encode_gpt_oss(const TensorSink& out, const std::string& experts, const std::string& kind, const ExpertWeights& w);

// ---- helpers shared with gen / tests --------------------------------------------------------
Tensor transpose_last2(const Tensor& t);  // [.., A, B] -> [.., B, A], any dtype
// Fetches `name`, checking dtype (one of `dtypes`) and shape; `what` names the module in errors.
Tensor fetch(const CheckpointDir& ck, const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
             const std::string& what, const char* orientation = nullptr);

}  // namespace qmoe::models
