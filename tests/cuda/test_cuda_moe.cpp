// The CUDA fused MoE against the reference (src/cpu/ref), on the raw device entry (cuda_moe.h) and
// through MoeLayer. Every test skips with "no CUDA device: skipped" where there is no GPU (CI).
// Each case draws fresh random weights and inputs, poisons the device output (0xFF bytes = NaN)
// before the run and compares every element.
// Tolerance, from the arithmetic (numerics.md: kernels differ from the reference only in fp32
// summation order, and for g_idx int weights in the operand-dtype rounding of dequantized weights):
//  * the output is rounded once to bf16/fp16: the two may land on either side of a rounding
//    boundary -> 2 half-ulps relative (rtol);
//  * h is rounded to the operand dtype before GEMM2; a different fp32 summation order can flip
//    that rounding for an element, moving every output of its token by |w_topk * w2[n, i]| * ulp(h_i)
//    (~2^-8 * |h| * |w2|, up to ~1e-3 of rms(y) per flip here, and a few flips can meet in one
//    output) -> atol = 2^-6 * rms(y); for fp8 the flip moves h's e4m3 code by one step (2^-4
//    relative), 16 times more -> atol = 2^-4 * rms(y);
//  * the whole-output NMSE must stay below 1e-5 (bf16 rounding alone gives ~5e-6 against an fp32
//    output; summation-order noise is orders below), 1e-4 for fp8;
//  * g_idx (mode 2) on mma.sync and folded int4 group scales on the Hopper wq kernel (" fold" in
//    the kernel list) round every dequantized weight to bf16/fp16 once: the bound is the issue's
//    "at most ~2x an exact-dequant bf16 reference": the reference run on the same weights
//    dequantized and rounded to the operand dtype (unquantized) gives the baseline error, and the
//    kernel's NMSE must be <= 2x that baseline's (+1e-6) and its max error <= 2x the baseline's max.
//    (That baseline is well above the exact kernels' bound: bf16's unit roundoff is 2^-8, so each
//    weight moves by up to 2^-8 relative; H200, thirteenth session: NMSE 1.5-1.8e-5 and single
//    outputs off by ~0.03 rms(y) against the exact reference.) The folded kernel must also match
//    the reference on the rounded weights to the exact kernels' tolerance (fp32 summation order).
#if defined(QMOE_HAVE_CUDA)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "common/cuda_moe_cases.h"
#include "common/tensor_check.h"
#include "core/codecs.h"
#include "cpu/ref/act_quant.h"
#include "cpu/ref/quantize.h"
#include "cpu/ref/reference.h"
#include "cuda/cuda_moe.h"
#include "cuda/moe_kernels.cuh"
#include "cuda/sm90_moe.cuh"

namespace qmoe {
namespace {

using cuda::DevBuf;
using test::Case;
using test::Routing;
using test::config;
using test::make_weights;
using test::random_routing;
using test::run_device;
using test::up;

void ck(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

struct Tol {
  double c = std::ldexp(1.0, -6), nmse = 1e-5;
};
// fp8 on the Hopper path (QGMMA, sm90_moe_gemm.cu): the tensor core sums each 128-wide k-block's
// products in its own format (aligned to the largest term, ~13 fraction bits kept: up to ~2^-13 of
// sum |products| per block, against ~2^-24 for fp32 sums), and those partials are added in fp32.
// g then moves by up to ~2^-13 relative instead of ~2^-24, so the e4m3 code of h (re-quantized
// per token before GEMM2) flips ~2^11 times more often. One flip of a large h element moves it
// by an e4m3 step, up to 1/8 of its value, i.e. up to ~0.1 * amax(h) ~ 0.35 * rms(h), and y by
// that times |w2[n, i]| (up to ~3 rms(w2)) against rms(y) ~ sqrt(I) rms(w2) rms(h): up to
// ~0.075 rms(y) per flip at I = 200 (more where h is heavy-tailed: silu(g) * u puts amax(h) at up
// to ~8 rms(h), and a step near amax is amax / 14, so ~0.13 rms(y) per flip at I = 320). Measured
// on the H200: up to ~0.2 rms(y) (two or three flips in one output) in 1-60 of 0.1-3 M outputs,
// NMSE 1.1-2.0e-5, and 0.26 rms(y) in 1 of 470400 (twenty-sixth session: H = 392, I = 320, M = 1200
// top-2, both fp8 tiles bit-identical) -> atol = 2^-1 * rms(y) (two such flips in one output), the
// whole-output NMSE bound unchanged (1e-4), which a systematic error would exceed.
// Activation-quantizing backend II schemes: exact products, so only a flipped code of the
// re-quantized h moves an output, as backend II's tolerance (tests/cuda/test_cuda_q.cpp): int8
// values (INT8 W8A8, W4A8 int8) 2^-5 rms, NVFP4 W4A4 (an e2m1 step) 2^-3 rms, NMSE 1e-4; A16 fp4
// (exact operands, fp32 sums) as the other exact paths. W4A8 fp8 as fp8 W8A8: an e4m3 step of h is
// up to 1/8 of the value (an int8 step 1/127 of the row's max), so one flip moves y by up to ~0.1
// rms(y) at I = 104 (the bound above): 2^-4 on the exact paths (H200, seventeenth session: 0.044
// rms(y) in 21 of 130536 outputs failed the 2^-5 that W4A8 fp8 shared with int8 before), and on QGMMA
// (" q8": the same exact products, summed per 128-k stage in the tensor core's format) fp8's
// Hopper-path 2^-1.
Tol tol_for(const ExpertWeights& w, const std::string& kernels = "") {
  Tol t;
  const SchemeKind k = w.scheme.kind;
  if (k == SchemeKind::kFP8W8A8) t = {std::ldexp(1.0, kernels.find("sm90") != std::string::npos ? -1 : -4), 1e-4};
  if (k == SchemeKind::kINT8W8A8 || k == SchemeKind::kW4A8INT8) t = {std::ldexp(1.0, -5), 1e-4};
  if (k == SchemeKind::kW4A8FP8) t = {std::ldexp(1.0, kernels.find(" q8") != std::string::npos ? -1 : -4), 1e-4};
  if (k == SchemeKind::kNVFP4) t = {std::ldexp(1.0, -3), 1e-4};
  return t;
}

// The Hopper-path tests run only where it does (an sm_90 device, QMOE_CUDA_WGMMA not 0) and say
// so elsewhere, as SKIP_WITHOUT_GPU does without a GPU.
#define SKIP_WITHOUT_SM90()                                                                          \
  do {                                                                                               \
    if (!cuda::sm90_available())                                                                     \
      GTEST_SKIP() << "not an sm_90 device (or QMOE_CUDA_WGMMA=0): the Hopper path does not run here"; \
  } while (0)

// Appends a case named n whose scheme is the default SchemeSpec edited by f.
template <class F>
void add_case(std::vector<Case>& v, std::string n, F f) {
  ref::SchemeSpec sp;
  f(sp);
  v.push_back({std::move(n), sp});
}

// The weights dequantized exactly and rounded to the activation dtype, as unquantized weights.
ExpertWeights rounded_dense(const ExpertWeights& w) {
  ExpertWeights d;
  d.num_experts = w.num_experts;
  d.hidden = w.hidden;
  d.intermediate = w.intermediate;
  d.act_dtype = w.act_dtype;
  d.scheme.kind = SchemeKind::kUnquantized;
  for (bool is13 : {true, false}) {
    Tensor f = ref::dequantize_proj(w, is13);
    Tensor t(w.act_dtype, f.shape());
    for (int64_t i = 0; i < f.numel(); ++i) test::set_value(t, i, f.data<float>()[i]);
    (is13 ? d.w13 : d.w2).weight = t;
    (is13 ? d.w13 : d.w2).bias = (is13 ? w.w13 : w.w2).bias;
  }
  return d;
}

void expect_close(const Tensor& got, const Tensor& want, const Tol& t, const std::string& what) {
  test::expect_close_rms(got, want, t.c, t.nmse, what, /*require_nonzero=*/false);
}

// The rounding baseline (header comment): got against the exact reference `want`, no worse than 2x
// `base` (the reference on the weights rounded to the operand dtype) is; every element finite.
void expect_within_rounding_baseline(const Tensor& got, const Tensor& want, const Tensor& base, DType act,
                                     const std::string& what) {
  std::vector<double> wv = test::values(want);
  test::CompareResult rb = test::compare(base, wv, 0, 0), rg = test::compare(got, wv, 0, 0);
  EXPECT_LE(rg.nmse, 2 * rb.nmse + 1e-6) << what << ": NMSE " << rg.nmse << " vs bf16-dequant baseline " << rb.nmse;
  EXPECT_LE(rg.max_abs, 2 * rb.max_abs + 2 * test::half_ulp_rel(act) * 0.05) << what << ": max |err| " << rg.max_abs
                                                                              << " vs baseline " << rb.max_abs;
  EXPECT_EQ(rg.count, static_cast<int64_t>(wv.size()));
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_TRUE(std::isfinite(test::value_at(got, i))) << what << " at " << i;
}

// got (from kernels `kern`) against the exact reference `want` of (w, cfg, x, r) within tol; where
// the kernels fold int4 group scales into the operands (" fold"), the rounding baseline instead,
// and the reference on the rounded weights (made once into `rounded`) to the exact kernels'
// tolerance with atol 2^-5 rms(y): against those weights only fp32 summation order differs, but a
// flip of h's bf16 rounding (header comment) moves outputs by |w2[n, i]| * ulp(h_i), and asym int4
// weights (u - z up to +-15) with a SiLU x up product h (heavy-tailed: |h| up to ~10 rms(h)) at
// I = 104 make a single flip up to ~0.02 rms(y) (H200, thirteenth session: 0.022 rms(y) in 1 of
// 470400 outputs, the NMSE at 7e-6 as for the exact kernels).
void expect_reference(const Tensor& got, const Tensor& want, const ExpertWeights& w, const MoeConfig& cfg,
                      const Tensor& x, const Routing& r, const std::string& kern, const Tol& tol, const std::string& what,
                      std::optional<ExpertWeights>& rounded) {
  if (kern.find(" fold") == std::string::npos) {
    expect_close(got, want, tol, what);
    return;
  }
  if (!rounded) rounded = rounded_dense(w);
  Tensor base = ref::reference_forward_routed(*rounded, cfg, nullptr, x, r.w, r.ids);
  expect_close(got, base, Tol{std::max(tol.c, std::ldexp(1.0, -5)), tol.nmse}, what + " vs the rounded weights");
  expect_within_rounding_baseline(got, want, base, w.act_dtype, what + " vs the exact weights");
}

std::vector<Case> all_schemes() {
  std::vector<Case> v;
  auto add = [&](std::string n, auto f) {
    ref::SchemeSpec s;
    f(s);
    v.push_back({std::move(n), s});
  };
  add("bf16", [](auto& s) { s.kind = SchemeKind::kUnquantized; });
  add("fp16", [](auto& s) { s.kind = SchemeKind::kUnquantized; s.act_dtype = DType::kF16; s.weight_dtype = DType::kF16; });
  for (int bits : {4, 8})
    for (int g : {32, 64, 128, 0})
      for (bool sym : {true, false}) {
        add(str("int", bits, "_g", g, sym ? "_sym" : "_asym"), [&](auto& s) {
          s.kind = SchemeKind::kWNA16; s.bits = bits; s.group_size = g; s.symmetric = sym;
        });
      }
  add("int4_g128_sym_actorder", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; s.actorder = true; });
  add("int4_g64_asym_actorder", [](auto& s) {
    s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 64; s.symmetric = false; s.actorder = true; });
  add("int8_g32_sym_actorder", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 32; s.actorder = true; });
  add("int4_g128_fp16", [](auto& s) {
    s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; s.act_dtype = DType::kF16; s.scale_dtype = DType::kF16; });
  add("int8_channel_asym_f32scale", [](auto& s) {
    s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 0; s.symmetric = false; s.scale_dtype = DType::kF32; });
  const Strategy ws[] = {Strategy::kTensor, Strategy::kChannel, Strategy::kBlock};
  const ActQuant as[] = {ActQuant::kFP8Tensor, ActQuant::kFP8Token, ActQuant::kFP8Group128};
  for (Strategy w : ws)
    for (ActQuant a : as)
      add(str("fp8_", strategy_name(w), "_", act_quant_name(a)), [&](auto& s) {
        s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = w; s.act = a;
        s.block = {8, 128};  // the quantizer needs bn to divide I = 200 (128 x 128: CudaLayer test)
      });
  add("fp8_channel_token_fp16", [](auto& s) {
    s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token;
    s.act_dtype = DType::kF16; });
  // FP8 weight-only: exact e4m3 operands (bf16 for a bf16 model, fp16 for fp16) times the 16-bit
  // activations, fp32 sums, the scales after: the exact paths' tolerance; on sm_90 tensor / channel
  // scales take the Hopper wq kernel from its row threshold (CudaSm90.Fp8WeightOnlyOnTheWqKernelAndOffIt)
  for (Strategy w : ws)
    add(str("fp8a16_", strategy_name(w)), [&](auto& s) {
      s.kind = SchemeKind::kFP8A16; s.fp8_strategy = w; s.act = ActQuant::kNone; s.block = {8, 128}; });
  add("fp8a16_channel_fp16", [](auto& s) {
    s.kind = SchemeKind::kFP8A16; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kNone;
    s.act_dtype = DType::kF16; });
  return v;
}

// ---- every scheme x every M on a scaled shape (E not a power of two, H / I not multiples of 64) ----
class SchemeSweep : public ::testing::TestWithParam<int> {};

TEST_P(SchemeSweep, MatchesReferenceForEveryM) {
  SKIP_WITHOUT_GPU();
  const Case c = all_schemes()[GetParam()];
  const test::SweepLayer l = test::sweep_layer(c.spec, 1000 + GetParam());
  const ExpertWeights& w = l.w;
  const cuda::DevExperts& ex = l.ex;
  const MoeConfig& cfg = l.cfg;
  const int E = l.E, k = l.k, H = l.H;
  uint64_t seed = 77 * GetParam();
  const bool gidx = w.w13.g_idx.defined();
  std::optional<ExpertWeights> rounded;
  if (gidx) rounded = rounded_dense(w);
  for (int64_t m : {1, 3, 16, 64, 257, 1024, 4096}) {
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, ++seed);
    Routing r = random_routing(m, k, E, ++seed);
    Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
    Tensor got = run_device(ex, nullptr, x, r, false);
    const std::string kern = cuda::forward_kernels(ex, m, k);
    const std::string what = str(c.name, " M=", m, " (", kern, ")");
    if (!gidx) {
      expect_reference(got, want, w, cfg, x, r, kern, tol_for(w, kern), what, rounded);
      continue;
    }
    expect_within_rounding_baseline(got, want, ref::reference_forward_routed(*rounded, cfg, nullptr, x, r.w, r.ids),
                                    w.act_dtype, what);
  }
}
INSTANTIATE_TEST_SUITE_P(AllSchemes, SchemeSweep, ::testing::Range(0, static_cast<int>(all_schemes().size())),
                         [](const auto& info) { return all_schemes()[info.param].name; });

