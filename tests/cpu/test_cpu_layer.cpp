// The CPU backend (src/cpu) against the reference (src/cpu/ref) and the tests' float64 model
// (tests/ref/oracle.h), for every scheme, on every ISA path this CPU runs (forced with
// cpu::set_cpu_isa, as QMOE_CPU_ISA does), odd sizes (rows and K not multiples of the 32-row jobs
// and 8-wide K units), and the MoE edge cases. Every output element is checked.
// Tolerance: oracle::layer gives, per element, a rigorous bound on how far any fp32 evaluation of
// the numerics contract can be from the float64 value, whatever its summation order, including the
// act-dtype rounding of h and the activation quantization resolving differently (its comments
// derive each term). The CPU kernels are such an evaluation (they only reorder sums, factor group
// scales out of exact products, and fold e4m3 block scales into exact bf16 values), so
// |cpu - oracle| <= tol and, as the reference obeys the same bound, |cpu - ref| <= 2 tol.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <omp.h>

#include "common/moe_cases.h"
#include "common/tensor_check.h"
#include "core/codecs.h"
#include "cpu/cpu_isa.h"
#include "cpu/cpu_kernels.h"
#include "cpu/ref/quantize.h"
#include "cpu/ref/reference.h"
#include "ref/oracle.h"

namespace qmoe {
namespace {

using ref::SchemeSpec;
using test::config;
using test::random_routing;

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> r;
  for (cpu::Isa i : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (cpu::isa_supported(i)) r.push_back(i);
  return r;
}

struct IsaGuard {
  explicit IsaGuard(cpu::Isa i) { cpu::set_cpu_isa(i); }
  ~IsaGuard() { cpu::set_cpu_isa(std::nullopt); }
};

struct Case {
  std::string name;
  SchemeSpec spec;
  int H, I;
  Activation act = Activation::kSiluMul;
};

SchemeSpec spec_of(SchemeKind k) {
  SchemeSpec s;
  s.kind = k;
  return s;
}

// H and I avoid multiples of 32 where the scheme allows it (padding of rows and K).
std::vector<Case> all_cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, SchemeSpec s, int H, int I, Activation a = Activation::kSiluMul) {
    c.push_back({std::move(name), s, H, I, a});
  };
  SchemeSpec s = spec_of(SchemeKind::kUnquantized);
  add("bf16", s, 90, 50);
  s.weight_dtype = DType::kF16, s.act_dtype = DType::kF16;
  add("fp16", s, 82, 46, Activation::kGeluMul);
  s.weight_dtype = DType::kF32, s.act_dtype = DType::kF32;
  add("f32", s, 66, 38, Activation::kSwigluOai);
  s = spec_of(SchemeKind::kUnquantized);
  s.weight_dtype = DType::kF32;
  add("f32_weights_bf16_acts", s, 70, 40);

  s = spec_of(SchemeKind::kWNA16);
  s.bits = 4, s.group_size = 32;
  add("wna16_int4_g32_sym", s, 96, 80);
  s.group_size = 128;
  add("wna16_int4_g128_sym", s, 256, 72);
  s.symmetric = false, s.group_size = 64, s.scale_dtype = DType::kF16;
  add("wna16_int4_g64_asym_f16scale", s, 192, 48);
  s.act_dtype = DType::kF16;
  add("wna16_int4_g64_asym_f16act", s, 128, 48);
  s = spec_of(SchemeKind::kWNA16);
  s.bits = 4, s.group_size = 32, s.actorder = true;
  add("wna16_int4_g32_actorder", s, 96, 64);
  s.symmetric = false;
  add("wna16_int4_g32_asym_actorder", s, 96, 64, Activation::kGeluMul);
  s = spec_of(SchemeKind::kWNA16);
  s.bits = 4, s.group_size = 0, s.symmetric = false;
  add("wna16_int4_channel_asym", s, 86, 42);
  s = spec_of(SchemeKind::kWNA16);
  s.bits = 8, s.group_size = 0, s.scale_dtype = DType::kF32;
  add("wna16_int8_channel_sym", s, 86, 70);
  s.group_size = 32, s.symmetric = false, s.scale_dtype = DType::kBF16;
  add("wna16_int8_g32_asym", s, 96, 48);
  // symmetric int8 with bf16 group scales, int4 with fp32 group scales: the fused kernels' other
  // scale paths (bf16 read in the stream; fp32 rows read in place)
  s.symmetric = true, s.group_size = 64;
  add("wna16_int8_g64_sym", s, 136, 44);
  s = spec_of(SchemeKind::kWNA16);
  s.bits = 4, s.group_size = 32, s.scale_dtype = DType::kF32;
  add("wna16_int4_g32_sym_f32scale", s, 104, 56);
  // groups of 48 columns (not a power of two; K = 160 ends inside a group)
  s = spec_of(SchemeKind::kWNA16);
  s.bits = 4, s.group_size = 48, s.symmetric = false;
  add("wna16_int4_g48_asym", s, 160, 96);
  s.bits = 8, s.symmetric = true;
  add("wna16_int8_g48_sym", s, 144, 112);

  s = spec_of(SchemeKind::kFP8W8A8);
  s.fp8_strategy = Strategy::kTensor, s.act = ActQuant::kFP8Tensor;
  add("fp8_tensor_static", s, 90, 50);
  s.act = ActQuant::kFP8Token;
  add("fp8_tensor_token", s, 82, 70);
  s.fp8_strategy = Strategy::kChannel;
  add("fp8_channel_token", s, 90, 50);
  s.act = ActQuant::kFP8Group128, s.scale_dtype = DType::kF32;
  add("fp8_channel_group128", s, 300, 50);
  s.fp8_strategy = Strategy::kBlock, s.block = {128, 128};
  add("fp8_block128_group128", s, 300, 128);
  s.block = {16, 32}, s.act = ActQuant::kFP8Token;
  add("fp8_block16x32_token", s, 80, 48, Activation::kGeluMul);
  s = spec_of(SchemeKind::kFP8A16);
  s.fp8_strategy = Strategy::kChannel;
  add("fp8a16_channel", s, 90, 50);
  s.fp8_strategy = Strategy::kBlock, s.block = {128, 128};
  add("fp8a16_block128", s, 200, 128);

  s = spec_of(SchemeKind::kINT8W8A8);
  add("int8_w8a8", s, 90, 70);
  s = spec_of(SchemeKind::kW4A8FP8);
  s.group_size = 32;
  add("w4a8_fp8_g32", s, 96, 50);
  s = spec_of(SchemeKind::kW4A8INT8);
  s.group_size = 32;
  add("w4a8_int8_g32", s, 160, 72);
  s.group_size = 128;
  add("w4a8_int8_g128", s, 256, 46);

