// config.json -> ArchInfo for the five MoE architectures qmoe loads. Key names follow the
// transformers configuration classes (Llama4TextConfig, MixtralConfig, Qwen3MoeConfig,
// DeepseekV3Config, GptOssConfig); defaults are the classes' defaults where a key may be absent.
#include "models/arch.h"

#include <algorithm>

namespace qmoe::models {
namespace {

using nlohmann::json;

struct Keys {
  const json& j;
  const std::string& path;
  const std::string& arch;

  const json& need(const char* key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) bad_input(path, ": missing key '", key, "' (needed for arch ", arch, ")");
    return *it;
  }
  int need_int(const char* key, int min_value = 1) const {
    const json& v = need(key);
    if (!v.is_number_integer()) bad_input(path, ": key '", key, "' must be an integer, got ", v.dump());
    int64_t x = v.get<int64_t>();
    if (x < min_value || x > (1 << 24)) bad_input(path, ": key '", key, "' = ", x, " is out of range (expected >= ", min_value, ")");
    return static_cast<int>(x);
  }
  int opt_int(const char* key, int dflt, int min_value = 0) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    return need_int(key, min_value);
  }
  bool opt_bool(const char* key, bool dflt) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) bad_input(path, ": key '", key, "' must be true or false, got ", it->dump());
    return it->get<bool>();
  }
  double opt_num(const char* key, double dflt) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_number()) bad_input(path, ": key '", key, "' must be a number, got ", it->dump());
    return it->get<double>();
  }
  std::string opt_str(const char* key, const std::string& dflt) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_string()) bad_input(path, ": key '", key, "' must be a string, got ", it->dump());
    return it->get<std::string>();
  }
  std::vector<int> opt_int_list(const char* key) const {
    std::vector<int> r;
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return r;
    if (!it->is_array()) bad_input(path, ": key '", key, "' must be a list of integers, got ", it->dump());
    for (const json& v : *it) {
      if (!v.is_number_integer()) bad_input(path, ": key '", key, "' must be a list of integers, got ", it->dump());
      r.push_back(v.get<int>());
    }
    return r;
  }
};

DType torch_dtype(const Keys& k) {
  std::string t = k.opt_str("torch_dtype", k.opt_str("dtype", "bfloat16"));
  if (t == "bfloat16") return DType::kBF16;
  if (t == "float16" || t == "half") return DType::kF16;
  if (t == "float32" || t == "float") return DType::kF32;
  bad_input(k.path, ": torch_dtype '", t, "' is not one of bfloat16, float16, float32");
}

}  // namespace

