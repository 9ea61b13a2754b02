// Quantization descriptions.
//  * QuantArgs mirrors compressed-tensors' QuantizationArgs (formats.md §2a), with its validation
//    rules; every format reader (compressed-tensors, ModelOpt, GPTQ, AWQ, gpt-oss) maps into it.
//  * MoeScheme is what a MoE layer runs: weights + input activations + where it came from, reduced
//    to a SchemeKind that backends dispatch on.
#pragma once
#include <array>
#include <optional>
#include <string>

#include "qmoe/dtype.h"

namespace qmoe {

enum class QuantType { kInt, kFloat };
enum class Strategy { kTensor, kChannel, kGroup, kBlock, kToken, kTensorGroup, kAttnHead };
enum class ActOrder { kNone, kGroup, kWeight };
enum class Dynamic { kStatic, kDynamic, kLocal };  // "local": NVFP4 activations (static global, dynamic blocks)

struct QuantArgs {
  int num_bits = 8;
  QuantType type = QuantType::kInt;
  bool symmetric = true;
  std::optional<Strategy> strategy;          // inferred by validate() when missing
  std::optional<int> group_size;             // -1 = channel
  std::optional<std::array<int, 2>> block_structure;  // [rows, cols]
  Dynamic dynamic = Dynamic::kStatic;
  ActOrder actorder = ActOrder::kNone;
  std::optional<DType> scale_dtype;
  std::optional<DType> zp_dtype;

  // Applies compressed-tensors' rules: infers strategy from group_size, then checks every
  // cross-field constraint. Throws kBadInput naming `where` (e.g. "config.json: config_groups.group_0.weights").
  void validate(const std::string& where);
  Strategy strat() const { return strategy.value_or(Strategy::kTensor); }
  std::string str() const;  // "int4 sym group128", "float8 channel dynamic", ...
};

const char* strategy_name(Strategy s);

// What the kernels run. One value per row of design.md's scheme table.
enum class SchemeKind {
  kUnquantized,  // bf16 / fp16 / fp32 weights, activations in the same dtype
  kWNA16,        // int4 / int8 weights (group or channel, sym or asym, optional g_idx), 16-bit acts
  kFP8W8A8,      // e4m3 weights (tensor / channel / block), e4m3 acts (static tensor / token / 1x128)
  kFP8A16,       // e4m3 weights, 16-bit activations (weight-only FP8)
  kINT8W8A8,     // int8 channel weights, int8 dynamic per-token activations
  kW4A8FP8,      // int4 group weights, fp8 per-token activations
  kW4A8INT8,     // int4 group weights, int8 per-token activations
  kNVFP4,        // e2m1 + e4m3/16 + fp32 global; activations nvfp4 (W4A4)
  kNVFP4A16,     // same weights, 16-bit activations
  kMXFP4A16,     // e2m1 + e8m0/32; 16-bit activations
};
const char* scheme_kind_name(SchemeKind k);
// e4m3 weights (W8A8 or weight-only): the schemes whose weights carry an fp8 strategy (tensor / channel / block).
constexpr bool has_fp8_weights(SchemeKind k) { return k == SchemeKind::kFP8W8A8 || k == SchemeKind::kFP8A16; }

// Where the activations' quantization parameters come from.
enum class ActQuant {
  kNone,          // 16-bit activations
  kFP8Tensor,     // static per-tensor fp8 scale from the checkpoint (input_scale)
  kFP8Token,      // dynamic per-token fp8 (scale = amax/448)
  kFP8Group128,   // dynamic per-token-group of 128 along K (DeepSeek 1x128)
  kINT8Token,     // dynamic per-token int8 (scale = amax/127), symmetric
  kNVFP4,         // dynamic e4m3 scale per 16 elements under a static fp32 global scale
};
const char* act_quant_name(ActQuant a);

struct MoeScheme {
  SchemeKind kind = SchemeKind::kUnquantized;
  QuantArgs weights;                        // meaningless for kUnquantized
  std::optional<QuantArgs> input_activations;
  ActQuant act = ActQuant::kNone;
  std::string format;                       // "pack-quantized", "modelopt NVFP4", "gptq", ...

  // Weight facts the kernels need, derived from `weights`:
  int weight_bits() const { return kind == SchemeKind::kUnquantized ? 16 : weights.num_bits; }
  std::string key() const;                  // "wna16/int4/g128/sym", "fp8/channel/token", ...
};

}  // namespace qmoe
