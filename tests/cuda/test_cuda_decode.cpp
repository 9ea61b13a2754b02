// The CUDA decode kernel (src/cuda/moe_decode.cu) against the reference (src/cpu/ref): every
// weight format / GEMM mode it runs, at M = 1, 2, 3, 5, 8, on odd sizes (K not a multiple of 64,
// N not a multiple of 16), with experts that get no tokens, experts with more rows than one
// 8-row M-block, K long enough to be split over the grid (GEMM1 partial sums + act_finish, GEMM2
// atomics with the bias added once), expert parallelism, Llama 4 weight-on-input with a shared
// expert, and biased swigluoai / gelu. Each case also asserts that forward() really chose the
// decode kernel (forward_kernels), unless QMOE_CUDA_DECODE=0 turns it off. GPU tests skip with
// "no CUDA device: skipped" where there is no GPU.
// Tolerances: the decode kernel computes the same function as moe_gemm.cu / moe_gemm_fp4.cu (exact
// operands, per-chunk fp32 partial sums each scaled once; only the fp32 summation order differs),
// so the checks are test_cuda_moe.cpp's and test_cuda_q.cpp's, for the reasons given there:
//  * 16-bit / WNA16: atol 2^-6 rms(y) (a flipped bf16 rounding of h), NMSE <= 1e-5;
//  * fp8 W8A8: h requantized to e4m3 (a flip moves a code by 2^-4): atol 2^-4 rms(y), NMSE <= 1e-4;
//  * NVFP4 / MXFP4 A16: atol 2^-8 rms(y), NMSE <= 1e-5 (as test_cuda_q.cpp: exact fp4 products);
//  * INT8 W8A8 / W4A8: atol 2^-5 rms(y), NMSE <= 1e-4; NVFP4 W4A4: atol 2^-3 rms(y), NMSE <= 1e-4;
// plus 2 half-ulps of the output dtype relative, on every element (expect_close_rms).
#if defined(QMOE_HAVE_CUDA)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_moe_cases.h"
#include "common/tensor_check.h"
#include "cpu/ref/quantize.h"
#include "cpu/ref/reference.h"
#include "cuda/cuda_moe.h"