const std::vector<std::string>& supported_archs() {
  static const std::vector<std::string> v = {"llama4", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"};
  return v;
}

std::string ArchInfo::layer_prefix(int layer) const {
  return str(layers_prefix, ".", layer, ".", moe_block);
}

bool ArchInfo::is_moe_layer(int layer) const {
  return std::binary_search(moe_layers.begin(), moe_layers.end(), layer);
}

ArchInfo read_arch(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) bad_input(path, ": expected a JSON object");
  auto mt = config.find("model_type");
  if (mt == config.end() || !mt->is_string())
    bad_input(path, ": missing string key 'model_type' (expected one of llama4, mixtral, qwen3_moe, deepseek_v3, gpt_oss)");
  ArchInfo a;
  a.model_type = mt->get<std::string>();
  a.layers_prefix = "model.layers";
  const json* cfg = &config;
  if (a.model_type == "llama4") {
    // The multimodal checkpoint nests the text model: text_config + "language_model." names.
    auto tc = config.find("text_config");
    if (tc == config.end() || !tc->is_object()) bad_input(path, ": model_type llama4 without an object 'text_config'");
    cfg = &*tc;
    a.layers_prefix = "language_model.model.layers";
    a.arch = "llama4";
  } else if (a.model_type == "llama4_text") {
    a.arch = "llama4";
  } else if (a.model_type == "mixtral" || a.model_type == "qwen3_moe" || a.model_type == "deepseek_v3" ||
             a.model_type == "gpt_oss") {
    a.arch = a.model_type;
  } else {
    unsupported(path, ": model_type '", a.model_type,
                "' has no qmoe adapter (supported: llama4, llama4_text, mixtral, qwen3_moe, deepseek_v3, gpt_oss)");
  }
  Keys k{*cfg, path, a.arch};
  a.num_layers = k.need_int("num_hidden_layers");
  a.hidden = k.need_int("hidden_size");
  a.act_dtype = torch_dtype(Keys{config, path, a.arch});
  if (cfg != &config && (cfg->contains("torch_dtype") || cfg->contains("dtype"))) a.act_dtype = torch_dtype(k);
  a.router.renormalize = false;

  if (a.arch == "llama4") {
    a.num_experts = k.need_int("num_local_experts");
    a.top_k = k.opt_int("num_experts_per_tok", 1, 1);
    a.intermediate = k.need_int("intermediate_size");
    a.shared_intermediate = a.intermediate;  // Llama4TextMoe's shared_expert uses intermediate_size
    a.dense_intermediate = k.opt_int("intermediate_size_mlp", a.intermediate, 1);
    a.moe_layers = k.opt_int_list("moe_layers");
    if (a.moe_layers.empty()) {
      int step = k.opt_int("interleave_moe_layer_step", 1, 1);
      for (int l = 0; l < a.num_layers; ++l)
        if ((l + 1) % step == 0) a.moe_layers.push_back(l);
    }
    a.router.kind = RouterKind::kLlama4;
    a.router.apply_router_weight_on_input = true;
    a.moe_block = "feed_forward";
    a.router_name = "router";
    a.shared_name = "shared_expert";
    a.gate_name = "gate_proj", a.up_name = "up_proj", a.down_name = "down_proj";
    a.fused_experts = true;
  } else if (a.arch == "mixtral") {
    a.num_experts = k.need_int("num_local_experts");
    a.top_k = k.opt_int("num_experts_per_tok", 2, 1);
    a.intermediate = k.need_int("intermediate_size");
    for (int l = 0; l < a.num_layers; ++l) a.moe_layers.push_back(l);
    a.router.kind = RouterKind::kSoftmaxTopK;
    a.router.renormalize = true;
    a.moe_block = "block_sparse_moe";
    a.router_name = "gate";
    a.gate_name = "w1", a.up_name = "w3", a.down_name = "w2";
  } else if (a.arch == "qwen3_moe") {
    a.num_experts = k.need_int("num_experts");
    a.top_k = k.opt_int("num_experts_per_tok", 8, 1);
    a.intermediate = k.need_int("moe_intermediate_size");
    a.dense_intermediate = k.opt_int("intermediate_size", a.intermediate, 1);
    int step = k.opt_int("decoder_sparse_step", 1, 1);
    std::vector<int> mlp_only = k.opt_int_list("mlp_only_layers");
    for (int l = 0; l < a.num_layers; ++l)
      if (std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && (l + 1) % step == 0)
        a.moe_layers.push_back(l);
    a.router.kind = RouterKind::kSoftmaxTopK;
    a.router.renormalize = k.opt_bool("norm_topk_prob", false);
    a.moe_block = "mlp";
    a.router_name = "gate";
    a.gate_name = "gate_proj", a.up_name = "up_proj", a.down_name = "down_proj";
  } else if (a.arch == "deepseek_v3") {
    a.num_experts = k.need_int("n_routed_experts");
    a.top_k = k.opt_int("num_experts_per_tok", 8, 1);
    a.intermediate = k.need_int("moe_intermediate_size");
    a.dense_intermediate = k.opt_int("intermediate_size", a.intermediate, 1);
    // absent keys take transformers' DeepseekV3Config defaults, which is what the model runs with
    int n_shared = k.opt_int("n_shared_experts", 1, 0);
    a.shared_intermediate = n_shared * a.intermediate;  // the shared experts are one MLP of n_shared * I
    int first_dense = k.opt_int("first_k_dense_replace", 3, 0);
    int freq = k.opt_int("moe_layer_freq", 1, 1);
    for (int l = 0; l < a.num_layers; ++l)
      if (l >= first_dense && l % freq == 0) a.moe_layers.push_back(l);
    a.router.kind = RouterKind::kGrouped;
    std::string scoring = k.opt_str("scoring_func", "sigmoid");
    if (scoring != "sigmoid" && scoring != "softmax")
      bad_input(path, ": scoring_func '", scoring, "' is not sigmoid or softmax");
    a.router.grouped_sigmoid = scoring == "sigmoid";
    a.router.num_groups = k.opt_int("n_group", 8, 1);
    a.router.topk_group = k.opt_int("topk_group", 4, 1);
    a.router.routed_scaling_factor = static_cast<float>(k.opt_num("routed_scaling_factor", 2.5));
    a.router.renormalize = k.opt_bool("norm_topk_prob", true);
    if (a.num_experts % a.router.num_groups != 0)
      bad_input(path, ": n_routed_experts ", a.num_experts, " is not a multiple of n_group ", a.router.num_groups);
    if (a.router.topk_group > a.router.num_groups)
      bad_input(path, ": topk_group ", a.router.topk_group, " exceeds n_group ", a.router.num_groups);
    a.moe_block = "mlp";
    a.router_name = "gate";
    a.shared_name = n_shared > 0 ? "shared_experts" : "";
    a.gate_name = "gate_proj", a.up_name = "up_proj", a.down_name = "down_proj";
  } else {  // gpt_oss
    a.num_experts = k.need_int("num_local_experts");
    a.top_k = k.opt_int("num_experts_per_tok", k.opt_int("experts_per_token", 4, 1), 1);
    a.intermediate = k.need_int("intermediate_size");
    double limit = k.opt_num("swiglu_limit", 7.0);
    if (limit != 7.0) unsupported(path, ": swiglu_limit ", limit, " (qmoe's swigluoai clamps at 7.0, as gpt-oss does)");
    for (int l = 0; l < a.num_layers; ++l) a.moe_layers.push_back(l);
    a.router.kind = RouterKind::kTopKSoftmax;
    a.activation = Activation::kSwigluOai;
    a.moe_block = "mlp";
    a.router_name = "router";
    a.gate_name = "gate_proj", a.up_name = "up_proj", a.down_name = "down_proj";
    a.fused_experts = true;
  }
  if (a.arch != "gpt_oss") {
    // Transformers builds these experts' activation from ACT2FN[hidden_act] (Llama4TextExperts,
    // MixtralBlockSparseTop2MLP, Qwen3MoeMLP, DeepseekV3MLP); gpt-oss's experts hard-code the clamped
    // SwiGLU above whatever hidden_act says. A name qmoe does not run is refused, never read as silu.
    const std::string act = k.opt_str("hidden_act", "silu");
    if (act == "silu" || act == "swish") a.activation = Activation::kSiluMul;
    else if (act == "gelu") a.activation = Activation::kGeluMul;  // transformers' "gelu": the exact erf form
    else
      unsupported(path, ": hidden_act '", act, "' is not supported: qmoe's experts run 'silu' / 'swish' (silu(gate) x up) ",
                  "or 'gelu' (the exact erf form, gelu(gate) x up)");
  }
  if (a.top_k > a.num_experts)
    bad_input(path, ": num_experts_per_tok ", a.top_k, " exceeds the number of experts ", a.num_experts);
  a.router.top_k = a.top_k;
  for (int l : a.moe_layers)
    if (l < 0 || l >= a.num_layers) bad_input(path, ": MoE layer ", l, " is outside num_hidden_layers ", a.num_layers);
  std::sort(a.moe_layers.begin(), a.moe_layers.end());
  return a;
}

}  // namespace qmoe::models