  add("nvfp4_w4a4", spec_of(SchemeKind::kNVFP4), 80, 72);
  add("nvfp4_w4a4_odd", spec_of(SchemeKind::kNVFP4), 88, 40);
  add("nvfp4a16", spec_of(SchemeKind::kNVFP4A16), 80, 50);
  s = spec_of(SchemeKind::kMXFP4A16);
  s.bias = true;
  add("mxfp4a16_swigluoai_bias", s, 96, 72, Activation::kSwigluOai);
  s.bias = false;
  add("mxfp4a16_silu", s, 160, 48);
  return c;
}

// How the CPU layer on `isa` feeds one expert set's GEMM inputs as 16-bit integer codes (layer method
// "/s16"), by the kernels' rule (Kernels::act16) for both projections, unless QMOE_CPU_ACT16=0:
// `block` > 0: bf16 activations of an A16 scheme as block fixed point (RowQuant::kS16, the oracle's
// act16 bound); `nvfp4`: NVFP4 activations as exact codes (RowQuant::kNVFP4S16, no bound to add).
struct S16 {
  int block = 0;
  bool nvfp4 = false;
  bool f32 = false;  // bf16 weights: bf16 activations as fp32 rows (Kernels::f32_acts, method "/f32")
  bool any() const { return block > 0 || nvfp4; }
  bool operator==(const S16&) const = default;
};
S16 s16_of(cpu::Isa isa, const ExpertWeights& w) {
  const cpu::Kernels& kn = cpu::kernels_for(isa);
  const char* env = std::getenv("QMOE_CPU_ACT16");
  const bool a16 = w.scheme.act == ActQuant::kNone && w.act_dtype == DType::kBF16;
  if (!kn.act16 || (env && env[0] == '0') || !(a16 || w.scheme.act == ActQuant::kNVFP4)) return {};
  if (a16 && kn.f32_acts && kn.f32_acts(cpu::pack_proj(w, w.w13, true)) && kn.f32_acts(cpu::pack_proj(w, w.w2, false)))
    return {0, false, true};
  const int b13 = kn.act16(cpu::pack_proj(w, w.w13, true)), b2 = kn.act16(cpu::pack_proj(w, w.w2, false));
  EXPECT_TRUE(b13 == b2 || b13 == 0 || b2 == 0) << b13 << " " << b2;
  if (a16) return {b13 > 0 && b2 > 0 ? b13 : 0, false};
  return {0, b13 == 16 && b2 == 16};
}

// QMOE_CPU_ACT16 set for a scope (nullptr: unset).
struct Act16Env {
  explicit Act16Env(const char* v) { v ? setenv("QMOE_CPU_ACT16", v, 1) : unsetenv("QMOE_CPU_ACT16"); }
  ~Act16Env() { unsetenv("QMOE_CPU_ACT16"); }
};

// Runs the CPU layer on every ISA and checks each against the oracle bound and the reference; where
// the ISA can take bf16 activations as 16-bit fixed point, both ways (QMOE_CPU_ACT16 unset / 0 / 1),
// the fixed-point run against the oracle's bound for it.
void expect_cpu_matches(const ExpertWeights& w, const MoeConfig& cfg, const ExpertWeights* shared, const Tensor& x,
                        const Tensor& tw, const Tensor& ids, const std::string& what) {
  auto opt_shared = shared ? std::optional<ExpertWeights>(*shared) : std::nullopt;
  Tensor yref = MoeLayer::create(w, cfg, Backend::kReference, opt_shared)->forward_routed(x, tw, ids);
  const std::vector<double> ref_vals = test::values(yref);
  for (cpu::Isa isa : isas()) {
    IsaGuard g(isa);
    // QMOE_CPU_ACT16 unset (the ISA's own rule: AVX-512 takes 16-bit codes on Intel CPUs only), =0
    // (bf16 kept) and =1 (16-bit codes wherever the kernels have them): each distinct choice runs once
    std::vector<std::pair<S16, S16>> seen;  // (routed, shared) choices already run
    for (const char* env : {static_cast<const char*>(nullptr), "0", "1"}) {
      Act16Env ev(env);
      const S16 r0 = s16_of(isa, w), s0 = shared ? s16_of(isa, *shared) : S16{};
      const int b = r0.block, bs = s0.block;
      const bool n0 = r0.nvfp4;
      if (std::find(seen.begin(), seen.end(), std::pair{r0, s0}) != seen.end()) continue;
      seen.emplace_back(r0, s0);
      const oracle::LayerOut want = oracle::layer(w, cfg, shared, x, tw, ids, b, bs);
      std::vector<double> tol2 = want.tol;
      for (double& t : tol2) t *= 2;
      auto layer = MoeLayer::create(w, cfg, Backend::kCpu, opt_shared);
      const std::string name = layer->method_name();
      EXPECT_NE(name.find(cpu::isa_name(isa)), std::string::npos) << name;
      EXPECT_EQ(std::string_view(name).ends_with("/s16"), b > 0 || n0) << name;
      EXPECT_EQ(std::string_view(name).ends_with("/f32"), r0.f32) << name;
      Tensor y = layer->forward_routed(x, tw, ids);
      ASSERT_EQ(y.dtype(), w.act_dtype);
      ASSERT_EQ(y.shape(), Shape({x.size(0), w.hidden}));
      const std::string tag = what + " [" + cpu::isa_name(isa) + (b > 0 ? ", act16 " + std::to_string(b) : "") +
                              (n0 ? ", nvfp4 s16" : "") + (r0.f32 ? ", f32 acts" : "") +
                              (bs > 0 ? ", shared act16 " + std::to_string(bs) : "") +
                              (env ? std::string(", QMOE_CPU_ACT16=") + env : "") + "]";
      test::CompareResult r = test::compare(y, want.y, want.tol);
      EXPECT_TRUE(r.ok) << r.report(tag + " vs float64 model");
      test::CompareResult rr = test::compare(y, ref_vals, tol2);
      EXPECT_TRUE(rr.ok) << rr.report(tag + " vs reference");
    }
  }
}

class CpuScheme : public ::testing::TestWithParam<Case> {};

