// Loader tests: every (arch, format) pair gen writes loads into canonical weights that dequantize to
// within the scheme's round-to-nearest error of the bf16 original; layouts (gate-first, fused in x
// out, gpt-oss interleave) checked against the raw tensors; router configs; NVFP4 global-scale
// conventions; TP / EP slicing against the unsliced load; bad inputs give one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/model_edit.h"
#include "common/tensor_check.h"
#include "cpu/ref/quantize.h"
#include "dispatch/select.h"
#include "formats/packing.h"
#include "models/layouts.h"
#include "models/slicing.h"
#include "qmoe/model.h"

namespace qmoe {
namespace {

using test::ModelScratch;

// Relative rms bound of round-to-nearest weight error for uniform random weights (gen's rows are
// uniform in +-a): int b-bit symmetric absmax has step a/(2^(b-1)-1) -> rel rms = step/sqrt(12) /
// (a/sqrt(3)) = 1/(2(2^(b-1)-1)) (int4 0.071, int8 0.0039); asymmetric 1/(2^b-1) (0.067); e4m3 has
// 3 mantissa bits: relative rounding error up to 2^-4, rms about 2^-4/sqrt(3) = 0.036; e2m1 under
// a per-16 (nvfp4) / power-of-two per-32 (mxfp4) scale measures about 0.10-0.11. Each bound adds
// ~15-25% for finite-sample noise and bf16 / e4m3 rounding of scales.
double weight_bound(const MoeScheme& s) {
  switch (s.kind) {
    case SchemeKind::kUnquantized: return 0.0;
    case SchemeKind::kWNA16: case SchemeKind::kW4A8FP8: case SchemeKind::kW4A8INT8: case SchemeKind::kINT8W8A8:
      return s.weights.num_bits == 8 ? 0.005 : 0.085;
    case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: return 0.042;
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: return 0.125;
    case SchemeKind::kMXFP4A16: return 0.14;
  }
  return 0;
}

TEST(ModelsLoad, EveryArchFormatPairDequantizesNearTheOriginal) {
  ModelScratch s("pairs");
  int pairs = 0;
  for (const models::GenFormat& f : models::gen_formats()) {
    for (const std::string& arch : f.archs) {
      SCOPED_TRACE(arch + " " + f.name);
      std::string dir = test::gen_model(s, arch, f.name, arch + "-" + f.name);
      Model q = load_model(dir);
      Model o = load_model(f.name == "bf16" ? dir : dir + "/bf16");
      ASSERT_EQ(q.arch, arch);
      ASSERT_EQ(q.layers.size(), 2u);
      ASSERT_EQ(o.layers.size(), 2u);
      for (size_t l = 0; l < q.layers.size(); ++l) {
        const ExpertWeights& w = q.layers[l].experts;
        EXPECT_EQ(w.num_experts, 8);
        EXPECT_EQ(w.hidden, 256);
        EXPECT_EQ(w.intermediate, 128);
        const double bound = weight_bound(w.scheme);
        for (bool w13 : {true, false}) {
          double err = test::rel_l2(ref::dequantize_proj(w, w13), ref::dequantize_proj(o.layers[l].experts, w13));
          EXPECT_LE(err, bound) << "layer " << l << (w13 ? " w13 " : " w2 ") << w.scheme.key();
          if (w.scheme.kind != SchemeKind::kUnquantized) EXPECT_GT(err, bound / 20) << "suspiciously exact";
        }
        ASSERT_EQ(q.layers[l].shared_expert.has_value(), o.layers[l].shared_expert.has_value());
        if (q.layers[l].shared_expert) {
          const ExpertWeights& sq = *q.layers[l].shared_expert;
          for (bool w13 : {true, false})
            EXPECT_LE(test::rel_l2(ref::dequantize_proj(sq, w13), ref::dequantize_proj(*o.layers[l].shared_expert, w13)),
                      weight_bound(sq.scheme));
        }
      }
      ++pairs;
    }
  }
  EXPECT_GE(pairs, 70);
}

// Canonical w13 = gate rows then up rows, "out x in", whatever the file layout.
TEST(ModelsLoad, GateFirstOutByInFromEveryLayout) {
  ModelScratch s("layout");
  auto bf16_at = [](const Tensor& t, int64_t i) { return t.data<uint16_t>()[i]; };
  {  // mixtral: experts.N.w1 (gate) / w3 (up) / w2, [out, in]
    std::string dir = test::gen_model(s, "mixtral", "bf16", "mx");
    Model m = load_model(dir);
    auto ck = CheckpointDir::open(dir);
    const ExpertWeights& w = m.layers[1].experts;
    const int I = w.intermediate, H = w.hidden;
    for (int e : {0, 5}) {
      std::string p = "model.layers.1.block_sparse_moe.experts." + std::to_string(e) + ".";
      Tensor g = ck->get(p + "w1.weight"), u = ck->get(p + "w3.weight"), d = ck->get(p + "w2.weight");
      for (int64_t i = 0; i < I * H; ++i) {
        ASSERT_EQ(bf16_at(w.w13.weight, (int64_t)e * 2 * I * H + i), bf16_at(g, i));
        ASSERT_EQ(bf16_at(w.w13.weight, (int64_t)e * 2 * I * H + I * H + i), bf16_at(u, i));
        ASSERT_EQ(bf16_at(w.w2.weight, (int64_t)e * H * I + i), bf16_at(d, i));
      }
    }
  }
  {  // llama4: fused gate_up_proj [E, H, 2I] in x out, first half of the last dim = gate
    std::string dir = test::gen_model(s, "llama4", "bf16", "l4");
    Model m = load_model(dir);
    Tensor gu = CheckpointDir::open(dir)->get("model.layers.0.feed_forward.experts.gate_up_proj");
    const ExpertWeights& w = m.layers[0].experts;
    const int64_t I = w.intermediate, H = w.hidden;
    for (int64_t e : {0, 7})
      for (int64_t n = 0; n < 2 * I; n += 7)
        for (int64_t k = 0; k < H; k += 5)
          ASSERT_EQ(bf16_at(w.w13.weight, (e * 2 * I + n) * H + k), bf16_at(gu, (e * H + k) * 2 * I + n));
    EXPECT_TRUE(m.layers[0].config.router.apply_router_weight_on_input);
    EXPECT_EQ(m.layers[0].config.router.kind, RouterKind::kLlama4);
    EXPECT_TRUE(m.layers[0].shared_expert.has_value());
  }
  {  // gpt-oss: gate_up_proj [E, H, 2I] with gate / up interleaved along 2I
    std::string dir = test::gen_model(s, "gpt_oss", "bf16", "go");
    Model m = load_model(dir);
    auto ck = CheckpointDir::open(dir);
    Tensor gu = ck->get("model.layers.0.mlp.experts.gate_up_proj");
    Tensor gb = ck->get("model.layers.0.mlp.experts.gate_up_proj_bias");
    const ExpertWeights& w = m.layers[0].experts;
    const int64_t I = w.intermediate, H = w.hidden;
    for (int64_t e : {0, 3})
      for (int64_t n = 0; n < I; n += 3) {
        for (int64_t k = 0; k < H; k += 11) {
          ASSERT_EQ(bf16_at(w.w13.weight, (e * 2 * I + n) * H + k), bf16_at(gu, (e * H + k) * 2 * I + 2 * n));
          ASSERT_EQ(bf16_at(w.w13.weight, (e * 2 * I + I + n) * H + k), bf16_at(gu, (e * H + k) * 2 * I + 2 * n + 1));
        }
        ASSERT_EQ(bf16_at(w.w13.bias, e * 2 * I + n), bf16_at(gb, e * 2 * I + 2 * n));
      }
    EXPECT_EQ(m.layers[0].config.activation, Activation::kSwigluOai);
    EXPECT_EQ(m.layers[0].config.router.kind, RouterKind::kTopKSoftmax);
    ASSERT_TRUE(m.layers[0].router_bias.defined());
    EXPECT_EQ(m.layers[0].router_bias.dtype(), DType::kF32);
  }
}

TEST(ModelsLoad, RouterConfigsFromConfigJson) {
  ModelScratch s("router");
  Model d = load_model(test::gen_model(s, "deepseek_v3", "bf16", "ds"));
  ASSERT_EQ(d.layers.size(), 2u);
  EXPECT_EQ(d.layers[0].layer, 1);  // first_k_dense_replace = 1: layer 0 is dense and skipped
  const RouterConfig& r = d.layers[0].config.router;
  EXPECT_EQ(r.kind, RouterKind::kGrouped);
  EXPECT_EQ(r.num_groups, 4);
  EXPECT_EQ(r.topk_group, 2);
  EXPECT_FLOAT_EQ(r.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(r.renormalize && r.grouped_sigmoid);
  EXPECT_EQ(d.layers[0].router_bias.shape(), Shape({8}));
  ASSERT_TRUE(d.layers[0].shared_expert.has_value());
  EXPECT_EQ(d.layers[0].shared_expert->intermediate, 128);
  Model q = load_model(test::gen_model(s, "qwen3_moe", "bf16", "qw"));
  EXPECT_EQ(q.layers[0].config.router.kind, RouterKind::kSoftmaxTopK);
  EXPECT_TRUE(q.layers[0].config.router.renormalize);
  EXPECT_FALSE(q.layers[0].shared_expert.has_value());
  EXPECT_EQ(q.layers[0].router_weight.shape(), Shape({8, 256}));
}

// A deepseek_v3 config.json without the routing keys reads transformers' DeepseekV3Config defaults
// (n_group 8, topk_group 4, routed_scaling_factor 2.5, one shared expert), not neutral values.
TEST(ModelsLoad, DeepseekRoutingKeysDefaultAsTransformersDoes) {
  ModelScratch s("dsdef");
  std::string dir = test::gen_model(s, "deepseek_v3", "bf16", "ds");
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  for (const char* key : {"n_group", "topk_group", "routed_scaling_factor"}) ASSERT_TRUE(cfg.erase(key)) << key;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  Model d = load_model(dir);
  const RouterConfig& r = d.layers[0].config.router;
  EXPECT_EQ(r.num_groups, 8);
  EXPECT_EQ(r.topk_group, 4);
  EXPECT_FLOAT_EQ(r.routed_scaling_factor, 2.5f);
  ASSERT_TRUE(d.layers[0].shared_expert.has_value());
}

// The same weights through compressed-tensors (divide by weight_global_scale) and ModelOpt
// (multiply by weight_scale_2) give the same canonical multiplier.
TEST(ModelsLoad, Nvfp4GlobalScaleConventionsAgree) {
  ModelScratch s("nvfp4");
  Model ct = load_model(test::gen_model(s, "mixtral", "ct-nvfp4", "ct"));
  Model mo = load_model(test::gen_model(s, "mixtral", "modelopt-nvfp4", "mo"));
  const ExpertWeights &a = ct.layers[0].experts, &b = mo.layers[0].experts;
  ASSERT_EQ(a.w13.global_scale.shape(), Shape({8, 2}));
  for (int64_t i = 0; i < a.w13.global_scale.numel(); ++i) {
    float x = a.w13.global_scale.data<float>()[i], y = b.w13.global_scale.data<float>()[i];
    EXPECT_NEAR(x, y, 1e-6f * y) << i;  // 1/(1/g) in fp32: within an ulp or two
    EXPECT_LT(x, 1e-3f);                // amax/(6*448): a multiplier, not 448*6/amax
  }
  EXPECT_NE(ct.layers[0].global_scale_convention.find("compressed-tensors"), std::string::npos);
  EXPECT_NE(mo.layers[0].global_scale_convention.find("modelopt"), std::string::npos);
}

TEST(ModelsLoad, TensorParallelSlicesMatchTheWhole) {
  ModelScratch s("tp");
  for (const char* fmt : {"ct-w4a16-asym", "ct-fp8-dynamic", "ct-nvfp4", "gptq", "gptq-asym"}) {
    SCOPED_TRACE(fmt);
    std::string dir = test::gen_model(s, "qwen3_moe", fmt, fmt, 256);
    Model full = load_model(dir);
    const ExpertWeights& f = full.layers[0].experts;
    const int64_t E = 8, H = 256, I = 256, Is = 128;
    Tensor f13 = ref::dequantize_proj(f, true), f2 = ref::dequantize_proj(f, false);
    for (int r = 0; r < 2; ++r) {
      LoadOptions o;
      o.tp_rank = r, o.tp_size = 2;
      Model part = load_model(dir, o);
      const ExpertWeights& p = part.layers[0].experts;
      ASSERT_EQ(p.intermediate, Is);
      Tensor p13 = ref::dequantize_proj(p, true), p2 = ref::dequantize_proj(p, false);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t n = 0; n < Is; ++n)
          for (int64_t k = 0; k < H; ++k) {
            ASSERT_EQ(p13.data<float>()[(e * 2 * Is + n) * H + k], f13.data<float>()[(e * 2 * I + r * Is + n) * H + k]);
            ASSERT_EQ(p13.data<float>()[(e * 2 * Is + Is + n) * H + k], f13.data<float>()[(e * 2 * I + I + r * Is + n) * H + k]);
            ASSERT_EQ(p2.data<float>()[(e * H + k) * Is + n], f2.data<float>()[(e * H + k) * I + r * Is + n]);
          }
    }
  }
}

// Actorder (g_idx) checkpoints under TP, as vLLM loads them (load_full_w2): a rank's w2 columns keep
// their g_idx values, which index all of the row's groups, and w2's scales stay whole.
TEST(ModelsLoad, TensorParallelActorderKeepsWholeW2Scales) {
  ModelScratch s("tp_actorder");
  // deepseek_v3: routed and shared experts are both actorder; grouped router with a bias.
  std::string dir = test::gen_model(s, "deepseek_v3", "ct-w4a16-actorder", "ao", 256);
  Model full = load_model(dir);
  const MoeLayerSpec& fl = full.layers[0];
  const ExpertWeights& f = fl.experts;
  ASSERT_TRUE(f.w2.g_idx.defined());
  const int64_t E = 8, H = 256, I = 256, G = 128;
  Tensor f13 = ref::dequantize_proj(f, true), f2 = ref::dequantize_proj(f, false);

  // x [M, H] bf16 values in +-[0.05, 1]; logits random. The same x read as F32 for the fp32 path.
  const int64_t M = 13;
  Tensor x = test::random_tensor(DType::kBF16, {M, H}, 41), xf(DType::kF32, {M, H});
  for (int64_t i = 0; i < x.numel(); ++i) xf.data_mut<float>()[i] = codec::bf16_to_f32(x.data<uint16_t>()[i]);
  Tensor logits = test::random_tensor(DType::kF32, {M, E}, 42, 0.1, 3.0);
  auto forward = [&](const MoeLayerSpec& l, DType act, Backend b = Backend::kReference) {
    ExpertWeights w = l.experts;
    std::optional<ExpertWeights> sh = l.shared_expert;
    w.act_dtype = act;
    if (sh) sh->act_dtype = act;
    return MoeLayer::create(w, l.config, b, sh, l.router_bias)->forward(act == DType::kF32 ? xf : x, logits);
  };
  const Tensor y32 = forward(fl, DType::kF32), y16 = forward(fl, DType::kBF16);
  double rms = 0;
  for (int64_t i = 0; i < y32.numel(); ++i) rms += double(y32.data<float>()[i]) * y32.data<float>()[i];
  rms = std::sqrt(rms / y32.numel());

  for (int tp : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const int64_t Is = I / tp;
    std::vector<Tensor> y32s, y16s;
    for (int r = 0; r < tp; ++r) {
      LoadOptions o;
      o.tp_rank = r, o.tp_size = tp;
      Model part = load_model(dir, o);
      const MoeLayerSpec& pl = part.layers[0];
      const ExpertWeights& p = pl.experts;
      ASSERT_EQ(p.intermediate, Is);
      // w2 keeps every group of the unsliced row; the rank's columns name groups beyond ceil(Is/G).
      ASSERT_EQ(p.w2.scale.shape(), Shape({E, H, (I + G - 1) / G}));
      ASSERT_EQ(p.w2.g_idx.shape(), Shape({E, Is}));
      std::set<int32_t> groups(p.w2.g_idx.data<int32_t>(), p.w2.g_idx.data<int32_t>() + p.w2.g_idx.numel());
      EXPECT_GT(static_cast<int64_t>(groups.size()), (Is + G - 1) / G);
      ASSERT_EQ(pl.shared_expert->w2.scale.shape(), Shape({1, H, (I + G - 1) / G}));
      // Dequantized weights: exactly the TP = 1 slice.
      Tensor p13 = ref::dequantize_proj(p, true), p2 = ref::dequantize_proj(p, false);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t n = 0; n < Is; ++n)
          for (int64_t k = 0; k < H; ++k) {
            ASSERT_EQ(p13.data<float>()[(e * 2 * Is + n) * H + k], f13.data<float>()[(e * 2 * I + r * Is + n) * H + k]);
            ASSERT_EQ(p13.data<float>()[(e * 2 * Is + Is + n) * H + k], f13.data<float>()[(e * 2 * I + I + r * Is + n) * H + k]);
            ASSERT_EQ(p2.data<float>()[(e * H + k) * Is + n], f2.data<float>()[(e * H + k) * I + r * Is + n]);
          }
      y32s.push_back(forward(pl, DType::kF32));
      y16s.push_back(forward(pl, DType::kBF16));
      // A rank's share is far from the whole (the comparison below can fail).
      EXPECT_GT(test::rel_l2(y32s.back(), y32), 0.2);
      // The CPU backend runs the rank's layout (scales [.., ceil(I/G)] indexed by g_idx) or refuses.
      ExpertWeights pw = p;
      MethodChoice c = query_method(pw, Backend::kCpu, pl.config, &*pl.shared_expert, pl.router_bias);
      if (c.ok) {
        Tensor yc = forward(pl, DType::kBF16, Backend::kCpu);
        // bf16 output rounding of both (2^-9 each) plus bf16 weight operands in the kernel: see
        // cmd_verify's backend tolerance (2e-2 for bf16 activations).
        std::vector<double> a = test::values(yc), b = test::values(y16s.back());
        double num = 0, den = 0;
        for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
        EXPECT_LE(std::sqrt(num / den), 2e-2) << c.method;
      } else {
        EXPECT_FALSE(c.reason.empty());
      }
    }
    // fp32 activations: no output rounding; h is the same on every rank (w13 rows are whole), so
    // sum_r y_r differs from y only by the fp32 order of GEMM2's I-term sums (split into tp partial
    // sums) and of the top-k / shared additions: about sqrt(I) * 2^-24 relative to the terms'
    // magnitude for random signs; 2^-14 * (|y| + rms(y)) is >60x that.
    for (int64_t i = 0; i < y32.numel(); ++i) {
      double sum = 0;
      for (const Tensor& t : y32s) sum += t.data<float>()[i];
      const double ref = y32.data<float>()[i];
      ASSERT_NEAR(sum, ref, std::ldexp(std::abs(ref) + rms, -14)) << i;
    }
    // bf16 activations: each rank's and the whole output are rounded to bf16 once (2^-8 relative
    // each), the same fp32 term as above on top.
    for (int64_t i = 0; i < y16.numel(); ++i) {
      double sum = 0, mag = 0;
      for (const Tensor& t : y16s) {
        double v = codec::bf16_to_f32(t.data<uint16_t>()[i]);
        sum += v, mag += std::abs(v);
      }
      const double ref = codec::bf16_to_f32(y16.data<uint16_t>()[i]);
      ASSERT_NEAR(sum, ref, std::ldexp(mag + std::abs(ref), -8) + std::ldexp(std::abs(ref) + rms, -14)) << i;
    }
  }

