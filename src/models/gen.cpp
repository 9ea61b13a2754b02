// `qmoe gen`: tiny complete model directories in every checkpoint layout qmoe loads. The routed
// and shared experts are quantized with the reference quantizers (round-to-nearest, ref/quantize.h)
// into the canonical encoding and converted to the checkpoint layout by layouts.cpp; attention,
// norms, embeddings, routers and dense MLPs are random bf16 and listed in the quantization
// config's ignore / exclude list, as llm-compressor / ModelOpt leave routers and lm_head.
#include "models/gen.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "core/codecs.h"
#include "cpu/ref/quantize.h"
#include "models/arch.h"
#include "models/layouts.h"
#include "qmoe/checkpoint.h"

namespace qmoe::models {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kPerExpert = {"llama4", "mixtral", "qwen3_moe", "deepseek_v3"};
const std::vector<std::string> kNoGptOss = {"llama4", "mixtral", "qwen3_moe", "deepseek_v3"};

}  // namespace

const std::vector<GenFormat>& gen_formats() {
  static const std::vector<GenFormat> v = {
      {"bf16", "unquantized bf16 (HF original layout: Llama 4 / gpt-oss fused in x out)",
       {"llama4", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"}},
      {"ct-w4a16", "compressed-tensors pack-quantized int4 group 128 symmetric (W4A16)", kNoGptOss},
      {"ct-w4a16-asym", "compressed-tensors pack-quantized int4 group 128 asymmetric (zero points)", kNoGptOss},
      {"ct-w4a16-actorder", "compressed-tensors pack-quantized int4 group 128, actorder group (g_idx)", kNoGptOss},
      {"ct-w8a16", "compressed-tensors pack-quantized int8 per-channel (W8A16)", kNoGptOss},
      {"ct-fp8", "compressed-tensors float-quantized fp8 per-tensor, static per-tensor activations (FP8)", kNoGptOss},
      {"ct-fp8-dynamic", "compressed-tensors float-quantized fp8 per-channel, dynamic per-token activations", kNoGptOss},
      {"ct-fp8-block", "compressed-tensors float-quantized fp8 128x128 blocks, dynamic 1x128 activations", kNoGptOss},
      {"ct-fp8-a16", "compressed-tensors float-quantized fp8 per-channel weights, bf16 activations (FP8 weight-only)",
       kNoGptOss},
      {"ct-int8", "compressed-tensors int-quantized int8 per-channel, dynamic per-token int8 activations (W8A8)", kNoGptOss},
      {"ct-w4afp8", "compressed-tensors pack-quantized int4 group 128, dynamic per-token fp8 activations", kNoGptOss},
      {"ct-nvfp4", "compressed-tensors nvfp4-pack-quantized, nvfp4 activations (W4A4; global scale divides)", kNoGptOss},
      {"ct-nvfp4a16", "compressed-tensors nvfp4-pack-quantized weights, bf16 activations", kNoGptOss},
      {"ct-mxfp4", "compressed-tensors mxfp4-pack-quantized weights, bf16 activations", kNoGptOss},
      {"modelopt-fp8", "ModelOpt FP8 per-tensor, static activations (hf_quant_config.json; Llama 4 fused, flat scales)",
       kNoGptOss},
      {"modelopt-nvfp4", "ModelOpt NVFP4 W4A4 (global scale multiplies; Llama 4 fused in x out)", kNoGptOss},
      {"modelopt-nvfp4-cfg", "ModelOpt NVFP4 W4A4 with the newer quantization_config in config.json (quant_method "
       "modelopt, ignore, config_groups) instead of hf_quant_config.json", kNoGptOss},
      {"modelopt-w4a16-nvfp4", "ModelOpt W4A16_NVFP4 (nvfp4 weights, bf16 activations)", kNoGptOss},
      {"gptq", "GPTQ int4 group 128 symmetric (qweight / qzeros / scales / g_idx, fp16 scales)", kPerExpert},
      {"gptq-asym", "GPTQ int4 group 128 asymmetric (sym false: qzeros hold zero - 1, format v1)", kPerExpert},
      {"gptq-v2", "GPTQ int4 group 128 asymmetric, checkpoint_format gptq_v2 (qzeros hold the zero itself)", kPerExpert},
      {"awq", "AWQ int4 group 128 with zero points (GEMM layout, fp16 scales)", kPerExpert},
      {"deepseek-fp8", "DeepSeek-V3 style fp8 128x128 blocks with weight_scale_inv (quant_method fp8)",
       {"mixtral", "qwen3_moe", "deepseek_v3"}},
      {"gpt-oss-mxfp4", "gpt-oss native MXFP4 (_blocks / _scales, interleaved gate/up rows, biases)", {"gpt_oss"}},
  };
  return v;
}

namespace {

struct Plan {
  ref::SchemeSpec spec;
  ModuleFormat module = ModuleFormat::kDense;
  std::string fused;       // llama4 / gpt_oss fused kind: "bf16", "fp8", "nvfp4", "mxfp4"; "" = per-expert
  std::string family;      // "compressed-tensors", "modelopt", "gptq", "awq", "fp8", "mxfp4", "none"
  std::string ct_format;   // compressed-tensors format string
  std::string modelopt_algo;
  bool modelopt_in_config = false;  // newer ModelOpt: quantization_config in config.json
};

Plan make_plan(const std::string& fmt, const std::string& arch) {
  Plan p;
  ref::SchemeSpec& s = p.spec;
  s.act_dtype = DType::kBF16;
  s.scale_dtype = DType::kBF16;
  const bool llama4 = arch == "llama4";
  auto ct = [&](ModuleFormat m, const char* f) {
    p.family = "compressed-tensors";
    p.module = m;
    p.ct_format = f;
  };
  if (fmt == "bf16") {
    s.kind = SchemeKind::kUnquantized;
    p.family = "none";
    p.module = ModuleFormat::kDense;
    if (llama4 || arch == "gpt_oss") p.fused = "bf16";
  } else if (fmt == "ct-w4a16" || fmt == "ct-w4a16-asym" || fmt == "ct-w4a16-actorder") {
    s.kind = SchemeKind::kWNA16, s.bits = 4, s.group_size = 128;
    s.symmetric = fmt != "ct-w4a16-asym";
    s.actorder = fmt == "ct-w4a16-actorder";
    ct(ModuleFormat::kCtPacked, "pack-quantized");
  } else if (fmt == "ct-w8a16") {
    s.kind = SchemeKind::kWNA16, s.bits = 8, s.group_size = 0;
    ct(ModuleFormat::kCtPacked, "pack-quantized");
  } else if (fmt == "ct-fp8" || fmt == "ct-fp8-dynamic" || fmt == "ct-fp8-block") {
    s.kind = SchemeKind::kFP8W8A8;
    s.fp8_strategy = fmt == "ct-fp8" ? Strategy::kTensor : fmt == "ct-fp8-block" ? Strategy::kBlock : Strategy::kChannel;
    s.act = fmt == "ct-fp8" ? ActQuant::kFP8Tensor : fmt == "ct-fp8-block" ? ActQuant::kFP8Group128 : ActQuant::kFP8Token;
    ct(ModuleFormat::kCtNaive, "float-quantized");
  } else if (fmt == "ct-fp8-a16") {
    s.kind = SchemeKind::kFP8A16, s.fp8_strategy = Strategy::kChannel, s.act = ActQuant::kNone;
    ct(ModuleFormat::kCtNaive, "float-quantized");
  } else if (fmt == "ct-int8") {
    s.kind = SchemeKind::kINT8W8A8, s.bits = 8, s.group_size = 0;
    ct(ModuleFormat::kCtNaive, "int-quantized");
  } else if (fmt == "ct-w4afp8") {
    s.kind = SchemeKind::kW4A8FP8, s.bits = 4, s.group_size = 128;
    ct(ModuleFormat::kCtPacked, "pack-quantized");
  } else if (fmt == "ct-nvfp4" || fmt == "ct-nvfp4a16") {
    s.kind = fmt == "ct-nvfp4" ? SchemeKind::kNVFP4 : SchemeKind::kNVFP4A16;
    ct(ModuleFormat::kCtNvfp4, "nvfp4-pack-quantized");
  } else if (fmt == "ct-mxfp4") {
    s.kind = SchemeKind::kMXFP4A16;
    ct(ModuleFormat::kCtMxfp4, "mxfp4-pack-quantized");
  } else if (fmt == "modelopt-fp8") {
    s.kind = SchemeKind::kFP8W8A8, s.fp8_strategy = Strategy::kTensor, s.act = ActQuant::kFP8Tensor;
    p.family = "modelopt", p.modelopt_algo = "FP8", p.module = ModuleFormat::kModeloptFp8;
    if (llama4) p.fused = "fp8";
  } else if (fmt == "modelopt-nvfp4" || fmt == "modelopt-nvfp4-cfg" || fmt == "modelopt-w4a16-nvfp4") {
    s.kind = fmt == "modelopt-w4a16-nvfp4" ? SchemeKind::kNVFP4A16 : SchemeKind::kNVFP4;
    p.family = "modelopt", p.modelopt_algo = s.kind == SchemeKind::kNVFP4 ? "NVFP4" : "W4A16_NVFP4";
    p.modelopt_in_config = fmt == "modelopt-nvfp4-cfg";
    p.module = ModuleFormat::kModeloptNvfp4;
    if (llama4) p.fused = "nvfp4";
  } else if (fmt == "gptq" || fmt == "gptq-asym" || fmt == "gptq-v2" || fmt == "awq") {
    s.kind = SchemeKind::kWNA16, s.bits = 4, s.group_size = 128, s.symmetric = fmt == "gptq";
    s.scale_dtype = DType::kF16;  // AutoGPTQ / AutoAWQ write fp16 scales
    p.family = fmt == "awq" ? "awq" : "gptq";
    p.module = fmt == "awq" ? ModuleFormat::kAwq : fmt == "gptq-v2" ? ModuleFormat::kGptqV2 : ModuleFormat::kGptq;
  } else if (fmt == "deepseek-fp8") {
    s.kind = SchemeKind::kFP8W8A8, s.fp8_strategy = Strategy::kBlock, s.act = ActQuant::kFP8Group128;
    p.family = "fp8", p.module = ModuleFormat::kDeepseekFp8;
  } else if (fmt == "gpt-oss-mxfp4") {
    s.kind = SchemeKind::kMXFP4A16;
    p.family = "mxfp4", p.fused = "mxfp4";
  } else {
    std::string list;
    for (const GenFormat& f : gen_formats()) list += (list.empty() ? "" : ", ") + f.name;
    bad_input("gen: unknown format '", fmt, "' (formats: ", list, ")");
  }
  return p;
}

// ---- random tensors ----------------------------------------------------------------------------
// bf16 values uniform in +-row_scale/sqrt(K), row_scale in [0.5, 2] per row: scales vary per row.
Tensor random_bf16(Shape shape, uint64_t seed, float gain = 1.0f) {
  Tensor t(DType::kBF16, shape);
  const int64_t K = shape.back(), rows = t.numel() / std::max<int64_t>(K, 1);
  const float inv = gain / std::sqrt(static_cast<float>(K));
  uint16_t* d = t.data_mut<uint16_t>();
  for (int64_t r = 0; r < rows; ++r) {
    float rs = ref::random_uniform(seed ^ 0x9e3779b97f4a7c15ULL, r, 0.5f, 2.0f) * inv;
    for (int64_t k = 0; k < K; ++k) d[r * K + k] = codec::f32_to_bf16(ref::random_uniform(seed, r * K + k, -1.f, 1.f) * rs);
  }
  return t;
}
Tensor ones_bf16(int64_t n, uint64_t seed) {  // norm weights around 1
  Tensor t(DType::kBF16, {n});
  for (int64_t i = 0; i < n; ++i) t.data_mut<uint16_t>()[i] = codec::f32_to_bf16(ref::random_uniform(seed, i, 0.9f, 1.1f));
  return t;
}

// actorder: per expert a seeded permutation; column perm[j] belongs to group j / G.
Tensor random_g_idx(int64_t E, int64_t K, int G, uint64_t seed) {
  Tensor t(DType::kI32, {E, K});
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int32_t> perm(K);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed * 7919 + e);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < K; ++j) t.data_mut<int32_t>()[e * K + perm[j]] = static_cast<int32_t>(j / G);
  }
  return t;
}