namespace qmoe {
namespace {

using test::Case;
using test::Routing;
using test::config;
using test::make_weights;
using test::random_routing;
using test::run_device;

struct Tol {
  double c = std::ldexp(1.0, -6), nmse = 1e-5;
};
Tol tol_for(const ExpertWeights& w) {
  switch (w.scheme.kind) {
    case SchemeKind::kFP8W8A8: return {std::ldexp(1.0, -4), 1e-4};
    case SchemeKind::kNVFP4A16: case SchemeKind::kMXFP4A16: return {std::ldexp(1.0, -8), 1e-5};
    case SchemeKind::kNVFP4: return {std::ldexp(1.0, -3), 1e-4};
    case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8FP8: case SchemeKind::kW4A8INT8:
      return {std::ldexp(1.0, -5), 1e-4};
    default: return {};
  }
}

bool decode_off() {
  const char* v = std::getenv("QMOE_CUDA_DECODE");
  return v != nullptr && std::string(v) == "0";
}

// The K splits forward_kernels reports for the GEMM whose kernel name starts with `prefix`.
std::string split_of(const std::string& kern, const std::string& prefix) {
  const size_t p = kern.find(prefix);
  if (p == std::string::npos) return "";
  const size_t q = kern.find("/split", p);
  if (q == std::string::npos) return "";
  const size_t end = kern.find(' ', q);
  return kern.substr(q + 6, end == std::string::npos ? std::string::npos : end - q - 6);
}

// forward() must have picked the decode kernel for both GEMMs.
void expect_decode(const cuda::DevExperts& ex, int64_t m, int k, const std::string& what) {
  if (decode_off()) return;
  // 16-bit weights decode on the sm_90 bulk kernel only (else the 16-row tile)
  if (ex.fmt == cuda::WFmt::k16 && !cuda::decode90_available()) return;
  const std::string kern = cuda::forward_kernels(ex, m, k);
  EXPECT_NE(kern.find("gemm1=decode"), std::string::npos) << what << ": " << kern;
  EXPECT_NE(kern.find("gemm2=decode"), std::string::npos) << what << ": " << kern;
}

void check(const cuda::DevExperts& ex, const ExpertWeights& w, const cuda::DevExperts* dsh, const ExpertWeights* sh,
           const MoeConfig& cfg, const Tensor& x, const Routing& r, bool on_input, const std::string& what,
           const std::vector<int32_t>& emap = {}, bool want_decode = true) {
  const int k = static_cast<int>(r.ids.size(1));
  if (want_decode) expect_decode(ex, x.size(0), k, what);
  Tensor want = ref::reference_forward_routed(w, cfg, sh, x, r.w, r.ids);
  Tensor got = run_device(ex, dsh, x, r, on_input, emap);
  const Tol t = tol_for(w);
  test::expect_close_rms(got, want, t.c, t.nmse, str(what, " (", cuda::forward_kernels(ex, x.size(0), k), ")"),
                         /*require_nonzero=*/true);
}

std::vector<Case> decode_schemes() {
  std::vector<Case> v;
  auto add = [&](std::string n, auto f) {
    ref::SchemeSpec s;
    f(s);
    v.push_back({std::move(n), s});
  };
  const DType hf = DType::kF16;
  // 16-bit weights (the sm_90 bulk kernel: each atom's words are the mma A fragment, reordered)
  add("bf16", [](auto& s) { s.kind = SchemeKind::kUnquantized; s.act_dtype = DType::kBF16; });
  add("fp16", [&](auto& s) { s.kind = SchemeKind::kUnquantized; s.act_dtype = hf; s.weight_dtype = hf; });
  // int4 / int8: per-chunk scales with chunks of 2 atoms (g128), 1 atom (g64 int4), half an atom
  // (g32 int4, flushed inside the atom), one atom (g32 int8) and whole K (channel)
  add("int4_g128_sym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; });
  add("int4_g64_asym_fp16", [&](auto& s) {
    s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 64; s.symmetric = false; s.act_dtype = hf;
    s.scale_dtype = hf; });
  add("int4_g32_asym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 32; s.symmetric = false; });
  add("int4_channel_sym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 0; });
  add("int8_g128_asym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 128; s.symmetric = false; });
  add("int8_g32_sym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 32; });
  // groups of 48 columns: chunks that straddle the sm_90 kernel's 128-column slabs (the register-ring
  // kernel runs them; chunk ends tracked by absolute column, K tails inside a group)
  add("int4_g48_asym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 48; s.symmetric = false; });
  add("int8_g48_sym", [](auto& s) { s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 48; });
  add("int8_channel_asym_f32scale", [](auto& s) {
    s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 0; s.symmetric = false; s.scale_dtype = DType::kF32; });
  // fp8: mode 3 (one scale pair for K) and mode 1 (1x128 activation groups, 128-column blocks); the
  // weight-only ones (ActQuant::kNone) run the same modes on 16-bit activations
  auto fp8 = [&](const char* n, Strategy ws, ActQuant a, DType act) {
    add(n, [&](auto& s) {
      s.kind = a == ActQuant::kNone ? SchemeKind::kFP8A16 : SchemeKind::kFP8W8A8;
      s.fp8_strategy = ws; s.act = a; s.act_dtype = act; s.block = {8, 128};
    });
  };
  fp8("fp8_tensor_static", Strategy::kTensor, ActQuant::kFP8Tensor, DType::kBF16);
  fp8("fp8_channel_token", Strategy::kChannel, ActQuant::kFP8Token, DType::kBF16);
  fp8("fp8_channel_token_fp16", Strategy::kChannel, ActQuant::kFP8Token, hf);
  fp8("fp8_channel_group128", Strategy::kChannel, ActQuant::kFP8Group128, DType::kBF16);
  fp8("fp8_block_token", Strategy::kBlock, ActQuant::kFP8Token, DType::kBF16);
  fp8("fp8_block_group128", Strategy::kBlock, ActQuant::kFP8Group128, DType::kBF16);
  // FP8 weight-only: bf16 operands for a bf16 model (e4m3 -> fp16 -> fp32 -> bf16), fp16 for fp16
  fp8("fp8a16_channel", Strategy::kChannel, ActQuant::kNone, DType::kBF16);
  fp8("fp8a16_tensor_fp16", Strategy::kTensor, ActQuant::kNone, hf);
  fp8("fp8a16_block", Strategy::kBlock, ActQuant::kNone, DType::kBF16);
  // backend II: fp4 units, and int weights with quantized activations (row scales)
  auto q = [&](const char* n, SchemeKind k, DType act, int g, bool sym = true) {
    add(n, [&](auto& s) { s.kind = k; s.act_dtype = act; s.group_size = g; s.symmetric = sym; });
  };
  q("nvfp4a16", SchemeKind::kNVFP4A16, DType::kBF16, 16);
  q("nvfp4a16_fp16", SchemeKind::kNVFP4A16, hf, 16);
  q("nvfp4_w4a4", SchemeKind::kNVFP4, DType::kBF16, 16);
  q("mxfp4a16", SchemeKind::kMXFP4A16, DType::kBF16, 32);
  q("mxfp4a16_fp16", SchemeKind::kMXFP4A16, hf, 32);
  q("int8_w8a8", SchemeKind::kINT8W8A8, DType::kBF16, 0);
  q("w4a8_fp8_g128", SchemeKind::kW4A8FP8, DType::kBF16, 128);
  q("w4a8_int8_g64_asym", SchemeKind::kW4A8INT8, DType::kBF16, 64, false);
  return v;
}

// ---- every format / mode at M = 1, 2, 3, 5, 8; E = 12 (not a power of two), H = 776 (K of GEMM1
//      not a multiple of 64, N of GEMM2 not a multiple of 16), I = 200; top-4 ----
class DecodeSweep : public ::testing::TestWithParam<int> {};

TEST_P(DecodeSweep, MatchesReferenceAtSmallM) {
  SKIP_WITHOUT_GPU();
  const Case c = decode_schemes()[GetParam()];
  const test::SweepLayer l = test::sweep_layer(c.spec, 3000 + GetParam());
  const ExpertWeights& w = l.w;
  const cuda::DevExperts& ex = l.ex;
  const MoeConfig& cfg = l.cfg;
  const int E = l.E, k = l.k, H = l.H;
  uint64_t seed = 313 * GetParam();
  // INT8 W8A8 takes the Hopper path from 2 rows per expert (config.h select_sm90); keep its decode
  // kernels at M = 5 / 8 (2-3 rows) here (QMOE_CUDA_WGMMA_MIN_ROWS is read per plan)
  test::ScopedEnv int8_decode;
  if (w.scheme.kind == SchemeKind::kINT8W8A8) int8_decode.set("QMOE_CUDA_WGMMA_MIN_ROWS", "5");
  for (int64_t m : {1, 2, 3, 5, 8}) {
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, ++seed);
    Routing r = random_routing(m, k, E, ++seed);
    check(ex, w, nullptr, nullptr, cfg, x, r, false, str(c.name, " M=", m));
  }
  // expert 3 never chosen; every token on experts 5..8 (M = 12: 12 rows on each, two 8-row
  // M-blocks per expert, while the uniform estimate of 4 rows per expert still picks decode)
  for (int mode : {2, 1}) {
    const int64_t m = mode == 1 ? 12 : 5;
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, ++seed);
    Routing r = random_routing(m, k, E, ++seed, mode);
    check(ex, w, nullptr, nullptr, cfg, x, r, false, str(c.name, " routing mode ", mode, " M=", m));
  }
  // The sm_90 decode kernel walks several (M-block, 32-column tile) items per block on large
  // layers (its producer streams on into the next item, the next item's scales / zero points are
  // staged while the current one runs, an M-block change restages the rows); the layer above has
  // one item per block, so force about 3 (partial last walk included).
  {
    test::ScopedEnv tiles("QMOE_CUDA_DECODE90_TILES", "3");
    for (int64_t m : {1, 3, 8}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, ++seed);
      Routing r = random_routing(m, k, E, ++seed);
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str(c.name, " 3 items per block M=", m));
    }
  }
  // 5-7 rows per expert: int4 weights take 16-row M-blocks on the sm_90 bulk kernel (two n8 token
  // operands per weight fragment) wherever it runs this layer at M = 1, else (and other formats) the
  // 16-row mma.sync tile (from 8 rows the Hopper path's quantized-weight kernel: config.h
  // select_sm90). M = 16 / 21: ~6 / ~7 rows per expert (an expert may exceed 16: two M-blocks);
  // routing mode 1, M = 20: 20 rows on each of 4 experts (a full and a 4-row M-block); then about 3
  // items per block.
  const std::string k1 = cuda::forward_kernels(ex, 1, k);
  const bool r16 = !decode_off() && ex.fmt == cuda::WFmt::kU4 && k1.find("gemm1=decode90") != std::string::npos &&
                   k1.find("gemm2=decode90") != std::string::npos;
  test::ScopedEnv tiles;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) tiles.set("QMOE_CUDA_DECODE90_TILES", "3");
    for (int64_t m : {16, 21, 20}) {
      const int mode = m == 20 ? 1 : 0;
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, ++seed);
      Routing r = random_routing(m, k, E, ++seed, mode);
      const std::string kern = cuda::forward_kernels(ex, m, k);
      if (r16) {
        EXPECT_NE(kern.find("gemm1=decode90r16"), std::string::npos) << kern;
        EXPECT_NE(kern.find("gemm2=decode90r16"), std::string::npos) << kern;
      }
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str(c.name, " 16-row blocks pass ", pass, " M=", m), {}, false);
    }
  }
}
INSTANTIATE_TEST_SUITE_P(DecodeFormats, DecodeSweep, ::testing::Range(0, static_cast<int>(decode_schemes().size())),
                         [](const auto& info) { return decode_schemes()[info.param].name; });

