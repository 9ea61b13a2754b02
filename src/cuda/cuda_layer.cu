// MoeLayer on the CUDA backend: host tensors in, host tensors out. The experts are prepared once
// (cuda_moe.h: repacked on the device); each forward uploads x and the routing (or the logits,
// routed on the device), runs the fused layer on a private stream and downloads y.
#ifndef QMOE_HAVE_CUDA
#define QMOE_HAVE_CUDA 1  // declares the CUDA factory in dispatch/backends.h
#endif
#include <cuda_runtime.h>

#include "cuda/cuda_moe.h"
#include "cuda/device_common.cuh"
#include "dispatch/backends.h"
#include "dispatch/bench_hooks.h"

namespace qmoe::detail {
namespace {

using cuda::DevBuf;

class CudaLayer final : public MoeLayer {
 public:
  explicit CudaLayer(LayerArgs a) : cfg_(std::move(a.cfg)) {
    QMOE_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ex_ = cuda::prepare(a.weights, cfg_.activation);
    if (a.shared) {
      shared_ = std::make_unique<cuda::DevExperts>(cuda::prepare(*a.shared, cfg_.activation));
    }
    if (a.router_bias.defined()) {
      std::vector<float> b(static_cast<size_t>(a.router_bias.numel()));
      for (size_t i = 0; i < b.size(); ++i)
        b[i] = a.router_bias.dtype() == DType::kF32 ? a.router_bias.data<float>()[i]
                                                     : codec::bf16_to_f32(a.router_bias.data<uint16_t>()[i]);
      bias_ = up(b.data(), b.size() * 4);
    }
    if (!cfg_.expert_map.empty()) emap_ = up(cfg_.expert_map.data(), cfg_.expert_map.size() * 4);
    cuda::uploads_done();  // stream_ is non-blocking: not ordered after the uploads
  }
  ~CudaLayer() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Tensor forward(const Tensor& x, const Tensor& logits) override {
    check_x(x);
    QMOE_CHECK(logits.dim() == 2 && logits.size(0) == x.size(0) && logits.size(1) == cfg_.num_experts &&
                   logits.dtype() == DType::kF32,
               kBadInput, "CUDA MoE forward: router_logits must be F32 [", x.size(0), ", ", cfg_.num_experts,
               "], got ", dtype_name(logits.dtype()), " ", shape_str(logits.shape()));
    const int64_t m = x.size(0);
    const int k = cfg_.router.top_k;
    ensure(m);
    if (m > 0) {
      QMOE_CUDA_OK(cudaMemcpyAsync(logits_.ptr, logits.raw(), logits.nbytes(), cudaMemcpyHostToDevice, stream_));
      cuda::route_device(logits_.as<float>(), m, cfg_.num_experts, cfg_.router, bias_.as<float>(), tw_.as<float>(),
                         tid_.as<int32_t>(), stream_);
    }
    return run(x, k);
  }

  Tensor forward_routed(const Tensor& x, const Tensor& w, const Tensor& ids) override {
    check_x(x);
    const int64_t m = x.size(0);
    QMOE_CHECK(w.dim() == 2 && w.size(0) == m && w.dtype() == DType::kF32 && ids.dtype() == DType::kI32 &&
                   ids.shape() == w.shape(),
               kBadInput, "CUDA MoE forward_routed: topk_weights F32 [M, k] and topk_ids I32 [M, k] expected, got ",
               dtype_name(w.dtype()), " ", shape_str(w.shape()), " and ", dtype_name(ids.dtype()), " ",
               shape_str(ids.shape()));
    const int k = static_cast<int>(w.size(1));
    const int32_t* pid = ids.data<int32_t>();
    for (int64_t i = 0; i < ids.numel(); ++i)
      QMOE_CHECK(pid[i] >= 0 && pid[i] < cfg_.num_experts, kBadInput, "CUDA MoE forward_routed: topk_ids[", i,
                 "] = ", pid[i], " is outside [0, ", cfg_.num_experts, ")");
    ensure(m, k);
    if (m > 0) {
      QMOE_CUDA_OK(cudaMemcpyAsync(tw_.ptr, w.raw(), w.nbytes(), cudaMemcpyHostToDevice, stream_));
      QMOE_CUDA_OK(cudaMemcpyAsync(tid_.ptr, ids.raw(), ids.nbytes(), cudaMemcpyHostToDevice, stream_));
    }
    return run(x, k);
  }

  Backend backend() const override { return Backend::kCuda; }
  std::string method_name() const override { return ex_.method; }