// ---- edge cases ----
TEST(CudaMoeEdges, ZeroTokenExpertOneExpertTopOneAndEP) {
  SKIP_WITHOUT_GPU();
  ref::SchemeSpec s;
  s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 64; s.symmetric = false;
  const int E = 7, H = 264, I = 136;
  ExpertWeights w = make_weights(s, E, H, I, 5);
  cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
  const Tol tol = tol_for(w);
  for (int64_t m : {1, 5, 300, 2000}) {
    for (int mode : {1, 2}) {  // 1: all tokens on the same experts, 2: expert 3 never used
      for (int k : {1, 3}) {
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, m * 31 + mode + k);
        Routing r = random_routing(m, k, E, m * 7 + mode * 3 + k, mode);
        Tensor want = ref::reference_forward_routed(w, config(E, k), nullptr, x, r.w, r.ids);
        expect_close(run_device(ex, nullptr, x, r, false), want, tol, str("mode ", mode, " k ", k, " M ", m));
      }
    }
  }
  // expert parallelism: 10 global experts, this rank holds 7 of them (global 9, 2, 6 elsewhere)
  std::vector<int32_t> emap = {0, 1, -1, 2, 3, 4, -1, 5, 6, -1};
  for (int64_t m : {3, 500}) {
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, 900 + m);
    Routing r = random_routing(m, 2, 10, 901 + m);
    MoeConfig cfg = config(10, 2);
    cfg.expert_map = emap;
    Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
    expect_close(run_device(ex, nullptr, x, r, false, emap), want, tol, str("EP M ", m));
  }
}

TEST(CudaMoeEdges, Llama4WeightOnInputWithSharedExpert) {
  SKIP_WITHOUT_GPU();
  for (bool fp8 : {false, true}) {
    ref::SchemeSpec s;
    if (fp8) { s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token; }
    const int E = 16, H = 512, I = 384;
    ExpertWeights w = make_weights(s, E, H, I, 11 + fp8);
    ExpertWeights sh = make_weights(s, 1, H, I, 12 + fp8);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    cuda::DevExperts dsh = cuda::prepare(sh, Activation::kSiluMul);
    MoeConfig cfg = config(E, 1, Activation::kSiluMul, true);
    for (int64_t m : {1, 16, 400, 1500}) {  // 400: 25 rows per expert (64-row Hopper M-blocks)
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 13 + m);
      Routing r = random_routing(m, 1, E, 14 + m);
      Tensor want = ref::reference_forward_routed(w, cfg, &sh, x, r.w, r.ids);
      expect_close(run_device(ex, &dsh, x, r, true), want, tol_for(w, cuda::forward_kernels(ex, m, 1)),
                   str("llama4 fp8=", fp8, " M ", m));
    }
  }
}

TEST(CudaMoeEdges, GptOssSwigluWithBiasAndGelu) {
  SKIP_WITHOUT_GPU();
  for (Activation act : {Activation::kSwigluOai, Activation::kGeluMul}) {
    for (int kind = 0; kind < 3; ++kind) {
      ref::SchemeSpec s;
      s.bias = true;
      if (kind == 1) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 32; }
      if (kind == 2) {
        s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kBlock; s.act = ActQuant::kFP8Group128;
        s.block = {24, 128};  // divides I = H = 360
      }
      const int E = 9, H = 360, I = 360;
      ExpertWeights w = make_weights(s, E, H, I, 40 + kind);
      cuda::DevExperts ex = cuda::prepare(w, act);
      for (int64_t m : {1, 40, 700}) {
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, 41 + m);
        Routing r = random_routing(m, 4, E, 42 + m);
        Tensor want = ref::reference_forward_routed(w, config(E, 4, act), nullptr, x, r.w, r.ids);
        expect_close(run_device(ex, nullptr, x, r, false), want, tol_for(w, cuda::forward_kernels(ex, m, 4)),
                     str(activation_name(act), " kind ", kind, " M ", m));
      }
    }
  }
}

// ---- 256 experts at prefill size (DeepSeek's expert count with small H / I) ----
TEST(CudaMoeEdges, ManyExpertsPrefill) {
  SKIP_WITHOUT_GPU();
  for (int kind = 0; kind < 2; ++kind) {
    ref::SchemeSpec s;
    if (kind == 1) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; }
    const int E = 256, H = 1024, I = 256;
    ExpertWeights w = make_weights(s, E, H, I, 60 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    std::optional<ExpertWeights> rounded;
    for (int64_t m : {1024, 4096}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 61 + m);
      Routing r = random_routing(m, 8, E, 62 + m);
      Tensor want = ref::reference_forward_routed(w, config(E, 8), nullptr, x, r.w, r.ids);
      const std::string kern = cuda::forward_kernels(ex, m, 8);
      expect_reference(run_device(ex, nullptr, x, r, false), want, w, config(E, 8), x, r, kern, tol_for(w, kern),
                       str("E=256 kind ", kind, " M ", m, " (", kern, ")"), rounded);
    }
  }
}

// The 16-bit and fp8 schemes with one scale pair for all of K (what both Hopper plain-weight
// kernels, the tile and the streaming one, run): bf16, fp16, fp8 per-tensor static, per-channel x
// per-token in a bf16 and an fp16 model.
std::vector<Case> hopper_plain_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16", [](auto&) {});
  add("fp16", [](auto& sp) { sp.act_dtype = DType::kF16; sp.weight_dtype = DType::kF16; });
  add("fp8_tensor_static", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kTensor; sp.act = ActQuant::kFP8Tensor; });
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  add("fp8_channel_token_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token;
    sp.act_dtype = DType::kF16; });
  return cases;
}

// ---- the Hopper (sm_90a wgmma + TMA) prefill path: taken where it should be, and exact ----
// Odd sizes (H = 392 and I = 104 are not multiples of the 64 / 128-wide k-blocks, N tiles are
// partly out of range), an expert with no tokens, expert parallelism, every fp8 scale layout the
// path runs (per-tensor static, per-channel x per-token, 128-row blocks x 1x128 groups).
TEST(CudaSm90, PrefillPathIsTakenAndMatchesReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases = hopper_plain_cases();
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("fp8_block_group128", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128;
    sp.block = {8, 128}; });
  // WNA16 on the quantized-weight wgmma kernel (weights as the register operand)
  add("int4_g128_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; sp.symmetric = false; });
  add("int4_g128_sym_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; sp.act_dtype = DType::kF16; sp.scale_dtype = DType::kF16; });
  add("int8_g256_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 8; sp.group_size = 256; sp.symmetric = false; });
  add("int4_channel_sym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 0; });
  add("int8_g128_sym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 8; sp.group_size = 128; });
  add("int8_channel_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 8; sp.group_size = 0; sp.symmetric = false; });
  // INT8 W8A8 (symmetric int8 channel weights x int8 per-token activations) on IGMMA: exact int32
  add("int8_w8a8", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; });
  add("int8_w8a8_fp16", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; sp.act_dtype = DType::kF16; });
  // backend II on the quantized-weight kernel: W4A8 (int4 x fp8 / int8 per-token values as exact
  // 16-bit operands), NVFP4 A16 / W4A4 and MXFP4 A16 (fp4 units, block scales in the operands)
  add("w4a8_fp8_g128", [](auto& sp) { sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 128; });
  add("w4a8_int8_g128_asym", [](auto& sp) { sp.kind = SchemeKind::kW4A8INT8; sp.group_size = 128; sp.symmetric = false; });
  add("w4a8_int8_channel_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kW4A8INT8; sp.group_size = 0; sp.act_dtype = DType::kF16; });
  add("nvfp4a16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4A16; sp.group_size = 16; });
  add("nvfp4_w4a4", [](auto& sp) { sp.kind = SchemeKind::kNVFP4; sp.group_size = 16; });
  add("nvfp4_w4a4_fp16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4; sp.group_size = 16; sp.act_dtype = DType::kF16; });
  add("mxfp4a16", [](auto& sp) { sp.kind = SchemeKind::kMXFP4A16; sp.group_size = 32; });
  add("mxfp4a16_fp16", [](auto& sp) { sp.kind = SchemeKind::kMXFP4A16; sp.group_size = 32; sp.act_dtype = DType::kF16; });
  const int E = 5, H = 392, I = 104;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 300 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const SchemeKind kind = w.scheme.kind;
    // 16-bit, fp8 and INT8 W8A8 weights take 64-row M-blocks at up to 40 expected rows per expert
    // (M = 60: 24), 128-row blocks above (M = 333, 1200); the other schemes 128-row blocks throughout
    const bool b64 = kind == SchemeKind::kUnquantized || kind == SchemeKind::kFP8W8A8 || kind == SchemeKind::kINT8W8A8;
    std::vector<int64_t> ms = {333, 1200};
    if (b64) ms.insert(ms.begin(), 60);
    // int8 atoms straight into acc: 256-row token tiles from 1024 rows per expert (config.h kWq256Rows8)
    const bool wide8 = c.name == "int8_channel_asym";
    if (wide8) ms.push_back(2600);
    if (kind == SchemeKind::kUnquantized || kind == SchemeKind::kFP8W8A8 || kind == SchemeKind::kINT8W8A8)
      ASSERT_NE(ex.w13.wp.ptr, nullptr) << c.name << ": no plain weight copy for the Hopper path";
    std::optional<ExpertWeights> rounded;
    for (int mode : {0, 2}) {  // 2: expert 3 gets no token
      for (int64_t m : ms) {
        const std::string kern = cuda::forward_kernels(ex, m, 2);
        const Tol tol = tol_for(w, kern);
        ASSERT_NE(kern.find("sm90"), std::string::npos) << c.name << " M=" << m << " ran " << kern;
        ASSERT_EQ(kern.find("wgmma64") != std::string::npos, m == 60) << c.name << " M=" << m << " ran " << kern;
        if (wide8) ASSERT_EQ(kern.find("wgmma256") != std::string::npos, m == 2600) << c.name << " M=" << m << " ran " << kern;
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, 310 + m + mode);
        Routing r = random_routing(m, 2, E, 320 + m + mode, mode);
        Tensor want = ref::reference_forward_routed(w, config(E, 2), nullptr, x, r.w, r.ids);
        expect_reference(run_device(ex, nullptr, x, r, false), want, w, config(E, 2), x, r, kern, tol,
                         str(c.name, " mode ", mode, " M=", m, " (", kern, ")"), rounded);
      }
    }
    // expert parallelism: 8 global experts, the 5 local ones are global 0, 2, 3, 5, 7
    std::vector<int32_t> emap = {0, -1, 1, 2, -1, 3, -1, 4};
    for (int64_t m : {700, 100}) {  // 100: 40 slots per local expert planned (64-row M-blocks for 16-bit / fp8)
      if (m == 100 && !b64) continue;
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 330 + m);
      Routing r = random_routing(m, 2, 8, 331 + m);
      MoeConfig cfg = config(8, 2);
      cfg.expert_map = emap;
      Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
      const std::string kern = cuda::forward_kernels(ex, m, 2);
      expect_reference(run_device(ex, nullptr, x, r, false, emap), want, w, cfg, x, r, kern, tol_for(w, kern),
                       str(c.name, " EP M=", m, " (", kern, ")"), rounded);
    }
  }
}

// fp8 block weights x 1x128 activation groups on the Hopper tile kernel, whose block scales are
// loaded once per 64-row gate / up half of a tile and k-block where a block spans such halves
// (n_div % 64 == 0 and I % 64 == 0 for w13; n_div a multiple of the consumer's columns for w2), per
// column otherwise: blocks of 128 / 64 rows (both projections by halves; I = 384 puts the up rows
// of a tile at an odd 64 within a 128-row block) and 32 rows (per column), H = 392 (a partial last
// k-block and N tile in w2), 64- and 128-row M-blocks, an expert with no tokens, fp16 activations;
// with the halves on (the default) and off (QMOE_CUDA_FP8_BLOCK_SLOTS=0).
TEST(CudaSm90, Fp8BlockScalesByTileHalf) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  test::ScopedEnv slots_env;
  const int E = 5, H = 392;
  int n = 0;
  // (I, block rows): the reference's quantizer wants blocks that divide I
  const std::array<std::pair<int, int>, 5> shapes = {{{256, 128}, {384, 128}, {192, 64}, {320, 64}, {192, 32}}};
  for (auto [I, bn] : shapes)
    for (DType act : {DType::kBF16, DType::kF16}) {
      if (act == DType::kF16 && I != 256) continue;
      ref::SchemeSpec sp;
      sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128;
      sp.block = {bn, 128};
      sp.act_dtype = act;
      ExpertWeights w = make_weights(sp, E, H, I, 760 + n++);
      cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
      std::optional<ExpertWeights> rounded;
      for (const char* on : {"1", "0"})
        for (int mode : {0, 2})
          for (int64_t m : {60, 333, 1200}) {
            slots_env.set("QMOE_CUDA_FP8_BLOCK_SLOTS", on);
            const std::string kern = cuda::forward_kernels(ex, m, 2);
            ASSERT_NE(kern.find("sm90-wgmma"), std::string::npos) << "M=" << m << " ran " << kern;
            Tensor x = test::random_tensor(w.act_dtype, {m, H}, 770 + m + mode);
            Routing r = random_routing(m, 2, E, 780 + m + mode, mode);
            Tensor want = ref::reference_forward_routed(w, config(E, 2), nullptr, x, r.w, r.ids);
            expect_reference(run_device(ex, nullptr, x, r, false), want, w, config(E, 2), x, r, kern, tol_for(w, kern),
                             str("I ", I, " block ", bn, " halves ", on, " mode ", mode, " M=", m, " (", kern, ")"),
                             rounded);
          }
    }
}

// The forward with the environment switch `name` at its default and at "0": bit-identical outputs
// (`differ` says what differs when they are not), and the default's against the reference.
void expect_switch_identical(const char* name, const char* differ, const cuda::DevExperts& ex,
                             const ExpertWeights& w, const MoeConfig& cfg, const Tensor& x, const Routing& r,
                             const std::vector<int32_t>& emap, const std::string& kern, const std::string& what,
                             std::optional<ExpertWeights>& rounded) {
  const Tensor on = run_device(ex, nullptr, x, r, false, emap);
  Tensor off;
  {
    test::ScopedEnv env(name, "0");
    off = run_device(ex, nullptr, x, r, false, emap);
  }
  ASSERT_EQ(on.nbytes(), off.nbytes());
  EXPECT_EQ(std::memcmp(on.raw(), off.raw(), on.nbytes()), 0) << what << ": " << differ;
  const Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
  expect_reference(on, want, w, cfg, x, r, kern, tol_for(w, kern), what, rounded);
}

// The tile kernel's wide epilogue stores (Sm90Gemm::wide_store: lane pairs swap halves of two column
// groups, 4 columns per lane) against 2 columns per lane (QMOE_CUDA_WIDE_STORE=0): bit-identical
// (the same values, stored in other groupings), and the reference. H = 392 and I = 232 (column
// counts that are multiples of 8 but not of 16: the last 4-column chunks of a row), 64- and 128-row
// M-blocks, 16-bit (bf16 and fp16, swigluoai with biases), fp8 per channel and 128 x 128 blocks with
// biases, INT8 with biases, an expert with no tokens, top-1 and top-2.
// The schemes of the tile kernels' switch tests: bf16, fp16 with biases (swigluoai), fp8 per channel x
// per token, (fp8_block: 8 x 128 blocks x 1 x 128 groups with biases), INT8 W8A8 with biases.
std::vector<Case> tile_switch_cases(bool fp8_block) {
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16", [](auto&) {});
  add("fp16_bias", [](auto& sp) { sp.act_dtype = DType::kF16; sp.weight_dtype = DType::kF16; sp.bias = true; });
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  if (fp8_block)
    add("fp8_block_group128_bias", [](auto& sp) {
      sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128;
      sp.block = {8, 128}; sp.bias = true; });
  add("int8_w8a8_bias", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; sp.bias = true; });
  return cases;
}

TEST(CudaSm90, WideEpilogueStoresMatchNarrow) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  const std::vector<Case> cases = tile_switch_cases(true);
  const int E = 5, H = 392, I = 232;
  // the tile kernel at every M here (few rows per expert would take mma.sync or the streaming kernel)
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  env.set("QMOE_CUDA_STREAM", "0");
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1700 + static_cast<int>(ci));
    const Activation act = c.spec.bias && c.spec.kind == SchemeKind::kUnquantized ? Activation::kSwigluOai
                                                                                 : Activation::kSiluMul;
    cuda::DevExperts ex = cuda::prepare(w, act);
    std::optional<ExpertWeights> rounded;
    for (int k : {1, 2})
      for (int mode : {0, 2})
        for (int64_t m : {60, 333, 1200}) {
          const std::string kern = cuda::forward_kernels(ex, m, k);
          ASSERT_NE(kern.find("sm90-wgmma"), std::string::npos) << c.name << " M=" << m << " ran " << kern;
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1710 + m + mode + k);
          Routing r = random_routing(m, k, E, 1720 + m + mode + k, mode);
          const MoeConfig cfg = config(E, k, act);
          const std::string what = str(c.name, " top-", k, " mode ", mode, " M=", m, " (", kern, ")");
          expect_switch_identical("QMOE_CUDA_WIDE_STORE", "the wide epilogue stores differ from the narrow ones", ex, w,
                                  cfg, x, r, {}, kern, what, rounded);
        }
  }
}