// ---- GEMM2's K split by the balanced fill rule (config.h select_decode): E = 4, top-1, M = 1,
//      H = 5000 (157 column tiles), I = 3000 (47 k-tiles): the doubling rule splits in two (2 items of
//      24 k-tiles per block), the balanced one, for 4-bit weights, in three (2 items of 16); fp32
//      partials of three splits add atomically in a run-dependent order, so the reference decides
//      (both rules; fp8 / bf16 as the control: two splits either way) ----
TEST(CudaDecode, BalancedGemm2Splits) {
  SKIP_WITHOUT_GPU();
  if (decode_off()) GTEST_SKIP() << "decode kernels off (QMOE_CUDA_DECODE=0)";
  for (int kind = 0; kind < 4; ++kind) {
    ref::SchemeSpec s;
    std::string name;
    if (kind == 0) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; s.symmetric = false; name = "int4_g128_asym"; }
    if (kind == 1) { s.kind = SchemeKind::kNVFP4A16; s.group_size = 16; name = "nvfp4a16"; }
    if (kind == 2) {
      s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token; name = "fp8";
    }
    if (kind == 3) {  // 16-bit weights decode on the sm_90 bulk kernel only
      if (!cuda::decode90_available()) continue;
      s.kind = SchemeKind::kUnquantized; s.act_dtype = DType::kBF16; name = "bf16";
    }
    s.bias = kind != 3;
    const int E = 4, H = 5000, I = 3000;
    ExpertWeights w = make_weights(s, E, H, I, 880 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const MoeConfig cfg = config(E, 1, Activation::kSiluMul);
    Tensor x = test::random_tensor(w.act_dtype, {1, H}, 881 + kind);
    Routing r = random_routing(1, 1, E, 882 + kind);
    test::ScopedEnv env;
    // GEMM2's output zeroed by GEMM1 (the default) and by a memset (QMOE_CUDA_O_BY_GEMM1=0); each
    // forward's workspace is poisoned with NaN first (run_device), so an o not cleared fails
    for (const char* bal : {"1", "0", "1"}) {
      env.set("QMOE_CUDA_FILL_BALANCE", bal);
      env.set("QMOE_CUDA_O_BY_GEMM1", bal == std::string("0") ? "0" : "1");
      const std::string kern = cuda::forward_kernels(ex, 1, 1);
      if (kern.find("gemm2=decode") == std::string::npos) {
        ADD_FAILURE() << name << ": expected GEMM2 on a decode kernel: " << kern;
        continue;
      }
      // 16- and 8-bit weights keep the doubling rule (config.h select_decode)
      EXPECT_EQ(split_of(kern, "gemm2=decode"), bal[0] == '1' && kind < 2 ? "3" : "2") << name << ": " << kern;
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str("balanced splits ", name, " balance=", bal, " (", kern, ")"));
    }
  }
}

