// C ABI on the CUDA backend: a layer prepared with the raw-pointer API of src/cuda/cuda_moe.h, run
// on the caller's device tensors and stream (host tensors are staged through device buffers on the
// same stream). Workspace and routing buffers belong to the layer; when a call arrives on another
// stream than the previous one, it first waits for the previous call's event, so one layer can
// serve several streams without racing on its buffers. Without a CUDA build, layer creation fails
// with MoeLayer::create's own "no CUDA backend" error.
#include "c_api/c_api_internal.h"

#if defined(QMOE_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/codecs.h"

#include "cuda/cuda_moe.h"
#include "dispatch/backends.h"
#endif

namespace qmoe::capi {

#if defined(QMOE_HAVE_CUDA)

namespace {

void cuda_ok(cudaError_t e, const char* op) {
  if (e != cudaSuccess) fail(ErrorKind::kInternal, "CUDA layer: ", op, " failed: ", cudaGetErrorString(e));
}

struct DeviceScope {
  int prev = -1;
  explicit DeviceScope(int id) {
    cuda_ok(cudaGetDevice(&prev), "cudaGetDevice");
    if (prev != id) cuda_ok(cudaSetDevice(id), "cudaSetDevice");
  }
  ~DeviceScope() {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev) cudaSetDevice(prev);
  }
};

cuda::DevBuf upload(const void* p, size_t n) {
  cuda::DevBuf b(n);
  cuda_ok(cudaMemcpy(b.ptr, p, n, cudaMemcpyHostToDevice), "cudaMemcpy");
  return b;
}

void grow(cuda::DevBuf& b, size_t n) {
  if (b.bytes < n) b = cuda::DevBuf(n);
}

}  // namespace

struct CudaLayer {
  int device = 0;
  MoeConfig cfg;
  cuda::DevExperts ex;
  std::unique_ptr<cuda::DevExperts> shared;
  cuda::DevBuf bias, emap;
  cuda::DevBuf x_stage, y_stage, logits_stage, tw, tid;  // grown on demand
  cuda::Workspace ws;
  cudaEvent_t done = nullptr;     // recorded after each call on last_stream
  cudaStream_t last_stream = nullptr;
  bool used = false;

  ~CudaLayer() {
    // Buffers are freed next: wait for the last call that may still be reading them.
    if (done != nullptr) {
      if (used) cudaEventSynchronize(done);
      cudaEventDestroy(done);
    }
  }

  // Orders this call after the previous one when it ran on another stream (shared buffers).
  void begin(cudaStream_t s) {
    if (used && s != last_stream) cuda_ok(cudaStreamWaitEvent(s, done, 0), "cudaStreamWaitEvent");
  }
  void end(cudaStream_t s) {
    cuda_ok(cudaEventRecord(done, s), "cudaEventRecord");
    last_stream = s;
    used = true;
  }
};

void CudaLayerDeleter::operator()(CudaLayer* p) const {
  if (p == nullptr) return;
  int prev = -1;
  bool restore = cudaGetDevice(&prev) == cudaSuccess && prev != p->device;
  if (restore) cudaSetDevice(p->device);  // free on the device that owns the buffers
  delete p;
  if (restore) cudaSetDevice(prev);
}

CudaLayerPtr make_cuda_layer(ExpertWeights w, MoeConfig cfg, std::optional<ExpertWeights> shared, Tensor router_bias) {
  // The same checks and message as MoeLayer::create for the CUDA backend.
  w.validate("MoE layer");
  if (shared) shared->validate("shared expert");
  detail::LayerArgs a{std::move(w), std::move(cfg), std::move(shared), std::move(router_bias)};
  std::string why = detail::cuda_can_implement(a);
  if (!why.empty())
    unsupported("backend 'cuda' cannot run scheme ", a.weights.scheme.key(), ": ", why);

  CudaLayerPtr l(new CudaLayer);
  cuda_ok(cudaGetDevice(&l->device), "cudaGetDevice");  // prepared on the caller's current device
  l->cfg = std::move(a.cfg);
  l->ex = cuda::prepare(a.weights, l->cfg.activation);
  if (a.shared) l->shared = std::make_unique<cuda::DevExperts>(cuda::prepare(*a.shared, l->cfg.activation));
  if (a.router_bias.defined()) {
    std::vector<float> b(static_cast<size_t>(a.router_bias.numel()));
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = a.router_bias.dtype() == DType::kF32 ? a.router_bias.data<float>()[i]
                                                   : codec::bf16_to_f32(a.router_bias.data<uint16_t>()[i]);
    l->bias = upload(b.data(), b.size() * sizeof(float));
  }
  if (!l->cfg.expert_map.empty())
    l->emap = upload(l->cfg.expert_map.data(), l->cfg.expert_map.size() * sizeof(int32_t));
  cuda::uploads_done();  // the caller's streams may be non-blocking: every upload lands first
  cuda_ok(cudaEventCreateWithFlags(&l->done, cudaEventDisableTiming), "cudaEventCreate");
  return l;
}

std::string cuda_layer_method(const CudaLayer& l) { return l.ex.method; }