// The tile kernel's 16-bit A rows copied by its producer warpgroup straight from x (Sm90Gemm::a_src:
// cp.async into the 128B-swizzled stages, zeros past k and for padding positions, no gather of x)
// against the gathered rows loaded by TMA (QMOE_CUDA_A_DIRECT=0): bit-identical (the same operands)
// and the reference. H = 392 (the last k box only partly inside k), 64- and 128-row M-blocks, bf16
// and fp16 with swigluoai and biases, top-1 / top-2 (rows of x shared by several slots), an expert
// with no tokens, expert parallelism, one CTA per tile as well as persistent; forced at every size.
TEST(CudaSm90, DirectARowsMatchGather) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16", [](auto&) {});
  add("fp16_bias", [](auto& sp) { sp.act_dtype = DType::kF16; sp.weight_dtype = DType::kF16; sp.bias = true; });
  const int E = 5, I = 232;
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  env.set("QMOE_CUDA_STREAM", "0");
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    {
      const int H = 392;
      ExpertWeights w = make_weights(c.spec, E, H, I, 1800 + static_cast<int>(ci) + H);
      const Activation act = c.spec.bias ? Activation::kSwigluOai : Activation::kSiluMul;
      cuda::DevExperts ex = cuda::prepare(w, act);
      std::optional<ExpertWeights> rounded;
      for (const char* persist : {"1", "0"})
        for (int k : {1, 2})
          for (int mode : {0, 2})
            for (bool ep : {false, true})
              for (int64_t m : {60, 333, 1200}) {
                if (ep && mode == 2) continue;
                env.set("QMOE_CUDA_PERSIST", persist);
                env.set("QMOE_CUDA_A_DIRECT", "1");
                const std::string kern = cuda::forward_kernels(ex, m, k);
                ASSERT_NE(kern.find("sm90-wgmma"), std::string::npos) << c.name << " M=" << m << " ran " << kern;
                ASSERT_NE(kern.find(" x-direct"), std::string::npos) << c.name << " " << kern;
                // expert parallelism: 7 global experts, the fourth and the last on another rank
                std::vector<int32_t> emap;
                if (ep) emap = {0, 1, 2, -1, 3, 4, -1};
                const int eg = ep ? 7 : E;
                MoeConfig cfg = config(eg, k, act);
                cfg.expert_map = emap;
                Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1810 + m + mode + k + ep);
                Routing r = random_routing(m, k, eg, 1820 + m + mode + k + ep, mode);
                const std::string what = str(c.name, " top-", k, " mode ", mode, ep ? " EP" : "", " persist ",
                                             persist, " M=", m, " (", kern, ")");
                expect_switch_identical("QMOE_CUDA_A_DIRECT", "A rows copied from x differ from the gathered rows", ex, w,
                                        cfg, x, r, emap, kern, what, rounded);
              }
    }
  }
}

// The persistent tile kernel and one-CTA wq kernels (one CTA per SM walking the tiles, the ring of
// stages running on across them) against one CTA per tile (QMOE_CUDA_PERSIST=0): bit-identical
// outputs (each tile's arithmetic is the same) and the reference, with several tiles per CTA
// (E = 64, H = 512, I = 256, M = 2048 top-4: 128 +- 11 rows per expert, so most experts' second
// M-block is a tail of <= 64 live rows; 256-512 tiles per GEMM), an expert with no tokens, expert
// parallelism, on 16-bit, fp8 per channel, fp8 1x128 blocks (with biases) and INT8 weights (the
// tile kernel) and int4 / int8 groups, int4 channels, W4A8 fp8 (QGMMA), NVFP4 A16 / W4A4 and MXFP4
// with biases (the wq kernel's 128-row token tiles, one CTA per SM; the fp4 units and the int4 layers
// that accumulate straight into acc (channel or folded group scales) also on the 256-row tiles their
// rule takes at 128 rows per expert, config.h kWq256Rows).
TEST(CudaSm90, PersistentTileKernelMatchesOneCtaPerTile) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16", [](auto&) {});
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  add("fp8_block_group128_bias", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128;
    sp.block = {128, 128}; sp.bias = true; });
  add("int8_w8a8", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; });
  add("int4_g128_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; sp.symmetric = false; });
  add("int4_channel_sym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 0; });
  add("int8_g128_sym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 8; sp.group_size = 128; });
  add("w4a8_fp8_g128", [](auto& sp) { sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 128; });
  add("nvfp4a16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4A16; sp.group_size = 16; });
  add("nvfp4_w4a4", [](auto& sp) { sp.kind = SchemeKind::kNVFP4; sp.group_size = 16; });
  add("mxfp4a16_bias", [](auto& sp) { sp.kind = SchemeKind::kMXFP4A16; sp.group_size = 32; sp.bias = true; });
  const int E = 64, H = 512, I = 256, k = 4;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1500 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    std::optional<ExpertWeights> rounded;
    const bool fp4 = c.spec.kind == SchemeKind::kNVFP4A16 || c.spec.kind == SchemeKind::kNVFP4 ||
                     c.spec.kind == SchemeKind::kMXFP4A16;
    const bool int4 = c.spec.kind == SchemeKind::kWNA16 && c.spec.bits == 4;
    for (const char* tn : fp4 || int4 ? std::vector<const char*>{"128", ""} : std::vector<const char*>{""})
    for (int mode : {0, 2}) {  // 2: expert 3 gets no token
      for (bool ep : {false, true}) {
        if (ep && mode == 2) continue;
        const int64_t m = 2048;
        // expert parallelism: 80 global experts, every fifth one on another rank
        std::vector<int32_t> emap;
        if (ep)
          for (int g = 0, l = 0; g < 80; ++g) emap.push_back(g % 5 == 4 ? -1 : l++);
        const int eg = ep ? 80 : E;
        MoeConfig cfg = config(eg, k);
        cfg.expert_map = emap;
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1510 + mode + ep);
        Routing r = random_routing(m, k, eg, 1520 + mode + ep, mode);
        test::ScopedEnv tn_env;
        if (*tn) tn_env.set("QMOE_CUDA_WQ_TN", tn);
        const std::string kern = cuda::forward_kernels(ex, m, k);
        // 128-row tiles (no M-block size after the kernel's name): one CTA per SM for the wq kernel;
        // by their rule 256-row tiles for fp4 units and for int4 with channel or folded group scales
        const bool int4_direct = int4 && (c.spec.group_size == 0 || kern.find(" fold") != std::string::npos);
        const char* want = !*tn && (fp4 || int4_direct) ? "gemm1=sm90-wgmma256 gemm2=sm90-wgmma256"
                                                        : "gemm1=sm90-wgmma gemm2=sm90-wgmma";
        ASSERT_NE(kern.find(want), std::string::npos) << c.name << " ran " << kern;
        if (c.spec.kind == SchemeKind::kW4A8FP8) ASSERT_NE(kern.find(" q8"), std::string::npos) << kern;
        const std::string what = str(c.name, " mode ", mode, ep ? " EP" : "", " M=", m, *tn ? " tn 128" : "", " (", kern, ")");
        expect_switch_identical("QMOE_CUDA_PERSIST", "the persistent kernel differs from one CTA per tile", ex, w, cfg,
                                x, r, emap, kern, what, rounded);
      }
    }
  }
}

// One forward of a switch test (expect_switch_identical on switch `name`): x and the routing over
// eg experts (`mode` as random_routing's) from `seed`, expert map `emap`; the tile kernel with `tag`
// among the kernels' names must run. kern: the kernels' names.
void switch_case(const char* name, const char* differ, const char* tag, const ExpertWeights& w,
                 const cuda::DevExperts& ex, int eg, int k, int mode, int64_t m, const std::vector<int32_t>& emap,
                 const std::string& label, std::optional<ExpertWeights>& rounded, int seed, std::string& kern) {
  MoeConfig cfg = config(eg, k);
  cfg.expert_map = emap;
  Tensor x = test::random_tensor(w.act_dtype, {m, w.hidden}, seed);
  Routing r = random_routing(m, k, eg, seed + 1, mode);
  kern = cuda::forward_kernels(ex, m, k);
  ASSERT_NE(kern.find("gemm1=sm90-wgmma"), std::string::npos) << label << " M=" << m << " ran " << kern;
  ASSERT_NE(kern.find(tag), std::string::npos) << label << " M=" << m << " ran " << kern;
  const std::string what = str(label, " top-", k, " mode ", mode, emap.empty() ? "" : " EP", " M=", m, " (", kern, ")");
  expect_switch_identical(name, differ, ex, w, cfg, x, r, emap, kern, what, rounded);
}

// The switch tests' sweep over E = 5 local experts: persistent and one CTA per tile, top-1 / top-2,
// an expert with no tokens (mode 2), expert parallelism (7 global experts, the fourth and the last
// on another rank), each M of ms: f(label suffix, eg, k, mode, m, emap, seed).
template <class F>
void switch_sweep(test::ScopedEnv& env, std::initializer_list<int64_t> ms, int seed0, F f) {
  for (const char* persist : {"1", "0"})
    for (int k : {1, 2})
      for (int mode : {0, 2})
        for (bool ep : {false, true})
          for (int64_t m : ms) {
            if (ep && mode == 2) continue;
            env.set("QMOE_CUDA_PERSIST", persist);
            std::vector<int32_t> emap;
            if (ep) emap = {0, 1, 2, -1, 3, 4, -1};
            f(str(" persist ", persist), ep ? 7 : 5, k, mode, m, emap, seed0 + static_cast<int>(m) + mode + k + ep);
          }
}

// The tile kernel's CTA pairs (Sm90Gemm::cluster2: clusters of two CTAs on adjacent N tiles of one
// 128-row M-block, each multicasting half of the A box's rows into both, a stage refilled once both
// CTAs' consumers released it, rank 0 mailing the pairs to rank 1) against one CTA per tile loading
// its own A (QMOE_CUDA_PAIRS=0): bit-identical (the same operands and arithmetic per tile) and the
// reference. Odd numbers of N tiles (the last pair's second tile is past the weights: fp8 GEMM2 of
// H = 520 and GEMM1 of I = 320, bf16 GEMM2 of H = 520), tail M-blocks (<= 64 live rows), fp8 per
// channel x per token, per tensor x static (fp16) and 64 x 128 blocks x 1 x 128 groups with biases,
// bf16 and fp16 weights (x gathered: pairs load A by TMA), top-1 / top-2, an expert with no tokens,
// expert parallelism, one cluster per pair as well as persistent, and many pairs per cluster
// (E = 64, M = 2048 top-4).
TEST(CudaSm90, CtaPairsMatchSingleCtas) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  add("fp8_tensor_static_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kTensor; sp.act = ActQuant::kFP8Tensor;
    sp.act_dtype = DType::kF16; });
  add("fp8_block_group128_bias", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128;
    sp.block = {64, 128}; sp.bias = true; });
  add("bf16", [](auto&) {});
  add("fp16", [](auto& sp) { sp.act_dtype = DType::kF16; sp.weight_dtype = DType::kF16; });
  const std::array<std::pair<int, int>, 5> dims = {{{520, 232}, {392, 320}, {512, 320}, {520, 232}, {392, 320}}};  // (H, I)
  const int E = 5;
  // the tile kernel on 128-row M-blocks at every M here (> 40 rows per expert; M = 250 top-1: 50
  // rows, every expert's M-block a tail)
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  env.set("QMOE_CUDA_STREAM", "0");
  auto check = [&](const ExpertWeights& w, const cuda::DevExperts& ex, int eg, int k, int mode, int64_t m,
                   const std::vector<int32_t>& emap, const std::string& name, std::optional<ExpertWeights>& rounded,
                   int seed) {
    env.set("QMOE_CUDA_PAIRS", "1");  // fp8 too (select_pairs keeps them for 16-bit weights)
    env.set("QMOE_CUDA_A_DIRECT", "0");  // 16-bit: x gathered (pairs load A by TMA)
    std::string kern;
    switch_case("QMOE_CUDA_PAIRS", "the CTA pairs differ from single CTAs", " pairs", w, ex, eg, k, mode, m, emap, name,
                rounded, seed, kern);
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const auto [H, I] = dims[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1900 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    std::optional<ExpertWeights> rounded;
    switch_sweep(env, {250, 333, 1200}, 1910, [&](const std::string& sfx, int eg, int k, int mode, int64_t m,
                                                  const std::vector<int32_t>& emap, int seed) {
      check(w, ex, eg, k, mode, m, emap, c.name + sfx, rounded, seed);
    });
  }
  // many pairs per cluster: E = 64, M = 2048 top-4 (most experts' second M-block a tail)
  env.set("QMOE_CUDA_PERSIST", "1");
  env.set("QMOE_CUDA_A_DIRECT", "0");
  ExpertWeights w = make_weights(cases[0].spec, 64, 520, 320, 1950);
  cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
  std::optional<ExpertWeights> rounded;
  for (int mode : {0, 2}) check(w, ex, 64, 4, mode, 2048, {}, "fp8_channel_token E=64", rounded, 1960 + mode);
}