// ---- K split over the grid: GEMM1 K = 4360 > kDecodeMaxK (partial sums + act_finish) and GEMM2
//      K = 1032 split for grid fill at M = 1 (atomics, bias added by split 0 only); swigluoai ----
TEST(CudaDecode, GridSplitK) {
  SKIP_WITHOUT_GPU();
  for (int kind = 1; kind < 4; ++kind) {  // 16-bit weights do not run decode (config.h)
    ref::SchemeSpec s;
    s.bias = true;
    std::string name;
    if (kind == 1) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; name = "int4_g128"; }
    if (kind == 2) { s.kind = SchemeKind::kNVFP4A16; s.group_size = 16; name = "nvfp4a16"; }
    if (kind == 3) {
      s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token; name = "fp8";
    }
    // E = 2, top-1: at M = 1 GEMM2 has 137 column blocks, under 2 per SM -> split in two
    const int E = 2, H = 4360, I = 1032;
    ExpertWeights w = make_weights(s, E, H, I, 70 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSwigluOai);
    const MoeConfig cfg = config(E, 1, Activation::kSwigluOai);
    // M = 1 twice: on the sm_90 kernel with direct routing each M-block stages one row, so GEMM1
    // needs no split there (config.h kDecodeMaxK1); QMOE_CUDA_DIRECT=0 keeps align's 8-row
    // blocks and the split
    test::ScopedEnv env;
    const std::pair<int64_t, const char*> runs[] = {{1, "1"}, {3, "1"}, {1, "0"}};
    for (const auto& [m, direct] : runs) {
      env.set("QMOE_CUDA_DIRECT", direct);
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 71 + m + kind);
      Routing r = random_routing(m, 1, E, 72 + m + kind);
      const std::string kern = cuda::forward_kernels(ex, m, 1);
      if (!decode_off()) {
        const bool one_row = kern.find(" direct") != std::string::npos;
        EXPECT_EQ(split_of(kern, "gemm1=decode"), one_row ? "1" : "2") << kern;  // decode or decode90
        if (m == 1) EXPECT_EQ(split_of(kern, "gemm2=decode"), "2") << kern;
      }
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str("split-K ", name, " M=", m, " (", kern, ")"));
    }
  }
}

// ---- the bulk (sm_90) decode kernel at a K range whose staged rows (8 rows x K = 4096) would not
//      let two of its blocks share an SM: forward() splits GEMM1's K in two to keep it on the bulk
//      kernel (decode90_fit; partial sums + act_finish) instead of the register-ring one ----
TEST(CudaDecode, BulkKernelSplitsKToFit) {
  SKIP_WITHOUT_GPU();
  for (int kind = 0; kind < 3; ++kind) {
    ref::SchemeSpec s;
    std::string name;
    if (kind == 0) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; name = "int4_g128"; }
    if (kind == 1) {
      s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token; name = "fp8";
    }
    if (kind == 2) { s.kind = SchemeKind::kMXFP4A16; s.group_size = 32; name = "mxfp4a16"; }
    const int E = 4, H = 4096, I = 264;
    ExpertWeights w = make_weights(s, E, H, I, 110 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const MoeConfig cfg = config(E, 2);
    for (int64_t m : {8, 5}) {  // 16 / 10 slots on 4 experts: up to 8 rows per M-block
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 111 + m + kind);
      Routing r = random_routing(m, 2, E, 112 + m + kind);
      const std::string kern = cuda::forward_kernels(ex, m, 2);
      const char* refit = std::getenv("QMOE_CUDA_DECODE90_REFIT");
      const char* force = std::getenv("QMOE_CUDA_DECODE90");  // "2": the bulk kernel even at one block per SM
      // GEMM2 (K = 264) takes the bulk kernel wherever it is available; then GEMM1 must too
      if (!decode_off() && kern.find("gemm2=decode90") != std::string::npos && !(refit && refit[0] == '0') &&
          !(force && force[0] == '2')) {
        EXPECT_NE(kern.find("gemm1=decode90"), std::string::npos) << kern;
        // int4 g128 stages 32 chunks' column scales on top of the rows: only a split fits two
        // blocks (fp8 with one scale pair and MXFP4 fit unsplit)
        if (kind == 0) EXPECT_EQ(split_of(kern, "gemm1=decode"), "2") << kern;
      }
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str("bulk K split ", name, " M=", m));
    }
  }
}