  // validate: a g_idx value past the scale's groups is refused (one line naming w2.g_idx).
  LoadOptions o;
  o.tp_rank = 1, o.tp_size = 2;
  ExpertWeights p = load_model(dir, o).layers[0].experts;
  p.w2.scale = models::slice_dim(p.w2.scale, 2, 0, 1);
  try {
    p.validate("tp rank 1");
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("w2.g_idx"), std::string::npos) << m;
    EXPECT_NE(m.find("outside [0, 1)"), std::string::npos) << m;
  }
}

TEST(ModelsLoad, TensorParallelSizeThatDoesNotDivideNamesTheOnesThatWork) {
  ModelScratch s("tpbad");
  std::string dir = test::gen_model(s, "qwen3_moe", "ct-w4a16", "w4", 256);
  LoadOptions o;
  o.tp_size = 4;  // I/tp = 64, not a multiple of the group 128
  try {
    load_model(dir, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    std::string m = e.what();
    EXPECT_NE(m.find("TP size 4"), std::string::npos) << m;
    EXPECT_NE(m.find("group 128"), std::string::npos) << m;
    EXPECT_NE(m.find("TP sizes that work: 1, 2"), std::string::npos) << m;
  }
  std::string ds = test::gen_model(s, "deepseek_v3", "deepseek-fp8", "ds");
  o.tp_size = 2;  // I/tp = 64 < the 128 fp8 block
  try {
    load_model(ds, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("fp8 block 128x128"), std::string::npos) << m;
    EXPECT_NE(m.find("TP sizes that work: 1"), std::string::npos) << m;
  }
}

TEST(ModelsLoad, ExpertParallelKeepsAContiguousRange) {
  ModelScratch s("ep");
  std::string dir = test::gen_model(s, "mixtral", "ct-fp8", "fp8");
  Model full = load_model(dir);
  LoadOptions o;
  o.ep_rank = 1, o.ep_size = 2;
  Model part = load_model(dir, o);
  const MoeLayerSpec& p = part.layers[1];
  EXPECT_EQ(p.experts.num_experts, 4);
  EXPECT_EQ(p.config.num_experts, 8);
  EXPECT_EQ(p.config.expert_map, std::vector<int32_t>({-1, -1, -1, -1, 0, 1, 2, 3}));
  Tensor a = ref::dequantize_proj(p.experts, true), b = ref::dequantize_proj(full.layers[1].experts, true);
  const int64_t per = a.numel() / 4;
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[4 * per + i]);
  o.ep_size = 3, o.ep_rank = 0;
  EXPECT_THROW(load_model(dir, o), Error);
}