// fp8 with one scale pair for all of K on n256 tiles (Sm90Gemm::fp8_wide: 128 x 256 with each
// consumer warpgroup's n256 as two n128 QGMMA halves, 64 x 256 with each warpgroup one half,
// promoted k-block by k-block) against the n128 tiles (QMOE_CUDA_FP8_WIDE=0): bit-identical (the same
// k-block partials, summed in the same order) and the reference. 64-row M-blocks (M = 60, and M =
// 100 top-2: 40 rows per expert) and 128-row ones; N tile counts that are odd and partial (GEMM2 N =
// 520: three 256-column tiles, the last with 8 live columns; GEMM1 N = 2 I = 640 / 464), H = 392 (a
// partial last k-block), tail M-blocks (<= 64 live rows: M = 250 top-1), per channel x per token
// with and without biases, per tensor x static with fp16 activations, top-1 / top-2, an expert with
// no tokens, expert parallelism, one CTA per tile as well as persistent.
TEST(CudaSm90, Fp8WideTilesMatchNarrow) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("fp8_channel_token_bias", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; sp.bias = true; });
  add("fp8_tensor_static_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kTensor; sp.act = ActQuant::kFP8Tensor;
    sp.act_dtype = DType::kF16; });
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  const std::array<std::pair<int, int>, 3> dims = {{{520, 320}, {392, 232}, {392, 320}}};  // (H, I)
  const int E = 5;
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  env.set("QMOE_CUDA_STREAM", "0");
  int runs64 = 0, runs128 = 0;  // both M-block heights must have run
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const auto [H, I] = dims[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 2000 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    std::optional<ExpertWeights> rounded;
    switch_sweep(env, {60, 100, 250, 333, 1200}, 2010, [&](const std::string& sfx, int eg, int k, int mode, int64_t m,
                                                         const std::vector<int32_t>& emap, int seed) {
      std::string kern;
      switch_case("QMOE_CUDA_FP8_WIDE", "the fp8 n256 tiles differ from the n128 ones", " n256", w, ex, eg, k, mode, m,
                  emap, c.name + sfx, rounded, seed, kern);
      (kern.find("sm90-wgmma64") != std::string::npos ? runs64 : runs128) += 1;
    });
  }
  EXPECT_GT(runs64, 0) << "no case ran 64-row M-blocks";
  EXPECT_GT(runs128, 0) << "no case ran 128-row M-blocks";
}

// A weight box that ends past N's rows (Sm90Gemm::trim_box: the streaming kernel loads whole 64-row
// slices up to np, the n256 tile kernels only the first half of a last box whose rows end there)
// against whole boxes (QMOE_CUDA_TRIM_BOX=0): bit-identical (rows past the loaded ones are past N,
// never stored, whatever stale shared memory gives them) and the reference. Last boxes of every kind: N = 520 (8
// live rows: one stream slice, the first half of an n256 tile), N = 2 I = 640 (128 rows: two slices,
// exactly half a tile), N = 416 (160 rows: three slices, more than half a tile), N = 464 (208 rows:
// four slices, untrimmed); bf16, fp16 with swigluoai and biases, fp8 per channel x per token (the
// n256 QGMMA halves), INT8 W8A8 with biases (n256 IGMMA); the streaming kernel on 16- and 64-row
// M-blocks, the tile kernel on 64- and 128-row ones (tail M-blocks at M = 250 top-1), top-1 / top-2,
// an expert with no tokens, expert parallelism. The streaming kernel also without its token tiles'
// L2 evict-last policy (QMOE_CUDA_STREAM_XHINT=0): the same bits.
TEST(CudaSm90, TrimmedLastBoxMatchesWhole) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  const std::vector<Case> cases = tile_switch_cases(false);
  const std::array<std::pair<int, int>, 2> dims = {{{520, 320}, {416, 232}}};  // (H, I)
  const int E = 5;
  int runs_stream = 0, runs_tile = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci)
    for (size_t di = 0; di < dims.size(); ++di) {
      const Case& c = cases[ci];
      const auto [H, I] = dims[di];
      ExpertWeights w = make_weights(c.spec, E, H, I, 2100 + static_cast<int>(4 * ci + di));
      const Activation act = c.spec.bias && c.spec.kind == SchemeKind::kUnquantized ? Activation::kSwigluOai
                                                                                   : Activation::kSiluMul;
      cuda::DevExperts ex = cuda::prepare(w, act);
      std::optional<ExpertWeights> rounded;
      for (const char* kernel : {"stream16", "stream64", "tile"}) {
        test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
        const bool stream = kernel[0] == 's';
        env.set("QMOE_CUDA_STREAM", stream ? "1" : "0");
        if (stream) env.set("QMOE_CUDA_STREAM_NT", kernel + 6);
        // (top-k, routing mode, expert parallelism, M): 12 / 50 rows per expert, tails, no tokens, EP
        const std::array<std::tuple<int, int, bool, int64_t>, 4> runs = {
            {{1, 0, false, 60}, {1, 0, false, 250}, {2, 2, false, 333}, {2, 0, true, 250}}};
        for (const auto& [k, mode, ep, m] : runs) {
          std::vector<int32_t> emap;
          if (ep) emap = {0, 1, 2, -1, 3, 4, -1};
          const int eg = ep ? 7 : E;
          MoeConfig cfg = config(eg, k, act);
          cfg.expert_map = emap;
          const int seed = 2150 + static_cast<int>(m) + mode + k + ep;
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, seed);
          Routing r = random_routing(m, k, eg, seed + 1, mode);
          const std::string kern = cuda::forward_kernels(ex, m, k);
          ASSERT_NE(kern.find(stream ? str("sm90-", kernel) : std::string("gemm1=sm90-wgmma")), std::string::npos)
              << c.name << " M=" << m << " ran " << kern;
          (stream ? runs_stream : runs_tile) += 1;
          const std::string what = str(c.name, " H ", H, " I ", I, " top-", k, " mode ", mode, ep ? " EP" : "",
                                       " M=", m, " (", kern, ")");
          expect_switch_identical("QMOE_CUDA_TRIM_BOX", "the trimmed last boxes differ from whole ones", ex, w,
                                  cfg, x, r, emap, kern, what, rounded);
          if (stream) {  // the token tiles' L2 evict-last loads (Sm90Gemm::x_evict_last): the same bits
            const Tensor hinted = run_device(ex, nullptr, x, r, false, emap);
            test::ScopedEnv xhint("QMOE_CUDA_STREAM_XHINT", "0");
            const Tensor plain = run_device(ex, nullptr, x, r, false, emap);
            ASSERT_EQ(plain.nbytes(), hinted.nbytes());
            EXPECT_EQ(std::memcmp(plain.raw(), hinted.raw(), plain.nbytes()), 0) << what << ": evict-last token tiles differ";
          }
        }
      }
    }
  EXPECT_GT(runs_stream, 0);
  EXPECT_GT(runs_tile, 0);
}

// Expert parallelism on the wq kernel's layers: this rank owns 6 of 9 global experts (top-3; the
// other experts' slots contribute nothing), m tokens against the reference with the same map.
void expect_ep_reference(const ExpertWeights& w, const cuda::DevExperts& ex, int64_t H, int64_t m, uint64_t seed,
                         const std::string& name, std::optional<ExpertWeights>& rounded) {
  std::vector<int32_t> emap = {0, -1, 1, 2, -1, 3, 4, -1, 5};
  Tensor x = test::random_tensor(w.act_dtype, {m, H}, seed);
  Routing r = random_routing(m, 3, 9, seed + 1);
  MoeConfig cfg = config(9, 3);
  cfg.expert_map = emap;
  Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
  const std::string kern = cuda::forward_kernels(ex, m, 3);
  expect_reference(run_device(ex, nullptr, x, r, false, emap), want, w, cfg, x, r, kern, tol_for(w, kern),
                   str(name, " EP M=", m, " (", kern, ")"), rounded);
}

// The quantized-weight wgmma kernel's 32- and 64-row token tiles (wgmma m64n32 / m64n64, A = the
// dequantized weights from registers; select_sm90 takes them at up to 24 / 48 rows per expert),
// forced (QMOE_CUDA_WQ_TN, QMOE_CUDA_WGMMA_MIN_ROWS) on every format the kernel runs: rows per
// expert below, near and above the tile (experts spilling into a second M-block), an expert with no
// tokens, expert parallelism, odd H / I (partly empty atoms and N tiles).
TEST(CudaSm90, QuantizedWeightTokenTiles) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("int4_g128_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; sp.symmetric = false; });
  add("int4_channel_sym_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 0; sp.act_dtype = DType::kF16; sp.scale_dtype = DType::kF16; });
  add("int8_g256_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 8; sp.group_size = 256; sp.symmetric = false; });
  add("w4a8_fp8_g128", [](auto& sp) { sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 128; });
  add("w4a8_int8_channel", [](auto& sp) { sp.kind = SchemeKind::kW4A8INT8; sp.group_size = 0; });
  add("nvfp4a16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4A16; sp.group_size = 16; });
  add("nvfp4_w4a4", [](auto& sp) { sp.kind = SchemeKind::kNVFP4; sp.group_size = 16; });
  add("mxfp4a16", [](auto& sp) { sp.kind = SchemeKind::kMXFP4A16; sp.group_size = 32; });
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  const int E = 6, H = 392, I = 232;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1100 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    std::optional<ExpertWeights> rounded;
    for (const char* tn : {"32", "64"}) {
      env.set("QMOE_CUDA_WQ_TN", tn);
      for (int mode : {0, 2}) {  // 2: expert 3 gets no token
        for (int64_t m : {9, 40, 70}) {  // top-3 of 6 experts: 4.5 / 20 / 35 rows per expert
          const std::string kern = cuda::forward_kernels(ex, m, 3);
          ASSERT_NE(kern.find(str("sm90-wgmma", tn)), std::string::npos) << c.name << " M=" << m << " ran " << kern;
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1110 + m + mode);
          Routing r = random_routing(m, 3, E, 1120 + m + mode, mode);
          Tensor want = ref::reference_forward_routed(w, config(E, 3), nullptr, x, r.w, r.ids);
          expect_reference(run_device(ex, nullptr, x, r, false), want, w, config(E, 3), x, r, kern, tol_for(w, kern),
                           str(c.name, " TN ", tn, " mode ", mode, " M=", m, " (", kern, ")"), rounded);
        }
      }
      expect_ep_reference(w, ex, H, 50, 1130, str(c.name, " TN ", tn), rounded);
    }
  }
}

// The int4 group-scale cases of the fold and wide-tile tests: scales that fold (bf16 sym g128, fp16
// asym g256, both with groups ending inside K = 392 / 520) and fp32 scales that do not.
std::vector<Case> fold_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("int4_g128_sym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; });
  add("int4_g256_asym_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 256; sp.symmetric = false;
    sp.act_dtype = DType::kF16; sp.scale_dtype = DType::kF16; });
  add("int4_g128_f32scale", [](auto& sp) {
    sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; sp.scale_dtype = DType::kF32; });
  return cases;
}

