// Quantization-config readers and the MoE scheme rules, on realistic config snippets (the shapes of
// the configs llm-compressor, ModelOpt, GPTQ/AWQ, gpt-oss and DeepSeek publish, formats.md §2),
// plus every error rule: malformed, unknown, ambiguous, unsupported.
#include <gtest/gtest.h>

#include <chrono>

#include "checkpoint/ckpt_test_util.h"
#include "formats/quant_config.h"
#include "qmoe/checkpoint.h"

namespace qmoe::formats {
namespace {
using json = nlohmann::json;
using test::expect_error;

const std::string kGate = "model.layers.3.mlp.experts.7.gate_proj";
const std::string kUp = "model.layers.3.mlp.experts.7.up_proj";
const std::string kDown = "model.layers.3.mlp.experts.7.down_proj";

QuantConfig read(const std::string& config_json, const std::string* hf = nullptr) {
  json c = json::parse(config_json);
  json h = hf ? json::parse(*hf) : json();
  return read_quant_config(c, hf ? &h : nullptr, "/ckpt");
}

// Resolves gate/up/down of layer 3 expert 7 and returns the MoE scheme.
MoeScheme layer_scheme(const QuantConfig& c, const std::string& cls = "Linear") {
  return moe_scheme("layer 3", c.resolve(kGate, cls), c.resolve(kUp, cls), c.resolve(kDown, cls));
}

// llm-compressor W4A16 (as in RedHatAI checkpoints): one group, class target, ignore list.
const char* kCtW4A16 = R"({"architectures":["Qwen3MoeForCausalLM"],"quantization_config":{
  "config_groups":{"group_0":{"input_activations":null,"output_activations":null,"targets":["Linear"],
    "weights":{"actorder":null,"block_structure":null,"dynamic":false,"group_size":128,"num_bits":4,
      "observer":"minmax","observer_kwargs":{},"strategy":"group","symmetric":true,"type":"int"}}},
  "format":"pack-quantized","global_compression_ratio":null,"ignore":["lm_head","re:.*mlp.gate$"],
  "kv_cache_scheme":null,"quant_method":"compressed-tensors","quantization_status":"compressed",
  "sparsity_config":{},"transform_config":{},"version":"0.10.2"}})";

TEST(QuantConfig, Unquantized) {
  QuantConfig c = read(R"({"architectures":["MixtralForCausalLM"],"hidden_size":4096})");
  EXPECT_FALSE(c.quantized());
  EXPECT_FALSE(c.resolve(kGate).has_value());
  MoeScheme s = layer_scheme(c);
  EXPECT_EQ(s.kind, SchemeKind::kUnquantized);
  // quantization_config: null is the same as absent.
  EXPECT_FALSE(read(R"({"quantization_config":null})").quantized());
}

TEST(QuantConfig, CompressedTensorsW4A16) {
  QuantConfig c = read(kCtW4A16);
  EXPECT_EQ(c.source, QuantSource::kCompressedTensors);
  auto g = c.resolve(kGate);
  ASSERT_TRUE(g.has_value());
  EXPECT_FALSE(g->ignored);
  ASSERT_TRUE(g->weights.has_value());
  EXPECT_EQ(g->weights->num_bits, 4);
  EXPECT_EQ(g->weights->strat(), Strategy::kGroup);
  EXPECT_EQ(g->weights->group_size, 128);
  EXPECT_TRUE(g->weights->symmetric);
  EXPECT_FALSE(g->input_activations.has_value());
  EXPECT_EQ(g->format, "pack-quantized");
  EXPECT_NE(g->matched.find("'Linear'"), std::string::npos);
  // Router gate and lm_head are ignored; a non-Linear class is not targeted.
  EXPECT_TRUE(c.resolve("model.layers.3.mlp.gate")->ignored);
  EXPECT_TRUE(c.resolve("lm_head")->ignored);
  EXPECT_FALSE(c.resolve("model.layers.3.input_layernorm", "RMSNorm").has_value());
  // re.match is anchored at the start only: "re:.*mlp.gate$" does not hit gate_proj.
  EXPECT_FALSE(c.resolve("model.layers.3.mlp.gate_proj_x")->ignored);
  MoeScheme s = layer_scheme(c);
  EXPECT_EQ(s.kind, SchemeKind::kWNA16);
  EXPECT_EQ(s.act, ActQuant::kNone);
  EXPECT_EQ(s.format, "pack-quantized");
  EXPECT_EQ(s.weights.group_size, 128);
}

