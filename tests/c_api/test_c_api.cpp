// The C ABI against the C++ API it wraps: for every scheme, a layer described through
// qmoe_layer_create (scheme fields left to inference) gets the same scheme key and produces the
// same bits as MoeLayer::create on the same weights, on the reference and CPU backends (or fails
// with the same status and message); checkpoints load to the same layers as load_model, with the
// inspect JSON, tensor views, TP slicing and error statuses checked; errors stay per thread.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/c_api_views.h"
#include "common/tensor_check.h"
#include "cpu/ref/quantize.h"
#include "models/gen.h"
#include "qmoe/c_api.h"
#include "qmoe/model.h"

namespace qmoe {
namespace {

using test::experts_view;
using test::host_view;
using test::out_view;
using test::same_bits;

struct SchemeCase {
  const char* name;
  ref::SchemeSpec spec;
};

std::vector<SchemeCase> scheme_cases() {
  std::vector<SchemeCase> v;
  auto add = [&](const char* n, auto f) {
    ref::SchemeSpec s;
    f(s);
    v.push_back({n, s});
  };
  add("bf16", [](ref::SchemeSpec& s) { s.kind = SchemeKind::kUnquantized; });
  add("f16_acts_f16", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kUnquantized;
    s.act_dtype = DType::kF16;
    s.weight_dtype = DType::kF16;
  });
  add("wna16_int4_g32_sym", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kWNA16;
    s.group_size = 32;
  });
  add("wna16_int4_g32_asym", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kWNA16;
    s.group_size = 32;
    s.symmetric = false;
  });
  add("wna16_int4_actorder", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kWNA16;
    s.group_size = 32;
    s.actorder = true;
  });
  add("wna16_int8_channel", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kWNA16;
    s.bits = 8;
    s.group_size = 0;
  });
  add("fp8_tensor_static", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kFP8W8A8;
    s.fp8_strategy = Strategy::kTensor;
    s.act = ActQuant::kFP8Tensor;
  });
  add("fp8_channel_token", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kFP8W8A8;
    s.fp8_strategy = Strategy::kChannel;
    s.act = ActQuant::kFP8Token;
  });
  add("fp8_block_group128", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kFP8W8A8;
    s.fp8_strategy = Strategy::kBlock;
    s.act = ActQuant::kFP8Group128;
  });
  add("fp8_a16_channel", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kFP8A16;
    s.fp8_strategy = Strategy::kChannel;
  });
  add("int8_w8a8", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kINT8W8A8;
    s.bits = 8;
    s.group_size = 0;
    s.act = ActQuant::kINT8Token;
  });
  add("w4a8_fp8", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kW4A8FP8;
    s.group_size = 32;
    s.act = ActQuant::kFP8Token;
  });
  add("w4a8_int8", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kW4A8INT8;
    s.group_size = 32;
    s.act = ActQuant::kINT8Token;
  });
  add("nvfp4", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kNVFP4;
    s.act = ActQuant::kNVFP4;
  });
  add("nvfp4_a16", [](ref::SchemeSpec& s) { s.kind = SchemeKind::kNVFP4A16; });
  add("mxfp4_a16_bias", [](ref::SchemeSpec& s) {
    s.kind = SchemeKind::kMXFP4A16;
    s.bias = true;
  });
  return v;
}

class CApiScheme : public ::testing::TestWithParam<SchemeCase> {};