// int4 WNA16 group scales folded into the wq kernel's operands (Sm90Gemm::fold): taken on 128- and
// 64-row token tiles (one and two CTAs per SM) where every scale is an exact operand-dtype value
// (bf16 scales of a bf16 model, fp16 ones of an fp16 model); not on 32-row tiles (measured slower
// there), with fp32 scales, or under QMOE_CUDA_WQ_FOLD=0. Folded, the kernel matches the reference
// run on the weights rounded once to the operand dtype to fp32 summation order (and the exact
// reference within the rounding baseline, expect_reference); the exact path (fp32 promotion per
// group) matches the exact reference to the same tight tolerance. Groups of 128 and 256 ending
// inside K (H = 392, I = 520), sym and asym, an expert with no tokens.
TEST(CudaSm90, FoldedGroupScales) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases = fold_cases();
  const int E = 6, H = 392, I = 520;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1200 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const bool exact16 = c.spec.scale_dtype != DType::kF32;
    EXPECT_EQ(ex.w13.scale16, exact16) << c.name;
    std::optional<ExpertWeights> rounded;
    test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
    for (const std::string tn : {"128", "64", "32"}) {
      env.set("QMOE_CUDA_WQ_TN", tn.c_str());
      for (int mode : {0, 2}) {  // 2: expert 3 gets no token
        const int64_t m = 700;
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1210 + mode);
        Routing r = random_routing(m, 2, E, 1220 + mode, mode);
        Tensor want = ref::reference_forward_routed(w, config(E, 2), nullptr, x, r.w, r.ids);
        for (const char* fold : {"1", "0"}) {
          env.set("QMOE_CUDA_WQ_FOLD", fold);
          const std::string kern = cuda::forward_kernels(ex, m, 2);
          const std::string what = str(c.name, " TN ", tn, " mode ", mode, " (", kern, ")");
          ASSERT_NE(kern.find(str("gemm1=sm90-wgmma", tn == "128" ? " " : tn)), std::string::npos) << what;
          ASSERT_EQ(kern.find(" fold") != std::string::npos, exact16 && fold[0] == '1' && tn != "32") << what;
          expect_reference(run_device(ex, nullptr, x, r, false), want, w, config(E, 2), x, r, kern, Tol{}, what, rounded);
        }
      }
    }
  }
}

// The wq kernel's 256-row token tiles (m64n256k16 with the dequantized weights from registers, 128
// accumulators per thread, three stages): taken only where both GEMMs accumulate straight into acc
// (int4 channel scales, group scales folded into the operands, fp4 units: NVFP4A16, NVFP4 W4A4 in
// fp16, MXFP4 with biases), forced here (QMOE_CUDA_WQ_TN=256)
// at 20-500 rows per expert: a tile mostly padding (half tiles: 128 token columns), one expert's rows
// over two M-blocks (the second with <= 128 or > 128 live rows), an expert with no tokens, expert
// parallelism; groups of 128 / 256 ending inside K (H = 392, I = 520), sym and asym, bf16 and fp16,
// channel scales with biases. fp32 group scales (no fold) and the exact promoting path
// (QMOE_CUDA_WQ_FOLD=0) keep 128-row tiles.
TEST(CudaSm90, WideTokenTiles) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases = fold_cases();
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("int4_channel_asym_bias", [](auto& sp) {
    sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 0; sp.symmetric = false; sp.bias = true; });
  add("nvfp4a16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4A16; sp.group_size = 16; });
  add("nvfp4_w4a4_fp16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4; sp.group_size = 16; sp.act_dtype = DType::kF16; });
  add("mxfp4a16_bias", [](auto& sp) { sp.kind = SchemeKind::kMXFP4A16; sp.group_size = 32; sp.bias = true; });
  const int E = 6, H = 392, I = 520;
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  env.set("QMOE_CUDA_WQ_TN", "256");
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1300 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const bool fp4 = c.spec.kind != SchemeKind::kWNA16;  // fp4 units: always straight into acc
    const bool channel = c.spec.group_size == 0, exact16 = c.spec.scale_dtype != DType::kF32;
    std::optional<ExpertWeights> rounded;
    for (const char* fold : {"1", "0"}) {
      if (fp4 && fold[0] == '0') continue;  // (the fold is int4's)
      env.set("QMOE_CUDA_WQ_FOLD", fold);
      const bool wide = fp4 || channel || (exact16 && fold[0] == '1');
      for (int mode : {0, 2}) {  // 2: expert 3 gets no token
        for (int64_t m : {60, 700, 1100, 1500}) {  // top-2 of 6 experts: 20 / 233 / 367 / 500 rows per expert
          if (!wide && m != 700) continue;
          const std::string kern = cuda::forward_kernels(ex, m, 2);
          const std::string what = str(c.name, " fold ", fold, " mode ", mode, " M=", m, " (", kern, ")");
          ASSERT_NE(kern.find(wide ? "gemm1=sm90-wgmma256 " : "gemm1=sm90-wgmma "), std::string::npos) << what;
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1310 + m + mode);
          Routing r = random_routing(m, 2, E, 1320 + m + mode, mode);
          Tensor want = ref::reference_forward_routed(w, config(E, 2), nullptr, x, r.w, r.ids);
          expect_reference(run_device(ex, nullptr, x, r, false), want, w, config(E, 2), x, r, kern, tol_for(w, kern),
                           what, rounded);
        }
      }
    }
    env.set("QMOE_CUDA_WQ_FOLD", "1");
    expect_ep_reference(w, ex, H, 900, 1330, c.name, rounded);
  }
}

// W4A8 with fp8 per-token activations on QGMMA (Sm90Gemm::q8: int4 codes converted to e4m3 operands
// in registers, the token rows' codes in the Sm90Gather::kperm order): symmetric / asymmetric int4
// (zero points: |u - z| up to 15), group 128 / 256 and channel scales, an fp16 model; 128- and
// 64-row token tiles (forced) with half tiles, an expert with no tokens; H = 392 and I = 232 (not
// multiples of 16: the permuted rows' last 16 columns hold zeros past K); x quantized once per
// token (top-2) and per slot (top-1 with the router weight on the input, Llama 4); expert
// parallelism. Against the reference (tol_for: fp8's Hopper-path tolerance) and, with
// QMOE_CUDA_W4A8_QGMMA=0, the exact HGMMA form of the same layer (no " q8", W4A8's own tolerance).
TEST(CudaSm90, W4A8Fp8OnQgmma) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("w4a8_fp8_g128", [](auto& sp) { sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 128; });
  add("w4a8_fp8_g256_asym", [](auto& sp) { sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 256; sp.symmetric = false; });
  add("w4a8_fp8_channel_asym", [](auto& sp) { sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 0; sp.symmetric = false; });
  add("w4a8_fp8_g128_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kW4A8FP8; sp.group_size = 128; sp.act_dtype = DType::kF16; sp.scale_dtype = DType::kF16; });
  const int E = 5, H = 392, I = 232;
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1400 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const bool channel = c.spec.group_size == 0;
    for (const char* tn : {"128", "64"}) {
      env.set("QMOE_CUDA_WQ_TN", tn);
      // channel scales (and g256 with w2's K = 232: one group) on 64-row tiles run two CTAs per SM,
      // which keep the 16-bit form
      const bool q8 = tn[0] == '1' || (!channel && c.spec.group_size < 256);
      for (const char* on : {"1", "0"}) {
        env.set("QMOE_CUDA_W4A8_QGMMA", on);
        for (int mode : {0, 2}) {  // 2: expert 3 gets no token
          for (int64_t m : {333, 40}) {  // top-2 of 5: 133 / 16 rows per expert
            const std::string kern = cuda::forward_kernels(ex, m, 2);
            const std::string what = str(c.name, " TN ", tn, " qgmma ", on, " mode ", mode, " M=", m, " (", kern, ")");
            ASSERT_NE(kern.find(str("gemm1=sm90-wgmma", tn[0] == '1' ? " " : tn)), std::string::npos) << what;
            ASSERT_EQ(kern.find(" q8") != std::string::npos, q8 && on[0] == '1') << what;
            Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1410 + m + mode);
            Routing r = random_routing(m, 2, E, 1420 + m + mode, mode);
            Tensor want = ref::reference_forward_routed(w, config(E, 2), nullptr, x, r.w, r.ids);
            expect_close(run_device(ex, nullptr, x, r, false), want, tol_for(w, kern), what);
          }
        }
        {  // top-1, router weight on the input: rows quantized per slot
          const int64_t m = 300;
          MoeConfig cfg = config(E, 1, Activation::kSiluMul, true);
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1430);
          Routing r = random_routing(m, 1, E, 1431);
          Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
          const std::string kern = cuda::forward_kernels(ex, m, 1);
          expect_close(run_device(ex, nullptr, x, r, true), want, tol_for(w, kern),
                       str(c.name, " TN ", tn, " qgmma ", on, " weight on input (", kern, ")"));
        }
        {  // expert parallelism: 8 global experts, the 5 local ones are global 0, 2, 3, 5, 7
          std::vector<int32_t> emap = {0, -1, 1, 2, -1, 3, -1, 4};
          const int64_t m = 500;
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1440);
          Routing r = random_routing(m, 2, 8, 1441);
          MoeConfig cfg = config(8, 2);
          cfg.expert_map = emap;
          Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
          const std::string kern = cuda::forward_kernels(ex, m, 2);
          expect_close(run_device(ex, nullptr, x, r, false, emap), want, tol_for(w, kern),
                       str(c.name, " TN ", tn, " qgmma ", on, " EP (", kern, ")"));
        }
      }
    }
  }
}

// An expert's last 128-row M-block with at most 64 live rows runs on one consumer warpgroup
// (sm90_moe_gemm.cu, Sm90Gemm::half_tail). Top-1 routing with exact per-expert counts puts blocks on
// both sides of that boundary: 64 rows (one block, tail), 65 (row 64 live: both warpgroups), 192
// (second block exactly 64: tail), 193, 1 (a block of one row), and an expert with none. Tokens
// are shuffled so an expert's rows are not contiguous tokens.
// Top-1 routing that gives expert e exactly counts[e] tokens, the tokens shuffled (an expert's rows are
// not contiguous tokens), router weights in [0.05, 1).
Routing top1_routing(const std::vector<int>& counts, uint64_t seed) {
  const int64_t m = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<int32_t> ids;
  for (int e = 0; e < static_cast<int>(counts.size()); ++e) ids.insert(ids.end(), counts[e], e);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  Routing r{Tensor(DType::kF32, {m, 1}), Tensor(DType::kI32, {m, 1})};
  std::mt19937_64 rng(seed + 1);
  for (int64_t t = 0; t < m; ++t) {
    r.ids.data_mut<int32_t>()[t] = ids[t];
    r.w.data_mut<float>()[t] = std::uniform_real_distribution<float>(0.05f, 1.f)(rng);
  }
  return r;
}

TEST(CudaSm90, TailBlocksAtTheOneWarpgroupBoundary) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  const std::vector<int> counts = {64, 65, 192, 193, 1, 0};
  const int E = static_cast<int>(counts.size()), H = 264, I = 136;
  const int64_t m = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const Routing r = top1_routing(counts, 77);
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16", [](auto&) {});
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  add("fp8_block_group128", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128;
    sp.block = {8, 128}; });
  add("int8_w8a8", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; });
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 500 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const std::string kern = cuda::forward_kernels(ex, m, 1);
    // 85 expected rows per expert: 128-row M-blocks on the Hopper path
    ASSERT_NE(kern.find("sm90-wgmma"), std::string::npos) << c.name << " ran " << kern;
    ASSERT_EQ(kern.find("wgmma64"), std::string::npos) << c.name << " ran " << kern;
    const Tol tol = tol_for(w, "sm90");
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, 510 + ci);
    Tensor want = ref::reference_forward_routed(w, config(E, 1), nullptr, x, r.w, r.ids);
    expect_close(run_device(ex, nullptr, x, r, false), want, tol, str(c.name, " (", kern, ")"));
  }
}

