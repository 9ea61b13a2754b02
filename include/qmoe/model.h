// Loading MoE layers from a checkpoint directory: architecture adapters (llama4, mixtral,
// qwen3_moe, deepseek_v3, gpt_oss) x quantization formats (compressed-tensors, ModelOpt, GPTQ,
// AWQ, gpt-oss MXFP4, unquantized) -> canonical ExpertWeights + MoeConfig per MoE layer, with
// TP / EP slicing at load. Nothing is half-loaded: any error aborts the whole load.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qmoe/moe.h"

namespace qmoe {

struct LoadOptions {
  int tp_rank = 0, tp_size = 1;  // splits I (w13 rows, w2 columns)
  int ep_rank = 0, ep_size = 1;  // splits E (contiguous ranges of experts)
  std::vector<int> only_layers;  // empty = every MoE layer
  std::function<void(size_t done, size_t total)> progress;  // called as layers load
};

struct MoeLayerSpec {
  int layer = 0;                      // decoder layer index
  std::string prefix;                 // "model.layers.3.feed_forward"
  ExpertWeights experts;              // canonical routed experts (this rank's slice)
  MoeConfig config;                   // router config, activation, expert_map
  std::optional<ExpertWeights> shared_expert;  // E = 1 (Llama 4, DeepSeek shared_experts)
  Tensor router_weight;               // [E, H] as stored (for inspect / run)
  Tensor router_bias;                 // [E] F32 (DeepSeek e_score_correction_bias, gpt-oss router bias) or absent
  std::string format_source;          // "compressed-tensors pack-quantized (per-expert)", ...
  std::string global_scale_convention;  // "" or how the file stored the NVFP4 global scale
};

struct Model {
  std::string dir;
  std::string arch;                   // "llama4", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"
  std::string quant_method;           // "compressed-tensors", "modelopt", "gptq", "awq", "mxfp4", "none"
  std::vector<MoeLayerSpec> layers;
};

Model load_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace qmoe