TEST_P(CpuScheme, MatchesReferenceOnEveryIsa) {
  const Case& c = GetParam();
  ref::RandomWeightsSpec rs;
  rs.scheme = c.spec;
  rs.num_experts = 5;  // not a power of two
  rs.hidden = c.H;
  rs.intermediate = c.I;
  rs.seed = 7;
  rs.act_amax = 1.5f;
  ExpertWeights w = ref::make_random_expert_weights(rs);
  for (int64_t M : {1, 13}) {
    Tensor x = test::random_tensor(c.spec.act_dtype, {M, c.H}, 11 + M);
    Tensor tw, ids;
    random_routing(M, 2, 5, 13 + M, tw, ids);
    expect_cpu_matches(w, config(5, 2, c.act), nullptr, x, tw, ids, c.name + " M=" + std::to_string(M));
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, CpuScheme, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- few tokens per expert (the AVX-512 fused decode-and-dot path) -------------------------------
// Every token goes to the same two experts (in either slot order), so each touched expert has
// exactly T = M rows: M = 1..4 (fused kernels streaming both panels of a pair), 7 and 12 (one
// panel at a time, the largest fused block), 13 (4-bit codes: fused blocks of 12 + 1; other codes:
// the batched tile kernels, whose short rests run with the last full block as two near-equal blocks:
// 7 + 6), 17 (9 + 8) and 25 (12 + 7 + 6), for every code kind the fused kernels decode. Then a batch that mixes
// experts with T = 5, 3 and 2 in one call (different kernels side by side, guided schedule).

void fixed_routing(int64_t M, const std::vector<std::array<int, 2>>& pick, uint64_t seed, Tensor& w, Tensor& ids) {
  w = Tensor(DType::kF32, {M, 2});
  ids = Tensor(DType::kI32, {M, 2});
  std::mt19937_64 rng(seed);
  for (int64_t t = 0; t < M; ++t)
    for (int j = 0; j < 2; ++j) {
      ids.data_mut<int32_t>()[t * 2 + j] = pick[size_t(t)][size_t(j)];
      w.data_mut<float>()[t * 2 + j] = 0.1f + 0.9f * std::uniform_real_distribution<float>(0, 1)(rng);
    }
}

class CpuFewTokens : public ::testing::TestWithParam<Case> {};

TEST_P(CpuFewTokens, FusedTokenCounts) {
  const Case& c = GetParam();
  ref::RandomWeightsSpec rs;
  rs.scheme = c.spec;
  rs.num_experts = 5;
  rs.hidden = c.H;
  rs.intermediate = c.I;
  rs.seed = 17;
  rs.act_amax = 1.5f;
  ExpertWeights w = ref::make_random_expert_weights(rs);
  for (int64_t M : {1, 2, 3, 4, 7, 12, 13, 17, 25}) {
    std::vector<std::array<int, 2>> pick;
    for (int64_t t = 0; t < M; ++t) pick.push_back(t % 2 ? std::array<int, 2>{3, 1} : std::array<int, 2>{1, 3});
    Tensor x = test::random_tensor(c.spec.act_dtype, {M, c.H}, 50 + M);
    Tensor tw, ids;
    fixed_routing(M, pick, 60 + M, tw, ids);
    expect_cpu_matches(w, config(5, 2, c.act), nullptr, x, tw, ids, c.name + " T=" + std::to_string(M));
  }
  // experts 2: T = 5, 4: T = 3, 0: T = 2
  std::vector<std::array<int, 2>> pick = {{2, 4}, {4, 2}, {2, 4}, {0, 2}, {2, 0}};
  Tensor x = test::random_tensor(c.spec.act_dtype, {5, c.H}, 70);
  Tensor tw, ids;
  fixed_routing(5, pick, 71, tw, ids);
  expect_cpu_matches(w, config(5, 2, c.act), nullptr, x, tw, ids, c.name + " T=5,3,2");
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, CpuFewTokens, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- activation quantizers: every ISA build bit-identical to the portable one --------------------
// The AVX-512 NVFP4 and the avx2 kNVFP4S16 quantizers are hand-vectorized; the layer tests alone would
// let a wrong rounding through where the oracle bound allows the quantization to resolve differently.
// Rows hold random values and, for NVFP4, three blocks whose maximum is exactly 6 on grids of 1/8
// and 1/4 (with G = 1 at n = 16 and 100: scale 1, r = 1), so x * r lands on every e2m1 rounding threshold
// (ties to even).
TEST(CpuQuantRow, IsaBuildsAreBitIdentical) {
  using cpu::RowQuant;
  std::mt19937 rng(5);
  for (RowQuant rq : {RowQuant::kNVFP4, RowQuant::kNVFP4S16, RowQuant::kInt8Token, RowQuant::kFp8Token, RowQuant::kBF16}) {
    for (int n : {16, 37, 100, 130}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) x[size_t(k)] = std::uniform_real_distribution<float>(-3, 3)(rng);
      const bool nv = rq == RowQuant::kNVFP4 || rq == RowQuant::kNVFP4S16;
      if (nv)  // blocks 0..2 (with G = 1, n = 16, scale 1): every e2m1 threshold, 0.25 .. 5
        for (int k = 0; k < std::min(n, 48); ++k) {
          const float v = k % 16 == 0 ? 6.f : k < 16 ? float(k % 13) * 0.125f : k < 32 ? float(k - 16) * 0.25f : float(k - 24) * 0.25f;
          x[size_t(k)] = k % 2 ? -v : v;
        }
      for (int k = 0; k < n; ++k) x[size_t(k)] = codec::round_bf16(x[size_t(k)]);  // inputs are act-dtype values
      std::vector<std::vector<uint8_t>> rows;
      std::vector<float> scales;
      for (cpu::Isa isa : isas()) {
        cpu::ActBuf a;
        const bool s16 = rq == RowQuant::kNVFP4S16;
        const int ld = s16 ? int(cpu::round_up(n + 29, 16)) : n + 29;
        a.alloc(rq == RowQuant::kInt8Token ? cpu::ActFmt::kS8 : s16 ? cpu::ActFmt::kS16 : cpu::ActFmt::kBF16, 1, ld);
        std::memset(a.data.data(), 0x5a, a.data.n);  // padding must be written as zeros
        a.row_scale.assign(1, 0.f);
        if (rq == RowQuant::kInt8Token) {
          a.group = 32;
          a.num_groups = (ld + 31) / 32;
          a.group_sum.assign(size_t(a.num_groups), 0);
        }
        if (s16) {
          a.group = 16;
          a.num_groups = ld / 16;
          a.group_sum.assign(size_t(a.num_groups), -1);
          a.group_scale.assign(size_t(a.num_groups), -1.f);
        }
        std::vector<float> tmp(static_cast<size_t>(n) + 16);
        cpu::QuantRowArgs q;
        q.q = rq;
        q.static_scale = nv ? (n == 16 || n == 100 ? 1.f : 0.37f) : 1.f;
        q.scratch = tmp.data();
        cpu::kernels_for(isa).quant_row(x.data(), n, q, a, 0);
        rows.emplace_back(a.data.data(), a.data.data() + size_t(ld) * (rq == RowQuant::kInt8Token ? 1 : 2));
        scales.push_back(a.row_scale[0]);
        for (int32_t g : a.group_sum) scales.push_back(float(g));
        for (float g : a.group_scale) scales.push_back(g);
        if (s16) {  // q x group scale: the kNVFP4 quantizer's values, exactly; the block sums
          cpu::ActBuf b;
          b.alloc(cpu::ActFmt::kBF16, 1, ld);
          q.q = RowQuant::kNVFP4;
          cpu::kernels_for(cpu::Isa::kScalar).quant_row(x.data(), n, q, b, 0);
          for (int k = 0; k < ld; ++k) {
            const float got = float(a.row<int16_t>(0)[k]) * a.group_scale[size_t(k / 16)];
            const float want = codec::bf16_to_f32(b.row<uint16_t>(0)[k]);
            ASSERT_EQ(got, want) << cpu::isa_name(isa) << " n " << n << " k " << k;
          }
          for (int g = 0; g < a.num_groups; ++g) {
            int32_t sum = 0;
            for (int k = 16 * g; k < 16 * g + 16; ++k) sum += a.row<int16_t>(0)[k];
            EXPECT_EQ(a.group_sum[size_t(g)], sum) << cpu::isa_name(isa) << " n " << n << " block " << g;
          }
        }
      }
      for (size_t r = 1; r < rows.size(); ++r) {
        EXPECT_EQ(rows[r], rows[0]) << "quant kind " << int(rq) << " n=" << n << " ISA #" << r;
      }
      const size_t per = scales.size() / rows.size();
      for (size_t r = 1; r < rows.size(); ++r)
        for (size_t i = 0; i < per; ++i) EXPECT_EQ(scales[r * per + i], scales[i]) << "quant kind " << int(rq) << " n=" << n;
    }
  }
}

// ---- 16-bit block fixed point (RowQuant::kS16) against its float64 definition, every ISA build
//      bit-identical: blocks of 16 and 32 columns; random values over 2^-12 .. 4 (exponent spans
//      past 7: inexact codes), a block of powers of two spanning 7 (exact), an all-zero block, a
//      block with a subnormal-range maximum (the exponent floor -112), and one with NaN / Inf (codes 0,
//      factor NaN). For each block: the factor is 2^(E - 14) with 2^E <= amax < 2^(E + 1) (E >= -112),
//      q = rint(x / factor) (RNE), |q| < 2^15, the sum of q stored; the padding columns zero. ----
TEST(CpuQuantRow, Int16BlocksMatchTheirDefinition) {
  std::mt19937 rng(9);
  for (int B : {16, 32})
    for (int n : {16, 40, 100, 129}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) {
        const float mag = std::ldexp(1.f + std::uniform_real_distribution<float>(0, 1)(rng), std::uniform_int_distribution<int>(-12, 1)(rng));
        x[size_t(k)] = codec::round_bf16(k % 3 ? mag : -mag);
      }
      if (n >= 2 * B) {
        for (int k = B; k < 2 * B; ++k) x[size_t(k)] = std::ldexp(k % 2 ? -1.f : 1.f, -(k % 8));  // span 7: exact
      }
      if (n >= 3 * B) {
        for (int k = 2 * B; k < std::min(n, 3 * B); ++k) x[size_t(k)] = 0.f;
        if (n >= 4 * B) {
          for (int k = 3 * B; k < 4 * B; ++k) x[size_t(k)] = std::ldexp(float(k % 5), -130);  // subnormal
        }
      }
      if (n == 129) x[100] = std::nanf(""), x[3] = INFINITY;  // blocks 100 / B and 0: NaN factor
      const int ld = int(cpu::round_up(n + 29, B));
      std::vector<std::vector<uint8_t>> rows;
      std::vector<float> scales;
      std::vector<int32_t> sums;
      for (cpu::Isa isa : isas()) {
        cpu::ActBuf a;
        a.alloc(cpu::ActFmt::kS16, 1, ld);
        std::memset(a.data.data(), 0x5a, a.data.n);  // padding must be written as zeros
        a.group = B;
        a.num_groups = ld / B;
        a.group_scale.assign(size_t(a.num_groups), -1.f);
        a.group_sum.assign(size_t(a.num_groups), -1);
        cpu::QuantRowArgs q;
        q.q = cpu::RowQuant::kS16;
        cpu::kernels_for(isa).quant_row(x.data(), n, q, a, 0);
        rows.emplace_back(a.data.data(), a.data.data() + size_t(ld) * 2);
        for (float f : a.group_scale) scales.push_back(f);
        for (int32_t v : a.group_sum) sums.push_back(v);
        const int16_t* d = a.row<int16_t>(0);
        for (int g = 0; g < a.num_groups; ++g) {
          double amax = 0;
          bool finite = true;
          for (int k = g * B; k < std::min(n, (g + 1) * B); ++k) {
            finite &= std::isfinite(x[size_t(k)]);
            amax = std::max(amax, std::fabs(double(x[size_t(k)])));
          }
          const std::string where = std::string(cpu::isa_name(isa)) + " B " + std::to_string(B) + " n " +
                                    std::to_string(n) + " block " + std::to_string(g);
          int64_t sum = 0;
          if (!finite) {
            EXPECT_TRUE(std::isnan(a.group_scale[size_t(g)])) << where;
            for (int k = g * B; k < (g + 1) * B; ++k) EXPECT_EQ(d[k], 0) << where;
            EXPECT_EQ(a.group_sum[size_t(g)], 0) << where;
            continue;
          }
          const int E = amax > 0 ? std::max(std::ilogb(amax), -112) : -112;
          const double f = std::ldexp(1.0, E - 14);
          EXPECT_EQ(double(a.group_scale[size_t(g)]), f) << where;
          for (int k = g * B; k < (g + 1) * B; ++k) {
            const double xv = k < n ? double(x[size_t(k)]) : 0.0;
            const double want = std::nearbyint(xv / f);  // RNE
            ASSERT_EQ(double(d[k]), want) << where << " k " << k << " x " << xv;
            ASSERT_LT(std::fabs(want), 32768.0) << where;
            EXPECT_LE(std::fabs(d[k] * f - xv), std::max(std::ldexp(amax, -15), std::ldexp(1.0, -127))) << where;  // the oracle's bound
            sum += d[k];
          }
          if (n >= 2 * B && g == 1) {
            for (int k = B; k < 2 * B; ++k) EXPECT_EQ(d[k] * f, double(x[size_t(k)])) << where << " exact block";
          }
          EXPECT_EQ(a.group_sum[size_t(g)], sum) << where;
        }
      }
      for (size_t r = 1; r < rows.size(); ++r) EXPECT_EQ(rows[r], rows[0]) << "kS16 B " << B << " n " << n << " ISA #" << r;
      const size_t per = scales.size() / rows.size();
      for (size_t r = 1; r < rows.size(); ++r)
        for (size_t i = 0; i < per; ++i) {
          EXPECT_EQ(std::memcmp(&scales[r * per + i], &scales[i], 4), 0) << "kS16 B " << B << " n " << n << " block " << i;
          EXPECT_EQ(sums[r * per + i], sums[i]) << "kS16 B " << B << " n " << n << " block " << i;
        }
    }
}

// ---- routing edge cases --------------------------------------------------------------------------

ExpertWeights small_weights(SchemeKind k, int E, uint64_t seed = 3, int H = 96, int I = 48) {
  ref::RandomWeightsSpec rs;
  rs.scheme = spec_of(k);
  rs.scheme.group_size = 32;
  rs.num_experts = E;
  rs.hidden = H;
  rs.intermediate = I;
  rs.seed = seed;
  return ref::make_random_expert_weights(rs);
}

// ---- the ISA kernels decode every weight exactly: with a one-hot activation row (1.0 at column k)
//      a job's output is weight (r, k) times its scales, one rounding, whatever the summation
//      order; the avx2 / avx512 kernels must give the portable scalar kernel's bits for every k and
//      row. fp8 weights get every e4m3 code but NaN (subnormals included; the avx2 kernel's fp16
//      decode), then every code with NaN (its exact e4m3 decode, PackedProj::fp8_nan; a NaN output need
//      only be NaN), MXFP4 the e8m0 scale 2^-127 (byte 0), the others random codes (int4 / int8 sym
//      and asym, bf16, e2m1 with e4m3 block scales). ----
// ---- the ISA activation (Kernels::act_row): the reference's expressions with the ISA's exp ---------
// Random gate / up values over the range where silu and swigluoai bend (|g| <= 20) and out to the
// exp's overflow and underflow (|g| <= 120), and the special values, against ref::apply_activation
// (std::exp). Both sides evaluate the same expression with the same roundings but for exp: the ISA's
// (Cody-Waite reduction, a degree-7 Taylor polynomial, truncation < 0.05 ulp, Horner rounding < 1
// ulp) and glibc's expf (< 1 ulp) differ by < 2 ulps; each of the at most four roundings after the
// exp (1 + e, the division, one or two products) can add one ulp to the difference of two roundings
// of nearby values: at most 6 ulps apart (measured: 4 for silu, 5 for swigluoai over 400000 values),
// and NaN / inf / signed zero exactly where std::exp gives them.
TEST(CpuKernels, ActRowMatchesTheReference) {
  std::vector<cpu::Isa> with;
  for (cpu::Isa isa : isas())
    if (cpu::kernels_for(isa).act_row) with.push_back(isa);
  if (with.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512, whose kernels have their own activation";
  std::mt19937 rng(91);
  std::vector<float> g, u;
  for (int i = 0; i < 400000; ++i) {
    const float range = i < 300000 ? 20.f : 120.f;
    g.push_back(std::uniform_real_distribution<float>(-range, range)(rng));
    u.push_back(std::uniform_real_distribution<float>(-10.f, 10.f)(rng));
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float sv : {0.f, -0.f, 1e-30f, -1e-30f, 1e-40f, 7.f, -7.f, 88.7f, -88.7f, 88.75f, -88.75f, 104.5f, -104.5f, inf, -inf, nan})
    for (float uv : {1.f, -2.5f, 0.f, 7.5f, inf, nan}) g.push_back(sv), u.push_back(uv);
  const int n = int(g.size());
  auto ulps = [](float a, float b) {
    if (a == b) return 0.0;
    const double m = std::max(std::fabs(double(a)), std::fabs(double(b)));
    const double ulp = std::ldexp(1.0, std::max(std::ilogb(float(m)), -126) - 23);
    return std::fabs(double(a) - double(b)) / ulp;
  };
  for (Activation act : {Activation::kSiluMul, Activation::kSwigluOai, Activation::kGeluMul})
    for (cpu::Isa isa : with) {
      std::vector<float> h(size_t(n) + 16, -12345.f);  // poisoned, and past the end
      for (int c0 = 0; c0 < n; c0 += 29) {           // odd lengths: the masked tail of each call
        const int len = std::min(29, n - c0);
        cpu::kernels_for(isa).act_row(act, g.data() + c0, u.data() + c0, len, h.data() + c0);
      }
      double worst = 0;
      for (int i = 0; i < n; ++i) {
        const float want = ref::apply_activation(act, g[size_t(i)], u[size_t(i)]), got = h[size_t(i)];
        const std::string at = std::string(activation_name(act)) + " [" + cpu::isa_name(isa) + "] g " +
                               std::to_string(g[size_t(i)]) + " u " + std::to_string(u[size_t(i)]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << at << ": got " << got;
          continue;
        }
        ASSERT_FALSE(std::isnan(got)) << at << ": want " << want;
        if (std::isinf(want) || want == 0.f) {
          ASSERT_EQ(got, want) << at;
          ASSERT_EQ(std::signbit(got), std::signbit(want)) << at;
          continue;
        }
        const double d = ulps(got, want);
        worst = std::max(worst, d);
        ASSERT_LE(d, 6.0) << at << ": got " << got << " want " << want;
      }
      for (int i = n; i < n + 16; ++i) ASSERT_EQ(h[size_t(i)], -12345.f) << "wrote past n";
      std::printf("act_row %s [%s]: worst %.2f ulps over %d values\n", activation_name(act), cpu::isa_name(isa), worst, n);
    }
}

TEST(CpuKernels, EveryWeightDecodesAsTheScalarKernel) {
  struct K { const char* name; SchemeSpec spec; };
  std::vector<K> kinds;
  auto add = [&](const char* n, SchemeKind k, int bits, int group, bool sym) {
    SchemeSpec sp = spec_of(k);
    sp.bits = bits;
    sp.group_size = group;
    sp.symmetric = sym;
    kinds.push_back({n, sp});
  };
  add("fp8a16", SchemeKind::kFP8A16, 8, 0, true);
  add("fp8a16_with_nan", SchemeKind::kFP8A16, 8, 0, true);
  add("int4_g32_asym", SchemeKind::kWNA16, 4, 32, false);
  add("int4_g64_sym", SchemeKind::kWNA16, 4, 64, true);
  add("int8_g32_asym", SchemeKind::kWNA16, 8, 32, false);
  add("int8_channel_sym", SchemeKind::kWNA16, 8, 0, true);
  add("bf16", SchemeKind::kUnquantized, 16, 0, true);
  add("mxfp4a16", SchemeKind::kMXFP4A16, 4, 32, true);
  add("nvfp4a16", SchemeKind::kNVFP4A16, 4, 16, true);
  std::vector<cpu::Isa> fast;
  for (cpu::Isa i : {cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (cpu::isa_supported(i)) fast.push_back(i);
  if (fast.empty()) GTEST_SKIP() << "no AVX2 / AVX-512 on this CPU: only the scalar kernels run here";
  const int H = 256, I = 32;  // w13: 64 rows (two jobs) x K = 256
  Act16Env force("1");  // the AVX-512 act16 kernels too, whatever the CPU's vendor (cpu::prefer_int16_dot)
  int act16_runs = 0, act16_runs512 = 0;
  for (const K& kd : kinds) {
    ref::RandomWeightsSpec rs;
    rs.scheme = kd.spec;
    rs.num_experts = 1;
    rs.hidden = H;
    rs.intermediate = I;
    rs.seed = 140;
    ExpertWeights w = ref::make_random_expert_weights(rs);
    const bool with_nan = std::string(kd.name) == "fp8a16_with_nan";
    if (kd.spec.kind == SchemeKind::kFP8A16) {  // every e4m3 code (but the two NaNs), cycled over (n, k)
      uint8_t* c = static_cast<uint8_t*>(w.w13.weight.raw_mut());
      for (int64_t i = 0; i < w.w13.weight.numel(); ++i) {
        const uint8_t b = static_cast<uint8_t>(i * 7 % 256);
        c[i] = (b & 0x7F) == 0x7F && !with_nan ? 0 : b;
      }
    }
    if (kd.spec.kind == SchemeKind::kMXFP4A16) {  // e8m0 byte 0 (2^-127, a subnormal fp32) in every third group
      uint8_t* sc = static_cast<uint8_t*>(w.w13.scale.raw_mut());
      for (int64_t i = 0; i < w.w13.scale.numel(); i += 3) sc[i] = 0;
    }
    const cpu::PackedProj pw = cpu::pack_proj(w, w.w13, true);
    if (kd.spec.kind == SchemeKind::kFP8A16) ASSERT_EQ(pw.fp8_nan, with_nan) << kd.name;
    cpu::ActBuf a;
    a.alloc(cpu::ActFmt::kBF16, 1, pw.k_pad);
    std::vector<float> scratch_buf(cpu::gemm_scratch_floats(pw, 1) + 16);
    float* scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch_buf.data()) + 63) & ~uintptr_t(63));
    for (int k = 0; k < H; ++k) {
      std::memset(a.row<uint16_t>(0), 0, size_t(pw.k_pad) * 2);
      a.row<uint16_t>(0)[k] = 0x3F80;  // 1.0
      for (int pair = 0; pair < pw.rows_pad / cpu::kJobRows; ++pair) {
        auto run = [&](cpu::Isa isa) {
          std::array<float, cpu::kJobRows> out{};
          cpu::GemmJob j;
          j.w = &pw;
          j.pair = pair;
          j.a = &a;
          j.nrows = 1;
          j.out = out.data();
          j.ldo = cpu::kJobRows;
          j.scratch = scratch;
          cpu::kernels_for(isa).gemm(j);
          return out;
        };
        const auto want = run(cpu::Isa::kScalar);
        for (cpu::Isa isa : fast) {
          const auto got = run(isa);
          for (int r = 0; r < cpu::kJobRows; ++r)
            if (!(std::isnan(want[r]) && std::isnan(got[r])))
              ASSERT_EQ(0, std::memcmp(&got[r], &want[r], 4))
                << kd.name << " " << cpu::isa_name(isa) << " k " << k << " row " << pair * cpu::kJobRows + r << ": got "
                << got[r] << " want " << want[r];
        }
        // the same one-hot row as 16-bit block fixed point (q = 2^14 at k, factor 2^-14), where an ISA
        // takes these weights' activations so (Kernels::act16): the same bits as the bf16 row
        for (cpu::Isa isa : fast) {
          const int B = cpu::kernels_for(isa).act16 ? cpu::kernels_for(isa).act16(pw) : 0;
          if (B == 0) continue;
          cpu::ActBuf a16;
          a16.alloc(cpu::ActFmt::kS16, 1, int(cpu::round_up(pw.k_pad, B)));
          std::memset(a16.data.data(), 0, a16.data.n);
          a16.row<int16_t>(0)[k] = 16384;
          a16.group = B;
          a16.num_groups = a16.ld / B;
          a16.group_scale.assign(size_t(a16.num_groups), std::ldexp(1.f, -126));
          a16.group_scale[size_t(k / B)] = std::ldexp(1.f, -14);
          a16.group_sum.assign(size_t(a16.num_groups), 0);
          a16.group_sum[size_t(k / B)] = 16384;
          std::swap(a, a16);
          const auto got = run(isa), scalar16 = run(cpu::Isa::kScalar);
          std::swap(a, a16);
          for (int r = 0; r < cpu::kJobRows; ++r) {
            ASSERT_EQ(0, std::memcmp(&got[r], &want[r], 4))
                << kd.name << " " << cpu::isa_name(isa) << " act16 k " << k << " row " << pair * cpu::kJobRows + r
                << ": got " << got[r] << " want " << want[r];
            ASSERT_EQ(0, std::memcmp(&scalar16[r], &want[r], 4)) << kd.name << " scalar act16 k " << k;
          }
          ++act16_runs;
          if (isa == cpu::Isa::kAvx512) ++act16_runs512;
        }
      }
    }
  }
  if (cpu::isa_supported(cpu::Isa::kAvx2)) EXPECT_GT(act16_runs, 0) << "the avx2 act16 kernels never ran";
  if (cpu::isa_supported(cpu::Isa::kAvx512)) EXPECT_GT(act16_runs512, 0) << "the avx512 act16 kernels never ran";
}

// The 16-bit integer kernels (Kernels::act16) of both ISA builds on random block fixed-point rows: the
// AVX-512 kernels (cpu_kernels_avx512.cpp run_s16) do the avx2 ones' arithmetic in the same order on 16
// rows per vector, so the outputs must be the same bits (where the CPU has AVX-512); the avx2 ones
// within fp32 summation error of the scalar kernel. T = 1-9, 13, 29 and 40 tokens (the fused passes of
// both builds, one token's two-panel pass, and both tile paths: avx2 above 4 tokens in blocks of 6,
// AVX-512 above 8 in blocks of 12), K = 200 (a partial last weight group and activation block) and 600
// (three tile chunks), int4 sym / asym, int8 sym channel / asym g32, MXFP4, NVFP4 A16, with biases and,
// for NVFP4, e4m3 group scales (the 2^-8 fp16 form).
TEST(CpuKernels, Int16KernelsAgreeAcrossIsas) {
  if (!cpu::isa_supported(cpu::Isa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU: no act16 kernels to check";
  const bool avx512 = cpu::isa_supported(cpu::Isa::kAvx512);
  struct K { const char* name; SchemeKind kind; int bits, group; bool sym; };
  const K kinds[] = {{"int4_g32_sym", SchemeKind::kWNA16, 4, 32, true},   {"int4_g64_asym", SchemeKind::kWNA16, 4, 64, false},
                     {"int8_channel_sym", SchemeKind::kWNA16, 8, 0, true}, {"int8_g32_asym", SchemeKind::kWNA16, 8, 32, false},
                     {"mxfp4a16", SchemeKind::kMXFP4A16, 4, 32, true},     {"nvfp4a16", SchemeKind::kNVFP4A16, 4, 16, true}};
  // w13: 80 rows (three jobs, the last half padding) x K = 200 (one chunk of the AVX-512 tile path) or
  // 600 (three, the last ending in a partial activation block); T > 8 runs the tile path, T = 29 / 40
  // as several token blocks
  const int I = 40;
  std::mt19937 rng(77);
  for (int H : {200, 600})
  for (const K& kd : kinds) {
    ref::RandomWeightsSpec rs;
    rs.scheme = spec_of(kd.kind);
    rs.scheme.bits = kd.bits;
    rs.scheme.group_size = kd.group;
    rs.scheme.symmetric = kd.sym;
    rs.num_experts = 2;
    rs.hidden = H;
    rs.intermediate = I;
    rs.seed = 141;
    rs.scheme.bias = true;
    const ExpertWeights w = ref::make_random_expert_weights(rs);
    const cpu::PackedProj pw = cpu::pack_proj(w, w.w13, true);
    const int B = cpu::act16_block(pw);
    ASSERT_GT(B, 0) << kd.name;
    for (int T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 29, 40}) {
      cpu::ActBuf a;
      a.alloc(cpu::ActFmt::kS16, T, int(cpu::round_up(pw.k_pad, B)));
      a.group = B;
      a.num_groups = a.ld / B;
      a.group_scale.assign(size_t(T) * a.num_groups, 0.f);
      a.group_sum.assign(size_t(T) * a.num_groups, 0);
      cpu::QuantRowArgs q;
      q.q = cpu::RowQuant::kS16;
      std::vector<float> x(static_cast<size_t>(H));
      for (int t = 0; t < T; ++t) {
        for (float& v : x) v = codec::round_bf16(std::uniform_real_distribution<float>(-2, 2)(rng));
        cpu::kernels_for(cpu::Isa::kScalar).quant_row(x.data(), H, q, a, t);
      }
      std::vector<float> scratch_buf(cpu::gemm_scratch_floats(pw, T) + 16);
      float* scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch_buf.data()) + 63) & ~uintptr_t(63));
      for (int e = 0; e < 2; ++e)
        for (int pair = 0; pair < pw.rows_pad / cpu::kJobRows; ++pair) {
          auto run = [&](cpu::Isa isa) {
            std::vector<float> out(size_t(T) * cpu::kJobRows, std::nanf(""));  // poisoned
            cpu::GemmJob j;
            j.w = &pw;
            j.e = e;
            j.pair = pair;
            j.a = &a;
            j.nrows = T;
            j.out = out.data();
            j.ldo = cpu::kJobRows;
            j.scratch = scratch;
            cpu::kernels_for(isa).gemm(j);
            return out;
          };
          const auto want = run(cpu::Isa::kScalar), a2 = run(cpu::Isa::kAvx2);
          const auto a5 = avx512 ? run(cpu::Isa::kAvx512) : a2;
          double amax = 0;
          for (float v : want) amax = std::max(amax, double(std::fabs(v)));
          for (size_t i = 0; i < want.size(); ++i) {
            const std::string at = std::string(kd.name) + " H " + std::to_string(H) + " T " + std::to_string(T) + " e " + std::to_string(e) + " pair " +
                                   std::to_string(pair) + " out " + std::to_string(i);
            ASSERT_EQ(0, std::memcmp(&a5[i], &a2[i], 4)) << at << ": avx512 " << a5[i] << " avx2 " << a2[i];
            // fp32 sums over <= 38 blocks of exact int32 parts: well inside 2^-16 of the row's largest output
            ASSERT_NEAR(a2[i], want[i], std::ldexp(amax, -16) + 1e-30) << at;
          }
        }
    }
  }
}

