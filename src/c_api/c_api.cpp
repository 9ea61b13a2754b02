// C ABI: version, errors, tensor descriptors, host <-> CUDA copies, routing and align.
// Routing and align compute on the host (src/routing); CUDA tensors reach them through copies
// ordered on the caller's stream, which the call then synchronizes.
#include <algorithm>
#include <cstring>

#include "c_api/c_api_internal.h"
#include "qmoe/routing.h"

#if defined(QMOE_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#ifndef QMOE_VERSION
#define QMOE_VERSION "0.0.0"
#endif

namespace qmoe::capi {

static_assert(QMOE_DTYPE_BOOL == static_cast<int>(DType::kBool), "qmoe_dtype_t must mirror qmoe::DType");
static_assert(QMOE_DTYPE_BF16 == static_cast<int>(DType::kBF16), "qmoe_dtype_t must mirror qmoe::DType");
static_assert(QMOE_DTYPE_E8M0 == static_cast<int>(DType::kE8M0), "qmoe_dtype_t must mirror qmoe::DType");

namespace {
thread_local std::string t_error;
}  // namespace

void set_error(std::string msg) { t_error = std::move(msg); }

bool present(const qmoe_tensor_t* t) { return t != nullptr && t->data != nullptr; }

TensorDesc describe(const qmoe_tensor_t* t, const char* what) {
  QMOE_CHECK(t != nullptr, kBadInput, what, ": tensor descriptor is NULL");
  QMOE_CHECK(t->dtype >= 0 && t->dtype <= QMOE_DTYPE_BOOL, kBadInput, what, ": dtype code ", t->dtype,
             " is not a qmoe_dtype_t");
  QMOE_CHECK(t->ndim >= 0 && t->ndim <= QMOE_MAX_DIMS, kBadInput, what, ": ndim ", t->ndim, " is outside [0, ",
             QMOE_MAX_DIMS, "]");
  TensorDesc d;
  d.dtype = static_cast<DType>(t->dtype);
  d.shape.assign(t->shape, t->shape + t->ndim);
  for (int64_t s : d.shape)
    QMOE_CHECK(s >= 0, kBadInput, what, ": negative dimension in shape ", shape_str(d.shape));
  d.data = t->data;
  int dev = t->device == 0 ? QMOE_DEVICE_CPU : t->device;
  QMOE_CHECK(dev == QMOE_DEVICE_CPU || dev == QMOE_DEVICE_CUDA, kBadInput, what, ": device code ", t->device,
             " is neither QMOE_DEVICE_CPU (1) nor QMOE_DEVICE_CUDA (2)");
  d.cuda = dev == QMOE_DEVICE_CUDA;
  d.device_id = t->device_id;
  QMOE_CHECK(d.data != nullptr || shape_numel(d.shape) == 0, kBadInput, what, ": data is NULL for shape ",
             shape_str(d.shape));
  return d;
}

Tensor host_view(const TensorDesc& d, const char* what) {
  QMOE_CHECK(!d.cuda, kBadInput, what, " is on ", d.device_str(), " but this call needs a host (cpu) tensor");
  return Tensor(d.dtype, d.shape, d.data, nullptr);
}

void expect(const TensorDesc& d, const char* what, DType dtype, const Shape& shape) {
  QMOE_CHECK(d.dtype == dtype && d.shape == shape, kBadInput, what, ": expected ", dtype_name(dtype), " ",
             shape_str(shape), ", got ", dtype_name(d.dtype), " ", shape_str(d.shape));
}

#if defined(QMOE_HAVE_CUDA)
namespace {
void cuda_ok(cudaError_t e, const char* op, const char* what) {
  if (e != cudaSuccess) fail(ErrorKind::kInternal, op, " for ", what, " failed: ", cudaGetErrorString(e));
}
// Makes `id` the current device for the scope (CUDA calls on a stream of another device fail).
struct DeviceScope {
  int prev = -1;
  DeviceScope(int id, const char* what) {
    cuda_ok(cudaGetDevice(&prev), "cudaGetDevice", what);
    if (prev != id) cuda_ok(cudaSetDevice(id), "cudaSetDevice", what);
  }
  ~DeviceScope() {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev) cudaSetDevice(prev);
  }
};
}  // namespace
#endif

