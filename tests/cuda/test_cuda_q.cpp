// CUDA backend II (NVFP4 W4A4 / A16, MXFP4 A16, INT8 W8A8, W4A8 fp8 / int8) against the reference
// (src/cpu/ref), on the raw device entry (cuda_moe.h), through MoeLayer, and end to end from
// `qmoe gen` checkpoints via load_model. GPU tests skip with "no CUDA device: skipped" where there
// is no GPU; the refusal tests need none. Each case draws fresh random weights and inputs, poisons
// the device output and workspace (0xFF bytes = NaN) and compares every element.
// Tolerance, from the arithmetic (numerics.md; moe_gemm_fp4.cu / moe_act_q.cu say why every
// product is exact, so kernels differ from the reference only in fp32 summation order):
//  * the output is rounded once to bf16 / fp16: 2 half-ulps relative;
//  * A16 schemes (exact operands): h's bf16 rounding can flip for an element (probability ~2^-15),
//    moving the output by one term's half-ulp: atol = 2^-8 rms(y), NMSE <= 1e-5;
//  * activation-quantizing schemes requantize h: a flipped h rounding can move one element's code
//    by one step (int8: s = amax/127, fp8: 2^-4 relative) or change its row's / block's scale:
//    atol = 2^-5 rms(y) (as backend I's fp8), NMSE <= 1e-4; for NVFP4 W4A4 one e2m1 step of an h
//    element is up to vmax/3, entering one term w2[n, i] * dh ~ rms(h) / sqrt(I) of the output:
//    atol = 2^-3 rms(y) (I >= 128 here), NMSE <= 1e-4 (such flips are rare: ~1 in 10^6 elements).
#if defined(QMOE_HAVE_CUDA)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "common/cuda_moe_cases.h"
#include "common/tensor_check.h"
#include "cpu/ref/quantize.h"
#include "cpu/ref/reference.h"
#include "cuda/cuda_moe.h"
#include "cuda/cuda_moe_q.h"
#include "dispatch/bench_hooks.h"
#include "models/gen.h"
#include "qmoe/model.h"

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

struct Tol {
  double c = std::ldexp(1.0, -8), nmse = 1e-5;
};
Tol tol_for(const ExpertWeights& w) {
  switch (w.scheme.kind) {
    case SchemeKind::kNVFP4: return {std::ldexp(1.0, -3), 1e-4};
    case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8INT8:
      return {std::ldexp(1.0, -5), 1e-4};
    // an e4m3 step of the re-quantized h is up to 1/8 of the value (test_cuda_moe.cpp tol_for: 2^-4
    // on the exact paths, 2^-1 for the QGMMA form "q8"); these cases, fixed inputs, measure within
    // 2^-4 on every path they take
    case SchemeKind::kW4A8FP8:
      return {std::ldexp(1.0, -4), 1e-4};
    default: return {};
  }
}

void expect_close(const Tensor& got, const Tensor& want, const Tol& t, const std::string& what) {
  test::expect_close_rms(got, want, t.c, t.nmse, what, /*require_nonzero=*/true);
}

std::vector<Case> q_schemes() {
  std::vector<Case> v;
  auto add = [&](std::string n, SchemeKind k, DType act, int g, bool sym = true) {
    ref::SchemeSpec s;
    s.kind = k;
    s.act_dtype = act;
    s.group_size = g;
    s.symmetric = sym;
    v.push_back({std::move(n), s});
  };
  const DType bf = DType::kBF16, hf = DType::kF16;
  add("nvfp4a16", SchemeKind::kNVFP4A16, bf, 16);
  add("nvfp4a16_fp16", SchemeKind::kNVFP4A16, hf, 16);
  add("nvfp4_w4a4", SchemeKind::kNVFP4, bf, 16);
  add("nvfp4_w4a4_fp16", SchemeKind::kNVFP4, hf, 16);
  add("mxfp4a16", SchemeKind::kMXFP4A16, bf, 32);
  add("mxfp4a16_fp16", SchemeKind::kMXFP4A16, hf, 32);
  add("int8_w8a8", SchemeKind::kINT8W8A8, bf, 0);
  add("int8_w8a8_fp16", SchemeKind::kINT8W8A8, hf, 0);
  add("w4a8_fp8_g128", SchemeKind::kW4A8FP8, bf, 128);
  add("w4a8_fp8_g32_asym", SchemeKind::kW4A8FP8, bf, 32, false);
  add("w4a8_int8_g128", SchemeKind::kW4A8INT8, bf, 128);
  add("w4a8_int8_channel", SchemeKind::kW4A8INT8, bf, 0);
  add("w4a8_int8_g64_asym_fp16", SchemeKind::kW4A8INT8, hf, 64, false);
  return v;
}