TEST(QuantConfig, TargetPrecedenceExactThenRegexThenClass) {
  // Groups listed class first, regex second, exact last: precedence must not follow the order.
  const char* cfg = R"({"quantization_config":{"quant_method":"compressed-tensors","format":"mixed-precision",
    "config_groups":{
      "by_class":{"targets":["Linear"],"format":"pack-quantized","weights":{"num_bits":8,"type":"int","strategy":"channel","symmetric":true}},
      "by_regex":{"targets":["re:.*experts\\.\\d+\\.(gate|up)_proj"],"format":"pack-quantized",
                  "weights":{"num_bits":4,"type":"int","strategy":"group","group_size":64,"symmetric":false}},
      "by_name":{"targets":["model.layers.3.mlp.experts.7.up_proj"],"format":"float-quantized",
                 "weights":{"num_bits":8,"type":"float","strategy":"channel"},
                 "input_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true}}},
    "ignore":["re:model\\.layers\\.0\\."]}})";
  QuantConfig c = read(cfg);
  auto gate = c.resolve(kGate), up = c.resolve(kUp), down = c.resolve(kDown);
  EXPECT_EQ(gate->weights->num_bits, 4);  // regex beats class
  EXPECT_EQ(gate->format, "pack-quantized");
  EXPECT_FALSE(gate->weights->symmetric);
  EXPECT_EQ(up->weights->type, QuantType::kFloat);  // exact beats regex
  EXPECT_EQ(up->format, "float-quantized");
  EXPECT_EQ(down->weights->num_bits, 8);  // only the class matches
  EXPECT_EQ(down->weights->strat(), Strategy::kChannel);
  // Ignore is anchored at the start: layer 0 (and "model.layers.0.anything") only.
  EXPECT_TRUE(c.resolve("model.layers.0.mlp.experts.7.gate_proj")->ignored);
  EXPECT_FALSE(c.resolve("model.layers.10.mlp.experts.7.gate_proj")->ignored);
  // Mixed schemes across gate / up / down: one clear error naming the layer and both schemes.
  expect_error([&] { layer_scheme(c); }, ErrorKind::kUnsupported,
               {"layer 3", "gate_proj and up_proj", "int4 asym group64", "float8 channel"});
}

TEST(QuantConfig, PresetsExpand) {
  struct P {
    const char* preset;
    const char* format;
    SchemeKind kind;
    ActQuant act;
  } ps[] = {
      {"W4A16", "pack-quantized", SchemeKind::kWNA16, ActQuant::kNone},
      {"W4A16_ASYM", "pack-quantized", SchemeKind::kWNA16, ActQuant::kNone},
      {"W8A16", "pack-quantized", SchemeKind::kWNA16, ActQuant::kNone},
      {"W8A8", "int-quantized", SchemeKind::kINT8W8A8, ActQuant::kINT8Token},
      {"INT8", "int-quantized", SchemeKind::kINT8W8A8, ActQuant::kINT8Token},
      {"W4AFP8", "pack-quantized", SchemeKind::kW4A8FP8, ActQuant::kFP8Token},
      {"W4A8", "pack-quantized", SchemeKind::kW4A8INT8, ActQuant::kINT8Token},
      {"FP8", "float-quantized", SchemeKind::kFP8W8A8, ActQuant::kFP8Tensor},
      {"FP8_DYNAMIC", "float-quantized", SchemeKind::kFP8W8A8, ActQuant::kFP8Token},
      {"FP8_BLOCK", "float-quantized", SchemeKind::kFP8W8A8, ActQuant::kFP8Group128},
      {"NVFP4", "nvfp4-pack-quantized", SchemeKind::kNVFP4, ActQuant::kNVFP4},
      {"NVFP4A16", "nvfp4-pack-quantized", SchemeKind::kNVFP4A16, ActQuant::kNone},
      {"MXFP4A16", "mxfp4-pack-quantized", SchemeKind::kMXFP4A16, ActQuant::kNone},
  };
  for (const auto& p : ps) {
    SCOPED_TRACE(p.preset);
    std::string cfg = std::string(R"({"quantization_config":{"quant_method":"compressed-tensors","format":")") +
                      p.format + R"(","config_groups":{")" + p.preset + R"(":["Linear"]},"ignore":["lm_head"]}})";
    QuantConfig c = read(cfg);
    MoeScheme s = layer_scheme(c);
    EXPECT_EQ(s.kind, p.kind) << scheme_kind_name(s.kind);
    EXPECT_EQ(s.act, p.act) << act_quant_name(s.act);
    EXPECT_EQ(s.format, p.format);
  }
  // Spot-check the expanded arguments.
  auto w4 = preset_scheme("W4A16_ASYM");
  EXPECT_FALSE(w4->weights->symmetric);
  EXPECT_EQ(w4->weights->group_size, 128);
  auto blk = preset_scheme("FP8_BLOCK");
  EXPECT_EQ(blk->weights->block_structure, (std::array<int, 2>{128, 128}));
  EXPECT_EQ(blk->input_activations->group_size, 128);
  auto nv = preset_scheme("NVFP4");
  EXPECT_EQ(nv->weights->strat(), Strategy::kTensorGroup);
  EXPECT_EQ(nv->weights->group_size, 16);
  EXPECT_EQ(nv->input_activations->dynamic, Dynamic::kLocal);
  auto mx = preset_scheme("MXFP4");
  EXPECT_EQ(mx->weights->group_size, 32);
  EXPECT_TRUE(mx->input_activations.has_value());
  EXPECT_FALSE(preset_scheme("W3A7").has_value());
  // MXFP4 with quantized activations is a valid config qmoe does not run.
  QuantConfig c = read(R"({"quantization_config":{"quant_method":"compressed-tensors","format":"mxfp4-pack-quantized",
    "config_groups":{"MXFP4":["Linear"]}}})");
  expect_error([&] { layer_scheme(c); }, ErrorKind::kUnsupported, {"layer 3", "float4 group32", "supported:"});
}