ExpertWeights bf16_experts(const Tensor& w13, const Tensor& w2) {
  ref::SchemeSpec s;
  s.kind = SchemeKind::kUnquantized;
  ExpertWeights w;
  w.scheme = ref::make_scheme(s);
  w.num_experts = static_cast<int>(w13.size(0));
  w.hidden = static_cast<int>(w13.size(2));
  w.intermediate = static_cast<int>(w2.size(2));
  w.w13.weight = w13;
  w.w2.weight = w2;
  return w;
}

// One quantized projection of all experts with scales shared across a whole tensor (fused Llama 4:
// ModelOpt stores one flat scale per expert (fp8) or one global multiplier (nvfp4)).
ProjWeights quantize_shared_scale(const Tensor& w, const ref::SchemeSpec& spec, bool per_expert) {
  ref::ProjFormat f = ref::make_proj_format(spec, false);
  f.shards = 1;
  const int64_t E = w.size(0), N = w.size(1), K = w.size(2);
  Tensor src = per_expert ? w : w.reshape({1, E * N, K});
  ProjWeights p = ref::quantize_proj(src, f);
  if (!per_expert) {
    p.weight = p.weight.reshape({E, N, p.weight.size(2)});
    p.scale = p.scale.reshape({E, N, p.scale.size(2)});
    Tensor g(DType::kF32, {E, 1});
    for (int64_t e = 0; e < E; ++e) g.data_mut<float>()[e] = p.global_scale.data<float>()[0];
    p.global_scale = g;
  }
  return p;
}

