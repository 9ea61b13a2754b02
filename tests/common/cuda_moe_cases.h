// Header-only helpers shared by the CUDA MoE tests (tests/cuda), on top of moe_cases.h: the no-GPU
// skip, host-to-device upload, the raw device entry run on host inputs with poisoned output and
// workspace, and the rms-scaled all-elements comparison (each test file explains its tolerances). Included only by CUDA builds' test sources (the includer guards on QMOE_HAVE_CUDA).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/moe_cases.h"
#include "common/tensor_check.h"
#include "cuda/cuda_moe.h"

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    std::string why_;                                               \
    if (!::qmoe::cuda::device_present(&why_))                       \
      GTEST_SKIP() << "no CUDA device: skipped (" << why_ << ")";   \
  } while (0)

namespace qmoe::test {

// Environment switches (QMOE_CUDA_*) for one scope: each set() sets a variable, and every variable
// set through it is unset when the scope ends (the tests start from an unset environment).
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const char* name, const char* value) { set(name, value); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const std::string& n : names_) unsetenv(n.c_str());
  }
  void set(const char* name, const char* value) {
    setenv(name, value, 1);
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.emplace_back(name);
  }

 private:
  std::vector<std::string> names_;
};

// A device copy of n host bytes (16 spare bytes, so n = 0 still gives a valid pointer).
inline cuda::DevBuf up(const void* p, size_t n) {
  cuda::DevBuf b(n + 16);
  if (n) cudaMemcpy(b.ptr, p, n, cudaMemcpyHostToDevice);
  return b;
}

// The layer every scheme sweep of tests/cuda runs: E = 12 experts (not a power of two), top-4,
// H = 776 (K of GEMM1 not a multiple of 64, N of GEMM2 not a multiple of 16), I = 200, SiLU-mul;
// the scheme's weights from `seed`, prepared for the device.
struct SweepLayer {
  static constexpr int E = 12, k = 4, H = 776, I = 200;
  ExpertWeights w;
  cuda::DevExperts ex;
  MoeConfig cfg;
};
inline SweepLayer sweep_layer(const ref::SchemeSpec& spec, uint64_t seed) {
  SweepLayer l;
  l.w = make_weights(spec, SweepLayer::E, SweepLayer::H, SweepLayer::I, seed);
  l.ex = cuda::prepare(l.w, Activation::kSiluMul);
  l.cfg = config(SweepLayer::E, SweepLayer::k);
  return l;
}

// The device entry on host inputs, output and workspace poisoned (0xFF bytes = NaN), so a stale
// workspace or an unwritten output element fails the comparison.
inline Tensor run_device(const cuda::DevExperts& ex, const cuda::DevExperts* sh, const Tensor& x, const Routing& r,
                         bool on_input, const std::vector<int32_t>& emap = {}) {
  const int64_t m = x.size(0);
  const int k = static_cast<int>(r.ids.size(1));
  cuda::DevBuf dx = up(x.raw(), x.nbytes()), dw = up(r.w.raw(), r.w.nbytes()),
               di = up(r.ids.raw(), r.ids.nbytes());
  cuda::DevBuf dm = emap.empty() ? cuda::DevBuf() : up(emap.data(), emap.size() * 4);
  cuda::DevBuf dy(static_cast<size_t>(m) * ex.hidden * 2 + 16);
  cudaMemset(dy.ptr, 0xFF, dy.bytes);
  cuda::Workspace ws;
  ws.reserve(cuda::workspace_bytes(ex, sh, m, k, 0));
  cudaMemset(ws.buf.ptr, 0xFF, ws.bytes);
  cuda::ForwardArgs a;
  a.x = dx.ptr; a.topk_w = dw.as<float>(); a.topk_ids = di.as<int32_t>(); a.y = dy.ptr;
  a.m = m; a.top_k = k; a.expert_map = emap.empty() ? nullptr : dm.as<int32_t>(); a.weight_on_input = on_input;
  cuda::forward(ex, sh, a, ws.buf.ptr, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Tensor y(ex.act, {m, ex.hidden});
  cudaMemcpy(y.raw_mut(), dy.ptr, y.nbytes(), cudaMemcpyDeviceToHost);
  return y;
}

// Every element within atol = c * rms(want) plus 2 half-ulps of want's dtype relative (the output's
// own rounding), and the whole-output NMSE <= nmse. require_nonzero: an all-zero reference fails
// (a test on it would prove nothing).
inline void expect_close_rms(const Tensor& got, const Tensor& want, double c, double nmse, const std::string& what,
                             bool require_nonzero) {
  std::vector<double> wv = values(want);
  double ss = 0;
  for (double v : wv) ss += v * v;
  const double rms = std::sqrt(ss / std::max<size_t>(1, wv.size()));
  if (require_nonzero) {
    ASSERT_GT(rms, 0.0) << what << ": the reference output is all zeros (the test would prove nothing)";
  }
  CompareResult r = compare(got, wv, c * rms, 2 * half_ulp_rel(want.dtype()));
  EXPECT_TRUE(r.ok) << r.report(what);
  EXPECT_LE(r.nmse, nmse) << what << ": NMSE " << r.nmse;
}

}  // namespace qmoe::test