void cuda_layer_forward(CudaLayer& l, const TensorDesc& x, const TensorDesc* logits, const TensorDesc* w,
                        const TensorDesc* ids, const TensorDesc& y, void* stream) {
  for (const TensorDesc* t : {&x, logits, w, ids, &y})
    if (t != nullptr && t->cuda)
      QMOE_CHECK(t->device_id == l.device, kBadInput, "tensor on cuda:", t->device_id,
                 " but the layer was prepared on cuda:", l.device);
  if (ids != nullptr && !ids->cuda) {  // host ids are checked here; device ids cannot be without a sync
    const int32_t* p = static_cast<const int32_t*>(ids->data);
    for (int64_t i = 0, n = shape_numel(ids->shape); i < n; ++i)
      QMOE_CHECK(p[i] >= 0 && p[i] < l.cfg.num_experts, kBadInput, "topk_ids[", i, "] = ", p[i], " is outside [0, ",
                 l.cfg.num_experts, ")");
  }
  DeviceScope scope(l.device);
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t m = x.shape[0];
  const int k = l.cfg.router.top_k;
  const size_t slots = static_cast<size_t>(m) * k;
  l.begin(s);
  // Device pointer of each input: the caller's, or a staging copy of a host tensor on stream s.
  auto dev_in = [&](const TensorDesc& t, cuda::DevBuf& stage) -> const void* {
    if (t.cuda || t.nbytes() == 0) return t.data;
    grow(stage, t.nbytes());
    cuda_ok(cudaMemcpyAsync(stage.ptr, t.data, t.nbytes(), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    return stage.ptr;
  };
  const void* xp = dev_in(x, l.x_stage);
  const float* twp = nullptr;
  const int32_t* tidp = nullptr;
  if (logits != nullptr) {
    grow(l.tw, slots * sizeof(float) + 16);
    grow(l.tid, slots * sizeof(int32_t) + 16);
    const float* lp = static_cast<const float*>(dev_in(*logits, l.logits_stage));
    if (m > 0)
      cuda::route_device(lp, m, l.cfg.num_experts, l.cfg.router, l.bias.as<float>(), l.tw.as<float>(),
                         l.tid.as<int32_t>(), s);
    twp = l.tw.as<float>();
    tidp = l.tid.as<int32_t>();
  } else {
    twp = static_cast<const float*>(dev_in(*w, l.tw));
    tidp = static_cast<const int32_t*>(dev_in(*ids, l.tid));
  }
  void* yp = y.data;
  if (!y.cuda) {
    grow(l.y_stage, y.nbytes() + 16);
    yp = l.y_stage.ptr;
  }
  if (m > 0) {
    l.ws.reserve(cuda::workspace_bytes(l.ex, l.shared.get(), m, k, l.cfg.num_experts));
    cuda::ForwardArgs a;
    a.x = xp;
    a.topk_w = twp;
    a.topk_ids = tidp;
    a.y = yp;
    a.m = m;
    a.top_k = k;
    a.num_global_experts = l.cfg.num_experts;
    a.expert_map = l.emap.as<int32_t>();
    a.weight_on_input = l.cfg.router.apply_router_weight_on_input;
    cuda::forward(l.ex, l.shared.get(), a, l.ws.buf.ptr, s);
  }
  if (!y.cuda && y.nbytes() > 0)
    cuda_ok(cudaMemcpyAsync(y.data, yp, y.nbytes(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  l.end(s);
  // Host outputs (and host inputs still being read from pageable memory) need the stream done.
  if (!x.cuda || !y.cuda || (logits && !logits->cuda) || (w && !w->cuda))
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

bool cuda_route(const TensorDesc& logits, const RouterConfig& rc, const TensorDesc* bias, const TensorDesc& w,
                const TensorDesc& ids, void* stream) {
  if (!logits.cuda || logits.dtype != DType::kF32 || (bias != nullptr && (!bias->cuda || bias->dtype != DType::kF32)))
    return false;
  DeviceScope scope(logits.device_id);
  try {
    cuda::route_device(static_cast<const float*>(logits.data), logits.shape[0], static_cast<int>(logits.shape[1]), rc,
                       bias ? static_cast<const float*>(bias->data) : nullptr, static_cast<float*>(w.data),
                       static_cast<int32_t*>(ids.data), static_cast<cudaStream_t>(stream));
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kUnsupported) return false;  // a router the device kernel does not take
    throw;
  }
  return true;
}

#else  // !QMOE_HAVE_CUDA

struct CudaLayer {};

void CudaLayerDeleter::operator()(CudaLayer* p) const { delete p; }

CudaLayerPtr make_cuda_layer(ExpertWeights w, MoeConfig cfg, std::optional<ExpertWeights> shared, Tensor router_bias) {
  // Throws MoeLayer::create's "this build of qmoe has no CUDA backend" error.
  MoeLayer::create(std::move(w), std::move(cfg), Backend::kCuda, std::move(shared), std::move(router_bias));
  fail(ErrorKind::kInternal, "MoeLayer::create accepted the CUDA backend in a build without CUDA");
}

std::string cuda_layer_method(const CudaLayer&) { return ""; }

void cuda_layer_forward(CudaLayer&, const TensorDesc&, const TensorDesc*, const TensorDesc*, const TensorDesc*,
                        const TensorDesc&, void*) {
  fail(ErrorKind::kInternal, "CUDA layer forward in a build without CUDA");
}

bool cuda_route(const TensorDesc&, const RouterConfig&, const TensorDesc*, const TensorDesc&, const TensorDesc&,
                void*) {
  return false;
}

#endif

}  // namespace qmoe::capi