Tensor widen(const Tensor& t, int S) {  // [E, 1] F32 -> [E, S]
  Tensor r(DType::kF32, {t.size(0), S});
  for (int64_t e = 0; e < t.size(0); ++e)
    for (int s = 0; s < S; ++s) r.data_mut<float>()[e * S + s] = t.data<float>()[e];
  return r;
}

json quant_args_json(const QuantArgs& a) {
  json j;
  j["num_bits"] = a.num_bits;
  j["type"] = a.type == QuantType::kInt ? "int" : "float";
  j["symmetric"] = a.symmetric;
  j["strategy"] = strategy_name(a.strat());
  j["group_size"] = a.group_size && *a.group_size > 0 ? json(*a.group_size) : json(nullptr);
  j["block_structure"] = a.block_structure ? json({(*a.block_structure)[0], (*a.block_structure)[1]}) : json(nullptr);
  j["dynamic"] = a.dynamic == Dynamic::kLocal ? json("local") : json(a.dynamic == Dynamic::kDynamic);
  j["actorder"] = a.actorder == ActOrder::kGroup ? json("group") : a.actorder == ActOrder::kWeight ? json("weight") : json(nullptr);
  j["observer"] = a.dynamic == Dynamic::kDynamic ? json(nullptr) : json("minmax");
  j["observer_kwargs"] = json::object();
  return j;
}