// EP decodes only the rank's experts: per-expert, fused Llama 4 (flat and block scales) and gpt-oss
// layouts give exactly the whole load's range (weights, scales, global / input scales, biases).
TEST(ModelsLoad, ExpertParallelEveryLayoutEqualsTheWholeLoadsRange) {
  ModelScratch s("ep_layouts");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"qwen3_moe", "ct-w4a16-asym"}, {"llama4", "bf16"}, {"llama4", "modelopt-fp8"}, {"llama4", "modelopt-nvfp4"},
      {"gpt_oss", "gpt-oss-mxfp4"}, {"gpt_oss", "bf16"}, {"deepseek_v3", "deepseek-fp8"}};
  auto same = [](const Tensor& a, const Tensor& whole, int64_t e0, const char* what) {
    ASSERT_EQ(a.defined(), whole.defined()) << what;
    if (!a.defined()) return;
    Tensor b = whole.slice0(e0, e0 + a.size(0));
    ASSERT_EQ(a.shape(), b.shape()) << what;
    ASSERT_EQ(a.dtype(), b.dtype()) << what;
    ASSERT_EQ(0, memcmp(a.raw(), b.raw(), a.nbytes())) << what;
  };
  for (const auto& [arch, fmt] : cases) {
    SCOPED_TRACE(arch + " " + fmt);
    std::string dir = test::gen_model(s, arch, fmt, arch + fmt, 128, 5);
    Model full = load_model(dir);
    for (int n : {2, 4}) {
      for (int r = 0; r < n; ++r) {
        LoadOptions o;
        o.ep_rank = r, o.ep_size = n;
        Model part = load_model(dir, o);
        for (size_t l = 0; l < part.layers.size(); ++l) {
          const ExpertWeights &p = part.layers[l].experts, &f = full.layers[l].experts;
          const int El = 8 / n, e0 = r * El;
          ASSERT_EQ(p.num_experts, El);
          std::vector<int32_t> map(8, -1);
          for (int e = 0; e < El; ++e) map[e0 + e] = e;
          EXPECT_EQ(part.layers[l].config.expert_map, map);
          for (auto [pp, fp] : {std::pair{&p.w13, &f.w13}, std::pair{&p.w2, &f.w2}}) {
            same(pp->weight, fp->weight, e0, "weight");
            same(pp->scale, fp->scale, e0, "scale");
            same(pp->zero_point, fp->zero_point, e0, "zero_point");
            same(pp->g_idx, fp->g_idx, e0, "g_idx");
            same(pp->global_scale, fp->global_scale, e0, "global_scale");
            same(pp->input_scale, fp->input_scale, e0, "input_scale");
            same(pp->bias, fp->bias, e0, "bias");
          }
          // The shared expert is replicated on every EP rank.
          ASSERT_EQ(part.layers[l].shared_expert.has_value(), full.layers[l].shared_expert.has_value());
          if (part.layers[l].shared_expert) same(part.layers[l].shared_expert->w2.weight, full.layers[l].shared_expert->w2.weight, 0, "shared");
        }
      }
    }
  }
}

