// Architecture adapters, part 1: what config.json says about the MoE layers of llama4, mixtral,
// qwen3_moe, deepseek_v3 and gpt_oss (which decoder layers are MoE, E, top-k, H, expert I, the
// shared expert, the router and the activation) and the tensor names each architecture uses.
// Part 2 (assemble.h) turns the named tensors into canonical ExpertWeights.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qmoe/moe.h"

namespace qmoe::models {

struct ArchInfo {
  std::string arch;            // "llama4", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"
  std::string model_type;      // config.json model_type as written ("llama4" or "llama4_text", ...)
  std::string layers_prefix;   // "model.layers" or "language_model.model.layers" (llama4 multimodal)
  int num_layers = 0;
  int num_experts = 0;         // routed experts E
  int top_k = 1;
  int hidden = 0;              // H
  int intermediate = 0;        // routed expert I
  int shared_intermediate = 0; // shared expert I, 0 = no shared expert
  int dense_intermediate = 0;  // I of the dense (non-MoE) MLP layers
  std::vector<int> moe_layers; // decoder layers holding a MoE block, ascending
  RouterConfig router;
  Activation activation = Activation::kSiluMul;
  DType act_dtype = DType::kBF16;  // torch_dtype
  // Tensor names, relative to "<layers_prefix>.<L>.":
  std::string moe_block;       // "feed_forward", "block_sparse_moe", "mlp"
  std::string router_name;     // "router" or "gate" (holds weight [E, H], optional bias)
  std::string shared_name;     // "shared_expert" / "shared_experts" / "" (none)
  std::string gate_name, up_name, down_name;  // per-expert projection names ("gate_proj" / "w1" ...)
  bool fused_experts = false;  // experts stored as one tensor over all experts (llama4 bf16/ModelOpt, gpt_oss)

  std::string layer_prefix(int layer) const;  // "model.layers.3.feed_forward"
  bool is_moe_layer(int layer) const;
};

// Reads config.json (`config`, read from `path`) and returns the MoE facts. Throws kBadInput naming
// the file and the missing / malformed key, kUnsupported for an architecture qmoe has no adapter for.
ArchInfo read_arch(const nlohmann::json& config, const std::string& path);

// The arch names gen / load understand, and the model_type strings they map from.
const std::vector<std::string>& supported_archs();

}  // namespace qmoe::models