// ---- every scheme x every M; E not a power of two, H and I not multiples of 16 / 32 / 64 / 128
//      (partial NVFP4 blocks, MXFP4 groups, int groups and k-tiles at the end of every row) ----
class QSchemeSweep : public ::testing::TestWithParam<int> {};

TEST_P(QSchemeSweep, MatchesReferenceForEveryM) {
  SKIP_WITHOUT_GPU();
  const Case c = q_schemes()[GetParam()];
  const test::SweepLayer l = test::sweep_layer(c.spec, 2000 + GetParam());
  const ExpertWeights& w = l.w;
  const cuda::DevExperts& ex = l.ex;
  const MoeConfig& cfg = l.cfg;
  const int E = l.E, k = l.k, H = l.H;
  const Tol tol = tol_for(w);
  uint64_t seed = 91 * GetParam();
  for (int64_t m : {1, 3, 16, 64, 257, 1024}) {
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, ++seed);
    Routing r = random_routing(m, k, E, ++seed);
    Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
    Tensor got = run_device(ex, nullptr, x, r, false);
    expect_close(got, want, tol, str(c.name, " M=", m, " (", cuda::forward_kernels(ex, m, k), ")"));
  }
}
INSTANTIATE_TEST_SUITE_P(QSchemes, QSchemeSweep, ::testing::Range(0, static_cast<int>(q_schemes().size())),
                         [](const auto& info) { return q_schemes()[info.param].name; });

// ---- edge cases: an expert with no tokens, all tokens on the same experts, top_k 1, EP ----
TEST(CudaQEdges, ZeroTokenExpertOneExpertTopOneAndEP) {
  SKIP_WITHOUT_GPU();
  for (int which : {0, 1, 2}) {
    ref::SchemeSpec s;
    s.kind = which == 0 ? SchemeKind::kNVFP4 : which == 1 ? SchemeKind::kMXFP4A16 : SchemeKind::kW4A8INT8;
    s.group_size = which == 0 ? 16 : which == 1 ? 32 : 64;
    const int E = 7, H = 264, I = 136;
    ExpertWeights w = make_weights(s, E, H, I, 5 + which);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const Tol tol = tol_for(w);
    for (int64_t m : {1, 5, 300, 2000})
      for (int mode : {1, 2})
        for (int k : {1, 3}) {
          Tensor x = test::random_tensor(w.act_dtype, {m, H}, m * 31 + mode + k + which);
          Routing r = random_routing(m, k, E, m * 7 + mode * 3 + k + which, mode);
          Tensor want = ref::reference_forward_routed(w, config(E, k), nullptr, x, r.w, r.ids);
          expect_close(run_device(ex, nullptr, x, r, false), want, tol,
                       str(scheme_kind_name(s.kind), " mode ", mode, " k ", k, " M ", m));
        }
    // expert parallelism: 10 global experts, this rank holds 7 (global 2, 6, 9 elsewhere)
    std::vector<int32_t> emap = {0, 1, -1, 2, 3, 4, -1, 5, 6, -1};
    for (int64_t m : {3, 500}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 900 + m);
      Routing r = random_routing(m, 2, 10, 901 + m);
      MoeConfig cfg = config(10, 2);
      cfg.expert_map = emap;
      Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
      expect_close(run_device(ex, nullptr, x, r, false, emap), want, tol,
                   str(scheme_kind_name(s.kind), " EP M ", m));
    }
  }
}

// ---- Llama 4 path: top-1, router weight on the input, shared expert; NVFP4 W4A4 and A16 ----
TEST(CudaQEdges, Llama4Nvfp4WeightOnInputWithSharedExpert) {
  SKIP_WITHOUT_GPU();
  for (SchemeKind kind : {SchemeKind::kNVFP4, SchemeKind::kNVFP4A16}) {
    ref::SchemeSpec s;
    s.kind = kind;
    s.group_size = 16;
    const int E = 16, H = 512, I = 384;
    ExpertWeights w = make_weights(s, E, H, I, 11);
    ExpertWeights sh = make_weights(s, 1, H, I, 12);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    cuda::DevExperts dsh = cuda::prepare(sh, Activation::kSiluMul);
    MoeConfig cfg = config(E, 1, Activation::kSiluMul, true);
    for (int64_t m : {1, 16, 1500}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 13 + m);
      Routing r = random_routing(m, 1, E, 14 + m);
      Tensor want = ref::reference_forward_routed(w, cfg, &sh, x, r.w, r.ids);
      expect_close(run_device(ex, &dsh, x, r, true), want, tol_for(w),
                   str("llama4 ", scheme_kind_name(kind), " M ", m));
    }
    // and through MoeLayer with router logits (Llama 4 router: top-1 then sigmoid of the logit)
    cfg.router.kind = RouterKind::kLlama4;
    auto cu = MoeLayer::create(w, cfg, Backend::kCuda, sh);
    auto rf = MoeLayer::create(w, cfg, Backend::kReference, sh);
    for (int64_t m : {2, 333}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 15 + m);
      Tensor logits = test::random_tensor(DType::kF32, {m, E}, 16 + m, 0.01, 3.0);
      expect_close(cu->forward(x, logits), rf->forward(x, logits), tol_for(w),
                   str("llama4 layer ", scheme_kind_name(kind), " M ", m));
    }
  }
}

