// Quantizers (round-trip bounds per scheme, checked with the tests' own float64 dequantization),
// ExpertWeights::validate (one test per rejected defect), and the activation quantization
// emulation against a plain transcription of docs/numerics.md (bitwise codes and scales).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/tensor_check.h"
#include "cpu/ref/act_quant.h"
#include "cpu/ref/quantize.h"
#include "ref/oracle.h"

namespace qmoe {
namespace {

using ref::SchemeSpec;

// ---- quantizer round trips ------------------------------------------------------------------------

struct RtCase {
  std::string name;
  SchemeSpec spec;
};

std::vector<RtCase> rt_cases() {
  std::vector<RtCase> c;
  SchemeSpec s;
  s.kind = SchemeKind::kUnquantized;
  c.push_back({"bf16", s});
  s.weight_dtype = DType::kF16;
  c.push_back({"fp16", s});
  s = {};
  s.kind = SchemeKind::kWNA16;
  s.group_size = 32;
  c.push_back({"int4_g32_sym", s});
  s.symmetric = false;
  c.push_back({"int4_g32_asym", s});
  s.actorder = true;
  c.push_back({"int4_g32_asym_actorder", s});
  s = {};
  s.kind = SchemeKind::kWNA16;
  s.bits = 8, s.group_size = 0, s.scale_dtype = DType::kF16;
  c.push_back({"int8_channel_sym_f16", s});
  s.symmetric = false, s.group_size = 64;
  c.push_back({"int8_g64_asym", s});
  s = {};
  s.kind = SchemeKind::kFP8A16;
  for (Strategy st : {Strategy::kTensor, Strategy::kChannel, Strategy::kBlock}) {
    s.fp8_strategy = st;
    s.block = {16, 64};
    c.push_back({std::string("fp8_") + strategy_name(st), s});
  }
  s = {};
  s.kind = SchemeKind::kNVFP4A16;
  c.push_back({"nvfp4", s});
  s.kind = SchemeKind::kMXFP4A16;
  c.push_back({"mxfp4", s});
  return c;
}

class Quantizer : public ::testing::TestWithParam<RtCase> {};

// Bounds (x = w / d with d the element's effective scale):
//  int sym: |err| <= d/2: the scale rounding (<= 2^-9 rel) moves amax/d at most qmax * 2^-8 < 0.5
//           past qmax, so clamping never costs more than rounding does.
//  int asym: |err| <= d (1 + umax 2^-8): rint(-lo/d) and the rounded scale can push the top of
//           the range past umax by up to 0.5 + umax 2^-8 steps, which the clamp removes.
//  fp8: |err| <= 2^-4 |w| + 2^-10 d (e4m3: 3 mantissa bits; subnormal step 2^-9 d).
//  nvfp4 / mxfp4: |err| <= d max(0.25, |x| / 4): half the e2m1 step (0.25 below 2, 0.5 below 4,
//           1 below 6) and the saturation above 6 (x <= 6.4 nvfp4, x < 8 mxfp4).
TEST_P(Quantizer, RoundTripWithinBound) {
  const RtCase& c = GetParam();
  const int E = 3, H = 96, I = 48;  // w13 [3, 96, 96], w2 [3, 96, 48]: partial groups where G = 64
  Tensor w13 = test::random_tensor(DType::kF32, {E, 2 * I, H}, 31, 0.001, 1.0);
  Tensor w2 = test::random_tensor(DType::kF32, {E, H, I}, 32, 0.001, 1.0);
  Tensor g13, g2;
  if (c.spec.actorder) {  // a fixed permutation: column k in group (k * 7 % K) / G
    g13 = Tensor(DType::kI32, {E, H});
    g2 = Tensor(DType::kI32, {E, I});
    for (int e = 0; e < E; ++e) {
      for (int k = 0; k < H; ++k) g13.data_mut<int32_t>()[e * H + k] = (k * 7 % H) / c.spec.group_size;
      for (int k = 0; k < I; ++k) g2.data_mut<int32_t>()[e * I + k] = (k * 7 % I) / c.spec.group_size;
    }
  }
  ExpertWeights q = ref::quantize_expert_weights(w13, w2, c.spec, 4.0f, g13, g2);
  for (bool is_w13 : {true, false}) {
    const Tensor& src = is_w13 ? w13 : w2;
    const int64_t N = src.size(1), K = src.size(2);
    Tensor deq_ref = ref::dequantize_proj(q, is_w13);  // the library's decoder ...
    for (int64_t e = 0; e < E; ++e) {
      std::vector<double> d = oracle::dequant(q, is_w13, e);  // ... and the test's own
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t i = (e * N + n) * K + k;
          const double w = test::value_at(src, i), got = d[n * K + k];
          // the library dequantizes in fp32 (code * scale [* global] may round once or twice)
          ASSERT_LE(std::fabs(got - test::value_at(deq_ref, i)), 2 * oracle::kU * std::fabs(got))
              << c.name << " decoders disagree at " << i;
          double bound = 0;
          switch (c.spec.kind) {
            case SchemeKind::kUnquantized: bound = test::half_ulp_rel(c.spec.weight_dtype) * std::fabs(w); break;
            case SchemeKind::kWNA16: {
              const ProjWeights& p = is_w13 ? q.w13 : q.w2;
              const int64_t ng = p.scale.size(2);
              const int64_t g = p.g_idx.defined() ? p.g_idx.data<int32_t>()[e * K + k]
                                                   : (c.spec.group_size > 0 ? k / c.spec.group_size : 0);
              const double s = oracle::scalar(p.scale, (e * N + n) * ng + g);
              bound = c.spec.symmetric ? 0.5 * s * (1 + 1e-6) : s * (1 + ((1 << c.spec.bits) - 1) / 256.0);
              break;
            }
            case SchemeKind::kFP8A16: {
              // the scale of this element: |code value| * s = got  =>  s from a nonzero neighbor is
              // simpler to bound through amax: every e4m3 has 2^-4 relative precision or is subnormal.
              const ProjWeights& p = is_w13 ? q.w13 : q.w2;
              double s;
              if (c.spec.fp8_strategy == Strategy::kTensor) s = p.scale.data<float>()[e * (is_w13 ? 2 : 1) + (is_w13 ? n / I : 0)];
              else if (c.spec.fp8_strategy == Strategy::kChannel) s = oracle::scalar(p.scale, e * N + n);
              else s = p.scale.data<float>()[(e * p.scale.size(1) + n / 16) * p.scale.size(2) + k / 64];
              bound = std::ldexp(1.0, -4) * std::fabs(w) + std::ldexp(1.0, -10) * s;
              break;
            }
            default: {
              const ProjWeights& p = is_w13 ? q.w13 : q.w2;
              const bool nv = c.spec.kind == SchemeKind::kNVFP4A16;
              const int64_t G = nv ? 16 : 32, ng = (K + G - 1) / G;
              double dd = oracle::scalar(p.scale, (e * N + n) * ng + k / G, !nv);
              if (nv) dd *= p.global_scale.data<float>()[e * (is_w13 ? 2 : 1) + (is_w13 ? n / I : 0)];
              bound = dd * std::max(0.25, std::fabs(w) / dd / 4) * (1 + 1e-6);
            }
          }
          ASSERT_LE(std::fabs(got - w), bound) << c.name << (is_w13 ? " w13" : " w2") << " [" << e << ", " << n
                                               << ", " << k << "] w " << w << " got " << got;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, Quantizer, ::testing::ValuesIn(rt_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Quantizer, Mxfp4ScaleFollowsCompressedTensorsFormula) {
  // amax 1.0 -> round_pow2 1 -> e = 127 + 0 - 2 = 125; amax 1.75 (mantissa carries) -> 2 -> 126;
  // amax 1.7 (bf16 1.703125, below the carry) -> 1 -> 125.
  Tensor w(DType::kF32, {1, 3, 32});
  const float amax[3] = {1.0f, 1.75f, 1.7f};
  for (int n = 0; n < 3; ++n)
    for (int k = 0; k < 32; ++k) w.data_mut<float>()[n * 32 + k] = amax[n] * ((k % 2) ? -1.f : 1.f) * (k == 5 ? 1.f : 0.5f);
  ref::ProjFormat f;
  f.kind = ref::ProjFormat::Kind::kMXFP4;
  ProjWeights p = ref::quantize_proj(w, f);
  EXPECT_EQ(p.scale.data<uint8_t>()[0], 125);
  EXPECT_EQ(p.scale.data<uint8_t>()[1], 126);
  EXPECT_EQ(p.scale.data<uint8_t>()[2], 125);
}

TEST(Quantizer, Nvfp4FollowsModelOptRecipe) {
  // One shard, amax 6 * 448 * g with g = 1/64: global = amax / (6 * 448); the max block scale is 448.
  Tensor w = test::random_tensor(DType::kF32, {1, 2, 32}, 41, 0.01, 1.0);
  w.data_mut<float>()[3] = 42.f;  // amax
  ref::ProjFormat f;
  f.kind = ref::ProjFormat::Kind::kNVFP4;
  ProjWeights p = ref::quantize_proj(w, f);
  EXPECT_EQ(p.global_scale.data<float>()[0], 42.f / (6.f * 448.f));
  EXPECT_EQ(codec::e4m3_to_f32(p.scale.data<uint8_t>()[0]), 448.f);
  EXPECT_EQ(codec::e2m1_to_f32(p.weight.data<uint8_t>()[1] >> 4), 6.f);  // element 3: high nibble of byte 1
}

TEST(Quantizer, RandomWeightsAreDeterministicAndValid) {
  ref::RandomWeightsSpec rs;
  rs.scheme.kind = SchemeKind::kNVFP4;
  rs.num_experts = 3, rs.hidden = 64, rs.intermediate = 32, rs.seed = 5;
  ExpertWeights a = ref::make_random_expert_weights(rs), b = ref::make_random_expert_weights(rs);
  ASSERT_EQ(a.w13.weight.nbytes(), b.w13.weight.nbytes());
  EXPECT_EQ(std::memcmp(a.w13.weight.raw(), b.w13.weight.raw(), a.w13.weight.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.w2.scale.raw(), b.w2.scale.raw(), a.w2.scale.nbytes()), 0);
  ASSERT_TRUE(a.w13.input_scale.defined());
  EXPECT_EQ(a.w13.input_scale.shape(), Shape({3, 2}));
  EXPECT_EQ(a.w2.global_scale.shape(), Shape({3, 1}));
  rs.seed = 6;
  ExpertWeights c = ref::make_random_expert_weights(rs);
  EXPECT_NE(std::memcmp(a.w13.weight.raw(), c.w13.weight.raw(), a.w13.weight.nbytes()), 0);
}

// ---- validate ----------------------------------------------------------------------------------------

ExpertWeights valid(SchemeKind k, bool asym = false) {
  ref::RandomWeightsSpec rs;
  rs.scheme.kind = k;
  rs.scheme.group_size = 32;
  rs.scheme.symmetric = !asym;
  rs.num_experts = 4, rs.hidden = 64, rs.intermediate = 32;
  return ref::make_random_expert_weights(rs);
}

void expect_rejected(const ExpertWeights& w, const std::vector<std::string>& needles) {
  try {
    w.validate("layer 3");
    FAIL() << "accepted; expected an error mentioning " << needles[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("layer 3: ", 0), 0u) << m;
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "missing '" << n << "' in: " << m;
  }
}

TEST(Validate, AcceptsEveryRandomScheme) {
  for (SchemeKind k : {SchemeKind::kUnquantized, SchemeKind::kWNA16, SchemeKind::kFP8W8A8, SchemeKind::kFP8A16,
                       SchemeKind::kINT8W8A8, SchemeKind::kW4A8FP8, SchemeKind::kW4A8INT8, SchemeKind::kNVFP4,
                       SchemeKind::kNVFP4A16, SchemeKind::kMXFP4A16})
    EXPECT_NO_THROW(valid(k).validate("x")) << scheme_kind_name(k);
}

TEST(Validate, RejectsNaNScale) {
  ExpertWeights w = valid(SchemeKind::kWNA16);
  w.w2.scale = w.w2.scale.clone();
  test::set_value(w.w2.scale, 2 * 64 + 5, std::nan(""));  // [4, 64, 1]: expert 2
  expect_rejected(w, {"w2.scale", "expert 2", "NaN"});
}

TEST(Validate, RejectsInfScale) {
  ExpertWeights w = valid(SchemeKind::kFP8W8A8);
  w.w13.scale = w.w13.scale.clone();
  test::set_value(w.w13.scale, 64 * 3 + 1, INFINITY);  // channel scales [4, 64, 1]: expert 3
  expect_rejected(w, {"w13.scale", "expert 3", "Inf"});
}

TEST(Validate, RejectsZeroScale) {
  ExpertWeights w = valid(SchemeKind::kNVFP4);
  w.w13.scale = w.w13.scale.clone();
  w.w13.scale.data_mut<uint8_t>()[7] = 0;  // e4m3 zero, expert 0
  expect_rejected(w, {"w13.scale", "expert 0", "zero"});
}

TEST(Validate, RejectsNegativeGlobalScale) {
  ExpertWeights w = valid(SchemeKind::kNVFP4);
  w.w2.global_scale = w.w2.global_scale.clone();
  w.w2.global_scale.data_mut<float>()[1] = -1.f;
  expect_rejected(w, {"w2.global_scale", "expert 1", "negative"});
}

TEST(Validate, RejectsNaNE8M0Scale) {
  ExpertWeights w = valid(SchemeKind::kMXFP4A16);
  w.w2.scale = w.w2.scale.clone();
  w.w2.scale.data_mut<uint8_t>()[w.w2.scale.numel() - 1] = 0xff;
  expect_rejected(w, {"w2.scale", "expert 3", "NaN"});
}

TEST(Validate, RejectsWrongDtype) {
  ExpertWeights w = valid(SchemeKind::kFP8A16);
  w.w13.weight = Tensor(DType::kBF16, w.w13.weight.shape());
  expect_rejected(w, {"w13.weight", "expected F8_E4M3", "got BF16"});
}

TEST(Validate, RejectsWrongShape) {
  ExpertWeights w = valid(SchemeKind::kWNA16);
  w.w2.scale = Tensor(DType::kBF16, {4, 64, 2});  // I = 32 with group 32 has 1 group
  expect_rejected(w, {"w2.scale", "[4, 64, 1]", "[4, 64, 2]"});
}

TEST(Validate, RejectsMissingAndUnexpectedTensors) {
  ExpertWeights w = valid(SchemeKind::kFP8W8A8);
  w.scheme.act = ActQuant::kFP8Tensor;  // static activations need input_scale
  expect_rejected(w, {"w13.input_scale", "missing"});
  ExpertWeights z = valid(SchemeKind::kWNA16);
  z.w13.zero_point = Tensor(DType::kU8, {4, 64, 2});
  expect_rejected(z, {"w13.zero_point", "must be absent"});
}

TEST(Validate, RejectsZeroPointOutOfRange) {
  ExpertWeights w = valid(SchemeKind::kWNA16, true);
  w.w13.zero_point = w.w13.zero_point.clone();
  w.w13.zero_point.data_mut<uint8_t>()[w.w13.zero_point.numel() - 1] = 16;
  expect_rejected(w, {"w13.zero_point", "expert 3", "16"});
}

TEST(Validate, RejectsGIdxOutOfRange) {
  ExpertWeights w = valid(SchemeKind::kWNA16);
  w.w13.g_idx = Tensor(DType::kI32, {4, 64});
  w.w13.g_idx.data_mut<int32_t>()[64 + 9] = 2;  // H = 64, group 32: groups 0 and 1
  expect_rejected(w, {"w13.g_idx[1, 9]", "2"});
}

TEST(Validate, RejectsFp8BlockSpanningGateAndUp) {
  ref::RandomWeightsSpec rs;
  rs.scheme.kind = SchemeKind::kFP8A16;
  rs.scheme.fp8_strategy = Strategy::kBlock;
  rs.scheme.block = {16, 32};
  rs.num_experts = 2, rs.hidden = 64, rs.intermediate = 32;
  ExpertWeights w = ref::make_random_expert_weights(rs);
  w.block = {24, 32};
  expect_rejected(w, {"block rows 24", "I = 32"});
}

// ---- activation quantization vs a plain transcription of numerics.md -----------------------------

TEST(ActQuant, Fp8TokenGroupAndStaticMatchFormulas) {
  const int64_t M = 4, K = 300;  // K % 128 != 0: a short last group
  Tensor x = test::random_tensor(DType::kBF16, {M, K}, 51, 0.001, 3.0);
  for (ActQuant kind : {ActQuant::kFP8Token, ActQuant::kFP8Group128, ActQuant::kFP8Tensor}) {
    const float stat = 0.004f;
    ref::QuantizedActs q = ref::quantize_activations(x, kind, stat);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t g0 = 0; g0 < K; g0 += (kind == ActQuant::kFP8Group128 ? 128 : K)) {
        const int64_t g1 = std::min(K, g0 + (kind == ActQuant::kFP8Group128 ? 128 : K));
        float amax = 0;
        for (int64_t k = g0; k < g1; ++k) amax = std::max(amax, std::fabs(float(test::value_at(x, m * K + k))));
        const float s = kind == ActQuant::kFP8Tensor ? stat : std::max(amax, 1e-10f) / 448.f;
        const int64_t si = m * q.scale.size(1) + (kind == ActQuant::kFP8Group128 ? g0 / 128 : 0);
        ASSERT_EQ(q.scale.data<float>()[si], s) << act_quant_name(kind) << " row " << m << " group " << g0 / 128;
        for (int64_t k = g0; k < g1; ++k)
          ASSERT_EQ(q.q.data<uint8_t>()[m * K + k], codec::f32_to_e4m3(float(test::value_at(x, m * K + k)) / s, true))
              << act_quant_name(kind) << " [" << m << ", " << k << "]";
      }
  }
}

TEST(ActQuant, Int8TokenRoundsHalfToEven) {
  // Row amax 127 -> s = 1: 2.5 -> 2, 3.5 -> 4, -0.5 -> 0 (RNE), 127 -> 127.
  Tensor x(DType::kF32, {1, 5});
  const float v[5] = {2.5f, 3.5f, -0.5f, 127.f, -126.5f};
  for (int i = 0; i < 5; ++i) x.data_mut<float>()[i] = v[i];
  ref::QuantizedActs q = ref::quantize_activations(x, ActQuant::kINT8Token);
  EXPECT_EQ(q.scale.data<float>()[0], 1.f);
  const int8_t want[5] = {2, 4, 0, 127, -126};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.q.data<int8_t>()[i], want[i]) << i;
  Tensor r = test::random_tensor(DType::kF16, {3, 77}, 52);
  ref::QuantizedActs qr = ref::quantize_activations(r, ActQuant::kINT8Token);
  for (int64_t m = 0; m < 3; ++m) {
    float amax = 0;
    for (int64_t k = 0; k < 77; ++k) amax = std::max(amax, std::fabs(float(test::value_at(r, m * 77 + k))));
    const float s = amax / 127.f;
    ASSERT_EQ(qr.scale.data<float>()[m], s);
    for (int64_t k = 0; k < 77; ++k)
      ASSERT_EQ(qr.q.data<int8_t>()[m * 77 + k], int8_t(std::nearbyint(float(test::value_at(r, m * 77 + k)) / s)));
  }
}

TEST(ActQuant, Nvfp4MatchesVllmRefQuant) {
  const int64_t M = 3, K = 88;  // 5.5 blocks of 16
  Tensor x = test::random_tensor(DType::kBF16, {M, K}, 53, 0.001, 2.0);
  const float A = 2.0f / (6.f * 448.f);  // input multiplier for |x| <= 2
  ref::QuantizedActs q = ref::quantize_activations(x, ActQuant::kNVFP4, A);
  ASSERT_EQ(q.scale.shape(), Shape({M, 6}));
  const float G = 1.f / A;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b * 16 < K; ++b) {
      float vmax = 0;
      const int64_t k1 = std::min<int64_t>(K, b * 16 + 16);
      for (int64_t k = b * 16; k < k1; ++k) vmax = std::max(vmax, std::fabs(float(test::value_at(x, m * K + k))));
      const uint8_t s = codec::f32_to_e4m3(G * (vmax * (1.f / 6.f)), true);
      ASSERT_EQ(q.scale.data<uint8_t>()[m * 6 + b], s);
      const float sf = codec::e4m3_to_f32(s), r = 1.f / (sf * (1.f / G));
      for (int64_t k = b * 16; k < k1; ++k)
        ASSERT_EQ(q.q.data<uint8_t>()[m * K + k],
                  codec::f32_to_e2m1(std::clamp(float(test::value_at(x, m * K + k)) * r, -6.f, 6.f)))
            << "[" << m << ", " << k << "]";
    }
  // Dequantized values stay within the e2m1 grid error of x.
  Tensor d = ref::dequantize_activations(q);
  for (int64_t i = 0; i < M * K; ++i) {
    const double xv = test::value_at(x, i), dv = test::value_at(d, i);
    const double sd = codec::e4m3_to_f32(q.scale.data<uint8_t>()[(i / K) * 6 + (i % K) / 16]) * (1.0 / G);
    ASSERT_LE(std::fabs(xv - dv), sd * std::max(0.25, std::fabs(xv) / sd / 4) * (1 + 1e-6)) << i;
  }
}

TEST(ActQuant, AllZeroRowUsesTheFloor) {
  Tensor x(DType::kBF16, {1, 130});
  ref::QuantizedActs q = ref::quantize_activations(x, ActQuant::kFP8Group128);
  EXPECT_EQ(q.scale.data<float>()[0], 1e-10f / 448.f);
  EXPECT_EQ(q.scale.data<float>()[1], 1e-10f / 448.f);
  for (int64_t k = 0; k < 130; ++k) EXPECT_EQ(q.q.data<uint8_t>()[k], 0);
}

}  // namespace
}  // namespace qmoe
