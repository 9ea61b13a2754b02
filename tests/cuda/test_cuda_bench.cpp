// The anchor benchmark through the bench hooks (dispatch/bench_hooks.h), runnable without the CLI:
// set QMOE_GPU_BENCH=1 (and optionally QMOE_BENCH_OUT=file.jsonl). Rows: the five anchor shapes x
// M in {1, 16, 64, 256, 1024, 4096} x {bf16, fp8 channel/token, int4 g128 sym}; ceilings measured
// in the same run; floor = max(bytes / read rate, 6 M k H I / matrix rate) as anchors.md defines
// it; ratio = the peer's µs (anchors.md) / ours. Prints one markdown table. Without a GPU or the
// variable it skips.
#if defined(QMOE_HAVE_CUDA)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>

#include "dispatch/bench_hooks.h"

namespace qmoe::detail {
namespace {

struct Shape {
  const char* name;
  int E, k, H, I;
  Activation act;
  bool on_input;
};
const Shape kShapes[] = {{"llama4-scout", 16, 1, 5120, 8192, Activation::kSiluMul, true},
                         {"mixtral-8x7b", 8, 2, 4096, 14336, Activation::kSiluMul, false},
                         {"qwen3-30b-a3b", 128, 8, 2048, 768, Activation::kSiluMul, false},
                         {"deepseek-v3", 256, 8, 7168, 2048, Activation::kSiluMul, false},
                         {"gpt-oss-120b", 128, 4, 2880, 2880, Activation::kSwigluOai, false}};
const int kMs[] = {1, 16, 64, 256, 1024, 4096};
// anchors.md peer figures (µs): bf16 vLLM, fp8 vLLM tuned, int4 vLLM-Triton; [shape][m]
const double kPeer[3][5][6] = {
    {{111, 702, 1471, 1569, 2045, 4505}, {183, 645, 656, 723, 1502, 5034}, {34.4, 198, 299, 331, 392, 744},
     {199, 2082, 4374, 5200, 8807, 15286}, {70.8, 616, 1294, 2333, 2697, 4055}},
    {{58.8, 340, 466, 510, 621, 1324}, {114, 342, 354, 409, 871, 2932}, {30.6, 116, 168, 188, 249, 568},
     {103, 1023, 2154, 2600, 2791, 4549}, {47.6, 321, 656, 867, 956, 1495}},
    {{304, 2570, 2303, 2315, 3289, 9540}, {1092, 2870, 1577, 2420, 6944, 24478}, {85.3, 668, 672, 703, 1006, 2960},
     {626, 7407, 10403, 12006, 12168, 29054}, {288, 2464, 3122, 3657, 3694, 8652}}};

MoeScheme scheme_of(int s) {
  MoeScheme m;
  if (s == 1) {
    m.kind = SchemeKind::kFP8W8A8;
    m.weights.num_bits = 8;
    m.weights.type = QuantType::kFloat;
    m.weights.strategy = Strategy::kChannel;
    m.act = ActQuant::kFP8Token;
  } else if (s == 2) {
    m.kind = SchemeKind::kWNA16;
    m.weights.num_bits = 4;
    m.weights.strategy = Strategy::kGroup;
    m.weights.group_size = 128;
  }
  return m;
}

// One custom row, QMOE_BENCH_CUSTOM="E,top_k,H,I,M,scheme" (scheme 0 bf16, 1 fp8, 2 int4).
TEST(CudaBench, CustomRow) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: skipped (" << why << ")";
  const char* spec = std::getenv("QMOE_BENCH_CUSTOM");
  if (spec == nullptr) GTEST_SKIP() << "set QMOE_BENCH_CUSTOM=E,top_k,H,I,M,scheme to time one row";
  BenchProblem p;
  int sc = 0, m = 1;
  ASSERT_EQ(std::sscanf(spec, "%d,%d,%d,%d,%d,%d", &p.num_experts, &p.top_k, &p.hidden, &p.intermediate, &m, &sc), 6);
  p.m = m;
  p.shape = spec;
  p.scheme = scheme_of(sc);
  p.group_size = sc == 2 ? 128 : 0;
  BenchResult r = cuda_bench(p, 3, 10, 0);
  std::printf("custom %s: %.1f us (%s)\n", spec, r.us, r.kernel.c_str());
}

TEST(CudaBench, AnchorRows) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: skipped (" << why << ")";
  if (std::getenv("QMOE_GPU_BENCH") == nullptr) GTEST_SKIP() << "set QMOE_GPU_BENCH=1 to run the anchor benchmark";
  // QMOE_BENCH_CEIL="read_tbps,bf16_tflops,fp8_tflops" reuses ceilings measured by an earlier
  // process (rows run in separate processes); otherwise they are measured here.
  DeviceCeilings c;
  if (const char* ce = std::getenv("QMOE_BENCH_CEIL")) {
    ASSERT_EQ(std::sscanf(ce, "%lf,%lf,%lf", &c.read_tbps, &c.bf16_tflops, &c.fp8_tflops), 3);
    c.device = "ceilings from QMOE_BENCH_CEIL";
  } else {
    c = cuda_measure_ceilings(0);
  }
  std::printf("ceilings: %s: read %.2f TB/s, copy %.2f TB/s, bf16 %.0f TFLOP/s, fp8 %.0f TFLOP/s\n", c.device.c_str(),
              c.read_tbps, c.copy_tbps, c.bf16_tflops, c.fp8_tflops);
  const char* out = std::getenv("QMOE_BENCH_OUT");
  std::ofstream js;
  if (out) js.open(out, std::ios::app);  // rows from several processes collect in one file
  const char* only = std::getenv("QMOE_BENCH_SCHEMES");  // e.g. "0,1,2"
  const char* shape_only = std::getenv("QMOE_BENCH_SHAPES");  // substring match, e.g. "qwen3"
  const char* m_only = std::getenv("QMOE_BENCH_MS");          // e.g. ",1,4096,"
  std::printf("| shape | M | scheme | µs | TB/s | TFLOP/s | floor µs | %% floor | peer µs | peer/qmoe | kernels |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  const char* names[] = {"bf16", "fp8", "int4"};
  for (int s = 0; s < 3; ++s) {
    if (only && !std::strchr(only, '0' + s)) continue;
    for (int si = 0; si < 5; ++si) {
      const Shape& sh = kShapes[si];
      if (shape_only && !std::strstr(sh.name, shape_only)) continue;
      for (int mi = 0; mi < 6; ++mi) {
        if (m_only && !std::strstr(m_only, (std::string(",") + std::to_string(kMs[mi]) + ",").c_str())) continue;
        BenchProblem p;
        p.shape = sh.name;
        p.num_experts = sh.E; p.top_k = sh.k; p.hidden = sh.H; p.intermediate = sh.I;
        p.m = kMs[mi];
        p.scheme = scheme_of(s);
        p.group_size = s == 2 ? 128 : 0;
        p.activation = sh.act;
        p.apply_router_weight_on_input = sh.on_input;
        p.seed = 1 + si * 10 + mi;
        BenchResult r;
        try {
          r = cuda_bench(p, 5, 25, 0);
        } catch (const std::exception& e) {
          ADD_FAILURE() << sh.name << " M=" << p.m << " " << names[s] << ": " << e.what();
          std::printf("| %s | %d | %s | error: %s |\n", sh.name, p.m, names[s], e.what());
          if (std::strstr(e.what(), "CUDA error")) return;  // the context is gone
          continue;
        }
        const double flops = 6.0 * p.m * sh.k * sh.H * sh.I;
        const double rate = (s == 1 ? c.fp8_tflops : c.bf16_tflops) * 1e12;
        const double bytes = r.weight_bytes + r.io_bytes;
        const double floor_us = std::max(bytes / (c.read_tbps * 1e12), flops / rate) * 1e6;
        const double peer = kPeer[s][si][mi];
        std::printf("| %s | %d | %s | %.1f | %.2f | %.0f | %.1f | %.0f | %.1f | %.2f | %s |\n", sh.name, p.m, names[s],
                    r.us, bytes / (r.us * 1e-6) / 1e12, flops / (r.us * 1e-6) / 1e12, floor_us, 100 * floor_us / r.us,
                    peer, peer / r.us, r.kernel.c_str());
        std::fflush(stdout);
        if (js)
          js << "{\"shape\":\"" << sh.name << "\",\"m\":" << p.m << ",\"scheme\":\"" << names[s]
             << "\",\"backend\":\"cuda\",\"us\":" << r.us << ",\"us_min\":" << r.us_min
             << ",\"tbps\":" << bytes / (r.us * 1e-6) / 1e12 << ",\"tflops\":" << flops / (r.us * 1e-6) / 1e12
             << ",\"floor_us\":" << floor_us << ",\"pct_floor\":" << 100 * floor_us / r.us << ",\"peer_us\":" << peer
             << ",\"kernel\":\"" << r.kernel << "\"}\n";
        EXPECT_GT(r.us, 0);
      }
    }
  }
}

}  // namespace
}  // namespace qmoe::detail
#else
// A build without nvcc has no CUDA backend: the suite reports itself skipped.
#include <gtest/gtest.h>
TEST(CudaBench, NoCudaBuild) { GTEST_SKIP() << "no CUDA device: skipped (this build has no CUDA backend)"; }
#endif