// ---- gpt-oss path: MXFP4, swigluoai with biases (and gelu), top-4 ----
TEST(CudaQEdges, GptOssMxfp4SwigluWithBias) {
  SKIP_WITHOUT_GPU();
  for (Activation act : {Activation::kSwigluOai, Activation::kGeluMul}) {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kMXFP4A16;
    s.group_size = 32;
    s.bias = true;
    const int E = 9, H = 360, I = 360;
    ExpertWeights w = make_weights(s, E, H, I, 40);
    cuda::DevExperts ex = cuda::prepare(w, act);
    for (int64_t m : {1, 40, 700}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 41 + m);
      Routing r = random_routing(m, 4, E, 42 + m);
      Tensor want = ref::reference_forward_routed(w, config(E, 4, act), nullptr, x, r.w, r.ids);
      expect_close(run_device(ex, nullptr, x, r, false), want, tol_for(w), str(activation_name(act), " M ", m));
    }
  }
}

// ---- full-size rows: Llama 4 Scout NVFP4 W4A4 (with its shared expert) and gpt-oss-120b MXFP4 ----
TEST(CudaQFullSize, ScoutNvfp4AndGptOssMxfp4) {
  SKIP_WITHOUT_GPU();
  {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kNVFP4;
    s.group_size = 16;
    const int E = 16, H = 5120, I = 8192;
    ExpertWeights w = make_weights(s, E, H, I, 99);
    ExpertWeights sh = make_weights(s, 1, H, I, 98);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    cuda::DevExperts dsh = cuda::prepare(sh, Activation::kSiluMul);
    for (int64_t m : {3, 300}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 100 + m);
      Routing r = random_routing(m, 1, E, 101 + m);
      Tensor want = ref::reference_forward_routed(w, config(E, 1, Activation::kSiluMul, true), &sh, x, r.w, r.ids);
      expect_close(run_device(ex, &dsh, x, r, true), want, tol_for(w),
                   str("llama4-scout nvfp4 full size M=", m, " (", cuda::forward_kernels(ex, m, 1), ")"));
    }
  }
  {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kMXFP4A16;
    s.group_size = 32;
    s.bias = true;
    const int E = 128, H = 2880, I = 2880;
    ExpertWeights w = make_weights(s, E, H, I, 97);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSwigluOai);
    const int64_t m = 3;
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, 102);
    Routing r = random_routing(m, 4, E, 103);
    Tensor want = ref::reference_forward_routed(w, config(E, 4, Activation::kSwigluOai), nullptr, x, r.w, r.ids);
    expect_close(run_device(ex, nullptr, x, r, false), want, tol_for(w),
                 str("gpt-oss-120b mxfp4 full size M=3 (", cuda::forward_kernels(ex, m, 4), ")"));
  }
}