TEST(QuantConfig, MixedPrecisionPerGroupFormat) {
  // NVFP4 experts, FP8 attention (a typical llm-compressor mixed recipe).
  const char* cfg = R"({"quantization_config":{"quant_method":"compressed-tensors","format":"mixed-precision",
    "quantization_status":"compressed","config_groups":{
      "group_0":{"targets":["re:.*mlp\\.experts\\..*_proj$"],"format":"nvfp4-pack-quantized",
        "weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16,"symmetric":true,"dynamic":false},
        "input_activations":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16,"symmetric":true,"dynamic":"local"}},
      "group_1":{"targets":["re:.*self_attn\\.(q|k|v|o)_proj$"],"format":"float-quantized",
        "weights":{"num_bits":8,"type":"float","strategy":"channel","symmetric":true,"dynamic":false},
        "input_activations":{"num_bits":8,"type":"float","strategy":"token","symmetric":true,"dynamic":true}}},
    "ignore":["lm_head"]}})";
  QuantConfig c = read(cfg);
  EXPECT_EQ(c.resolve(kGate)->format, "nvfp4-pack-quantized");
  EXPECT_EQ(c.resolve("model.layers.3.self_attn.k_proj")->format, "float-quantized");
  EXPECT_FALSE(c.resolve("model.layers.3.mlp.shared_expert_gate").has_value());
  MoeScheme s = layer_scheme(c);
  EXPECT_EQ(s.kind, SchemeKind::kNVFP4);
  EXPECT_EQ(s.act, ActQuant::kNVFP4);
  // A mixed-precision group without its own format is an error.
  expect_error([] { read(R"({"quantization_config":{"quant_method":"compressed-tensors","format":"mixed-precision",
    "config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","group_size":128}}}}})"); },
               ErrorKind::kBadInput, {"config_groups.g", "mixed-precision"});
}

TEST(QuantConfig, CompressedTensorsErrors) {
  struct E {
    const char* what;
    const char* qc;
    ErrorKind kind;
    std::vector<std::string> needles;
  } es[] = {
      {"no config_groups", R"({"quant_method":"compressed-tensors","format":"pack-quantized"})", ErrorKind::kBadInput,
       {"config_groups"}},
      {"no targets", R"({"quant_method":"compressed-tensors","config_groups":{"g":{"weights":{"num_bits":4}}}})",
       ErrorKind::kBadInput, {"config_groups.g", "targets"}},
      {"empty targets", R"({"quant_method":"compressed-tensors","config_groups":{"g":{"targets":[]}}})",
       ErrorKind::kBadInput, {"config_groups.g", "empty"}},
      {"unknown group field",
       R"({"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],"weight":{"num_bits":4}}}})",
       ErrorKind::kBadInput, {"config_groups.g", "unknown field 'weight'"}},
      {"bad args", R"({"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],
        "weights":{"num_bits":4,"type":"int","strategy":"group"}}}})",
       ErrorKind::kBadInput, {"config_groups.g.weights", "group_size"}},
      {"unknown format", R"({"quant_method":"compressed-tensors","format":"packed","config_groups":{"W4A16":["Linear"]}})",
       ErrorKind::kUnsupported, {"format", "'packed'"}},
      {"list under non-preset", R"({"quant_method":"compressed-tensors","config_groups":{"group_0":["Linear"]}})",
       ErrorKind::kBadInput, {"config_groups.group_0", "preset"}},
      {"target in two groups", R"({"quant_method":"compressed-tensors","format":"pack-quantized",
        "config_groups":{"W4A16":["Linear"],"W8A16":["Linear"]}})",
       ErrorKind::kBadInput, {"'Linear'", "W4A16", "W8A16"}},
      {"invalid regex", R"({"quant_method":"compressed-tensors","config_groups":{"W4A16":["re:(experts"]}})",
       ErrorKind::kBadInput, {"invalid regex", "'(experts'"}},
      {"python inline flag", R"({"quant_method":"compressed-tensors","config_groups":{"W4A16":["re:(?i)experts"]}})",
       ErrorKind::kBadInput, {"'(?i'"}},
      {"targets not list", R"({"quant_method":"compressed-tensors","config_groups":{"g":{"targets":"Linear"}}})",
       ErrorKind::kBadInput, {"targets", "list of strings"}},
      {"output activations", R"({"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],
        "weights":{"num_bits":8,"type":"float"},"output_activations":{"num_bits":8,"type":"float"}}}})",
       ErrorKind::kUnsupported, {"output_activations"}},
      {"not compressed", R"({"quant_method":"compressed-tensors","quantization_status":"calibration","config_groups":{"W4A16":["Linear"]}})",
       ErrorKind::kUnsupported, {"quantization_status"}},
  };
  for (const auto& e : es) {
    SCOPED_TRACE(e.what);
    std::string cfg = std::string(R"({"quantization_config":)") + e.qc + "}";
    auto needles = e.needles;
    needles.push_back("/ckpt/config.json: quantization_config");
    expect_error([&] { read(cfg); }, e.kind, needles);
  }
}