struct Sizes {
  int E, H, I, Is, Id, L, first_moe, top_k, V = 512, heads = 4, kv_heads = 2;
};

json arch_config(const std::string& arch, const Sizes& z) {
  json c;
  c["hidden_size"] = z.H;
  c["num_hidden_layers"] = z.L;
  c["num_attention_heads"] = z.heads;
  c["num_key_value_heads"] = z.kv_heads;
  c["head_dim"] = z.H / z.heads;
  c["vocab_size"] = z.V;
  c["rms_norm_eps"] = 1e-5;
  c["max_position_embeddings"] = 4096;
  c["torch_dtype"] = "bfloat16";
  c["tie_word_embeddings"] = false;
  c["transformers_version"] = "4.55.0";
  c["model_type"] = arch;
  if (arch == "llama4") {
    c["architectures"] = {"Llama4ForCausalLM"};
    c["model_type"] = "llama4_text";
    c["intermediate_size"] = z.I;
    c["intermediate_size_mlp"] = z.Id;
    c["num_local_experts"] = z.E;
    c["num_experts_per_tok"] = z.top_k;
    c["interleave_moe_layer_step"] = 1;
    c["hidden_act"] = "silu";
    c["rope_theta"] = 500000.0;
    c["use_qk_norm"] = true;
  } else if (arch == "mixtral") {
    c["architectures"] = {"MixtralForCausalLM"};
    c["intermediate_size"] = z.I;
    c["num_local_experts"] = z.E;
    c["num_experts_per_tok"] = z.top_k;
    c["hidden_act"] = "silu";
    c["rope_theta"] = 1000000.0;
    c["router_aux_loss_coef"] = 0.02;
  } else if (arch == "qwen3_moe") {
    c["architectures"] = {"Qwen3MoeForCausalLM"};
    c["intermediate_size"] = z.Id;
    c["moe_intermediate_size"] = z.I;
    c["num_experts"] = z.E;
    c["num_experts_per_tok"] = z.top_k;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
    c["hidden_act"] = "silu";
    c["rope_theta"] = 1000000.0;
  } else if (arch == "deepseek_v3") {
    c["architectures"] = {"DeepseekV3ForCausalLM"};
    c["intermediate_size"] = z.Id;
    c["moe_intermediate_size"] = z.I;
    c["n_routed_experts"] = z.E;
    c["n_shared_experts"] = 1;
    c["num_experts_per_tok"] = z.top_k;
    int groups = z.E % 4 == 0 ? 4 : z.E % 2 == 0 ? 2 : 1;
    c["n_group"] = groups;
    c["topk_group"] = std::max(1, groups / 2);
    c["routed_scaling_factor"] = 2.5;
    c["scoring_func"] = "sigmoid";
    c["topk_method"] = "noaux_tc";
    c["norm_topk_prob"] = true;
    c["first_k_dense_replace"] = z.first_moe;
    c["moe_layer_freq"] = 1;
    c["hidden_act"] = "silu";
    c["kv_lora_rank"] = 64;
    c["q_lora_rank"] = 96;
    c["qk_rope_head_dim"] = 16;
    c["qk_nope_head_dim"] = 32;
    c["v_head_dim"] = 32;
  } else {  // gpt_oss
    c["architectures"] = {"GptOssForCausalLM"};
    c["intermediate_size"] = z.I;
    c["num_local_experts"] = z.E;
    c["num_experts_per_tok"] = z.top_k;
    c["experts_per_token"] = z.top_k;
    c["swiglu_limit"] = 7.0;
    c["hidden_act"] = "silu";
    c["sliding_window"] = 128;
    c["layer_types"] = json::array();
    for (int l = 0; l < z.L; ++l) c["layer_types"].push_back(l % 2 ? "full_attention" : "sliding_attention");
  }
  return c;
}

