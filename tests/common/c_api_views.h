// Header-only helpers shared by the C ABI tests (tests/c_api, CPU and CUDA): qmoe_tensor_t views of
// host tensors, the C description of a C++ ExpertWeights (only what an engine knows without qmoe's
// QuantArgs) and a bitwise tensor comparison.
#pragma once
#include <cstring>

#include "qmoe/c_api.h"
#include "qmoe/moe.h"
#include "qmoe/tensor.h"

namespace qmoe::test {

// A read-only CPU view of t; all zeros (no data) for an undefined tensor.
inline qmoe_tensor_t host_view(const Tensor& t) {
  qmoe_tensor_t c{};
  if (!t.defined()) return c;
  c.data = const_cast<void*>(t.raw());
  c.dtype = static_cast<int32_t>(t.dtype());
  c.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) c.shape[i] = t.size(i);
  c.device = QMOE_DEVICE_CPU;
  return c;
}

// A writable CPU view of t (an output).
inline qmoe_tensor_t out_view(Tensor& t) {
  qmoe_tensor_t c = host_view(t);
  c.data = t.raw_mut();
  return c;
}

inline qmoe_proj_tensors_t proj_view(const ProjWeights& p) {
  return {host_view(p.weight),       host_view(p.scale),       host_view(p.zero_point), host_view(p.g_idx),
          host_view(p.global_scale), host_view(p.input_scale), host_view(p.bias)};
}

// Only what an engine knows without qmoe's QuantArgs: kind, sizes, group / block, act dtype.
inline qmoe_expert_weights_t experts_view(const ExpertWeights& w) {
  qmoe_expert_weights_t c;
  qmoe_expert_weights_init(&c);
  c.scheme = static_cast<int32_t>(w.scheme.kind);
  c.num_experts = w.num_experts;
  c.hidden = w.hidden;
  c.intermediate = w.intermediate;
  c.group_size = w.group_size;
  c.block_n = w.block[0];
  c.block_k = w.block[1];
  c.act_dtype = static_cast<int32_t>(w.act_dtype);
  c.w13 = proj_view(w.w13);
  c.w2 = proj_view(w.w2);
  return c;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace qmoe::test