// Another rank's expert tensors are never read: a rank loads although an expert outside its range is
// missing (per-expert) or holds a NaN scale (fused gpt-oss), while the rank owning it fails on it.
TEST(ModelsLoad, ExpertParallelNeverReadsOtherRanksExperts) {
  ModelScratch s("ep_skip");
  std::string dir = test::gen_model(s, "mixtral", "ct-w4a16", "mx");
  test::edit_checkpoint(dir, [](std::vector<test::EditTensor>& ts) {
    test::find_tensor(ts, "model.layers.0.block_sparse_moe.experts.6.w2.weight_packed")->name = "";
  });
  LoadOptions o;
  o.ep_size = 2, o.ep_rank = 0;
  EXPECT_EQ(load_model(dir, o).layers.size(), 2u);
  o.ep_rank = 1;
  try {
    load_model(dir, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.6.w2.weight_packed"), std::string::npos) << e.what();
  }
  std::string go = test::gen_model(s, "gpt_oss", "gpt-oss-mxfp4", "go");
  test::edit_checkpoint(go, [](std::vector<test::EditTensor>& ts) {
    test::find_tensor(ts, "model.layers.1.mlp.experts.down_proj_scales")->bytes[0] = 0xff;  // e8m0 NaN, expert 0
  });
  o.ep_rank = 1;
  EXPECT_EQ(load_model(go, o).layers.size(), 2u);
  o.ep_rank = 0;
  try {
    load_model(go, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("layer 1"), std::string::npos) << m;
    EXPECT_NE(m.find("EP rank 0 (experts 0..3)"), std::string::npos) << m;
    EXPECT_NE(m.find("w2.scale of expert 0 holds NaN"), std::string::npos) << m;
  }
}

// GPTQ with sym = false: qzeros hold zero - 1 (format v1). The loaded zero points are the
// quantizer's own (not the implied 8), and re-encoding the canonical weights reproduces every
// stored tensor byte for byte.
TEST(ModelsLoad, GptqAsymmetricRoundTrip) {
  ModelScratch s("gptq_asym");
  std::string dir = test::gen_model(s, "qwen3_moe", "gptq-asym", "ga");
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  EXPECT_EQ(cfg["quantization_config"]["sym"], false);
  Model m = load_model(dir);
  EXPECT_EQ(m.quant_method, "gptq");
  auto ck = CheckpointDir::open(dir);
  for (const MoeLayerSpec& l : m.layers) {
    const ExpertWeights& w = l.experts;
    ASSERT_FALSE(w.scheme.weights.symmetric);
    for (const ProjWeights* p : {&w.w13, &w.w2}) {
      ASSERT_TRUE(p->zero_point.defined());
      std::set<int> zs(p->zero_point.data<uint8_t>(), p->zero_point.data<uint8_t>() + p->zero_point.numel());
      // Uniform random rows: -min/scale is near 7.5, so zero points are 7 and 8, not the implied 8 alone.
      EXPECT_GE(zs.size(), 2u);
      EXPECT_GE(*zs.begin(), 1);  // v1 cannot store a zero point of 0
      EXPECT_LE(*zs.rbegin(), 15);
    }
    for (int e : {0, 5}) {
      std::map<std::string, Tensor> enc;
      models::TensorSink sink = [&](const std::string& n, const Tensor& t) { enc[n] = t; };
      const std::string ep = str(l.prefix, ".experts.", e, ".");
      models::encode_module(sink, ep + "gate_proj", models::ModuleFormat::kGptq, w, true, e, 0);
      models::encode_module(sink, ep + "up_proj", models::ModuleFormat::kGptq, w, true, e, 1);
      models::encode_module(sink, ep + "down_proj", models::ModuleFormat::kGptq, w, false, e, 0);
      ASSERT_EQ(enc.size(), 12u);  // qweight, qzeros, scales, g_idx per projection
      for (const auto& [name, t] : enc) {
        SCOPED_TRACE(name);
        ASSERT_TRUE(ck->has(name));
        Tensor f = ck->get(name);
        ASSERT_EQ(f.dtype(), t.dtype());
        ASSERT_EQ(f.shape(), t.shape());
        ASSERT_EQ(0, memcmp(f.raw(), t.raw(), t.nbytes()));
      }
    }
  }
}

// checkpoint_format gptq_v2 stores the zero itself in qzeros (v1: zero - 1): the same quantized
// weights through both load to the same canonical tensors, and v2 stores a zero point of 0.
TEST(ModelsLoad, GptqV2ZerosAreStoredAsIs) {
  ModelScratch s("gptq_v2");
  std::string v1 = test::gen_model(s, "qwen3_moe", "gptq-asym", "v1");
  std::string v2 = test::gen_model(s, "qwen3_moe", "gptq-v2", "v2");
  nlohmann::json cfg;
  std::ifstream(v2 + "/config.json") >> cfg;
  EXPECT_EQ(cfg["quantization_config"]["checkpoint_format"], "gptq_v2");
  auto c1 = CheckpointDir::open(v1), c2 = CheckpointDir::open(v2);
  const std::string qz = "model.layers.0.mlp.experts.0.gate_proj.qzeros";
  Tensor z1 = c1->get(qz), z2 = c2->get(qz);
  ASSERT_EQ(z1.shape(), z2.shape());
  for (int64_t i = 0; i < z1.numel(); ++i)  // every nibble one higher (no carries: v1 nibbles are <= 14 here)
    EXPECT_EQ(uint32_t(z2.data<int32_t>()[i]), uint32_t(z1.data<int32_t>()[i]) + 0x11111111u) << i;
  Model m1 = load_model(v1), m2 = load_model(v2);
  ASSERT_EQ(m1.layers.size(), m2.layers.size());
  for (size_t l = 0; l < m1.layers.size(); ++l)
    for (auto pr : {&ExpertWeights::w13, &ExpertWeights::w2}) {
      const ProjWeights &a = m1.layers[l].experts.*pr, &b = m2.layers[l].experts.*pr;
      for (auto t : {&ProjWeights::weight, &ProjWeights::scale, &ProjWeights::zero_point}) {
        ASSERT_EQ((a.*t).shape(), (b.*t).shape());
        EXPECT_EQ(0, memcmp((a.*t).raw(), (b.*t).raw(), (a.*t).nbytes()));
      }
    }
  // a zero point of 0 fits v2 (v1 cannot store it)
  Tensor zero(DType::kU8, {8, 1});
  std::memset(zero.raw_mut(), 0, zero.nbytes());
  EXPECT_EQ(formats::gptq_pack_qzeros(zero, 4, false).data<int32_t>()[0], 0);
  EXPECT_THROW(formats::gptq_pack_qzeros(zero, 4, true), Error);
}

// ModelOpt's newer quantization_config in config.json (quant_method "modelopt", ignore,
// config_groups) loads exactly as the legacy hf_quant_config.json of the same weights.
TEST(ModelsLoad, ModeloptConfigJsonEqualsLegacyFile) {
  ModelScratch s("modelopt_cfg");
  for (const char* arch : {"qwen3_moe", "llama4"}) {
    SCOPED_TRACE(arch);
    std::string legacy = test::gen_model(s, arch, "modelopt-nvfp4", std::string(arch) + "-legacy");
    std::string cfgdir = test::gen_model(s, arch, "modelopt-nvfp4-cfg", std::string(arch) + "-cfg");
    EXPECT_TRUE(std::filesystem::exists(legacy + "/hf_quant_config.json"));
    EXPECT_FALSE(std::filesystem::exists(cfgdir + "/hf_quant_config.json"));
    nlohmann::json cfg;
    std::ifstream(cfgdir + "/config.json") >> cfg;
    EXPECT_EQ(cfg["quantization_config"]["quant_method"], "modelopt");
    EXPECT_FALSE(cfg["quantization_config"]["ignore"].empty());
    Model a = load_model(legacy), b = load_model(cfgdir);
    EXPECT_EQ(a.quant_method, "modelopt (hf_quant_config.json)");
    EXPECT_EQ(b.quant_method, "modelopt");
    ASSERT_EQ(a.layers.size(), b.layers.size());
    auto same = [](const Tensor& x, const Tensor& y, const char* what) {
      ASSERT_EQ(x.defined(), y.defined()) << what;
      if (!x.defined()) return;
      ASSERT_EQ(x.dtype(), y.dtype()) << what;
      ASSERT_EQ(x.shape(), y.shape()) << what;
      ASSERT_EQ(0, memcmp(x.raw(), y.raw(), x.nbytes())) << what;
    };
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const MoeLayerSpec &x = a.layers[l], &y = b.layers[l];
      EXPECT_EQ(x.experts.scheme.key(), y.experts.scheme.key());
      EXPECT_EQ(y.experts.scheme.kind, SchemeKind::kNVFP4);
      EXPECT_EQ(x.global_scale_convention, y.global_scale_convention);
      std::vector<std::pair<const ExpertWeights*, const ExpertWeights*>> ws = {{&x.experts, &y.experts}};
      ASSERT_EQ(x.shared_expert.has_value(), y.shared_expert.has_value());
      if (x.shared_expert) ws.push_back({&*x.shared_expert, &*y.shared_expert});
      for (auto [p, q] : ws)
        for (auto [pp, qp] : {std::pair{&p->w13, &q->w13}, std::pair{&p->w2, &q->w2}}) {
          same(pp->weight, qp->weight, "weight");
          same(pp->scale, qp->scale, "scale");
          same(pp->global_scale, qp->global_scale, "global_scale");
          same(pp->input_scale, qp->input_scale, "input_scale");
        }
      same(x.router_weight, y.router_weight, "router");  // routers stay unquantized (ignore list)
    }
  }
}