// compressed-tensors parts qmoe does not run are refused for the modules they cover: a
// sparse-compressed sparsity_config, a transform_config transform on activations ("input" /
// "output"); "dense" sparsity and transforms folded into the weights load as before.
TEST(QuantConfig, SparseCompressionAndOnlineTransformsAreRefused) {
  const auto with = [](const std::string& extra) {
    json c = json::parse(kCtW4A16);
    json e = json::parse(extra);
    for (auto it = e.begin(); it != e.end(); ++it) c["quantization_config"][it.key()] = it.value();
    return read(c.dump());
  };
  const auto refused = [](const QuantConfig& c, const std::string& module, const std::vector<std::string>& needles) {
    expect_error([&] { c.resolve(module); }, ErrorKind::kUnsupported, needles);
  };
  QuantConfig sp = with(R"({"sparsity_config":{"format":"sparse-24-bitmask","sparsity_structure":"2:4",
    "targets":["Linear"],"ignore":["lm_head"]}})");
  refused(sp, kGate, {"/ckpt/config.json", "sparsity_config: format 'sparse-24-bitmask'", "'" + kGate + "'", "sparse-compressed"});
  EXPECT_TRUE(sp.resolve("lm_head")->ignored);  // the sparsity ignore list spares it
  EXPECT_EQ(layer_scheme(with(R"({"sparsity_config":{"format":"dense","targets":["Linear"]}})")).kind, SchemeKind::kWNA16);
  EXPECT_EQ(layer_scheme(with(R"({"sparsity_config":{"format":"sparse-bitmask","targets":["Linear"],
    "ignore":["re:.*experts.*"]}})")).kind, SchemeKind::kWNA16);
  refused(with(R"({"sparsity_config":{"format":"marlin-24"}})"), kDown, {"'marlin-24'", "'" + kDown + "'"});  // no targets: all

  const std::string r4 = R"({"transform_config":{"config_groups":{"R4":{"type":"hadamard","apply":[
    {"targets":["re:.*down_proj$"],"location":"weight_input"},
    {"targets":["re:.*down_proj$"],"location":"input","inverse":true}]}}}})";
  QuantConfig t = with(r4);
  refused(t, kDown, {"transform_config.config_groups.R4.apply[1]", "'hadamard' transform at location 'input'", "'" + kDown + "'"});
  EXPECT_TRUE(t.resolve(kGate).has_value());  // gate / up: no transform
  EXPECT_EQ(layer_scheme(with(R"({"transform_config":{"config_groups":{"R1":{"type":"hadamard","apply":[
    {"targets":["Linear"],"location":"weight_input"},{"targets":["Linear"],"location":"weight_output"}]}}}})")).kind,
            SchemeKind::kWNA16);
  EXPECT_EQ(layer_scheme(with(R"({"transform_config":{"config_groups":{"R3":{"type":"hadamard","apply":[
    {"targets":["Linear"],"location":"output","ignore":["re:.*experts.*"]}]}}}})")).kind, SchemeKind::kWNA16);
  expect_error([&] { with(R"({"sparsity_config":[1]})"); }, ErrorKind::kBadInput, {"sparsity_config: must be an object"});
  expect_error([&] { with(R"({"transform_config":{"config_groups":{"x":{"apply":[{"targets":["Linear"]}]}}}})"); },
               ErrorKind::kBadInput, {"config_groups.x.apply[0]", "location"});
}

TEST(QuantConfig, MethodErrors) {
  expect_error([] { read(R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true}})"); },
               ErrorKind::kUnsupported, {"/ckpt/config.json", "'bitsandbytes'", "supported:"});
  expect_error([] { read(R"({"quantization_config":{"quant_algo":"NVFP4","ignore":[]}})"); }, ErrorKind::kBadInput,
               {"/ckpt/config.json", "quant_algo but no quant_method"});
  expect_error([] { read(R"({"quantization_config":{"bits":4}})"); }, ErrorKind::kBadInput, {"no quant_method"});
  expect_error([] { read(R"({"quantization_config":"gptq"})"); }, ErrorKind::kBadInput, {"must be an object"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":4}})"); }, ErrorKind::kBadInput,
               {"quant_method", "string"});
  // The older compressed-tensors key is read too.
  QuantConfig c = read(R"({"compression_config":{"quant_method":"compressed-tensors","format":"pack-quantized",
    "config_groups":{"W4A16":["Linear"]}}})");
  EXPECT_EQ(layer_scheme(c).kind, SchemeKind::kWNA16);
}

// ModelOpt legacy hf_quant_config.json for an NVFP4 model (nvidia/*-FP4 style).
const std::string kHfNvfp4 = R"({"producer":{"name":"modelopt","version":"0.29.0"},"quantization":{
  "quant_algo":"NVFP4","kv_cache_quant_algo":null,"group_size":16,
  "exclude_modules":["lm_head","model.layers.0.self_attn*","*.mlp.router","model.layers.1*"]}})";