 private:
  static DevBuf up(const void* p, size_t n) {
    DevBuf b(n);
    QMOE_CUDA_OK(cudaMemcpy(b.ptr, p, n, cudaMemcpyHostToDevice));
    return b;
  }
  void check_x(const Tensor& x) const {
    QMOE_CHECK(x.dim() == 2 && x.size(1) == ex_.hidden && x.dtype() == ex_.act, kBadInput,
               "CUDA MoE forward: x must be ", dtype_name(ex_.act), " [M, ", ex_.hidden, "], got ",
               dtype_name(x.dtype()), " ", shape_str(x.shape()));
  }
  void ensure(int64_t m, int k = -1) {
    if (k < 0) k = cfg_.router.top_k;
    const size_t slots = static_cast<size_t>(m) * k;
    auto grow = [](DevBuf& b, size_t n) {
      if (b.bytes < n) b = DevBuf(n);
    };
    grow(x_, static_cast<size_t>(m) * ex_.hidden * 2 + 16);
    grow(y_, static_cast<size_t>(m) * ex_.hidden * 2 + 16);
    grow(logits_, static_cast<size_t>(m) * cfg_.num_experts * 4 + 16);
    grow(tw_, slots * 4 + 16);
    grow(tid_, slots * 4 + 16);
    ws_.reserve(cuda::workspace_bytes(ex_, shared_.get(), m, k, cfg_.num_experts));
  }
  Tensor run(const Tensor& x, int k) {
    const int64_t m = x.size(0);
    Tensor y(ex_.act, {m, ex_.hidden});
    if (m == 0) return y;
    QMOE_CUDA_OK(cudaMemcpyAsync(x_.ptr, x.raw(), x.nbytes(), cudaMemcpyHostToDevice, stream_));
    cuda::ForwardArgs a;
    a.x = x_.ptr;
    a.topk_w = tw_.as<float>();
    a.topk_ids = tid_.as<int32_t>();
    a.y = y_.ptr;
    a.m = m;
    a.top_k = k;
    a.num_global_experts = cfg_.num_experts;
    a.expert_map = emap_.as<int32_t>();
    a.weight_on_input = cfg_.router.apply_router_weight_on_input;
    cuda::forward(ex_, shared_.get(), a, ws_.buf.ptr, stream_);
    QMOE_CUDA_OK(cudaMemcpyAsync(y.raw_mut(), y_.ptr, y.nbytes(), cudaMemcpyDeviceToHost, stream_));
    QMOE_CUDA_OK(cudaStreamSynchronize(stream_));
    return y;
  }

  MoeConfig cfg_;
  cudaStream_t stream_ = nullptr;
  cuda::DevExperts ex_;
  std::unique_ptr<cuda::DevExperts> shared_;
  DevBuf bias_, emap_, x_, y_, logits_, tw_, tid_;
  cuda::Workspace ws_;
};

}  // namespace

std::string cuda_can_implement(const LayerArgs& a) {
  std::string why;
  if (!cuda::device_present(&why)) return "no usable CUDA device (" + why + ")";
  why = cuda::can_prepare(a.weights);
  if (!why.empty()) return why;
  if (a.shared) {
    why = cuda::can_prepare(*a.shared);
    if (!why.empty()) return "shared expert: " + why;
    if (a.shared->num_experts != 1 || a.shared->hidden != a.weights.hidden || a.shared->act_dtype != a.weights.act_dtype)
      return "shared expert must have one expert with the routed experts' hidden size and activation dtype";
  }
  const RouterConfig& r = a.cfg.router;
  if (r.top_k < 1 || r.top_k > 32) return str("top_k ", r.top_k, " (1..32 supported)");
  if (r.kind == RouterKind::kGrouped && r.num_groups > 1 &&
      (r.num_groups > 32 || a.cfg.num_experts % r.num_groups != 0))
    return str("grouped router with ", r.num_groups, " groups over ", a.cfg.num_experts, " experts");
  if (a.cfg.num_experts > 4096) return str(a.cfg.num_experts, " experts (at most 4096)");
  if (a.weights.num_experts > 4000) return str(a.weights.num_experts, " local experts (at most 4000)");
  return "";
}

std::unique_ptr<MoeLayer> make_cuda_layer(LayerArgs a) { return std::make_unique<CudaLayer>(std::move(a)); }

// The CLI declares the bench hooks weak (a build without CUDA links); a weak reference does not
// pull bench.cu's object out of the static library, so this strong one (in the object every
// CUDA build links) does.
__attribute__((used)) static BenchResult (*const keep_bench_hooks)(const BenchProblem&, int, int, double) = &cuda_bench;

}  // namespace qmoe::detail