// ---- bad inputs: one error naming the file / tensor / layer ----------------------------------
std::string load_error(const std::string& dir, ErrorKind kind = ErrorKind::kBadInput) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    return m;
  }
  ADD_FAILURE() << "no error for " << dir;
  return "";
}
bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(ModelsBadInput, TransposedExpertTensor) {
  ModelScratch s("transposed");
  std::string dir = test::gen_model(s, "mixtral", "bf16");
  test::edit_checkpoint(dir, [](std::vector<test::EditTensor>& ts) {
    test::find_tensor(ts, "model.layers.1.block_sparse_moe.experts.5.w2.weight")->shape = {128, 256};
  });
  std::string m = load_error(dir);
  EXPECT_TRUE(has(m, "model.layers.1.block_sparse_moe.experts.5.w2.weight")) << m;
  EXPECT_TRUE(has(m, "layer 1 expert 5 w2")) << m;
  EXPECT_TRUE(has(m, "shape [128, 256], expected [256, 128] (out x in)")) << m;
  EXPECT_TRUE(has(m, "model.safetensors")) << m;
}

TEST(ModelsBadInput, TransposedFusedLlama4Tensor) {
  ModelScratch s("transposed4");
  std::string dir = test::gen_model(s, "llama4", "modelopt-nvfp4");
  test::edit_checkpoint(dir, [](std::vector<test::EditTensor>& ts) {
    test::find_tensor(ts, "model.layers.1.feed_forward.experts.down_proj")->shape = {8, 256, 64};  // out x in/2
  });
  std::string m = load_error(dir);
  EXPECT_TRUE(has(m, "experts.down_proj")) << m;
  EXPECT_TRUE(has(m, "expected [8, 64, 256]")) << m;
}