// ---- the bulk (sm_90) decode kernel's balanced slabs (config.h dec90_balance): where blocks walk
//      several items, GEMM2 K = 744 (24 fp8 / int8 atoms of 32 columns per column) runs 3-atom slabs,
//      one stage per item with every warp busy, and fp8 GEMM1 K = 1800 (8 staged rows of 3.7 KB) gives
//      up the second reduction buffer for a third block per SM (16-bit weights keep it);
//      a launch with few items per block keeps 2-atom slabs. Passes: the grid's own items per block
//      (few on this small layer), then 4 per block (QMOE_CUDA_DECODE90_TILES: the longer slabs) ----
TEST(CudaDecode, BulkSlabsBalanceTheWarps) {
  SKIP_WITHOUT_GPU();
  const char* bal = std::getenv("QMOE_CUDA_DECODE90_BALANCE");
  const bool balanced = cuda::decode90_available() && !(bal != nullptr && bal[0] != '1');
  if (balanced) {
    // the plans this layer's GEMMs get (8 staged rows; K ranges of 12 and 29 k-tiles, one split)
    EXPECT_EQ(cuda::decode90_plan(cuda::WFmt::kFP8, 3, 1 << 30, 768, 12, 1, 8, false).slab_atoms, 3);
    EXPECT_EQ(cuda::decode90_plan(cuda::WFmt::kU8, 1, 1 << 30, 768, 12, 1, 8, false).slab_atoms, 3);
    const cuda::Decode90Plan g1 = cuda::decode90_plan(cuda::WFmt::kFP8, 3, 1 << 30, 1856, 29, 1, 8, false);
    EXPECT_EQ(g1.slab_atoms, 2);
    EXPECT_EQ(g1.red_bufs, 1);
    EXPECT_EQ(g1.stages, 2);  // a third stage would cost the third block
    EXPECT_LE(3 * (g1.smem + 1024), 228 * 1024);
    // 16-bit weights keep the second buffer (two blocks), and take a third stage that keeps them
    // (K = 2048: 128 atoms of 16 columns, 2-atom slabs already even)
    const cuda::Decode90Plan b1 = cuda::decode90_plan(cuda::WFmt::k16, 0, 1 << 30, 2048, 32, 1, 8, false);
    EXPECT_EQ(b1.slab_atoms, 2);
    EXPECT_EQ(b1.red_bufs, 2);
    EXPECT_EQ(b1.stages, 3);
    EXPECT_LE(2 * (b1.smem + 1024), 228 * 1024);
    EXPECT_EQ(cuda::decode90_plan(cuda::WFmt::k16, 0, 1 << 30, 1856, 29, 1, 8, false).red_bufs, 2);
    // int4 g128: chunks of 2 atoms; 12 atoms take 2-atom slabs as before
    EXPECT_EQ(cuda::decode90_plan(cuda::WFmt::kU4, 1, 128, 768, 12, 2, 8, false).slab_atoms, 2);
  }
  for (int kind = 0; kind < 3; ++kind) {
    ref::SchemeSpec s;
    std::string name;
    if (kind == 0) {
      s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token; name = "fp8";
    }
    if (kind == 1) { s.kind = SchemeKind::kUnquantized; s.act_dtype = DType::kBF16; name = "bf16"; }
    if (kind == 2) { s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 0; name = "int8_channel"; }
    const int E = 6, H = 1800, I = 744;
    ExpertWeights w = make_weights(s, E, H, I, 130 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const MoeConfig cfg = config(E, 2);
    test::ScopedEnv tiles;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) tiles.set("QMOE_CUDA_DECODE90_TILES", "4");
      for (int64_t m : {1, 5, 8}) {
        Tensor x = test::random_tensor(w.act_dtype, {m, H}, 131 + m + kind + 10 * pass);
        Routing r = random_routing(m, 2, E, 132 + m + kind + 10 * pass);
        const std::string kern = cuda::forward_kernels(ex, m, 2);
        if (balanced && !decode_off()) {
          EXPECT_NE(kern.find("gemm1=decode90"), std::string::npos) << kern;
          EXPECT_NE(kern.find("gemm2=decode90"), std::string::npos) << kern;
        }
        check(ex, w, nullptr, nullptr, cfg, x, r, false, str("balanced slabs ", name, " pass ", pass, " M=", m), {},
              kind != 1 || cuda::decode90_available());
      }
    }
  }
}


