// Shared pieces of the C ABI implementation (src/c_api/*.cpp): the exception fence that turns
// every qmoe::Error / std::exception into a status + thread-local message, the conversion of
// qmoe_tensor_t into qmoe::Tensor views, and stream-ordered host <-> CUDA copies for the calls
// that compute on the host (routing, align, weights given as device tensors).
#pragma once
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>

#include "qmoe/c_api.h"
#include "qmoe/moe.h"
#include "qmoe/tensor.h"

namespace qmoe::capi {

void set_error(std::string msg);

inline qmoe_status_t status_of(ErrorKind k) {
  switch (k) {
    case ErrorKind::kBadInput: return QMOE_ERR_BAD_INPUT;
    case ErrorKind::kUnsupported: return QMOE_ERR_UNSUPPORTED;
    case ErrorKind::kVerifyFailed: return QMOE_ERR_VERIFY_FAILED;
    case ErrorKind::kInternal: return QMOE_ERR_INTERNAL;
  }
  return QMOE_ERR_INTERNAL;
}

// Runs f(); no exception escapes. Clears the thread's message on success.
template <class F>
qmoe_status_t fence(F&& f) noexcept {
  try {
    f();
    set_error("");
    return QMOE_OK;
  } catch (const Error& e) {
    set_error(e.what());
    return status_of(e.kind());
  } catch (const std::bad_alloc&) {
    set_error("internal: out of host memory");
    return QMOE_ERR_INTERNAL;
  } catch (const std::exception& e) {
    set_error(printable_message(std::string("internal: ") + e.what()));
    return QMOE_ERR_INTERNAL;
  } catch (...) {
    set_error("internal: unknown exception");
    return QMOE_ERR_INTERNAL;
  }
}

// Validated description of a qmoe_tensor_t (dtype in range, ndim <= QMOE_MAX_DIMS, shape >= 0,
// data present when numel > 0, device CPU or CUDA). `what` names the argument in errors.
struct TensorDesc {
  DType dtype = DType::kU8;
  Shape shape;
  void* data = nullptr;
  bool cuda = false;
  int device_id = 0;
  size_t nbytes() const { return static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype); }
  std::string device_str() const { return cuda ? str("cuda:", device_id) : std::string("cpu"); }
};

bool present(const qmoe_tensor_t* t);  // non-null with data or with numel 0 and a dtype set
TensorDesc describe(const qmoe_tensor_t* t, const char* what);

// Host view of a host tensor (throws kBadInput naming `what` when it is on CUDA).
Tensor host_view(const TensorDesc& d, const char* what);
// Throws kBadInput unless d has exactly this dtype and shape.
void expect(const TensorDesc& d, const char* what, DType dtype, const Shape& shape);

// Host copy of any tensor: host tensors are copied with memcpy, CUDA tensors with a copy ordered
// on `stream` followed by a stream synchronize. Throws kUnsupported on CUDA tensors when this
// build has no CUDA runtime.
Tensor to_host(const TensorDesc& d, void* stream, const char* what);
// Writes host tensor `src` into `dst` (same byte count), ordered on `stream` for CUDA tensors.
void from_host(const Tensor& src, const TensorDesc& dst, void* stream, const char* what);

RouterConfig router_config_from_c(const qmoe_router_config_t& c);  // kBadInput on a bad kind / top_k

// The canonical scheme + weights described by a qmoe_expert_weights_t. Tensors are copied unless
// `borrow`; device tensors are copied to the host through `stream` (a one-time cost at layer
// creation). `where` names the weights in errors ("experts", "shared expert").
ExpertWeights expert_weights_from_c(const qmoe_expert_weights_t& w, bool borrow, void* stream, const char* where);

// ---- the CUDA backend on device pointers (c_api_cuda.cpp) ----
struct CudaLayer;
struct CudaLayerDeleter {
  void operator()(CudaLayer* p) const;
};
using CudaLayerPtr = std::unique_ptr<CudaLayer, CudaLayerDeleter>;
// Validates and prepares on the current CUDA device; throws MoeLayer::create's errors.
CudaLayerPtr make_cuda_layer(ExpertWeights w, MoeConfig cfg, std::optional<ExpertWeights> shared, Tensor router_bias);
std::string cuda_layer_method(const CudaLayer& l);
// Routing from `logits` (F32 [M, E]) or given (`w`, `ids`); all tensors on the layer's device or
// all on the host (shapes and dtypes already checked). Runs on `stream`.
void cuda_layer_forward(CudaLayer& l, const TensorDesc& x, const TensorDesc* logits, const TensorDesc* w,
                        const TensorDesc* ids, const TensorDesc& y, void* stream);
// Routes F32 device logits on the device; false when it cannot (host tensors, other dtypes, or a
// router configuration the device kernel does not take), and the caller routes on the host.
bool cuda_route(const TensorDesc& logits, const RouterConfig& rc, const TensorDesc* bias, const TensorDesc& w,
                const TensorDesc& ids, void* stream);

}  // namespace qmoe::capi

// The opaque layer handle: a MoeLayer (reference / cpu) or a device-pointer CUDA layer.
struct qmoe_layer {
  std::unique_ptr<qmoe::MoeLayer> impl;
  qmoe::capi::CudaLayerPtr cuda;
  qmoe::Backend backend = qmoe::Backend::kReference;
  int num_experts = 0, num_experts_global = 0, hidden = 0, intermediate = 0, top_k = 0;
  qmoe::DType act_dtype = qmoe::DType::kBF16;
  qmoe::SchemeKind scheme = qmoe::SchemeKind::kUnquantized;
  std::string scheme_key, method;
  std::mutex mu;  // one call at a time: backends keep per-layer scratch
};
struct qmoe_checkpoint;