TEST(ModelsBadInput, MissingTensorGateUpMismatchAndBadScales) {
  ModelScratch s("bad");
  const std::string p = "model.layers.0.mlp.experts.3.";
  {
    std::string dir = test::gen_model(s, "qwen3_moe", "ct-w4a16", "missing");
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) { test::find_tensor(ts, p + "up_proj.weight_scale")->name = ""; });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, "missing tensor " + p + "up_proj.weight_scale")) << m;
  }
  {
    std::string dir = test::gen_model(s, "qwen3_moe", "bf16", "gateup");
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) {
      test::EditTensor* u = test::find_tensor(ts, p + "up_proj.weight");
      u->shape = {64, 256};
      u->bytes.resize(64 * 256 * 2);
    });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, p + "up_proj.weight") && has(m, "shape [64, 256], expected [128, 256]")) << m;
  }
  {
    std::string dir = test::gen_model(s, "qwen3_moe", "ct-w4a16", "nan");
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) {
      test::EditTensor* sc = test::find_tensor(ts, p + "down_proj.weight_scale");
      sc->bytes[10] = 0xc0, sc->bytes[11] = 0x7f;  // bf16 NaN at element 5
    });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, "layer 0") && has(m, "NaN") && has(m, "w2.scale")) << m;
  }
  {
    std::string dir = test::gen_model(s, "qwen3_moe", "ct-nvfp4", "zero");
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) {
      auto* g = test::find_tensor(ts, p + "gate_proj.weight_global_scale");
      std::fill(g->bytes.begin(), g->bytes.end(), 0);
    });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, p + "gate_proj.weight_global_scale") && has(m, "finite positive")) << m;
  }
  {
    std::string dir = test::gen_model(s, "qwen3_moe", "ct-nvfp4", "dtype");
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) { test::find_tensor(ts, p + "up_proj.weight_scale")->dtype = DType::kU8; });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, p + "up_proj.weight_scale") && has(m, "dtype U8, expected F8_E4M3")) << m;
  }
  {
    std::string dir = test::gen_model(s, "qwen3_moe", "ct-w4a16", "inf");
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) {
      auto* sc = test::find_tensor(ts, p + "gate_proj.weight_scale");
      sc->bytes[0] = 0x80, sc->bytes[1] = 0x7f;  // bf16 +Inf
    });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, "Inf")) << m;
  }
}