// The wq kernel multiplies an M-block's token columns only as far as its live rows, rounded up to 32
// (Sm90Gemm::live_cols: wgmma n32 .. n256 on 256- and 128-row tiles, both forced). Top-1 routing with
// exact per-expert counts on both sides of 32-row boundaries of both tiles (1, 32, 33 .. 257, 300) and
// an expert with none, tokens shuffled; int4 folded / channel (fp16, biases) / promoting (fp32 group
// scales, 128-row tiles), MXFP4, NVFP4A16, int8 channel. QMOE_CUDA_WQ_LIVE_COLS=1 against the
// halves-only form (=0) bit for bit, and the reference.
TEST(CudaSm90, LiveTokenColumns) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  const std::vector<int> counts = {1, 32, 33, 100, 128, 129, 160, 161, 200, 224, 225, 255, 256, 257, 300, 0};
  const int E = static_cast<int>(counts.size()), H = 264, I = 136;
  const int64_t m = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const Routing r = top1_routing(counts, 81);
  std::vector<Case> cases = fold_cases();
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("int4_channel_asym_bias_fp16", [](auto& sp) {
    sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 0; sp.symmetric = false; sp.bias = true;
    sp.act_dtype = DType::kF16; });
  add("mxfp4a16_bias", [](auto& sp) { sp.kind = SchemeKind::kMXFP4A16; sp.group_size = 32; sp.bias = true; });
  add("nvfp4a16", [](auto& sp) { sp.kind = SchemeKind::kNVFP4A16; sp.group_size = 16; });
  add("int8_channel", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 8; sp.group_size = 0; });
  test::ScopedEnv env("QMOE_CUDA_WGMMA_MIN_ROWS", "1");
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 1500 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    // fp32 group scales promote per group (a second accumulator set): 128-row tiles only
    const bool wide = c.spec.scale_dtype != DType::kF32;
    std::optional<ExpertWeights> rounded;
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, 1510 + static_cast<int>(ci));
    for (const char* tn : {"256", "128"}) {
      if (!wide && tn[0] == '2') continue;
      env.set("QMOE_CUDA_WQ_TN", tn);
      const std::string kern = cuda::forward_kernels(ex, m, 1);
      const std::string what = str(c.name, " TN ", tn, " (", kern, ")");
      ASSERT_NE(kern.find(tn[0] == '2' ? "gemm1=sm90-wgmma256 " : "gemm1=sm90-wgmma "), std::string::npos) << what;
      Tensor on, off;
      env.set("QMOE_CUDA_WQ_LIVE_COLS", "1");
      ASSERT_NE(cuda::forward_kernels(ex, m, 1).find(" live"), std::string::npos) << what;
      on = run_device(ex, nullptr, x, r, false);
      env.set("QMOE_CUDA_WQ_LIVE_COLS", "0");
      ASSERT_EQ(cuda::forward_kernels(ex, m, 1).find(" live"), std::string::npos) << what;
      off = run_device(ex, nullptr, x, r, false);
      ASSERT_EQ(on.nbytes(), off.nbytes());
      EXPECT_EQ(std::memcmp(on.raw(), off.raw(), on.nbytes()), 0) << what << ": live columns differ from halves";
      const Tensor want = ref::reference_forward_routed(w, config(E, 1), nullptr, x, r.w, r.ids);
      expect_reference(on, want, w, config(E, 1), x, r, kern, tol_for(w, kern), what, rounded);
    }
  }
}

// The Hopper path's streaming kernel (sm90_moe_gemm.cu sm90_stream_kernel: weights as wgmma's A,
// M-blocks of 16 or 64 token rows, persistent CTAs walking (M-block, 256-row weight box) items),
// forced on for 16-bit and fp8 weights with one scale pair for all of K: odd sizes (I = 104: one
// partly empty box for GEMM1; H = 392: two boxes for GEMM2, K not a multiple of 64 / 128), an
// expert with no tokens, expert parallelism, biases with swigluoai / gelu, both M-block sizes.
TEST(CudaSm90, StreamKernelMatchesReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases = hopper_plain_cases();
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16_bias", [](auto& sp) { sp.bias = true; });
  add("fp8_channel_token_bias", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; sp.bias = true; });
  // INT8 W8A8 on IGMMA (exact int32 sums, one scale pair)
  add("int8_w8a8", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; });
  add("int8_w8a8_fp16_bias", [](auto& sp) {
    sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; sp.act_dtype = DType::kF16; sp.bias = true; });
  test::ScopedEnv env("QMOE_CUDA_STREAM", "1");
  const int E = 5, H = 392, I = 104;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 700 + static_cast<int>(ci));
    const Activation act = !c.spec.bias ? Activation::kSiluMul : ci % 2 ? Activation::kGeluMul : Activation::kSwigluOai;
    cuda::DevExperts ex = cuda::prepare(w, act);
    const Tol tol = tol_for(w, "sm90");
    for (const char* nt : {"16", "64"}) {
      env.set("QMOE_CUDA_STREAM_NT", nt);
      for (int mode : {0, 2}) {  // 2: expert 3 gets no token
        for (int64_t m : {60, 333}) {  // 24 / 134 rows per expert
          const std::string kern = cuda::forward_kernels(ex, m, 2);
          ASSERT_NE(kern.find(str("sm90-stream", nt)), std::string::npos) << c.name << " M=" << m << " ran " << kern;
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, 710 + m + mode);
          Routing r = random_routing(m, 2, E, 720 + m + mode, mode);
          Tensor want = ref::reference_forward_routed(w, config(E, 2, act), nullptr, x, r.w, r.ids);
          expect_close(run_device(ex, nullptr, x, r, false), want, tol,
                       str(c.name, " NT ", nt, " mode ", mode, " M=", m, " (", kern, ")"));
        }
      }
      // expert parallelism: 8 global experts, the 5 local ones are global 0, 2, 3, 5, 7
      std::vector<int32_t> emap = {0, -1, 1, 2, -1, 3, -1, 4};
      const int64_t m = 150;
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 730 + m);
      Routing r = random_routing(m, 2, 8, 731 + m);
      MoeConfig cfg = config(8, 2, act);
      cfg.expert_map = emap;
      Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
      expect_close(run_device(ex, nullptr, x, r, false, emap), want, tol, str(c.name, " NT ", nt, " EP M=", m));
    }
  }
  // longer K and several boxes per expert (K = 1000 / 600, N = 1200 / 1000), 9 experts, top-3;
  // bf16, fp8 and (fp8 = 2) INT8 W8A8
  {
    ref::SchemeSpec sp;
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token;
    ref::SchemeSpec si;
    si.kind = SchemeKind::kINT8W8A8; si.group_size = 0;
    for (int fp8 = 0; fp8 < 3; ++fp8) {
      ExpertWeights w = make_weights(fp8 == 2 ? si : fp8 ? sp : ref::SchemeSpec{}, 9, 1000, 600, 740 + fp8);
      cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
      for (const char* nt : {"16", "64"}) {
        env.set("QMOE_CUDA_STREAM_NT", nt);
        const int64_t m = 77;  // 26 rows per expert
        const std::string kern = cuda::forward_kernels(ex, m, 3);
        ASSERT_NE(kern.find("sm90-stream"), std::string::npos) << kern;
        Tensor x = test::random_tensor(w.act_dtype, {m, 1000}, 750 + fp8);
        Routing r = random_routing(m, 3, 9, 751 + fp8);
        Tensor want = ref::reference_forward_routed(w, config(9, 3), nullptr, x, r.w, r.ids);
        expect_close(run_device(ex, nullptr, x, r, false), want, tol_for(w, "sm90"), str("long K fp8=", fp8, " NT ", nt));
      }
    }
  }
}

// One token on the sm_90 bulk decode kernel runs without align (GemmParams::direct_ids: M-block b
// is slot b, its expert read from the routing): top-1 / 8 / 32 of 40 experts, 16-bit, fp8 and int4
// weights, expert parallelism (slots on other ranks stay zero), and the same with align
// (QMOE_CUDA_DIRECT=0); both against the reference.
TEST(CudaSm90, OneTokenDecodeWithoutAlign) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("bf16", [](auto&) {});
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  add("int4_g128_asym", [](auto& sp) { sp.kind = SchemeKind::kWNA16; sp.bits = 4; sp.group_size = 128; sp.symmetric = false; });
  const int E = 40, H = 520, I = 200;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 800 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    for (int k : {1, 8, 32}) {
      const std::string kern = cuda::forward_kernels(ex, 1, k);
      ASSERT_NE(kern.find("decode90"), std::string::npos) << c.name << " top-" << k << " ran " << kern;
      ASSERT_NE(kern.find("direct"), std::string::npos) << c.name << " top-" << k << " ran " << kern;
      Tensor x = test::random_tensor(w.act_dtype, {1, H}, 810 + k);
      Routing r = random_routing(1, k, E, 820 + k);
      Tensor want = ref::reference_forward_routed(w, config(E, k), nullptr, x, r.w, r.ids);
      const Tol tol = tol_for(w, kern);
      expect_close(run_device(ex, nullptr, x, r, false), want, tol, str(c.name, " top-", k, " direct"));
      test::ScopedEnv with_align("QMOE_CUDA_DIRECT", "0");
      const std::string kern0 = cuda::forward_kernels(ex, 1, k);
      EXPECT_EQ(kern0.find("direct"), std::string::npos) << kern0;
      expect_close(run_device(ex, nullptr, x, r, false), want, tol, str(c.name, " top-", k, " with align"));
    }
    // expert parallelism: 48 global experts, the 40 local ones are the global ids not divisible by 6
    std::vector<int32_t> emap(48, -1);
    for (int g = 0, l = 0; g < 48; ++g)
      if (g % 6 != 0) emap[g] = l++;
    Tensor x = test::random_tensor(w.act_dtype, {1, H}, 830);
    Routing r = random_routing(1, 8, 48, 831);
    MoeConfig cfg = config(48, 8);
    cfg.expert_map = emap;
    Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
    expect_close(run_device(ex, nullptr, x, r, false, emap), want, tol_for(w, "decode90"), str(c.name, " EP direct"));
  }
}

// The Hopper gather's fp8 activation quantization (sm90_gather_warp_kernel: per token, per 1x128
// group, static) and int8 per-token one (quant 4, INT8 W8A8) against the reference's
// (cpu/ref/act_quant.cpp) bit for bit: every code and every scale. Rows of very different
// magnitudes (1e-30 .. 1e30, all zeros, values that land on e4m3 rounding ties), a row length held
// by one warp (2048) and one held by four (7176, odd 128-column groups); the division x / s is the
// reference's correctly rounded one (RowDiv). kperm (W4A8 on QGMMA): the same codes at
// sm90_kperm_pos(k), zeros at the positions of the columns past K in its last 16 (K = 7176: 8 of
// them), on the one-warp-per-row gather (K = 2048 / 7176) and the per-element one (K = 1001: rows
// not 16-byte aligned).
TEST(CudaSm90, GatherQuantizesBitForBitAsTheReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  const int R = 37;
  for (int K : {2048, 7176, 1001}) {
    const int pitch = (K + 63) / 64 * 64;
    std::mt19937_64 rng(900 + K);
    std::vector<uint16_t> xb(static_cast<size_t>(R) * K);
    for (int r = 0; r < R; ++r) {
      const double mag = r == 0 ? 0.0 : r == 1 ? 1e-30 : r == 2 ? 1e30 : std::pow(10.0, std::uniform_real_distribution<double>(-6, 6)(rng));
      for (int k = 0; k < K; ++k) {
        float v = static_cast<float>(mag * std::normal_distribution<double>(0, 1)(rng));
        if (r == 3 && k % 7 == 0) v = 448.f * (k % 2 ? 1.f : -1.f) / 2.f + 1.f;  // multiples near the max
        if (r == 4) v = (k % 2 ? 1.f : -1.f) * (1.f + (k % 16) / 16.f) * 0.0625f;  // exact e4m3 values and ties
        xb[static_cast<size_t>(r) * K + k] = codec::f32_to_bf16(v);
      }
    }
    std::vector<int32_t> ids(R);
    std::iota(ids.begin(), ids.end(), 0);
    const int32_t npost = R;
    const int32_t eid0 = 0;
    const float s_static = 0.0173f;
    DevBuf dx = up(xb.data(), xb.size() * 2), dids = up(ids.data(), R * 4), dn = up(&npost, 4), de = up(&eid0, 4),
           dsc = up(&s_static, 4);
    for (int qp : {1, 2, 3, 4, 11, 13}) {  // 4: int8 per token; 11 / 13: quant 1 / 3 with kperm
      const int quant = qp % 10, kperm = qp > 10;
      const int groups = quant == 2 ? (K + 127) / 128 : 1;
      DevBuf dout(static_cast<size_t>(R) * pitch), dscale(static_cast<size_t>(R) * groups * 4);
      cudaMemset(dout.ptr, 0x5A, dout.bytes);
      cudaMemset(dscale.ptr, 0x7F, dscale.bytes);
      cuda::Sm90Gather g;
      g.x = dx.ptr;
      g.ldx = K;
      g.cols = K;
      g.by_sorted = 0;
      g.sorted_ids = dids.as<int32_t>();
      g.expert_ids = de.as<int32_t>();
      g.block = 128;
      g.num_post = dn.as<int32_t>();
      g.numel = R;
      g.rows = R;
      g.quant = quant;
      g.in_scale = dsc.as<float>();
      g.out = dout.ptr;
      g.out_pitch = pitch;
      g.scales = dscale.as<float>();
      g.groups = groups;
      g.kperm = kperm;
      ASSERT_EQ(cuda::sm90_gather_warp_ok(g), K != 1001);
      cuda::launch_sm90_gather(false, g, nullptr);
      ck(cudaDeviceSynchronize());
      std::vector<uint8_t> got(dout.bytes);
      std::vector<float> gs(static_cast<size_t>(R) * groups);
      cudaMemcpy(got.data(), dout.ptr, got.size(), cudaMemcpyDeviceToHost);
      cudaMemcpy(gs.data(), dscale.ptr, gs.size() * 4, cudaMemcpyDeviceToHost);
      std::vector<float> row(K);
      std::vector<uint8_t> want(K);
      std::vector<float> ws(groups);
      int bad = 0;
      for (int r = 0; r < R; ++r) {
        for (int k = 0; k < K; ++k) row[k] = codec::bf16_to_f32(xb[static_cast<size_t>(r) * K + k]);
        if (quant == 1) ws[0] = ref::quantize_fp8_token(row.data(), K, want.data());
        else if (quant == 2) ref::quantize_fp8_group128(row.data(), K, want.data(), ws.data());
        else if (quant == 4) ws[0] = ref::quantize_int8_token(row.data(), K, reinterpret_cast<int8_t*>(want.data()));
        else ref::quantize_fp8_static(row.data(), K, s_static, want.data()), ws[0] = s_static;
        const uint8_t* gr = got.data() + static_cast<size_t>(r) * pitch;
        for (int k = 0; k < (kperm ? (K + 15) / 16 * 16 : K) && bad < 8; ++k) {
          const uint8_t c = gr[kperm ? cuda::sm90_kperm_pos(k) : k], wc = k < K ? want[k] : 0;
          if (c != wc) {
            ++bad;
            ADD_FAILURE() << "K " << K << " quant " << quant << " kperm " << kperm << " row " << r << " col " << k
                          << ": code " << int(c) << ", reference " << int(wc) << " (x = " << (k < K ? row[k] : 0.f) << ")";
          }
        }
        for (int gi = 0; gi < groups; ++gi)
          ASSERT_EQ(gs[static_cast<size_t>(r) * groups + gi], ws[gi]) << "K " << K << " quant " << quant << " row " << r << " group " << gi;
      }
      EXPECT_EQ(bad, 0) << "K " << K << " quant " << quant << " kperm " << kperm;
    }
  }
}