// ---- the bulk (sm_90) decode kernel's per-chunk scales / zero points from their item-contiguous
//      tables (DevProj::scale_t, one bulk copy per item) against its per-lane gathers
//      (QMOE_CUDA_D90_TILED_SCALES=0): bit-identical outputs (the same values reach the same
//      shared-memory slots), both within the reference's tolerance. int4 g128 / g32 (chunks that
//      end inside atoms) / g64 with zero points and fp16, int8 g128 with zero points, W4A8 int8 g64
//      with zero points; the sweep layer (K = 776: the last group ends in the padding; N = 776 and
//      2I = 400 not multiples of 32: rows past N in the last tile), one and about 3 items per block,
//      routing with an unused expert; then K split over the grid (g64 with zero points: GEMM1 K =
//      4360 split at M = 3, GEMM2 K = 1032 split at M = 1; each split's tables start at its first
//      group) ----
TEST(CudaDecode, TiledScalesMatchGathers) {
  SKIP_WITHOUT_GPU();
  if (!cuda::decode90_available() || decode_off()) GTEST_SKIP() << "the sm_90 bulk decode kernel does not run here";
  auto run_both = [&](const cuda::DevExperts& ex, const ExpertWeights& w, const MoeConfig& cfg, int64_t m, int k,
                      int E, int H, uint64_t seed, int mode, const std::string& what) {
    ASSERT_NE(ex.w13.scale_t.ptr, nullptr) << what << ": no tables were built";
    ASSERT_EQ(ex.w13.zero_t.ptr != nullptr, ex.w13.zero.ptr != nullptr) << what;
    const std::string kern = cuda::forward_kernels(ex, m, k);
    EXPECT_NE(kern.find("gemm1=decode90"), std::string::npos) << what << ": " << kern;
    EXPECT_NE(kern.find("gemm2=decode90"), std::string::npos) << what << ": " << kern;
    Tensor x = test::random_tensor(w.act_dtype, {m, H}, seed);
    Routing r = random_routing(m, k, E, seed + 1, mode);
    Tensor got[2];
    for (int t = 0; t < 2; ++t) {
      test::ScopedEnv env("QMOE_CUDA_D90_TILED_SCALES", t == 0 ? "0" : "1");
      got[t] = run_device(ex, nullptr, x, r, false);
    }
    ASSERT_EQ(got[0].nbytes(), got[1].nbytes());
    EXPECT_EQ(std::memcmp(got[0].raw(), got[1].raw(), got[0].nbytes()), 0)
        << what << ": tiled scales differ from the gathers (" << kern << ")";
    Tensor want = ref::reference_forward_routed(w, cfg, nullptr, x, r.w, r.ids);
    const Tol tl = tol_for(w);
    test::expect_close_rms(got[1], want, tl.c, tl.nmse, str(what, " (", kern, ")"), /*require_nonzero=*/true);
  };
  std::vector<Case> cases;
  for (const Case& c : decode_schemes())
    if (c.name == "int4_g128_sym" || c.name == "int4_g32_asym" || c.name == "int4_g64_asym_fp16" ||
        c.name == "int8_g128_asym" || c.name == "w4a8_int8_g64_asym")
      cases.push_back(c);
  ASSERT_EQ(cases.size(), 5u);
  uint64_t seed = 9100;
  for (const Case& c : cases) {
    const test::SweepLayer l = test::sweep_layer(c.spec, seed);
    for (int pass = 0; pass < 2; ++pass) {
      test::ScopedEnv tiles;
      if (pass == 1) tiles.set("QMOE_CUDA_DECODE90_TILES", "3");
      for (int64_t m : {1, 3}) {
        seed += 2;
        run_both(l.ex, l.w, l.cfg, m, l.k, l.E, l.H, seed, 0, str(c.name, " pass ", pass, " M=", m));
      }
      seed += 2;
      run_both(l.ex, l.w, l.cfg, 5, l.k, l.E, l.H, seed, 2, str(c.name, " pass ", pass, " expert 3 unused M=5"));
    }
  }
  ref::SchemeSpec s;
  s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 64; s.symmetric = false; s.bias = true;
  const int E = 2, H = 4360, I = 1032;
  ExpertWeights w = make_weights(s, E, H, I, 9300);
  cuda::DevExperts ex = cuda::prepare(w, Activation::kSwigluOai);
  const MoeConfig cfg = config(E, 1, Activation::kSwigluOai);
  test::ScopedEnv direct("QMOE_CUDA_DIRECT", "0");  // align's 8-row blocks: GEMM1 splits at M = 3
  for (int64_t m : {1, 3}) {
    const std::string kern = cuda::forward_kernels(ex, m, 1);
    const std::string sp = split_of(kern, m == 1 ? "gemm2=decode" : "gemm1=decode");
    EXPECT_TRUE(!sp.empty() && sp != "1") << kern;  // split (64-column groups: every split starts on one)
    run_both(ex, w, cfg, m, 1, E, H, 9301 + 2 * m, 0, str("int4_g64_asym split M=", m));
  }
}
// ---- expert parallelism (non-local experts skipped), Llama 4 weight-on-input + shared expert,
//      gelu with biases ----
TEST(CudaDecode, ExpertParallelLlama4AndBias) {
  SKIP_WITHOUT_GPU();
  for (int kind = 0; kind < 3; ++kind) {
    ref::SchemeSpec s;
    if (kind == 0) { s.kind = SchemeKind::kFP8W8A8; s.fp8_strategy = Strategy::kChannel; s.act = ActQuant::kFP8Token; }
    if (kind == 1) { s.kind = SchemeKind::kWNA16; s.bits = 4; s.group_size = 128; s.symmetric = false; }
    if (kind == 2) { s.kind = SchemeKind::kNVFP4; s.group_size = 16; }
    const int E = 7, H = 264, I = 136;
    ExpertWeights w = make_weights(s, E, H, I, 80 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    // 10 global experts, this rank holds 7 (global 2, 6, 9 elsewhere)
    std::vector<int32_t> emap = {0, 1, -1, 2, 3, 4, -1, 5, 6, -1};
    for (int64_t m : {1, 3, 8}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 81 + m);
      Routing r = random_routing(m, 2, 10, 82 + m);
      MoeConfig cfg = config(10, 2);
      cfg.expert_map = emap;
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str("EP kind ", kind, " M=", m), emap);
    }
    ExpertWeights sh = make_weights(s, 1, H, I, 90 + kind);
    cuda::DevExperts dsh = cuda::prepare(sh, Activation::kSiluMul);
    const MoeConfig cfg = config(E, 1, Activation::kSiluMul, true);
    for (int64_t m : {1, 2, 4}) {  // the shared expert (E = 1) holds all m rows: <= 4 for decode
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 91 + m);
      Routing r = random_routing(m, 1, E, 92 + m);
      expect_decode(dsh, m, 1, "shared expert");
      check(ex, w, &dsh, &sh, cfg, x, r, true, str("llama4 kind ", kind, " M=", m));
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    ref::SchemeSpec s;
    s.bias = true;
    if (kind == 0) { s.kind = SchemeKind::kWNA16; s.bits = 8; s.group_size = 64; }
    if (kind == 1) { s.kind = SchemeKind::kMXFP4A16; s.group_size = 32; }
    const int E = 9, H = 360, I = 360;
    ExpertWeights w = make_weights(s, E, H, I, 95 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kGeluMul);
    for (int64_t m : {1, 6}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, H}, 96 + m);
      Routing r = random_routing(m, 4, E, 97 + m);
      check(ex, w, nullptr, nullptr, config(E, 4, Activation::kGeluMul), x, r, false, str("gelu bias kind ", kind, " M=", m));
    }
  }
}