TEST(QuantConfig, ModelOptLegacyNvfp4) {
  QuantConfig c = read(R"({"architectures":["Llama4ForConditionalGeneration"]})", &kHfNvfp4);
  EXPECT_EQ(c.source, QuantSource::kModelOptLegacy);
  EXPECT_EQ(c.algo, "NVFP4");
  auto g = c.resolve(kGate);
  ASSERT_TRUE(g && g->weights);
  EXPECT_EQ(g->format, "modelopt NVFP4");
  EXPECT_EQ(g->weights->group_size, 16);
  MoeScheme s = layer_scheme(c);
  EXPECT_EQ(s.kind, SchemeKind::kNVFP4);
  EXPECT_EQ(s.act, ActQuant::kNVFP4);
  EXPECT_EQ(s.format, "modelopt NVFP4");
  // "module_path*" is rewritten into "module_path" and "module_path.*" (the module and its subtree).
  EXPECT_EQ(c.exclude, (std::vector<std::string>{"lm_head", "model.layers.0.self_attn", "model.layers.0.self_attn.*",
                                                 "*.mlp.router", "model.layers.1", "model.layers.1.*"}));
  EXPECT_TRUE(c.resolve("model.layers.0.self_attn")->ignored);
  EXPECT_TRUE(c.resolve("model.layers.0.self_attn.q_proj")->ignored);
  EXPECT_TRUE(c.resolve("model.layers.5.mlp.router")->ignored);  // fnmatch '*' crosses dots
  EXPECT_TRUE(c.resolve("lm_head")->ignored);
  EXPECT_FALSE(c.resolve("model.layers.5.mlp.router_bias")->ignored);
  // vLLM also excludes a module whose name merely contains an entry (kept for old exports), so
  // "model.layers.1" excludes "model.layers.12..." and "self_attn_x"; qmoe matches vLLM.
  EXPECT_TRUE(c.resolve("model.layers.12.mlp.experts.0.gate_proj")->ignored);
  EXPECT_TRUE(c.resolve("model.layers.0.self_attn_x.q_proj")->ignored);
  EXPECT_FALSE(c.resolve("model.layers.2.mlp.experts.0.gate_proj")->ignored);
  // An excluded MoE layer is unquantized.
  const std::string p = "model.layers.1.mlp.experts.0.";
  EXPECT_EQ(moe_scheme("layer 1", c.resolve(p + "gate_proj"), c.resolve(p + "up_proj"), c.resolve(p + "down_proj")).kind,
            SchemeKind::kUnquantized);
}

TEST(QuantConfig, ModelOptLegacyErrors) {
  std::string no_kv = R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"NVFP4","group_size":16,"exclude_modules":[]}})";
  expect_error([&] { read("{}", &no_kv); }, ErrorKind::kBadInput, {"/ckpt/hf_quant_config.json", "kv_cache_quant_algo"});
  std::string sq = R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"W8A8_SQ_PER_CHANNEL"}})";
  expect_error([&] { read("{}", &sq); }, ErrorKind::kUnsupported, {"hf_quant_config.json", "W8A8_SQ_PER_CHANNEL", "supported"});
  std::string noq = R"({"producer":{"name":"modelopt"}})";
  expect_error([&] { read("{}", &noq); }, ErrorKind::kBadInput, {"hf_quant_config.json", "quantization"});
  std::string ex = R"({"quantization":{"quant_algo":"FP8","exclude_modules":"lm_head"}})";
  expect_error([&] { read("{}", &ex); }, ErrorKind::kBadInput, {"exclude_modules", "list"});
  // Lower-case algorithm names are accepted (ModelOpt has emitted them).
  std::string lc = R"({"quantization":{"quant_algo":"fp8_pb_wo"}})";
  EXPECT_EQ(layer_scheme(read("{}", &lc)).act, ActQuant::kFP8Group128);
}

TEST(QuantConfig, ModelOptConfigJson) {
  struct A {
    const char* algo;
    SchemeKind kind;
    ActQuant act;
  } as[] = {{"FP8", SchemeKind::kFP8W8A8, ActQuant::kFP8Tensor},
            {"FP8_PER_CHANNEL_PER_TOKEN", SchemeKind::kFP8W8A8, ActQuant::kFP8Token},
            {"FP8_PB_WO", SchemeKind::kFP8W8A8, ActQuant::kFP8Group128},
            {"NVFP4", SchemeKind::kNVFP4, ActQuant::kNVFP4},
            {"W4A16_NVFP4", SchemeKind::kNVFP4A16, ActQuant::kNone}};
  for (const auto& a : as) {
    SCOPED_TRACE(a.algo);
    std::string cfg = std::string(R"({"quantization_config":{"quant_method":"modelopt","quant_algo":")") + a.algo +
                      R"(","producer":{"name":"modelopt","version":"0.37.0"},"ignore":["lm_head","model.layers.*.mlp.gate"],
                      "kv_cache_scheme":{"type":"float","num_bits":8,"dynamic":false}}})";
    QuantConfig c = read(cfg);
    EXPECT_EQ(c.source, QuantSource::kModelOpt);
    MoeScheme s = layer_scheme(c);
    EXPECT_EQ(s.kind, a.kind);
    EXPECT_EQ(s.act, a.act);
    EXPECT_EQ(s.format, std::string("modelopt ") + a.algo);
    EXPECT_TRUE(c.resolve("model.layers.3.mlp.gate")->ignored);
  }
  // MXFP8 is a ModelOpt algorithm qmoe reads but does not run.
  QuantConfig mx = read(R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"MXFP8"}})");
  expect_error([&] { layer_scheme(mx); }, ErrorKind::kUnsupported, {"layer 3", "supported:"});
  // config.json and hf_quant_config.json must agree.
  expect_error([] { read(R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"FP8"}})", &kHfNvfp4); },
               ErrorKind::kBadInput, {"FP8", "NVFP4", "hf_quant_config.json"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"modelopt"}})"); }, ErrorKind::kBadInput,
               {"quant_algo"});
}