Tensor to_host(const TensorDesc& d, void* stream, const char* what) {
  Tensor t(d.dtype, d.shape);
  if (t.nbytes() == 0) return t;
  if (!d.cuda) {
    std::memcpy(t.raw_mut(), d.data, t.nbytes());
    return t;
  }
#if defined(QMOE_HAVE_CUDA)
  DeviceScope scope(d.device_id, what);
  auto s = static_cast<cudaStream_t>(stream);
  cuda_ok(cudaMemcpyAsync(t.raw_mut(), d.data, t.nbytes(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync", what);
  cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize", what);
  return t;
#else
  unsupported(what, " is on ", d.device_str(), " but this build of qmoe has no CUDA support");
#endif
}

void from_host(const Tensor& src, const TensorDesc& dst, void* stream, const char* what) {
  QMOE_CHECK(src.nbytes() == dst.nbytes(), kInternal, what, ": writing ", src.nbytes(), " bytes into ",
             dst.nbytes());
  if (src.nbytes() == 0) return;
  if (!dst.cuda) {
    std::memcpy(dst.data, src.raw(), src.nbytes());
    return;
  }
#if defined(QMOE_HAVE_CUDA)
  DeviceScope scope(dst.device_id, what);
  auto s = static_cast<cudaStream_t>(stream);
  cuda_ok(cudaMemcpyAsync(dst.data, src.raw(), src.nbytes(), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync", what);
  // `src` is pageable host memory that dies with the caller: wait for the copy to consume it.
  cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize", what);
#else
  unsupported(what, " is on ", dst.device_str(), " but this build of qmoe has no CUDA support");
#endif
}

namespace {

RouterConfig router_from_c(const qmoe_router_config_t& c) {
  QMOE_CHECK(c.kind >= QMOE_ROUTER_SOFTMAX_TOPK && c.kind <= QMOE_ROUTER_GROUPED, kBadInput,
             "router config: kind ", c.kind, " is not a qmoe_router_kind_t");
  QMOE_CHECK(c.top_k >= 1, kBadInput, "router config: top_k ", c.top_k, " must be >= 1");
  RouterConfig r;
  r.kind = static_cast<RouterKind>(c.kind);
  r.top_k = c.top_k;
  r.renormalize = c.renormalize != 0;
  r.grouped_sigmoid = c.grouped_sigmoid != 0;
  r.num_groups = c.num_groups;
  r.topk_group = c.topk_group;
  r.routed_scaling_factor = c.routed_scaling_factor;
  r.apply_router_weight_on_input = c.apply_router_weight_on_input != 0;
  return r;
}

void same_device(const TensorDesc& a, const char* an, const TensorDesc& b, const char* bn) {
  QMOE_CHECK(a.cuda == b.cuda && (!a.cuda || a.device_id == b.device_id), kBadInput, an, " is on ",
             a.device_str(), " but ", bn, " is on ", b.device_str());
}

}  // namespace

RouterConfig router_config_from_c(const qmoe_router_config_t& c) { return router_from_c(c); }

}  // namespace qmoe::capi

using namespace qmoe;
using namespace qmoe::capi;

extern "C" {

int32_t qmoe_c_api_version(void) { return QMOE_C_API_VERSION; }
const char* qmoe_version(void) { return QMOE_VERSION; }

const char* qmoe_last_error(void) { return t_error.c_str(); }

size_t qmoe_last_error_copy(char* buf, size_t cap) {
  if (buf != nullptr && cap > 0) {
    size_t n = std::min(cap - 1, t_error.size());
    std::memcpy(buf, t_error.data(), n);
    buf[n] = '\0';
  }
  return t_error.size();
}

const char* qmoe_status_name(qmoe_status_t s) {
  switch (s) {
    case QMOE_OK: return "ok";
    case QMOE_ERR_BAD_INPUT: return "bad input";
    case QMOE_ERR_UNSUPPORTED: return "unsupported";
    case QMOE_ERR_VERIFY_FAILED: return "verify failed";
    case QMOE_ERR_INTERNAL: return "internal";
  }
  return "unknown status";
}

void qmoe_tensor_init(qmoe_tensor_t* t, void* data, qmoe_dtype_t dtype, int32_t ndim, const int64_t* shape) {
  if (t == nullptr) return;
  std::memset(t, 0, sizeof(*t));
  t->data = data;
  t->dtype = dtype;
  t->ndim = ndim < 0 ? 0 : std::min<int32_t>(ndim, QMOE_MAX_DIMS);
  for (int32_t i = 0; i < t->ndim; ++i) t->shape[i] = shape[i];
  t->device = QMOE_DEVICE_CPU;
}

void qmoe_router_config_init(qmoe_router_config_t* c) {
  if (c == nullptr) return;
  std::memset(c, 0, sizeof(*c));
  c->kind = QMOE_ROUTER_SOFTMAX_TOPK;
  c->top_k = 1;
  c->grouped_sigmoid = 1;
  c->num_groups = 1;
  c->topk_group = 1;
  c->routed_scaling_factor = 1.0f;
}

qmoe_status_t qmoe_route(const qmoe_tensor_t* logits, const qmoe_router_config_t* cfg, const qmoe_tensor_t* bias,
                         const qmoe_tensor_t* topk_weights, const qmoe_tensor_t* topk_ids, void* stream) {
  return fence([&] {
    QMOE_CHECK(cfg != nullptr, kBadInput, "qmoe_route: cfg is NULL");
    RouterConfig rc = router_from_c(*cfg);
    TensorDesc l = describe(logits, "router logits");
    QMOE_CHECK(l.shape.size() == 2, kBadInput, "router logits: expected [M, E], got ", shape_str(l.shape));
    QMOE_CHECK(l.dtype == DType::kF32 || l.dtype == DType::kBF16 || l.dtype == DType::kF16, kBadInput,
               "router logits: expected F32, BF16 or F16, got ", dtype_name(l.dtype));
    const int64_t m = l.shape[0];
    TensorDesc w = describe(topk_weights, "topk_weights"), i = describe(topk_ids, "topk_ids");
    expect(w, "topk_weights", DType::kF32, {m, rc.top_k});
    expect(i, "topk_ids", DType::kI32, {m, rc.top_k});
    same_device(l, "router logits", w, "topk_weights");
    same_device(l, "router logits", i, "topk_ids");
    Tensor bh;
    TensorDesc b;
    if (present(bias)) {
      b = describe(bias, "router bias");
      same_device(l, "router logits", b, "router bias");
    }
    if (cuda_route(l, rc, present(bias) ? &b : nullptr, w, i, stream)) return;
    if (present(bias)) bh = to_host(b, stream, "router bias");
    RoutingResult r = route(to_host(l, stream, "router logits"), rc, bh);
    from_host(r.topk_weights, w, stream, "topk_weights");
    from_host(r.topk_ids, i, stream, "topk_ids");
  });
}

qmoe_status_t qmoe_align_block_size_sizes(int64_t numel, int32_t num_experts, int32_t block_size,
                                          int64_t* sorted_capacity, int64_t* num_blocks) {
  return fence([&] {
    QMOE_CHECK(numel >= 0 && num_experts >= 1 && block_size >= 1, kBadInput,
               "align_block_size: need numel >= 0, num_experts >= 1, block_size >= 1; got ", numel, ", ",
               num_experts, ", ", block_size);
    QMOE_CHECK(numel < (int64_t{1} << 31) - int64_t{num_experts} * block_size, kBadInput, "align_block_size: ",
               numel, " ids overflow the int32 token indices");
    int64_t cap = numel + int64_t{num_experts} * (block_size - 1);
    cap = (cap + block_size - 1) / block_size * block_size;
    if (sorted_capacity) *sorted_capacity = cap;
    if (num_blocks) *num_blocks = cap / block_size;
  });
}

qmoe_status_t qmoe_align_block_size(const qmoe_tensor_t* topk_ids, int32_t num_experts, int32_t block_size,
                                    const qmoe_tensor_t* expert_map, const qmoe_tensor_t* sorted_token_ids,
                                    const qmoe_tensor_t* expert_ids, const qmoe_tensor_t* num_tokens_post_padded,
                                    void* stream) {
  return fence([&] {
    TensorDesc ids = describe(topk_ids, "topk_ids");
    QMOE_CHECK(ids.dtype == DType::kI32, kBadInput, "topk_ids: expected I32, got ", dtype_name(ids.dtype));
    const int64_t numel = shape_numel(ids.shape);
    int64_t cap = 0, blocks = 0;
    if (qmoe_align_block_size_sizes(numel, num_experts, block_size, &cap, &blocks) != QMOE_OK)
      bad_input(t_error);
    TensorDesc st = describe(sorted_token_ids, "sorted_token_ids");
    TensorDesc ex = describe(expert_ids, "expert_ids");
    TensorDesc np = describe(num_tokens_post_padded, "num_tokens_post_padded");
    expect(st, "sorted_token_ids", DType::kI32, {cap});
    expect(ex, "expert_ids", DType::kI32, {blocks});
    expect(np, "num_tokens_post_padded", DType::kI32, {1});
    same_device(ids, "topk_ids", st, "sorted_token_ids");
    same_device(ids, "topk_ids", ex, "expert_ids");
    same_device(ids, "topk_ids", np, "num_tokens_post_padded");
    std::vector<int32_t> map;
    if (present(expert_map)) {
      TensorDesc em = describe(expert_map, "expert_map");
      expect(em, "expert_map", DType::kI32, {num_experts});
      Tensor h = to_host(em, stream, "expert_map");
      map.assign(h.data<int32_t>(), h.data<int32_t>() + num_experts);
    }
    Tensor ids_h = to_host(ids, stream, "topk_ids");
    AlignResult r = align_block_size(ids_h.data<int32_t>(), numel, num_experts, block_size, map);
    QMOE_CHECK(static_cast<int64_t>(r.sorted_token_ids.size()) <= cap &&
                   static_cast<int64_t>(r.expert_ids.size()) <= blocks,
               kInternal, "align_block_size returned ", r.sorted_token_ids.size(), " sorted ids and ",
               r.expert_ids.size(), " blocks, more than the capacity ", cap, " / ", blocks);
    Tensor st_h(DType::kI32, {cap}), ex_h(DType::kI32, {blocks}), np_h(DType::kI32, {1});
    std::fill_n(st_h.data_mut<int32_t>(), cap, static_cast<int32_t>(numel));  // padding = sentinel numel
    std::copy(r.sorted_token_ids.begin(), r.sorted_token_ids.end(), st_h.data_mut<int32_t>());
    std::fill_n(ex_h.data_mut<int32_t>(), blocks, -1);  // blocks past the used ones: no expert
    std::copy(r.expert_ids.begin(), r.expert_ids.end(), ex_h.data_mut<int32_t>());
    np_h.data_mut<int32_t>()[0] = r.num_tokens_post_padded;
    from_host(st_h, st, stream, "sorted_token_ids");
    from_host(ex_h, ex, stream, "expert_ids");
    from_host(np_h, np, stream, "num_tokens_post_padded");
  });
}

}  // extern "C"