// ---- fp8 (one scale pair for K) GEMM2 on the bulk decode kernel quantizes h while staging it
//      (GemmParams::q_rows, with each row's maximum from GEMM1's epilogue, GemmParams::h_amax;
//      moe_forward.cu h_quant_in_gemm2) instead of an act_prep launch: the same arithmetic, so the
//      output must match the act_prep path bit for bit (QMOE_CUDA_H_QUANT_IN_GEMM2 = 0), and the
//      reference within tolerance. Per-token and static per-tensor activations, bf16 and fp16
//      models; one token (direct routing) at top-1 / top-8, 8-row M-blocks of 3 / 5 tokens, GEMM2
//      split over K in two, 12 tokens on 6 experts (M-blocks of several rows, each row's maximum over
//      I = 2056 from 257 GEMM1 warps), I = 8200, expert parallelism (static scales of another rank's
//      experts never read); twice in a row on the same workspace (the maxima cleared per forward) ----
TEST(CudaDecode, HQuantInGemm2MatchesActPrep) {
  SKIP_WITHOUT_GPU();
  if (!cuda::decode90_available() || decode_off()) GTEST_SKIP() << "needs the sm_90 bulk decode kernel (an sm_90 device, decode on)";
  struct Shape {
    int E, k, H, I;
    int64_t m;
  };
  const Shape shapes[] = {{12, 1, 776, 200, 1}, {40, 8, 776, 200, 1}, {12, 4, 776, 200, 3}, {12, 2, 776, 200, 5},
                          {2, 1, 4360, 1032, 1}, {6, 2, 520, 2056, 12}, {2, 1, 264, 8200, 1}};
  int ran = 0;
  for (int kind = 0; kind < 4; ++kind) {
    ref::SchemeSpec s;
    s.kind = SchemeKind::kFP8W8A8;
    s.fp8_strategy = kind < 2 ? Strategy::kChannel : Strategy::kTensor;
    s.act = kind < 2 ? ActQuant::kFP8Token : ActQuant::kFP8Tensor;
    s.act_dtype = kind % 2 == 0 ? DType::kBF16 : DType::kF16;
    const std::string name = str(kind < 2 ? "fp8_channel_token" : "fp8_tensor_static", kind % 2 == 0 ? "_bf16" : "_fp16");
    for (const Shape& sh : shapes) {
      ExpertWeights w = make_weights(s, sh.E, sh.H, sh.I, 140 + kind * 7 + sh.E + sh.I);
      cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
      const int64_t m = sh.m;
      Tensor x = test::random_tensor(w.act_dtype, {m, sh.H}, 141 + m + kind);
      Routing r = random_routing(m, sh.k, sh.E, 142 + m + kind);
      const std::string what = str(name, " E=", sh.E, " top-", sh.k, " H=", sh.H, " I=", sh.I, " M=", m);
      test::ScopedEnv env;
      env.set("QMOE_CUDA_H_QUANT_IN_GEMM2", "0");
      const std::string kern0 = cuda::forward_kernels(ex, m, sh.k);
      EXPECT_EQ(kern0.find("h-quant-in-gemm2"), std::string::npos) << what << ": " << kern0;
      Tensor y0 = run_device(ex, nullptr, x, r, false);
      env.set("QMOE_CUDA_H_QUANT_IN_GEMM2", "1");
      const std::string kern = cuda::forward_kernels(ex, m, sh.k);
      if (kern.find("gemm2=decode90") == std::string::npos) {
        ADD_FAILURE() << what << ": expected GEMM2 on the bulk decode kernel: " << kern;
        continue;
      }
      // GEMM1 split over K (partial sums, act_finish) keeps act_prep: its epilogue does not write h
      if (split_of(kern, "gemm1=decode") == "1") {
        EXPECT_NE(kern.find("h-quant-in-gemm2"), std::string::npos) << what << ": " << kern;
        ++ran;
      } else {
        EXPECT_EQ(kern.find("h-quant-in-gemm2"), std::string::npos) << what << ": " << kern;
      }
      if (sh.H == 4360) EXPECT_EQ(split_of(kern, "gemm2=decode"), "2") << what << ": " << kern;
      Tensor y1 = run_device(ex, nullptr, x, r, false);
      // more than two GEMM2 K splits add fp32 partials atomically in a run-dependent order: there
      // the reference decides, not bit identity
      const bool exact = split_of(kern, "gemm2=decode") == "1" || split_of(kern, "gemm2=decode") == "2";
      size_t diff = 0, first = y0.nbytes();
      // a second forward: its maxima start from zero again (a stale larger one would change s)
      Tensor x2 = test::random_tensor(w.act_dtype, {m, sh.H}, 143 + m + kind);
      Tensor y2 = run_device(ex, nullptr, x2, r, false);
      env.set("QMOE_CUDA_H_QUANT_IN_GEMM2", "0");
      Tensor y2_ref = run_device(ex, nullptr, x2, r, false);
      env.set("QMOE_CUDA_H_QUANT_IN_GEMM2", "1");
      if (exact) EXPECT_EQ(std::memcmp(y2.raw(), y2_ref.raw(), y2.nbytes()), 0) << what << ": the second forward differs";
      const auto* p0 = static_cast<const uint8_t*>(y0.raw());
      const auto* p1 = static_cast<const uint8_t*>(y1.raw());
      for (size_t i = 0; i < y0.nbytes(); ++i)
        if (p0[i] != p1[i]) {
          ++diff;
          if (first == y0.nbytes()) first = i;
        }
      if (exact) EXPECT_EQ(diff, 0u) << what << ": " << diff << " bytes differ from the act_prep path's output, first at byte "
                          << first << " (" << kern << ")";
      check(ex, w, nullptr, nullptr, config(sh.E, sh.k), x, r, false, what);
    }
    // expert parallelism: 10 global experts, this rank holds 7
    ExpertWeights w = make_weights(s, 7, 264, 136, 150 + kind);
    cuda::DevExperts ex = cuda::prepare(w, Activation::kSiluMul);
    const std::vector<int32_t> emap = {0, 1, -1, 2, 3, 4, -1, 5, 6, -1};
    for (int64_t m : {1, 3}) {
      Tensor x = test::random_tensor(w.act_dtype, {m, 264}, 151 + m);
      Routing r = random_routing(m, 2, 10, 152 + m);
      MoeConfig cfg = config(10, 2);
      cfg.expert_map = emap;
      test::ScopedEnv env("QMOE_CUDA_H_QUANT_IN_GEMM2", "0");
      Tensor y0 = run_device(ex, nullptr, x, r, false, emap);
      env.set("QMOE_CUDA_H_QUANT_IN_GEMM2", "1");
      Tensor y1 = run_device(ex, nullptr, x, r, false, emap);
      EXPECT_EQ(std::memcmp(y0.raw(), y1.raw(), y0.nbytes()), 0) << name << " EP M=" << m;
      check(ex, w, nullptr, nullptr, cfg, x, r, false, str(name, " EP M=", m), emap);
    }
  }
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace qmoe

#endif  // QMOE_HAVE_CUDA