TEST(CpuEdge, AllTokensOnOneExpertOthersEmpty) {
  ExpertWeights w = small_weights(SchemeKind::kWNA16, 7);
  const int64_t M = 40;  // more tokens than one microkernel block
  Tensor x = test::random_tensor(DType::kBF16, {M, 96}, 21);
  Tensor tw(DType::kF32, {M, 1}), ids(DType::kI32, {M, 1});
  for (int64_t t = 0; t < M; ++t) {
    ids.data_mut<int32_t>()[t] = 4;
    tw.data_mut<float>()[t] = 0.25f + 0.01f * t;
  }
  expect_cpu_matches(w, config(7, 1, Activation::kSiluMul), nullptr, x, tw, ids, "all on expert 4, top_k 1");
}

TEST(CpuEdge, TopK1AndExpertsWithZeroTokens) {
  ExpertWeights w = small_weights(SchemeKind::kFP8W8A8, 6);
  Tensor x = test::random_tensor(DType::kBF16, {3, 96}, 22);
  Tensor tw, ids;
  random_routing(3, 1, 6, 5, tw, ids);
  expect_cpu_matches(w, config(6, 1, Activation::kSiluMul), nullptr, x, tw, ids, "top_k 1");
}

TEST(CpuEdge, ExpertParallelMapSkipsRemoteExperts) {
  ExpertWeights w = small_weights(SchemeKind::kNVFP4, 3);  // 3 local of 6 global experts
  MoeConfig cfg = config(6, 3, Activation::kSiluMul);
  cfg.expert_map = {-1, 0, -1, 2, 1, -1};
  Tensor x = test::random_tensor(DType::kBF16, {9, 96}, 23);
  Tensor tw, ids;
  random_routing(9, 3, 6, 6, tw, ids);
  expect_cpu_matches(w, cfg, nullptr, x, tw, ids, "EP expert_map");
}