TEST(ModelsBadInput, UnsupportedSchemeAndMixedGateUpDown) {
  ModelScratch s("unsup");
  std::string dir = test::gen_model(s, "mixtral", "ct-fp8-dynamic");
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  auto& acts = cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"];
  acts["strategy"] = "channel";  // static per-channel fp8 activations: no MoE method runs them
  acts["dynamic"] = false;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::string m = load_error(dir, ErrorKind::kUnsupported);
  EXPECT_TRUE(has(m, "layer 0")) << m;

  // down_proj quantized differently from gate/up (an extra group targeting it)
  std::string d2 = test::gen_model(s, "mixtral", "ct-w4a16", "mixed");
  std::ifstream(d2 + "/config.json") >> cfg;
  auto g1 = cfg["quantization_config"]["config_groups"]["group_0"];
  g1["targets"] = {"re:.*w2$"};
  g1["weights"]["num_bits"] = 8;
  cfg["quantization_config"]["config_groups"]["group_1"] = g1;
  std::ofstream(d2 + "/config.json") << cfg.dump(2);
  m = load_error(d2, ErrorKind::kUnsupported);
  EXPECT_TRUE(has(m, "layer 0") && has(m, "down")) << m;
}

// A symmetric GPTQ / AWQ config with qzeros that are not the symmetric zero (the kernels take
// 2^(b-1) and never read qzeros) is refused, naming the tensor, the column and the group.
TEST(ModelsBadInput, SymmetricConfigWithOtherZeros) {
  ModelScratch s("gptq_sym");
  for (const char* fmt : {"gptq", "awq"}) {
    SCOPED_TRACE(fmt);
    std::string dir = test::gen_model(s, "mixtral", fmt, fmt);
    if (std::string(fmt) == "awq") {  // AWQ's symmetric form: zero_point false
      nlohmann::json cfg;
      std::ifstream(dir + "/config.json") >> cfg;
      cfg["quantization_config"]["zero_point"] = false;
      std::ofstream(dir + "/config.json") << cfg.dump(2);
      // the generated AWQ file is asymmetric: its zeros are not all 8
      std::string m = load_error(dir);
      EXPECT_TRUE(has(m, "w1.qzeros") && has(m, "says symmetric (zero 8)")) << m;
      continue;
    }
    ASSERT_NO_THROW(load_model(dir));
    const std::string name = "model.layers.1.block_sparse_moe.experts.3.w2.qzeros";
    test::edit_checkpoint(dir, [&](std::vector<test::EditTensor>& ts) {
      if (test::EditTensor* e = test::find_tensor(ts, name)) {  // column 1 of group 0 stores 3: zero 4
        const uint32_t w = 0x77777737u;
        memcpy(e->bytes.data(), &w, 4);
      }
    });
    std::string m = load_error(dir);
    EXPECT_TRUE(has(m, name) && has(m, "zero point 4 at column 1, group 0") && has(m, "stored as zero - 1 in GPTQ v1")) << m;
  }
}