// Collects tensors for one model directory and writes them (single file or shards + index).
struct DirWriter {
  std::vector<std::pair<std::string, Tensor>> tensors;
  TensorSink sink() {
    return [this](const std::string& n, const Tensor& t) { tensors.emplace_back(n, t); };
  }
  void write(const std::string& dir, const json& config, const json* hf_quant, int shards) {
    fs::create_directories(dir);
    auto write_json = [&](const std::string& name, const json& j) {
      std::ofstream f(dir + "/" + name);
      if (!f) bad_input("gen: cannot write ", dir, "/", name);
      f << j.dump(2) << "\n";
    };
    write_json("config.json", config);
    if (hf_quant) write_json("hf_quant_config.json", *hf_quant);
    shards = std::max(1, std::min<int>(shards, static_cast<int>(tensors.size())));
    if (shards == 1) {
      SafetensorsWriter w;
      for (auto& [n, t] : tensors) w.add(n, t);
      w.set_metadata("format", "pt");
      w.write(dir + "/model.safetensors");
      return;
    }
    json index;
    uint64_t total = 0;
    const size_t per = (tensors.size() + shards - 1) / shards;
    for (int s = 0; s < shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
      SafetensorsWriter w;
      w.set_metadata("format", "pt");
      for (size_t i = s * per; i < std::min(tensors.size(), (s + 1) * per); ++i) {
        w.add(tensors[i].first, tensors[i].second);
        index["weight_map"][tensors[i].first] = name;
        total += tensors[i].second.nbytes();
      }
      w.write(dir + "/" + name);
    }
    index["metadata"]["total_size"] = total;
    write_json("model.safetensors.index.json", index);
  }
};

}  // namespace