TEST(CpuEdge, Llama4WeightOnInputWithSharedExpert) {
  ExpertWeights w = small_weights(SchemeKind::kWNA16, 5, 4, 128, 80);
  ExpertWeights sh = small_weights(SchemeKind::kWNA16, 1, 5, 128, 48);
  MoeConfig cfg = config(5, 1, Activation::kSiluMul);
  cfg.router.apply_router_weight_on_input = true;
  Tensor x = test::random_tensor(DType::kBF16, {11, 128}, 24);
  Tensor tw, ids;
  random_routing(11, 1, 5, 7, tw, ids);
  expect_cpu_matches(w, cfg, &sh, x, tw, ids, "llama4 on-input + shared");
}

TEST(CpuEdge, SharedExpertWithOtherScheme) {
  ExpertWeights w = small_weights(SchemeKind::kMXFP4A16, 4, 6, 96, 64);
  ExpertWeights sh = small_weights(SchemeKind::kUnquantized, 1, 8, 96, 40);
  Tensor x = test::random_tensor(DType::kBF16, {6, 96}, 25);
  Tensor tw, ids;
  random_routing(6, 2, 4, 8, tw, ids);
  expect_cpu_matches(w, config(4, 2, Activation::kSiluMul), &sh, x, tw, ids, "mxfp4 + bf16 shared");
}