TEST_P(CApiScheme, SameSchemeAndBitsAsTheCppLayer) {
  const SchemeCase& sc = GetParam();
  ref::RandomWeightsSpec rs;
  rs.scheme = sc.spec;
  rs.num_experts = 6;
  rs.hidden = 192;
  rs.intermediate = 96;
  if (sc.spec.fp8_strategy == Strategy::kBlock && sc.spec.kind == SchemeKind::kFP8W8A8) {
    rs.hidden = 256;  // 128 x 128 blocks must divide each w13 shard's rows
    rs.intermediate = 128;
  }
  rs.seed = 11;
  ExpertWeights w = ref::make_random_expert_weights(rs);
  MoeConfig cfg;
  cfg.num_experts = w.num_experts;
  cfg.router.top_k = 2;
  cfg.router.renormalize = true;
  const int64_t m = 7;
  Tensor x = test::random_tensor(w.act_dtype, {m, w.hidden}, 3, 0.05, 2.0);
  Tensor logits = test::random_tensor(DType::kF32, {m, w.num_experts}, 4, 0.05, 3.0);

  qmoe_layer_desc_t d;
  qmoe_layer_desc_init(&d);
  d.experts = experts_view(w);
  d.router.top_k = 2;
  d.router.renormalize = 1;
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    SCOPED_TRACE(backend_name(b));
    d.backend = static_cast<int32_t>(b);
    std::unique_ptr<MoeLayer> cpp;
    std::string cpp_error;
    qmoe_status_t cpp_status = QMOE_OK;
    try {
      cpp = MoeLayer::create(w, cfg, b);
    } catch (const Error& e) {
      cpp_error = e.what();
      cpp_status = e.kind() == ErrorKind::kUnsupported ? QMOE_ERR_UNSUPPORTED : QMOE_ERR_BAD_INPUT;
    }
    qmoe_layer_t* layer = nullptr;
    qmoe_status_t s = qmoe_layer_create(&d, &layer);
    if (!cpp) {
      // The backend refuses this scheme: the C ABI reports the same status and message.
      EXPECT_EQ(s, cpp_status);
      EXPECT_EQ(std::string(qmoe_last_error()), cpp_error);
      EXPECT_EQ(layer, nullptr);
      continue;
    }
    ASSERT_EQ(s, QMOE_OK) << qmoe_last_error();
    qmoe_layer_props_t p;
    ASSERT_EQ(qmoe_layer_get_props(layer, &p), QMOE_OK);
    EXPECT_EQ(std::string(p.scheme_key), w.scheme.key()) << "inferred scheme differs";
    EXPECT_EQ(std::string(p.method_name), cpp->method_name());
    Tensor expect = cpp->forward(x, logits);
    Tensor y(w.act_dtype, {m, w.hidden});
    qmoe_tensor_t xt = host_view(x), lt = host_view(logits), yt = out_view(y);
    ASSERT_EQ(qmoe_layer_forward(layer, &xt, &lt, &yt, nullptr), QMOE_OK) << qmoe_last_error();
    EXPECT_TRUE(same_bits(y, expect)) << sc.name << ": C ABI output differs from MoeLayer::forward";
    // fused_experts on the same routing: same bits again.
    RoutingResult r = route(logits, cfg.router);
    Tensor y2(w.act_dtype, {m, w.hidden});
    qmoe_tensor_t wt = host_view(r.topk_weights), it = host_view(r.topk_ids), y2t = out_view(y2);
    ASSERT_EQ(qmoe_fused_experts(&d, &xt, &wt, &it, &y2t, nullptr), QMOE_OK) << qmoe_last_error();
    EXPECT_TRUE(same_bits(y2, expect)) << sc.name << ": fused_experts differs from MoeLayer::forward";
    qmoe_layer_free(layer);
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, CApiScheme, ::testing::ValuesIn(scheme_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CApiLayer, CopiedWeightsOutliveTheCallersBuffers) {
  ref::RandomWeightsSpec rs;
  rs.scheme.kind = SchemeKind::kWNA16;
  rs.scheme.group_size = 32;
  rs.num_experts = 4;
  rs.hidden = 64;
  rs.intermediate = 32;
  ExpertWeights w = ref::make_random_expert_weights(rs);
  Tensor x = test::random_tensor(DType::kBF16, {3, 64}, 5);
  Tensor logits = test::random_tensor(DType::kF32, {3, 4}, 6);
  MoeConfig cfg;
  cfg.num_experts = 4;
  cfg.router.top_k = 2;
  Tensor expect = MoeLayer::create(w, cfg, Backend::kReference)->forward(x, logits);

  // Descriptor over private copies that are scribbled over after creation (borrow_weights = 0).
  ExpertWeights copy = w;
  copy.w13.weight = w.w13.weight.clone();
  copy.w2.weight = w.w2.weight.clone();
  qmoe_layer_desc_t d;
  qmoe_layer_desc_init(&d);
  d.experts = experts_view(copy);
  d.router.top_k = 2;
  d.backend = QMOE_BACKEND_REFERENCE;
  qmoe_layer_t* layer = nullptr;
  ASSERT_EQ(qmoe_layer_create(&d, &layer), QMOE_OK) << qmoe_last_error();
  std::memset(copy.w13.weight.raw_mut(), 0x5a, copy.w13.weight.nbytes());
  std::memset(copy.w2.weight.raw_mut(), 0x5a, copy.w2.weight.nbytes());
  Tensor y(DType::kBF16, {3, 64});
  qmoe_tensor_t xt = host_view(x), lt = host_view(logits), yt = out_view(y);
  ASSERT_EQ(qmoe_layer_forward(layer, &xt, &lt, &yt, nullptr), QMOE_OK) << qmoe_last_error();
  EXPECT_TRUE(same_bits(y, expect));
  qmoe_layer_free(layer);
}

TEST(CApiErrors, MessagesArePerThread) {
  ASSERT_EQ(qmoe_align_block_size_sizes(4, 0, 8, nullptr, nullptr), QMOE_ERR_BAD_INPUT);
  std::string mine = qmoe_last_error();
  ASSERT_NE(mine.find("num_experts"), std::string::npos) << mine;
  std::string other = "unset";
  std::thread t([&] {
    other = qmoe_last_error();  // nothing failed on this thread yet
    int64_t cap = 0;
    EXPECT_EQ(qmoe_align_block_size_sizes(4, 2, 8, &cap, nullptr), QMOE_OK);
  });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(std::string(qmoe_last_error()), mine);
}

// ---- checkpoints ----------------------------------------------------------------------------

class CApiCheckpoint : public ::testing::Test {
 protected:
  static std::string gen(const std::string& format, int hidden = 128, int intermediate = 64) {
    std::string dir = (std::filesystem::temp_directory_path() / ("qmoe_c_api_" + format + "_" +
                                                                 std::to_string(::getpid())))
                          .string();
    std::filesystem::remove_all(dir);
    models::GenOptions o;
    o.arch = "mixtral";
    o.format = format;
    o.out = dir;
    o.reference_out = "-";
    o.layers = 2;
    o.experts = 6;
    o.hidden = hidden;
    o.intermediate = intermediate;
    o.seed = 7;
    models::generate_checkpoint(o);
    return dir;
  }
};

TEST_F(CApiCheckpoint, LoadsTheSameLayersAsLoadModel) {
  for (const char* format : {"bf16", "ct-w4a16"}) {
    SCOPED_TRACE(format);
    std::string dir = gen(format, 256, 128);  // int4 group 128 needs I % 128 == 0
    Model model = load_model(dir);
    qmoe_checkpoint_t* ck = nullptr;
    ASSERT_EQ(qmoe_checkpoint_load(dir.c_str(), nullptr, &ck), QMOE_OK) << qmoe_last_error();
    int32_t n = -1;
    ASSERT_EQ(qmoe_checkpoint_num_layers(ck, &n), QMOE_OK);
    ASSERT_EQ(n, static_cast<int32_t>(model.layers.size()));

    const char* js = nullptr;
    ASSERT_EQ(qmoe_checkpoint_info_json(ck, &js), QMOE_OK);
    nlohmann::json info = nlohmann::json::parse(js);
    EXPECT_EQ(info["arch"], "mixtral");
    EXPECT_EQ(info["quant_method"], model.quant_method);
    ASSERT_EQ(info["layers"].size(), model.layers.size());
    for (size_t i = 0; i < model.layers.size(); ++i) {
      const MoeLayerSpec& s = model.layers[i];
      const nlohmann::json& li = info["layers"][i];
      EXPECT_EQ(li["layer"], s.layer);
      EXPECT_EQ(li["prefix"], s.prefix);
      EXPECT_EQ(li["scheme"], s.experts.scheme.key());
      EXPECT_EQ(li["num_experts"], 6);
      EXPECT_EQ(li["hidden"], 256);
      EXPECT_EQ(li["intermediate"], 128);
      EXPECT_EQ(li["router"]["top_k"], s.config.router.top_k);
      EXPECT_EQ(li["tensors"]["w13.weight"]["dtype"], dtype_name(s.experts.w13.weight.dtype()));
      EXPECT_EQ(li["tensors"]["w13.weight"]["shape"], nlohmann::json(s.experts.w13.weight.shape()));

      // Tensor views hold the checkpoint's canonical bytes.
      for (auto [name, t] : {std::pair<const char*, const Tensor*>{"w13.weight", &s.experts.w13.weight},
                             {"w2.weight", &s.experts.w2.weight},
                             {"router_weight", &s.router_weight}}) {
        qmoe_tensor_t v;
        ASSERT_EQ(qmoe_checkpoint_tensor(ck, static_cast<int32_t>(i), name, &v), QMOE_OK) << qmoe_last_error();
        ASSERT_EQ(v.dtype, static_cast<int32_t>(t->dtype())) << name;
        ASSERT_EQ(Shape(v.shape, v.shape + v.ndim), t->shape()) << name;
        EXPECT_EQ(std::memcmp(v.data, t->raw(), t->nbytes()), 0) << name;
      }

      // The prepared layer computes what MoeLayer over load_model's weights computes, and keeps
      // working after the checkpoint handle is gone (last layer only).
      qmoe_layer_t* layer = nullptr;
      ASSERT_EQ(qmoe_checkpoint_layer_create(ck, static_cast<int32_t>(i), QMOE_BACKEND_REFERENCE, &layer), QMOE_OK)
          << qmoe_last_error();
      auto cpp = MoeLayer::create(s.experts, s.config, Backend::kReference, s.shared_expert, s.router_bias);
      const int64_t m = 5;
      Tensor x = test::random_tensor(s.experts.act_dtype, {m, 256}, 20 + i);
      Tensor logits = test::random_tensor(DType::kF32, {m, s.config.num_experts}, 30 + i);
      Tensor expect = cpp->forward(x, logits);
      if (i + 1 == model.layers.size()) {
        qmoe_checkpoint_free(ck);
        ck = nullptr;
      }
      Tensor y(s.experts.act_dtype, {m, 256});
      qmoe_tensor_t xt = host_view(x), lt = host_view(logits), yt = out_view(y);
      ASSERT_EQ(qmoe_layer_forward(layer, &xt, &lt, &yt, nullptr), QMOE_OK) << qmoe_last_error();
      EXPECT_TRUE(same_bits(y, expect)) << "layer " << i;
      qmoe_layer_free(layer);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_F(CApiCheckpoint, TensorParallelSliceAndErrors) {
  std::string dir = gen("bf16");
  qmoe_load_options_t o;
  qmoe_load_options_init(&o);
  o.tp_rank = 1;
  o.tp_size = 2;
  int32_t only = -1;
  qmoe_checkpoint_t* ck = nullptr;
  {
    Model full = load_model(dir);
    only = full.layers.back().layer;
  }
  o.only_layers = &only;
  o.num_only_layers = 1;
  ASSERT_EQ(qmoe_checkpoint_load(dir.c_str(), &o, &ck), QMOE_OK) << qmoe_last_error();
  int32_t n = 0;
  ASSERT_EQ(qmoe_checkpoint_num_layers(ck, &n), QMOE_OK);
  EXPECT_EQ(n, 1);
  qmoe_tensor_t v;
  ASSERT_EQ(qmoe_checkpoint_tensor(ck, 0, "w13.weight", &v), QMOE_OK) << qmoe_last_error();
  EXPECT_EQ(Shape(v.shape, v.shape + v.ndim), (Shape{6, 64, 128}));  // 2 * I / tp_size rows
  ASSERT_EQ(qmoe_checkpoint_tensor(ck, 0, "w2.weight", &v), QMOE_OK);
  EXPECT_EQ(Shape(v.shape, v.shape + v.ndim), (Shape{6, 128, 32}));

  EXPECT_EQ(qmoe_checkpoint_tensor(ck, 0, "w13.zero_point", &v), QMOE_ERR_BAD_INPUT);
  std::string msg = qmoe_last_error();
  EXPECT_NE(msg.find("w13.zero_point"), std::string::npos) << msg;
  EXPECT_NE(msg.find("w13.weight"), std::string::npos) << msg;  // lists what the layer has
  qmoe_layer_t* layer = nullptr;
  EXPECT_EQ(qmoe_checkpoint_layer_create(ck, 1, QMOE_BACKEND_REFERENCE, &layer), QMOE_ERR_BAD_INPUT);
  EXPECT_NE(std::string(qmoe_last_error()).find("outside [0, 1)"), std::string::npos) << qmoe_last_error();
  EXPECT_EQ(layer, nullptr);
  qmoe_checkpoint_free(ck);

  o.tp_rank = 2;  // rank outside tp_size
  ck = nullptr;
  EXPECT_EQ(qmoe_checkpoint_load(dir.c_str(), &o, &ck), QMOE_ERR_BAD_INPUT);
  EXPECT_EQ(ck, nullptr);
  EXPECT_NE(std::string(qmoe_last_error()).find("tp_rank"), std::string::npos) << qmoe_last_error();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qmoe