// ---- end to end: `qmoe gen` checkpoints -> load_model -> CUDA layer vs reference layer ----
TEST(CudaQCheckpoints, Llama4ModelOptNvfp4AndGptOssMxfp4) {
  std::string no_gpu;  // without a GPU the checkpoints are still generated, loaded and checked
  const bool gpu = cuda::device_present(&no_gpu);
  const std::filesystem::path root = std::filesystem::temp_directory_path() / "qmoe_test_cuda_q";
  std::filesystem::remove_all(root);
  struct G { const char* arch; const char* format; };
  for (const G& g : {G{"llama4", "modelopt-nvfp4"}, G{"llama4", "modelopt-w4a16-nvfp4"}, G{"gpt_oss", "gpt-oss-mxfp4"}}) {
    models::GenOptions o;
    o.arch = g.arch;
    o.format = g.format;
    o.out = (root / str(g.arch, "_", g.format)).string();
    o.reference_out = "-";
    o.layers = 1;
    o.experts = 8;
    o.hidden = 256;
    o.intermediate = 192;
    o.seed = 21;
    models::generate_checkpoint(o);
    Model model = load_model(o.out);
    ASSERT_FALSE(model.layers.empty()) << o.out;
    for (const MoeLayerSpec& L : model.layers) {
      EXPECT_EQ(cuda::can_prepare_q(L.experts), "") << g.format;
      if (L.shared_expert) EXPECT_EQ(cuda::can_prepare_q(*L.shared_expert), "") << g.format << " shared expert";
      if (!gpu) continue;
      // gpt-oss's router bias belongs to the logits (x W^T + b, the caller's); only grouped
      // routers take a score-correction bias
      const Tensor rb = L.config.router.kind == RouterKind::kGrouped ? L.router_bias : Tensor();
      auto cu = MoeLayer::create(L.experts, L.config, Backend::kCuda, L.shared_expert, rb);
      auto rf = MoeLayer::create(L.experts, L.config, Backend::kReference, L.shared_expert, rb);
      for (int64_t m : {1, 7, 300}) {
        Tensor x = test::random_tensor(L.experts.act_dtype, {m, L.experts.hidden}, 30 + m);
        Tensor logits = test::random_tensor(DType::kF32, {m, L.config.num_experts}, 31 + m, 0.01, 3.0);
        expect_close(cu->forward(x, logits), rf->forward(x, logits), tol_for(L.experts),
                     str(g.arch, " ", g.format, " ", L.prefix, " (", cu->method_name(), ") M ", m));
      }
    }
  }
  std::filesystem::remove_all(root);
  if (!gpu) GTEST_SKIP() << "no CUDA device: skipped (" << no_gpu << "); checkpoints generated and loaded";
}

// ---- host-side checks: run without a GPU ----
TEST(CudaQRefusals, EverySweepSchemeIsAccepted) {
  for (const Case& c : q_schemes()) {
    ExpertWeights w = make_weights(c.spec, 3, 776, 200, 1);
    EXPECT_TRUE(cuda::q_scheme(w.scheme.kind)) << c.name;
    EXPECT_EQ(cuda::can_prepare_q(w), "") << c.name;
  }
}

TEST(CudaQRefusals, ExplainWhy) {
  auto why = [](const ExpertWeights& w) { return cuda::can_prepare_q(w); };
  {  // MXFP4 with fp16 activations and a scale whose e2m1 products fall below fp16's subnormals
    ref::SchemeSpec s;
    s.kind = SchemeKind::kMXFP4A16;
    s.group_size = 32;
    s.act_dtype = DType::kF16;
    ExpertWeights w = make_weights(s, 2, 64, 32, 1);
    EXPECT_EQ(why(w), "");
    Tensor sc(w.w2.scale.dtype(), w.w2.scale.shape());
    std::memcpy(sc.raw_mut(), w.w2.scale.raw(), sc.nbytes());
    static_cast<uint8_t*>(sc.raw_mut())[3] = 90;  // 2^-37
    w.w2.scale = sc;
    EXPECT_NE(why(w).find("MXFP4 e8m0 scales"), std::string::npos) << why(w);
  }
  {  // NVFP4 W4A4 without its static activation multiplier
    ref::SchemeSpec s;
    s.kind = SchemeKind::kNVFP4;
    s.group_size = 16;
    ExpertWeights w = make_weights(s, 2, 64, 32, 2);
    EXPECT_EQ(why(w), "");
    w.w2.input_scale = Tensor();
    EXPECT_NE(why(w).find("input_scale"), std::string::npos) << why(w);
  }
  {  // W4A8 with act-order g_idx
    ref::SchemeSpec s;
    s.kind = SchemeKind::kW4A8INT8;
    s.group_size = 32;
    ExpertWeights w = make_weights(s, 2, 64, 32, 3);
    EXPECT_EQ(why(w), "");
    Tensor g(DType::kI32, {2, 64});
    for (int i = 0; i < 128; ++i) g.data_mut<int32_t>()[i] = (i % 64) / 32;
    w.w13.g_idx = g;
    EXPECT_NE(why(w).find("g_idx"), std::string::npos) << why(w);
  }
  {  // fp32 activations
    ref::SchemeSpec s;
    s.kind = SchemeKind::kNVFP4A16;
    s.group_size = 16;
    s.act_dtype = DType::kF32;
    ExpertWeights w = make_weights(s, 2, 64, 32, 4);
    EXPECT_NE(why(w).find("activation dtype"), std::string::npos) << why(w);
  }
  EXPECT_TRUE(cuda::q_scheme(SchemeKind::kNVFP4));
  EXPECT_FALSE(cuda::q_scheme(SchemeKind::kWNA16));
}