// One hot expert (every token's first slot) beside experts with 1-3 rows: the layer cuts the job list
// into runs bounded by cost (cpu_layer.cpp, JobRuns), so the hot expert's jobs spread over several
// runs and threads; every job must run exactly once whatever the team size (1, 2, 3 and 5 threads:
// more runs than jobs per thread, and fewer).
TEST(CpuEdge, HotExpertBesideSmallOnesAnyTeamSize) {
  for (SchemeKind k : {SchemeKind::kWNA16, SchemeKind::kUnquantized, SchemeKind::kINT8W8A8}) {
    ExpertWeights w = small_weights(k, 8, 11, 96, 200);  // 7 gate / up pairs, 3 output pairs per expert
    const int64_t M = 29;
    std::vector<std::array<int, 2>> pick;
    for (int64_t t = 0; t < M; ++t) pick.push_back({5, int(t % 7 < 5 ? t % 7 : t % 7 + 1)});  // 5 hot; 0-4, 6, 7
    Tensor x = test::random_tensor(DType::kBF16, {M, 96}, 80);
    Tensor tw, ids;
    fixed_routing(M, pick, 81, tw, ids);
    const int saved = omp_get_max_threads();
    for (int nt : {1, 2, 3, 5}) {
      omp_set_num_threads(nt);
      expect_cpu_matches(w, config(8, 2, Activation::kSiluMul), nullptr, x, tw, ids,
                         std::string(scheme_kind_name(k)) + " hot expert, " + std::to_string(nt) + " threads");
    }
    omp_set_num_threads(saved);
  }
}