TEST(QuantConfig, ModelOptMixedPrecision) {
  const char* cfg = R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION",
    "ignore":["lm_head"],"quantized_layers":{
      "model.layers.3.mlp.experts":{"quant_algo":"NVFP4","group_size":16},
      "model.layers.3.self_attn.q_proj":{"quant_algo":"FP8"},
      "model.layers.4.mlp.experts.0.gate_proj":{"quant_algo":"W4A16_NVFP4","group_size":16}}}})";
  QuantConfig c = read(cfg);
  EXPECT_EQ(layer_scheme(c).kind, SchemeKind::kNVFP4);  // covered by the fused experts entry
  EXPECT_EQ(c.resolve("model.layers.3.self_attn.q_proj")->format, "modelopt FP8");
  EXPECT_FALSE(c.resolve("model.layers.3.self_attn.k_proj").has_value());  // not listed: unquantized
  EXPECT_EQ(c.resolve("model.layers.4.mlp.experts")->format, "modelopt W4A16_NVFP4");  // parent lookup
  expect_error([] { read(R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION"}})"); },
               ErrorKind::kBadInput, {"quantized_layers"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION",
    "quantized_layers":{"a":{"quant_algo":"INT4_AWQ"}}}})"); },
               ErrorKind::kUnsupported, {"quantized_layers.a", "INT4_AWQ"});
}

TEST(QuantConfig, Gptq) {
  QuantConfig c = read(R"({"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true,
    "sym":true,"damp_percent":0.01,"true_sequential":true,"checkpoint_format":"gptq",
    "dynamic":{"-:.*\\.mlp\\.gate$":{},"+:model\\.layers\\.5\\..*":{"bits":8,"group_size":-1}}}})");
  EXPECT_EQ(c.source, QuantSource::kGPTQ);
  auto g = c.resolve(kGate);
  EXPECT_EQ(g->weights->num_bits, 4);
  EXPECT_EQ(g->weights->actorder, ActOrder::kGroup);
  EXPECT_EQ(g->format, "gptq");
  EXPECT_FALSE(c.resolve("lm_head").has_value());
  EXPECT_TRUE(c.resolve("model.layers.3.mlp.gate")->ignored);
  auto l5 = c.resolve("model.layers.5.mlp.experts.0.gate_proj");
  EXPECT_EQ(l5->weights->num_bits, 8);
  EXPECT_EQ(l5->weights->strat(), Strategy::kChannel);
  MoeScheme s = layer_scheme(c);
  EXPECT_EQ(s.kind, SchemeKind::kWNA16);
  EXPECT_EQ(s.format, "gptq");
  EXPECT_EQ(read(R"({"quantization_config":{"quant_method":"gptq","bits":4,"group_size":-1,"desc_act":true,"sym":false}})")
                .resolve(kGate)->weights->actorder,
            ActOrder::kNone);  // desc_act is a no-op with per-channel scales
  expect_error([] { read(R"({"quantization_config":{"quant_method":"gptq","bits":5,"group_size":128}})"); },
               ErrorKind::kBadInput, {"bits", "5"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"gptq","group_size":128}})"); }, ErrorKind::kBadInput,
               {"bits"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"gptq","bits":4,"group_size":0}})"); },
               ErrorKind::kBadInput, {"group_size"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"gptq","bits":"4"}})"); }, ErrorKind::kBadInput,
               {"bits", "integer"});
}

TEST(QuantConfig, Awq) {
  QuantConfig c = read(R"({"quantization_config":{"quant_method":"awq","bits":4,"group_size":128,"zero_point":true,
    "version":"gemm","modules_to_not_convert":["mlp.gate"]}})");
  auto g = c.resolve(kGate);
  EXPECT_FALSE(g->weights->symmetric);
  EXPECT_EQ(g->format, "awq");
  EXPECT_TRUE(c.resolve("model.layers.3.mlp.gate")->ignored);
  EXPECT_EQ(layer_scheme(c).kind, SchemeKind::kWNA16);
  expect_error([] { read(R"({"quantization_config":{"quant_method":"awq","bits":4,"group_size":128,"version":"gemv"}})"); },
               ErrorKind::kUnsupported, {"version", "'gemv'"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"awq","bits":4}})"); }, ErrorKind::kBadInput,
               {"group_size"});
}