// ---- bench rows of these schemes (device timing; runs only with QMOE_Q_BENCH=1) ----
TEST(CudaQBench, Rows) {
  SKIP_WITHOUT_GPU();
  if (std::getenv("QMOE_Q_BENCH") == nullptr) GTEST_SKIP() << "set QMOE_Q_BENCH=1 to print backend II bench rows";
  struct S { const char* name; int E, k, H, I; Activation act; bool on_input; };
  const S shapes[] = {{"llama4-scout", 16, 1, 5120, 8192, Activation::kSiluMul, true},
                      {"gpt-oss-120b", 128, 4, 2880, 2880, Activation::kSwigluOai, false},
                      {"mixtral-8x7b", 8, 2, 4096, 14336, Activation::kSiluMul, false}};
  struct Sch { const char* name; SchemeKind kind; int group; };
  const Sch schemes[] = {{"nvfp4a16", SchemeKind::kNVFP4A16, 16}, {"nvfp4", SchemeKind::kNVFP4, 16},
                         {"mxfp4a16", SchemeKind::kMXFP4A16, 32}, {"int8_w8a8", SchemeKind::kINT8W8A8, 0},
                         {"w4a8_fp8_g128", SchemeKind::kW4A8FP8, 128}, {"w4a8_int8_g128", SchemeKind::kW4A8INT8, 128}};
  detail::DeviceCeilings c = detail::cuda_measure_ceilings(0);
  std::printf("ceilings: read %.2f TB/s copy %.2f TB/s bf16 %.0f TFLOP/s fp8 %.0f TFLOP/s (%s)\n", c.read_tbps,
              c.copy_tbps, c.bf16_tflops, c.fp8_tflops, c.device.c_str());
  std::printf("| shape | scheme | M | us | TB/s | TFLOP/s | floor us | %% floor | kernel |\n");
  for (const S& sh : shapes)
    for (const Sch& sc : schemes) {
      if (std::string(sh.name) == "gpt-oss-120b" && sc.kind != SchemeKind::kMXFP4A16) continue;
      if (std::string(sh.name) == "mixtral-8x7b" && sc.kind == SchemeKind::kMXFP4A16) continue;
      ref::SchemeSpec spec;
      spec.kind = sc.kind;
      spec.group_size = sc.group;
      for (int m : {1, 16, 64, 256, 1024, 4096}) {
        detail::BenchProblem p;
        p.shape = sh.name;
        p.num_experts = sh.E; p.top_k = sh.k; p.hidden = sh.H; p.intermediate = sh.I;
        p.m = m;
        p.scheme = ref::make_scheme(spec);
        p.group_size = sc.group;
        p.activation = sh.act;
        p.apply_router_weight_on_input = sh.on_input;
        detail::BenchResult r = detail::cuda_bench(p, 5, 20, 0);
        const double flops = 6.0 * m * sh.k * sh.H * sh.I;
        const double rate = sc.kind == SchemeKind::kNVFP4 || sc.kind == SchemeKind::kNVFP4A16 ||
                                    sc.kind == SchemeKind::kMXFP4A16 || sc.kind == SchemeKind::kW4A8FP8 ||
                                    sc.kind == SchemeKind::kW4A8INT8 || sc.kind == SchemeKind::kINT8W8A8
                                ? c.bf16_tflops  // these run bf16 MMA operands
                                : c.fp8_tflops;
        const double floor_us = std::max((r.weight_bytes + r.io_bytes) / (c.copy_tbps * 1e12) * 1e6,
                                         flops / (rate * 1e12) * 1e6);
        std::printf("| %s | %s | %d | %.1f | %.2f | %.1f | %.1f | %.0f%% | %s |\n", sh.name, sc.name, m, r.us,
                    (r.weight_bytes + r.io_bytes) / (r.us * 1e-6) / 1e12, flops / (r.us * 1e-6) / 1e12, floor_us,
                    100.0 * floor_us / r.us, r.kernel.c_str());
      }
    }
}

}  // namespace
}  // namespace qmoe
#else
// A build without nvcc has no CUDA backend: the suite reports itself skipped.
#include <gtest/gtest.h>
TEST(CudaQ, NoCudaBuild) { GTEST_SKIP() << "no CUDA device: skipped (this build has no CUDA backend)"; }
#endif