// The experts' activation follows config.json's hidden_act (transformers' ACT2FN[hidden_act]):
// gelu runs gelu(gate) x up, a name qmoe does not run is refused (it used to be read as silu), and
// gpt-oss keeps its clamped SwiGLU whatever hidden_act says.
TEST(ModelsLoad, HiddenActPicksTheExpertActivation) {
  ModelScratch s("act");
  const auto with_act = [&](const std::string& arch, const std::string& name, const nlohmann::json& act) {
    std::string dir = test::gen_model(s, arch, "bf16", name);
    nlohmann::json cfg;
    std::ifstream(dir + "/config.json") >> cfg;
    nlohmann::json& c = cfg.contains("text_config") ? cfg["text_config"] : cfg;  // llama4: model_type llama4 nests it
    if (act.is_null()) c.erase("hidden_act");
    else c["hidden_act"] = act;
    std::ofstream(dir + "/config.json") << cfg.dump(2);
    return dir;
  };
  EXPECT_EQ(load_model(with_act("mixtral", "gelu", "gelu")).layers[0].config.activation, Activation::kGeluMul);
  EXPECT_EQ(load_model(with_act("qwen3_moe", "swish", "swish")).layers[0].config.activation, Activation::kSiluMul);
  EXPECT_EQ(load_model(with_act("deepseek_v3", "none", nullptr)).layers[0].config.activation, Activation::kSiluMul);
  EXPECT_EQ(load_model(with_act("llama4", "l4gelu", "gelu")).layers[0].config.activation, Activation::kGeluMul);
  EXPECT_EQ(load_model(with_act("gpt_oss", "oss", "gelu")).layers[0].config.activation, Activation::kSwigluOai);
  std::string m = load_error(with_act("mixtral", "tanh", "gelu_pytorch_tanh"), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(m, "config.json") && has(m, "hidden_act 'gelu_pytorch_tanh'")) << m;
  m = load_error(with_act("qwen3_moe", "relu", "relu"), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(m, "hidden_act 'relu'")) << m;
  m = load_error(with_act("mixtral", "num", 3), ErrorKind::kBadInput);
  EXPECT_TRUE(has(m, "'hidden_act' must be a string")) << m;
}

TEST(ModelsBadInput, NonMoeTensorsDoNotConfuseTheLoader) {
  ModelScratch s("extra");
  std::string dir = test::gen_model(s, "qwen3_moe", "ct-w8a16");
  // An unexpected non-MoE tensor and an extra MoE-looking one outside the expert range are ignored.
  test::edit_checkpoint(dir, [](std::vector<test::EditTensor>& ts) {
    ts.push_back({"model.layers.0.mlp.experts.99.odd_proj.weight", DType::kBF16, {2, 2}, std::vector<uint8_t>(8, 1)});
    ts.push_back({"vision_tower.patch_embed.weight", DType::kF32, {3}, std::vector<uint8_t>(12, 0)});
  });
  Model m = load_model(dir);
  EXPECT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[0].experts.scheme.kind, SchemeKind::kWNA16);
}

}  // namespace
}  // namespace qmoe