void generate_checkpoint(const GenOptions& o) {
  const auto& archs = supported_archs();
  if (std::find(archs.begin(), archs.end(), o.arch) == archs.end())
    bad_input("gen: unknown arch '", o.arch, "' (archs: llama4, mixtral, qwen3_moe, deepseek_v3, gpt_oss)");
  const GenFormat* gf = nullptr;
  for (const GenFormat& f : gen_formats())
    if (f.name == o.format) gf = &f;
  Plan plan = make_plan(o.format, o.arch);  // throws for an unknown format
  if (std::find(gf->archs.begin(), gf->archs.end(), o.arch) == gf->archs.end()) {
    std::string ok;
    for (const GenFormat& f : gen_formats())
      if (std::find(f.archs.begin(), f.archs.end(), o.arch) != f.archs.end()) ok += (ok.empty() ? "" : ", ") + f.name;
    bad_input("gen: format '", o.format, "' does not apply to arch ", o.arch, " (formats for ", o.arch, ": ", ok, ")");
  }
  if (o.out.empty()) bad_input("gen: --out is required");
  if (o.layers < 1 || o.experts < 1 || o.hidden < 1 || o.intermediate < 1 || o.shards < 1)
    bad_input("gen: --layers, --experts, --hidden, --intermediate and --shards must be >= 1");
  Sizes z;
  z.E = o.experts, z.H = o.hidden, z.I = o.intermediate, z.Is = o.intermediate, z.Id = 2 * o.intermediate;
  z.first_moe = o.arch == "deepseek_v3" ? 1 : 0;  // DeepSeek: first_k_dense_replace = 1 dense layer in front
  z.L = o.layers + z.first_moe;
  z.top_k = o.top_k > 0 ? o.top_k : (o.arch == "llama4" ? 1 : 2);
  if (z.top_k > z.E) bad_input("gen: --top-k ", z.top_k, " exceeds --experts ", z.E);
  if (z.H % z.heads) bad_input("gen: --hidden ", z.H, " must be a multiple of ", z.heads, " (attention heads)");
  // Size constraints of the layouts (the loader checks the same and says so).
  const ref::SchemeSpec& spec = plan.spec;
  auto need = [&](int m, const char* why) {
    if (z.H % m || z.I % m) bad_input("gen: format ", o.format, " needs --hidden and --intermediate to be multiples of ", m, " (", why, ")");
  };
  if (spec.kind == SchemeKind::kNVFP4 || spec.kind == SchemeKind::kNVFP4A16) need(16, "nvfp4 groups of 16");
  if (spec.kind == SchemeKind::kMXFP4A16) need(32, "mxfp4 groups of 32");
  if (spec.kind == SchemeKind::kFP8W8A8 && spec.fp8_strategy == Strategy::kBlock && z.I % 128)
    bad_input("gen: format ", o.format, " needs --intermediate to be a multiple of 128 (gate and up blocks of 128 rows)");
  if (plan.module == ModuleFormat::kGptq || plan.module == ModuleFormat::kGptqV2 || plan.module == ModuleFormat::kAwq ||
      spec.bits == 4)
    need(8, "int4 packing");
  if (o.arch == "gpt_oss" && z.I % 2) bad_input("gen: gpt_oss needs an even --intermediate");

  ArchInfo info;  // names only: built from the config we are about to write
  json cfg = arch_config(o.arch, z);
  info = read_arch(cfg, "gen config.json");

  DirWriter q, bf;
  const bool want_ref = o.reference_out != "-" && o.format != "bf16";
  const uint64_t seed = o.seed * 0x100000001b3ULL;
  uint64_t tid = 0;
  auto rnd = [&](Shape s, float gain = 1.0f) { return random_bf16(std::move(s), seed + 1000003ULL * ++tid, gain); };
  auto both = [&](const std::string& n, const Tensor& t) {
    q.sink()(n, t);
    if (want_ref) bf.sink()(n, t);
  };

  // ---- global non-MoE tensors ----
  both("model.embed_tokens.weight", rnd({z.V, z.H}, 8.0f));
  both("model.norm.weight", ones_bf16(z.H, seed + 17));
  both("lm_head.weight", rnd({z.V, z.H}));

  const int hd = z.H / z.heads;
  for (int l = 0; l < z.L; ++l) {
    const std::string lp = str(info.layers_prefix, ".", l, ".");
    both(lp + "input_layernorm.weight", ones_bf16(z.H, seed + 31 * l + 1));
    both(lp + "post_attention_layernorm.weight", ones_bf16(z.H, seed + 31 * l + 2));
    both(lp + "self_attn.q_proj.weight", rnd({z.heads * hd, z.H}));
    both(lp + "self_attn.k_proj.weight", rnd({z.kv_heads * hd, z.H}));
    both(lp + "self_attn.v_proj.weight", rnd({z.kv_heads * hd, z.H}));
    both(lp + "self_attn.o_proj.weight", rnd({z.H, z.heads * hd}));
    if (!info.is_moe_layer(l)) {  // dense MLP (DeepSeek first_k_dense_replace)
      both(lp + "mlp.gate_proj.weight", rnd({z.Id, z.H}));
      both(lp + "mlp.up_proj.weight", rnd({z.Id, z.H}));
      both(lp + "mlp.down_proj.weight", rnd({z.H, z.Id}));
      continue;
    }
    const std::string mp = info.layer_prefix(l) + ".";
    // router
    both(mp + info.router_name + ".weight", rnd({z.E, z.H}));
    if (o.arch == "deepseek_v3") {
      Tensor b(DType::kF32, {z.E});
      for (int e = 0; e < z.E; ++e) b.data_mut<float>()[e] = ref::random_uniform(seed + 77 * l, e, -0.05f, 0.05f);
      both(mp + "gate.e_score_correction_bias", b);
    }
    if (o.arch == "gpt_oss") both(mp + "router.bias", rnd({z.E}, 0.5f));
    // routed experts: bf16 originals, then the format
    Tensor w13 = rnd({z.E, 2LL * z.I, z.H}), w2 = rnd({z.E, z.H, z.I});
    ExpertWeights orig = bf16_experts(w13, w2);
    if (o.arch == "gpt_oss") {
      orig.w13.bias = rnd({z.E, 2LL * z.I}, 0.5f);
      orig.w2.bias = rnd({z.E, z.H}, 0.5f);
    }
    ExpertWeights qw;
    if (spec.kind == SchemeKind::kUnquantized) {
      qw = orig;
    } else {
      Tensor g13, g2;
      if (spec.actorder) g13 = random_g_idx(z.E, z.H, spec.group_size, seed + l), g2 = random_g_idx(z.E, z.I, spec.group_size, seed + 100 + l);
      qw = ref::quantize_expert_weights(w13, w2, spec, 4.0f, g13, g2);
      qw.w13.bias = orig.w13.bias, qw.w2.bias = orig.w2.bias;
      if (plan.fused == "fp8" || plan.fused == "nvfp4") {
        // Fused Llama 4 ModelOpt: one scale per expert (fp8) / one global multiplier (nvfp4) per tensor.
        const bool per_expert = plan.fused == "fp8";
        ProjWeights a = quantize_shared_scale(w13, spec, per_expert), b = quantize_shared_scale(w2, spec, per_expert);
        qw.w13.weight = a.weight, qw.w13.scale = per_expert ? widen(a.scale, 2) : a.scale;
        qw.w2.weight = b.weight, qw.w2.scale = b.scale;
        if (!per_expert) qw.w13.global_scale = widen(a.global_scale, 2), qw.w2.global_scale = b.global_scale;
        qw.validate(str("gen layer ", l));
      }
    }
    const std::string ex = mp + "experts";
    auto write_experts = [&](DirWriter& d, const ExpertWeights& w, ModuleFormat mf, const std::string& fused) {
      TensorSink s = d.sink();
      if (o.arch == "gpt_oss") return encode_gpt_oss(s, ex, fused, w);
      if (!fused.empty()) return encode_llama4_fused(s, ex, fused, w);
      for (int e = 0; e < z.E; ++e) {
        const std::string ep = str(ex, ".", e, ".");
        encode_module(s, ep + info.gate_name, mf, w, true, e, 0);
        encode_module(s, ep + info.up_name, mf, w, true, e, 1);
        encode_module(s, ep + info.down_name, mf, w, false, e, 0);
      }
    };
    write_experts(q, qw, plan.module, plan.fused);
    if (want_ref) write_experts(bf, orig, ModuleFormat::kDense, (o.arch == "llama4" || o.arch == "gpt_oss") ? "bf16" : "");
    // shared expert: one MLP, quantized with the same scheme per module (ModelOpt: its per-module layout)
    if (!info.shared_name.empty()) {
      Tensor s13 = rnd({1, 2LL * z.Is, z.H}), s2 = rnd({1, z.H, z.Is});
      ExpertWeights so = bf16_experts(s13, s2);
      Tensor sg13, sg2;
      if (spec.actorder) sg13 = random_g_idx(1, z.H, spec.group_size, seed + 200 + l), sg2 = random_g_idx(1, z.Is, spec.group_size, seed + 300 + l);
      ExpertWeights sq = spec.kind == SchemeKind::kUnquantized ? so : ref::quantize_expert_weights(s13, s2, spec, 4.0f, sg13, sg2);
      const std::string sp = mp + info.shared_name + ".";
      for (auto* d : {&q, &bf}) {
        if (d == &bf && !want_ref) continue;
        const ExpertWeights& w = d == &q ? sq : so;
        ModuleFormat mf = d == &q ? plan.module : ModuleFormat::kDense;
        encode_module(d->sink(), sp + "gate_proj", mf, w, true, 0, 0);
        encode_module(d->sink(), sp + "up_proj", mf, w, true, 0, 1);
        encode_module(d->sink(), sp + "down_proj", mf, w, false, 0, 0);
      }
    }
  }

  // ---- quantization config ----
  json qcfg = cfg;
  std::optional<json> hf_quant;
  const std::string router_re = o.arch == "mixtral" ? "re:.*block_sparse_moe\\.gate$"
                                : o.arch == "llama4" || o.arch == "gpt_oss" ? "re:.*router$"
                                                                             : "re:.*mlp\\.gate$";
  if (plan.family == "compressed-tensors") {
    MoeScheme ms = ref::make_scheme(spec);
    json group;
    group["targets"] = {"Linear"};
    group["weights"] = quant_args_json(ms.weights);
    group["input_activations"] = ms.input_activations ? quant_args_json(*ms.input_activations) : json(nullptr);
    group["output_activations"] = nullptr;
    group["format"] = plan.ct_format;
    json ignore = {"lm_head", "re:.*self_attn.*", router_re};
    if (z.first_moe > 0) ignore.push_back("re:model\\.layers\\.0\\.mlp\\..*");
    qcfg["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                   {"format", plan.ct_format},
                                   {"quantization_status", "compressed"},
                                   {"config_groups", {{"group_0", group}}},
                                   {"ignore", ignore},
                                   {"kv_cache_scheme", nullptr},
                                   {"global_compression_ratio", nullptr},
                                   {"sparsity_config", json::object()},
                                   {"version", "0.10.2"}};
  } else if (plan.family == "modelopt") {
    json excl = {"lm_head", "*self_attn*", "*router*", "*.mlp.gate", "*block_sparse_moe.gate"};
    if (z.first_moe > 0) excl.push_back("model.layers.0.mlp*");
    json producer = {{"name", "modelopt"}, {"version", "0.31.0"}};
    if (plan.modelopt_in_config) {
      // Newer exports (formats.md §2b): `ignore` instead of exclude_modules, kv_cache_scheme instead
      // of kv_cache_quant_algo, compressed-tensors-like config_groups describing the NVFP4 recipe.
      auto fp4 = [](bool dynamic) {
        return json{{"num_bits", 4}, {"type", "float"}, {"group_size", 16}, {"dynamic", dynamic}};
      };
      qcfg["quantization_config"] = {
          {"quant_method", "modelopt"},
          {"quant_algo", plan.modelopt_algo},
          {"producer", producer},
          {"ignore", excl},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", fp4(false)}, {"input_activations", fp4(true)}}}}},
          {"kv_cache_scheme", nullptr}};
    } else {
      json qq = {{"quant_algo", plan.modelopt_algo}, {"kv_cache_quant_algo", nullptr}, {"exclude_modules", excl}};
      if (plan.modelopt_algo != "FP8") qq["group_size"] = 16;
      hf_quant = json{{"producer", producer}, {"quantization", qq}};
    }
  } else if (plan.family == "gptq") {
    qcfg["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", false},
                                   {"sym", spec.symmetric}, {"damp_percent", 0.01}, {"true_sequential", true},
                                   {"checkpoint_format", plan.module == ModuleFormat::kGptqV2 ? "gptq_v2" : "gptq"}};
  } else if (plan.family == "awq") {
    qcfg["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"zero_point", true},
                                   {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  } else if (plan.family == "fp8") {
    qcfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {128, 128}}};
  } else if (plan.family == "mxfp4") {
    qcfg["quantization_config"] = {{"quant_method", "mxfp4"},
                                   {"modules_to_not_convert",
                                    {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  }
  q.write(o.out, qcfg, hf_quant ? &*hf_quant : nullptr, o.shards);
  if (want_ref) bf.write(o.reference_out.empty() ? o.out + "/bf16" : o.reference_out, cfg, nullptr, 1);
}

}  // namespace qmoe::models