// fp8 per-token / 1x128 and int8 per-token activations quantized once per token, then gathered as
// codes (Sm90Gather::codes): the two passes against the reference's quantizer bit for bit, the copy
// pass on shuffled slots of top-3 routing with padding positions (left untouched: their poison
// stays), K = 2048 / 7176 (odd in 16-byte pieces) and the x rows' extremes as
// GatherQuantizesBitForBitAsTheReference's; per-token codes also in the kperm order (both passes;
// the copy takes the whole last 16 columns).
TEST(CudaSm90, QuantOnceGatherCopiesTheTokensCodes) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  const int T = 29, top = 3, numel = T * top;
  for (int K : {2048, 7176}) {
    const int pitch = (K + 63) / 64 * 64;
    std::mt19937_64 rng(950 + K);
    std::vector<uint16_t> xb(static_cast<size_t>(T) * K);
    for (int t = 0; t < T; ++t) {
      const double mag = t == 0 ? 0.0 : t == 1 ? 1e-30 : t == 2 ? 1e30 : std::pow(10.0, std::uniform_real_distribution<double>(-6, 6)(rng));
      for (int k = 0; k < K; ++k)
        xb[static_cast<size_t>(t) * K + k] = codec::f32_to_bf16(static_cast<float>(mag * std::normal_distribution<double>(0, 1)(rng)));
    }
    // positions: every slot once, shuffled, with a sentinel (padding) after every 7th
    std::vector<int32_t> slots(numel), sorted;
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    for (int i = 0; i < numel; ++i) {
      sorted.push_back(slots[i]);
      if (i % 7 == 6) sorted.push_back(numel);
    }
    const int P = static_cast<int>(sorted.size());
    DevBuf dx = up(xb.data(), xb.size() * 2), dids = up(sorted.data(), P * 4), dn = up(&P, 4);
    for (int qp : {1, 2, 4, 11}) {  // 4: int8 per token; 11: quant 1 with kperm
      const int quant = qp % 10, kperm = qp > 10;
      const int groups = quant == 2 ? (K + 127) / 128 : 1;
      DevBuf dq(static_cast<size_t>(T) * pitch), dqs(static_cast<size_t>(T) * groups * 4);
      DevBuf dout(static_cast<size_t>(P) * pitch), dscale(static_cast<size_t>(P) * groups * 4);
      cudaMemset(dq.ptr, 0x5A, dq.bytes);
      cudaMemset(dout.ptr, 0x5A, dout.bytes);
      cudaMemset(dscale.ptr, 0x7F, dscale.bytes);
      cuda::Sm90Gather g;  // first pass: token t into row t
      g.x = dx.ptr;
      g.ldx = K;
      g.cols = K;
      g.by_sorted = 0;
      g.numel = g.rows = T;
      g.quant = quant;
      g.out = dq.ptr;
      g.out_pitch = pitch;
      g.scales = dqs.as<float>();
      g.groups = groups;
      g.kperm = kperm;
      ASSERT_TRUE(cuda::sm90_gather_warp_ok(g));
      cuda::launch_sm90_gather(false, g, nullptr);
      cuda::Sm90Gather c = g;  // second pass: position p takes token sorted[p] / top's codes
      c.sorted_ids = dids.as<int32_t>();
      c.num_post = dn.as<int32_t>();
      c.by_sorted = 1;
      c.row_div = top;
      c.numel = numel;
      c.rows = P;
      c.out = dout.ptr;
      c.scales = dscale.as<float>();
      c.codes = dq.ptr;
      c.codes_pitch = pitch;
      c.code_scales = dqs.as<float>();
      cuda::launch_sm90_gather(false, c, nullptr);
      ck(cudaDeviceSynchronize());
      std::vector<uint8_t> got(dout.bytes);
      std::vector<float> gs(static_cast<size_t>(P) * groups);
      cudaMemcpy(got.data(), dout.ptr, got.size(), cudaMemcpyDeviceToHost);
      cudaMemcpy(gs.data(), dscale.ptr, gs.size() * 4, cudaMemcpyDeviceToHost);
      std::vector<float> row(K), ws(groups);
      std::vector<uint8_t> want(K);
      int bad = 0;
      for (int pos = 0; pos < P; ++pos) {
        const uint8_t* gr = got.data() + static_cast<size_t>(pos) * pitch;
        if (sorted[pos] >= numel) {  // padding: untouched
          for (int k = 0; k < pitch && bad < 8; ++k)
            if (gr[k] != 0x5A) ++bad, ADD_FAILURE() << "K " << K << " quant " << quant << " padding position " << pos << " written at " << k;
          continue;
        }
        const int t = sorted[pos] / top;
        for (int k = 0; k < K; ++k) row[k] = codec::bf16_to_f32(xb[static_cast<size_t>(t) * K + k]);
        if (quant == 1) ws[0] = ref::quantize_fp8_token(row.data(), K, want.data());
        else if (quant == 4) ws[0] = ref::quantize_int8_token(row.data(), K, reinterpret_cast<int8_t*>(want.data()));
        else ref::quantize_fp8_group128(row.data(), K, want.data(), ws.data());
        for (int k = 0; k < (kperm ? (K + 15) / 16 * 16 : K) && bad < 8; ++k) {
          const uint8_t c = gr[kperm ? cuda::sm90_kperm_pos(k) : k], wc = k < K ? want[k] : 0;
          if (c != wc)
            ++bad, ADD_FAILURE() << "K " << K << " quant " << quant << " kperm " << kperm << " position " << pos
                                 << " (token " << t << ") col " << k << ": code " << int(c) << ", reference " << int(wc);
        }
        for (int gi = 0; gi < groups; ++gi)
          ASSERT_EQ(gs[static_cast<size_t>(pos) * groups + gi], ws[gi]) << "K " << K << " quant " << quant << " position " << pos;
      }
      EXPECT_EQ(bad, 0) << "K " << K << " quant " << quant;
    }
  }
}

// The layer with x quantized once per token gives the same output, bit for bit, as quantizing each
// slot's row (QMOE_CUDA_QUANT_ONCE=0), on the tile kernels (128- and 64-row M-blocks) and the
// streaming kernel, and matches the reference; weight on input (Llama 4) keeps per-slot rows.
TEST(CudaSm90, QuantOnceLayerIsBitIdentical) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  std::vector<Case> cases;
  auto add = [&](std::string n, auto f) { add_case(cases, std::move(n), f); };
  add("fp8_channel_token", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kChannel; sp.act = ActQuant::kFP8Token; });
  add("fp8_block_group128", [](auto& sp) {
    sp.kind = SchemeKind::kFP8W8A8; sp.fp8_strategy = Strategy::kBlock; sp.act = ActQuant::kFP8Group128; sp.block = {8, 128}; });
  add("int8_w8a8", [](auto& sp) { sp.kind = SchemeKind::kINT8W8A8; sp.group_size = 0; });
  const int E = 6, H = 392, I = 104;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    ExpertWeights w = make_weights(c.spec, E, H, I, 960 + static_cast<int>(ci));
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    for (const char* stream : {"", "1"}) {
      if (stream[0] != 0 && ci == 1) continue;  // 1x128 groups do not stream (K-varying scales)
      test::ScopedEnv env;
      if (stream[0] != 0) env.set("QMOE_CUDA_STREAM", stream);
      for (int64_t m : {50, 333, 1200}) {
        const std::string kern = cuda::forward_kernels(ex, m, 3);
        ASSERT_NE(kern.find("sm90"), std::string::npos) << c.name << " M=" << m << " ran " << kern;
        ASSERT_NE(kern.find("x-once"), std::string::npos) << c.name << " M=" << m << " ran " << kern;
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, 970 + m);
        Routing r = random_routing(m, 3, E, 971 + m);
        const Tensor once = run_device(ex, nullptr, x, r, false);
        Tensor per_slot;
        {
          test::ScopedEnv per_slot_env("QMOE_CUDA_QUANT_ONCE", "0");
          const std::string kern0 = cuda::forward_kernels(ex, m, 3);
          EXPECT_EQ(kern0.find("x-once"), std::string::npos) << kern0;
          per_slot = run_device(ex, nullptr, x, r, false);
        }
        ASSERT_EQ(once.nbytes(), per_slot.nbytes());
        EXPECT_EQ(std::memcmp(once.raw(), per_slot.raw(), once.nbytes()), 0)
            << c.name << " M=" << m << " (" << kern << "): quantized once differs from per slot";
        Tensor want = ref::reference_forward_routed(w, config(E, 3), nullptr, x, r.w, r.ids);
        expect_close(once, want, tol_for(w, "sm90"), str(c.name, " M=", m, " (", kern, ")"));
      }
    }
    EXPECT_EQ(cuda::forward_kernels(ex, 333, 1).find("x-once"), std::string::npos) << "top-1 has nothing to share";
  }
}

// ---- full-size anchor shapes (one row each; int4 g128 keeps host memory and time modest) ----
TEST(CudaMoeFullSize, AnchorShapes) {
  SKIP_WITHOUT_GPU();
  struct S { const char* name; int E, k, H, I; Activation act; bool on_input; };
  const S shapes[] = {{"llama4-scout", 16, 1, 5120, 8192, Activation::kSiluMul, true},
                      {"mixtral-8x7b", 8, 2, 4096, 14336, Activation::kSiluMul, false},
                      {"qwen3-30b-a3b", 128, 8, 2048, 768, Activation::kSiluMul, false},
                      {"deepseek-v3", 256, 8, 7168, 2048, Activation::kSiluMul, false},
                      {"gpt-oss-120b", 128, 4, 2880, 2880, Activation::kSwigluOai, false}};
  for (const S& sh : shapes) {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128;
    ExpertWeights w = make_weights(s, sh.E, sh.H, sh.I, 99);
    cuda::DevExperts ex = cuda::prepare(w, sh.act);
    const int64_t m = 3;
    Tensor x = test::random_tensor(w.act_dtype, {m, sh.H}, 100);
    Routing r = random_routing(m, sh.k, sh.E, 101);
    Tensor want = ref::reference_forward_routed(w, config(sh.E, sh.k, sh.act, sh.on_input), nullptr, x, r.w, r.ids);
    expect_close(run_device(ex, nullptr, x, r, sh.on_input), want, tol_for(w),
                 str(sh.name, " full size M=3 (", cuda::forward_kernels(ex, m, sh.k), ")"));
  }
  // and one bf16 full-size layer with a prefill-size M (qwen3: 1.2 GB of weights)
  ref::SchemeSpec s;
  ExpertWeights w = make_weights(s, 128, 2048, 768, 7);
  cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
  for (int64_t m : {1, 1024}) {
    Tensor x = test::random_tensor(w.act_dtype, {m, 2048}, 8 + m);
    Routing r = random_routing(m, 8, 128, 9 + m);
    Tensor want = ref::reference_forward_routed(w, config(128, 8), nullptr, x, r.w, r.ids);
    expect_close(run_device(ex, nullptr, x, r, false), want, tol_for(w), str("qwen3 bf16 full size M=", m));
  }
}