// Batched M with many tokens per expert (microkernel token blocks, partial last block), then a
// smaller call on the same layer: the reused workspace must not leak into the second result.
TEST(CpuEdge, LargeThenSmallBatchOnOneLayer) {
  for (SchemeKind k : {SchemeKind::kWNA16, SchemeKind::kINT8W8A8, SchemeKind::kW4A8INT8, SchemeKind::kNVFP4,
                       SchemeKind::kUnquantized}) {
    ExpertWeights w = small_weights(k, 3, 9, 160, 96);
    MoeConfig cfg = config(3, 2, Activation::kSiluMul);
    for (cpu::Isa isa : isas()) {
      IsaGuard g(isa);
      auto layer = MoeLayer::create(w, cfg, Backend::kCpu);
      auto ref = MoeLayer::create(w, cfg, Backend::kReference);
      for (int64_t M : {67, 5}) {
        Tensor x = test::random_tensor(DType::kBF16, {M, 160}, 30 + M);
        Tensor tw, ids;
        random_routing(M, 2, 3, 40 + M, tw, ids);
        Tensor y = layer->forward_routed(x, tw, ids);
        oracle::LayerOut want = oracle::layer(w, cfg, nullptr, x, tw, ids, s16_of(isa, w).block);
        test::CompareResult r = test::compare(y, want.y, want.tol);
        EXPECT_TRUE(r.ok) << r.report(std::string(scheme_kind_name(k)) + " M=" + std::to_string(M) + " [" +
                                      cpu::isa_name(isa) + "]");
      }
    }
  }
}

TEST(CpuEdge, RejectsBadIdsAndForcedMissingIsa) {
  ExpertWeights w = small_weights(SchemeKind::kWNA16, 4);
  auto layer = MoeLayer::create(w, config(4, 1, Activation::kSiluMul), Backend::kCpu);
  Tensor x = test::random_tensor(DType::kBF16, {2, 96}, 26);
  Tensor tw(DType::kF32, {2, 1}), ids(DType::kI32, {2, 1});
  tw.data_mut<float>()[0] = tw.data_mut<float>()[1] = 1.f;
  ids.data_mut<int32_t>()[0] = 1;
  ids.data_mut<int32_t>()[1] = 4;  // out of range
  EXPECT_THROW(layer->forward_routed(x, tw, ids), Error);
  EXPECT_EQ(cpu::isa_from_name("avx9"), std::nullopt);
  for (cpu::Isa i : {cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (!cpu::isa_supported(i)) EXPECT_THROW(cpu::set_cpu_isa(i), Error);
}

}  // namespace
}  // namespace qmoe