TEST(QuantConfig, GptOssMxfp4) {
  QuantConfig c = read(R"({"quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":[
    "model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}})");
  auto e = c.resolve("model.layers.3.mlp.experts.gate_up_proj");
  ASSERT_TRUE(e && e->weights);
  EXPECT_EQ(e->weights->group_size, 32);
  EXPECT_EQ(e->format, "mxfp4");
  EXPECT_TRUE(c.resolve("model.layers.3.self_attn.q_proj")->ignored);
  EXPECT_TRUE(c.resolve("model.layers.3.mlp.router")->ignored);
  EXPECT_FALSE(c.resolve("model.layers.3.some_linear").has_value());  // only experts are converted
  const std::string x = "model.layers.3.mlp.experts";
  EXPECT_EQ(moe_scheme("layer 3", c.resolve(x), c.resolve(x), c.resolve(x)).kind, SchemeKind::kMXFP4A16);
}

TEST(QuantConfig, DeepSeekFp8) {
  QuantConfig c = read(R"({"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic",
    "weight_block_size":[128,128]}})");
  MoeScheme s = layer_scheme(c);
  EXPECT_EQ(s.kind, SchemeKind::kFP8W8A8);
  EXPECT_EQ(s.act, ActQuant::kFP8Group128);
  EXPECT_EQ(s.format, "fp8");
  EXPECT_EQ(s.weights.block_structure, (std::array<int, 2>{128, 128}));
  // Per-tensor FP8 with static activations.
  EXPECT_EQ(layer_scheme(read(R"({"quantization_config":{"quant_method":"fp8","activation_scheme":"static"}})")).act,
            ActQuant::kFP8Tensor);
  // Per-tensor dynamic activations are not a qmoe scheme.
  expect_error([] { layer_scheme(read(R"({"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic"}})")); },
               ErrorKind::kUnsupported, {"layer 3", "float8 tensor dynamic"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"fp8","activation_scheme":"static","weight_block_size":[128,128]}})"); },
               ErrorKind::kBadInput, {"dynamic"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"fp8","weight_block_size":[128]}})"); },
               ErrorKind::kBadInput, {"weight_block_size"});
  expect_error([] { read(R"({"quantization_config":{"quant_method":"fp8","fmt":"e5m2"}})"); }, ErrorKind::kUnsupported,
               {"'e5m2'"});
  // 64x64 blocks parse but are not a qmoe scheme.
  expect_error([] { layer_scheme(read(R"({"quantization_config":{"quant_method":"fp8","weight_block_size":[64,64]}})")); },
               ErrorKind::kUnsupported, {"128x128"});
}

TEST(QuantConfig, FromCheckpointDir) {
  test::ScratchDir d("qc_ckdir");
  test::write_text(d / "config.json", R"({"architectures":["Llama4ForConditionalGeneration"]})");
  test::write_text(d / "hf_quant_config.json", kHfNvfp4);
  SafetensorsWriter w;
  w.add("x", Tensor(DType::kU8, {3}));
  w.write(d / "model.safetensors");
  QuantConfig c = read_quant_config(*CheckpointDir::open(d.path.string()));
  EXPECT_EQ(c.source, QuantSource::kModelOptLegacy);
  EXPECT_EQ(c.where, d / "hf_quant_config.json" + ".quantization");
  EXPECT_EQ(layer_scheme(c).kind, SchemeKind::kNVFP4);
  // A broken config names the directory's config.json.
  test::write_text(d / "config.json", R"({"quantization_config":{"quant_algo":"FP8"}})");
  expect_error([&] { read_quant_config(*CheckpointDir::open(d.path.string())); }, ErrorKind::kBadInput,
               {d / "config.json", "quant_algo but no quant_method"});
}