// ---- routing and align kernels ----
TEST(CudaRouting, EveryRouterKindMatchesReference) {
  SKIP_WITHOUT_GPU();
  struct R { RouterKind kind; int E, k; bool renorm; int groups, topk_group; bool bias; };
  const R rs[] = {{RouterKind::kSoftmaxTopK, 8, 2, true, 1, 1, false},
                  {RouterKind::kSoftmaxTopK, 128, 8, false, 1, 1, false},
                  {RouterKind::kSigmoidTopK, 12, 3, true, 1, 1, false},
                  {RouterKind::kTopKSoftmax, 128, 4, false, 1, 1, false},
                  {RouterKind::kLlama4, 16, 1, false, 1, 1, false},
                  {RouterKind::kGrouped, 256, 8, true, 8, 4, true},
                  {RouterKind::kGrouped, 64, 6, false, 8, 3, false}};
  for (const R& rr : rs) {
    RouterConfig cfg;
    cfg.kind = rr.kind; cfg.top_k = rr.k; cfg.renormalize = rr.renorm;
    cfg.num_groups = rr.groups; cfg.topk_group = rr.topk_group; cfg.routed_scaling_factor = 2.5f;
    for (int64_t m : {1, 7, 300}) {
      Tensor logits = test::random_tensor(DType::kF32, {m, rr.E}, 500 + m + rr.E, 0.01, 4.0);
      Tensor bias = rr.bias ? test::random_tensor(DType::kF32, {rr.E}, 600 + m, 0.001, 0.1) : Tensor();
      RoutingResult want = route(logits, cfg, bias);
      DevBuf dl = up(logits.raw(), logits.nbytes());
      DevBuf db = rr.bias ? up(bias.raw(), bias.nbytes()) : DevBuf();
      DevBuf dw(m * rr.k * 4), di(m * rr.k * 4);
      cudaMemset(dw.ptr, 0xFF, dw.bytes);
      cudaMemset(di.ptr, 0xFF, di.bytes);
      cuda::route_device(dl.as<float>(), m, rr.E, cfg, db.as<float>(), dw.as<float>(), di.as<int32_t>(), nullptr);
      ck(cudaDeviceSynchronize());
      std::vector<float> gw(m * rr.k);
      std::vector<int32_t> gi(m * rr.k);
      cudaMemcpy(gw.data(), dw.ptr, dw.bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(gi.data(), di.ptr, di.bytes, cudaMemcpyDeviceToHost);
      for (int64_t i = 0; i < m * rr.k; ++i) {
        ASSERT_EQ(gi[i], want.topk_ids.data<int32_t>()[i]) << router_kind_name(rr.kind) << " E " << rr.E << " at " << i;
        const float wv = want.topk_weights.data<float>()[i];
        ASSERT_NEAR(gw[i], wv, 2e-6 * std::fabs(wv) + 1e-7) << router_kind_name(rr.kind) << " at " << i;
      }
    }
  }
}

TEST(CudaAlign, GroupsEveryEntryByExpert) {
  SKIP_WITHOUT_GPU();
  for (int E : {1, 8, 12, 256})
    for (int block : {16, 128})
      for (int64_t numel : {1, 24, 1000, 4097, 5000, 32768}) {  // > 4096: the three-kernel path
        std::mt19937 rng(E * 7 + block + numel);
        std::vector<int32_t> ids(numel);
        for (auto& v : ids) v = static_cast<int32_t>(rng() % E);
        AlignResult want = align_block_size(ids.data(), numel, E, block);
        const int cap = cuda::align_capacity(static_cast<int>(numel), E, block);
        DevBuf di = up(ids.data(), ids.size() * 4), ds(cap * 4), de(cap / block * 4), dn(4);
        const int hn = cuda::align_hist_ints(static_cast<int>(numel), E);
        DevBuf dh(std::max(hn, 1) * 4), dz(cuda::kAlignZeroInts * 4);
        cudaMemset(ds.ptr, 0x7F, ds.bytes);  // poisoned: every position must be written
        cudaMemset(de.ptr, 0x7F, de.bytes);
        cudaMemset(dz.ptr, 0x7F, dz.bytes);  // the counters align zeroes
        cuda::launch_align(di.as<int32_t>(), static_cast<int>(numel), nullptr, E, block, cap, ds.as<int32_t>(),
                           de.as<int32_t>(), dn.as<int32_t>(), hn > 0 ? dh.as<int32_t>() : nullptr, nullptr,
                           dz.as<int32_t>());
        ck(cudaDeviceSynchronize());
        std::vector<int32_t> s(cap), e(cap / block), z(cuda::kAlignZeroInts);
        cudaMemcpy(z.data(), dz.ptr, dz.bytes, cudaMemcpyDeviceToHost);
        for (int j = 0; j < cuda::kAlignZeroInts; ++j) ASSERT_EQ(z[j], 0) << "counter " << j << " numel " << numel;
        int32_t n = 0;
        cudaMemcpy(s.data(), ds.ptr, cap * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(e.data(), de.ptr, e.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&n, dn.ptr, 4, cudaMemcpyDeviceToHost);
        ASSERT_EQ(n, want.num_tokens_post_padded);
        // same expert per block, and the same set of entries per block (order within an expert free)
        for (int b = 0; b < n / block; ++b) {
          ASSERT_EQ(e[b], want.expert_ids[b]) << "block " << b;
          std::multiset<int32_t> a(s.begin() + b * block, s.begin() + (b + 1) * block);
          for (int j = 0; j < block; ++j) {
            int32_t v = s[b * block + j];
            if (v != numel) ASSERT_EQ(ids[v], e[b]) << "entry " << v << " in block " << b;
          }
          (void)a;
        }
        std::multiset<int32_t> got(s.begin(), s.begin() + n), exp(want.sorted_token_ids.begin(),
                                                                    want.sorted_token_ids.begin() + n);
        ASSERT_EQ(got, exp) << "E " << E << " block " << block << " numel " << numel;
        for (int j = n; j < cap; ++j) ASSERT_EQ(s[j], numel) << "sentinel past num_post at " << j << " numel " << numel;
        for (int b = n / block; b < cap / block; ++b) ASSERT_EQ(e[b], -1) << "expert id past num_post, block " << b;
      }
}

// ---- MoeLayer with router logits, every router kind (DeepSeek grouped with bias included) ----
TEST(CudaLayer, ForwardWithLogitsMatchesReference) {
  SKIP_WITHOUT_GPU();
  ref::SchemeSpec s;
  s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kBlock; s.act = ActQuant::kFP8Group128;
  const int E = 32, H = 512, I = 256;
  ExpertWeights w = make_weights(s, E, H, I, 3);
  MoeConfig cfg = config(E, 6);
  cfg.router.kind = RouterKind::kGrouped;
  cfg.router.num_groups = 8;
  cfg.router.topk_group = 4;
  cfg.router.renormalize = true;
  cfg.router.routed_scaling_factor = 2.5f;
  Tensor bias = test::random_tensor(DType::kF32, {E}, 4, 0.001, 0.1);
  auto cu = MoeLayer::create(w, cfg, Backend::kCuda, std::nullopt, bias);
  auto rf = MoeLayer::create(w, cfg, Backend::kReference, std::nullopt, bias);
  EXPECT_EQ(cu->backend(), Backend::kCuda);
  for (int64_t m : {2, 333}) {
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, 5 + m);
    Tensor logits = test::random_tensor(DType::kF32, {m, E}, 6 + m, 0.01, 3.0);
    // M = 333: 62 rows per expert, the Hopper path where there is one
    expect_close(cu->forward(x, logits), rf->forward(x, logits), tol_for(w, m > 100 && cuda::sm90_available() ? "sm90" : ""),
                 str("layer M ", m));
  }
}

// Which fp8 weights the CUDA backend takes (cuda::can_prepare reads the weights only: this test
// runs without a GPU, in CI): FP8 weight-only with tensor, channel and block scales since the
// forty-fifth session; block k extents that are not whole 16-column steps and rows that are not
// 16-byte aligned are refused, each naming what it needs.
TEST(CudaPrepare, TakesFp8WeightOnlyAndNamesWhatItRefuses) {
  for (Strategy st : {Strategy::kTensor, Strategy::kChannel, Strategy::kBlock}) {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kFP8A16;
    s.fp8_strategy = st;
    s.block = {8, 128};
    ExpertWeights w = make_weights(s, 4, 256, 128, 3);
    EXPECT_EQ(cuda::can_prepare(w), "") << strategy_name(st);
    if (st == Strategy::kBlock) {
      w.block = {8, 40};
      EXPECT_EQ(cuda::can_prepare(w), "FP8 block 8x40 (k extent must be a multiple of 16)");
    }
  }
  ref::SchemeSpec s;
  s.kind = SchemeKind::kFP8A16;
  const std::string why = cuda::can_prepare(make_weights(s, 4, 124, 64, 3));
  EXPECT_NE(why.find("hidden 124"), std::string::npos) << why;
  EXPECT_NE(why.find("multiples of 8"), std::string::npos) << why;
}

TEST(CudaLayer, RefusesLoudly) {
  SKIP_WITHOUT_GPU();
  ref::SchemeSpec s;
  s.kind = SchemeKind::kFP8A16;  // runs on CUDA since the forty-fifth session; a hidden size of 124
  ExpertWeights w = make_weights(s, 4, 124, 64, 1);  // does not give the kernels 16-byte rows
  try {
    MoeLayer::create(w, config(4, 2), Backend::kCuda);
    FAIL() << "hidden 124 must be refused by the CUDA backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiples of 8"), std::string::npos) << e.what();
  }
}

// FP8 weight-only at prefill sizes: with QMOE_CUDA_FP8A16_WGMMA=1 (the default: moe_forward.cu
// fp8_a16_wgmma_on) tensor / channel scales take the Hopper wq kernel (the atoms
// decoded to exact bf16 / fp16 register operands, fp32 sums: the exact paths' tolerance), with 0 the
// mma.sync tiles; block scales never take it. H = 392 (K padded to 448: 14 atoms of 32) ends GEMM1's K
// in its fourth 128-k stage, half full, whose ring slot no earlier stage has written (128-row tiles:
// four stages): its other half is whatever shared memory held (the first run, s46, read NaN codes
// there: every output NaN).
TEST(CudaSm90, Fp8WeightOnlyOnTheWqKernelAndOffIt) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_SM90();
  struct V {
    Strategy st;
    DType act;
  };
  for (V v : {V{Strategy::kChannel, DType::kBF16}, V{Strategy::kTensor, DType::kBF16},
              V{Strategy::kChannel, DType::kF16}, V{Strategy::kBlock, DType::kBF16}}) {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kFP8A16;
    s.fp8_strategy = v.st;
    s.act_dtype = v.act;
    s.block = {8, 128};
    const int E = 6, H = 392, I = 200, k = 2;
    ExpertWeights w = make_weights(s, E, H, I, 23);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    for (const char* on : {"1", "0"}) {
      test::ScopedEnv env("QMOE_CUDA_FP8A16_WGMMA", on);
      for (int64_t m : {300, 1100, 3100}) {
        const std::string kern = cuda::forward_kernels(ex, m, k);
        const std::string what =
            str(strategy_name(v.st), " ", dtype_name(v.act), " wgmma=", on, " M=", m, " (", kern, ")");
        const bool hopper = kern.find("sm90") != std::string::npos;
        EXPECT_EQ(hopper, on[0] == '1' && v.st != Strategy::kBlock) << what;
        // M = 3100: 1033 rows per expert, the 256-row token tiles (two 80 KiB stages; config.h
        // kWq256Rows8); M = 300 / 1100: 128-row ones
        if (hopper) EXPECT_EQ(kern.find("wgmma256") != std::string::npos, m == 3100) << what;
        Tensor x = test::random_tensor(v.act, {m, H}, 60 + m);
        Routing r = random_routing(m, k, E, 70 + m);
        Tensor want = ref::reference_forward_routed(w, config(E, k), nullptr, x, r.w, r.ids);
        expect_close(run_device(ex, nullptr, x, r, false), want, Tol{}, what);
      }
    }
  }
}

// FP8 weight-only with e4m3 NaN codes (S.1111.111; a checkpoint may hold them and the reference
// decodes them as NaN): the outputs they reach are NaN on the device too, every other output as
// the reference. The bf16 operands' bit shuffle (dq_fp8_pair) would read the code as 480, finite.
// M = 300 (120 rows per expert) runs the Hopper wq kernel on sm_90 (channel scales), the rest the
// decode / mma.sync kernels.
TEST(CudaMoe, Fp8WeightOnlyNaNCodesStayNaN) {
  SKIP_WITHOUT_GPU();
  for (DType act : {DType::kBF16, DType::kF16}) {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kFP8A16;
    s.act_dtype = act;
    const int E = 5, H = 136, I = 72, k = 2;
    ExpertWeights w = make_weights(s, E, H, I, 17);
    ASSERT_EQ(w.w13.weight.dtype(), DType::kF8E4M3);
    // w13 of expert 2, row 3, column 5 (a gate row: all of h's column 3 for its tokens, then every
    // output of those tokens); w2 of expert 4, row 10, column 7 (output column 10 of its tokens)
    static_cast<uint8_t*>(w.w13.weight.raw_mut())[(2 * 2 * I + 3) * H + 5] = 0x7F;
    static_cast<uint8_t*>(w.w2.weight.raw_mut())[(4 * H + 10) * I + 7] = 0xFF;
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    for (int64_t m : {1, 3, 16, 300}) {
      Tensor x = test::random_tensor(act, {m, H}, 40 + m);
      Routing r = random_routing(m, k, E, 50 + m);
      Tensor want = ref::reference_forward_routed(w, config(E, k), nullptr, x, r.w, r.ids);
      Tensor got = run_device(ex, nullptr, x, r, false);
      const std::string kern = cuda::forward_kernels(ex, m, k);
      const std::string what = str(dtype_name(act), " M=", m, " (", kern, ")");
      if (m == 300 && cuda::sm90_available())
        EXPECT_NE(kern.find("sm90"), std::string::npos) << what << ": not the Hopper wq kernel";
      int64_t nans = 0;
      for (int64_t i = 0; i < want.numel(); ++i) {
        const bool wn = std::isnan(test::value_at(want, i));
        ASSERT_EQ(std::isnan(test::value_at(got, i)), wn) << what << " at " << i;
        nans += wn;
        if (wn) {  // compared above; the finite rest below
          test::set_value(want, i, 0.0);
          test::set_value(got, i, 0.0);
        }
      }
      if (m >= 16) EXPECT_GT(nans, 0) << what << ": no token met a NaN code";
      expect_close(got, want, Tol{}, what);
    }
  }
}

}  // namespace
}  // namespace qmoe
#else
// A build without nvcc has no CUDA backend: the suite reports itself skipped.
#include <gtest/gtest.h>
TEST(CudaMoe, NoCudaBuild) { GTEST_SKIP() << "no CUDA device: skipped (this build has no CUDA backend)"; }
#endif