TEST(MoeScheme, Rules) {
  QuantConfig c = read(kCtW4A16);
  auto q = c.resolve(kGate);
  auto ign = c.resolve("lm_head");
  ASSERT_TRUE(ign->ignored);
  // All ignored -> unquantized; one ignored -> mismatch.
  EXPECT_EQ(moe_scheme("layer 9", ign, ign, ign).kind, SchemeKind::kUnquantized);
  EXPECT_EQ(moe_scheme("layer 9", std::nullopt, std::nullopt, std::nullopt).kind, SchemeKind::kUnquantized);
  expect_error([&] { moe_scheme("layer 9", q, q, ign); }, ErrorKind::kUnsupported, {"layer 9", "down", "ignored"});
  expect_error([&] { moe_scheme("layer 9", q, std::nullopt, q); }, ErrorKind::kUnsupported, {"layer 9", "up", "unquantized"});
  // Unsupported combinations name the layer, the scheme and what is supported.
  auto mk = [](const char* w, const char* a, const char* fmt) {
    std::string cfg = std::string(R"({"quantization_config":{"quant_method":"compressed-tensors","format":")") + fmt +
                      R"(","config_groups":{"g":{"targets":["Linear"],"weights":)" + w +
                      (a ? std::string(R"(,"input_activations":)") + a : std::string()) + "}}}}";
    return read(cfg);
  };
  struct U {
    const char* what;
    const char* w;
    const char* a;
    const char* fmt;
  } us[] = {
      {"int8 static token acts", R"({"num_bits":8,"type":"int","strategy":"channel"})",
       R"({"num_bits":8,"type":"int","strategy":"tensor"})", "int-quantized"},
      {"int3", R"({"num_bits":3,"type":"int","strategy":"group","group_size":128})", nullptr, "pack-quantized"},
      {"wna16 in float format", R"({"num_bits":4,"type":"int","strategy":"group","group_size":128})", nullptr, "float-quantized"},
      {"fp8 static channel acts", R"({"num_bits":8,"type":"float","strategy":"channel"})",
       R"({"num_bits":8,"type":"float","strategy":"channel"})", "float-quantized"},
      {"nvfp4 group 32", R"({"num_bits":4,"type":"float","strategy":"tensor_group","group_size":32})", nullptr,
       "nvfp4-pack-quantized"},
      {"dense storage", R"({"num_bits":4,"type":"int","strategy":"group","group_size":128})", nullptr, "dense"},
      {"int tensor strategy", R"({"num_bits":4,"type":"int","strategy":"tensor"})", nullptr, "pack-quantized"},
  };
  for (const auto& u : us) {
    SCOPED_TRACE(u.what);
    QuantConfig cc = mk(u.w, u.a, u.fmt);
    expect_error([&] { layer_scheme(cc); }, ErrorKind::kUnsupported, {"layer 3", "MoE scheme", "supported:"});
  }
  // FP8 weight-only and asymmetric WNA16 are supported.
  EXPECT_EQ(layer_scheme(mk(R"({"num_bits":8,"type":"float","strategy":"channel"})", nullptr, "float-quantized")).kind,
            SchemeKind::kFP8A16);
  EXPECT_EQ(layer_scheme(mk(R"({"num_bits":8,"type":"int","strategy":"channel","symmetric":false})", nullptr, "pack-quantized")).kind,
            SchemeKind::kWNA16);
}

TEST(Matchers, Fnmatch) {
  EXPECT_TRUE(fnmatch("model.layers.*.self_attn", "model.layers.12.self_attn"));
  EXPECT_TRUE(fnmatch("*", ""));
  EXPECT_TRUE(fnmatch("*.router", "a.b.c.router"));
  EXPECT_FALSE(fnmatch("*.router", "a.b.c.router.x"));
  EXPECT_TRUE(fnmatch("layer?.x", "layer1.x"));
  EXPECT_FALSE(fnmatch("layer?.x", "layer12.x"));
  EXPECT_TRUE(fnmatch("l[0-3].x", "l2.x"));
  EXPECT_FALSE(fnmatch("l[!0-3].x", "l2.x"));
  EXPECT_TRUE(fnmatch("l[!0-3].x", "l7.x"));
  EXPECT_TRUE(fnmatch("a[b", "a[b"));  // unclosed bracket is a literal
  EXPECT_TRUE(fnmatch("[]]", "]"));
  EXPECT_FALSE(fnmatch("abc", "abcd"));
  EXPECT_TRUE(fnmatch("a*b*c*d*e*f*g", "aXbXcXdXeXfXg"));
  // Polynomial: a pathological pattern on a long name returns quickly.
  std::string name(5000, 'a');
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(fnmatch("*a*a*a*a*a*a*a*a*a*b", name));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(Matchers, PythonRegex) {
  auto m = [](const std::string& p, const std::string& s) { return python_re_match(*compile_python_regex(p, "t"), s); };
  EXPECT_TRUE(m(".*experts", "model.layers.0.mlp.experts.1.gate_proj"));  // no end anchor
  EXPECT_FALSE(m("experts", "model.layers.0.mlp.experts"));               // anchored at the start
  EXPECT_TRUE(m("model\\.layers\\.\\d+\\.mlp", "model.layers.17.mlp.experts"));
  EXPECT_FALSE(m(".*gate_proj$", "x.gate_proj.y"));
  EXPECT_TRUE(m("(?P<layer>model)\\.layers", "model.layers.1"));  // named group translated
  EXPECT_TRUE(m("\\Amodel.*proj\\Z", "model.x.proj"));
  EXPECT_FALSE(m("\\Amodel.*proj\\Z", "model.x.proj.y"));
  EXPECT_TRUE(m("[^.]+\\.x", "abc.x"));
  EXPECT_TRUE(m("a|ab", "ab"));
  expect_error([] { compile_python_regex("(a)\\1", "t"); }, ErrorKind::kBadInput, {"back-references"});
  expect_error([] { compile_python_regex("(?<=a)b", "t"); }, ErrorKind::kBadInput, {"t:", "(?<"});
  expect_error([] { compile_python_regex(std::string(40, '(') + std::string(40, ')'), "t"); }, ErrorKind::kBadInput,
               {"deeper"});
  // Exponential-backtracking patterns run in polynomial time.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(m("(a*)*b", std::string(40, 'a')));
  EXPECT_FALSE(m("(a|aa)+c", std::string(60, 'a')));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

}  // namespace
}  // namespace qmoe::formats
