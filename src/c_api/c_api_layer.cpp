// C ABI: MoE layers built from raw canonical tensors (qmoe_layer_create, qmoe_fused_experts) and
// their forward on host or CUDA tensors. The scheme's QuantArgs are derived with ref::make_scheme,
// the same function tests and `qmoe gen` use, so a layer described here is dispatched exactly like
// one loaded from a checkpoint.
#include <cstring>

#include "c_api/c_api_internal.h"
#include "cpu/ref/quantize.h"

namespace qmoe::capi {

qmoe_layer* make_layer(ExpertWeights w, MoeConfig cfg, Backend backend, std::optional<ExpertWeights> shared,
                       Tensor router_bias);

namespace {

Tensor weight_tensor(const qmoe_tensor_t& t, bool borrow, void* stream, const std::string& name) {
  if (!present(&t)) return Tensor();
  TensorDesc d = describe(&t, name.c_str());
  if (d.cuda) return to_host(d, stream, name.c_str());
  Tensor v = host_view(d, name.c_str());
  return borrow ? v : v.clone();
}

ProjWeights proj_from_c(const qmoe_proj_tensors_t& p, bool borrow, void* stream, const std::string& where) {
  ProjWeights w;
  w.weight = weight_tensor(p.weight, borrow, stream, where + ".weight");
  w.scale = weight_tensor(p.scale, borrow, stream, where + ".scale");
  w.zero_point = weight_tensor(p.zero_point, borrow, stream, where + ".zero_point");
  w.g_idx = weight_tensor(p.g_idx, borrow, stream, where + ".g_idx");
  w.global_scale = weight_tensor(p.global_scale, borrow, stream, where + ".global_scale");
  w.input_scale = weight_tensor(p.input_scale, borrow, stream, where + ".input_scale");
  w.bias = weight_tensor(p.bias, borrow, stream, where + ".bias");
  QMOE_CHECK(w.weight.defined(), kBadInput, where, ".weight is absent");
  return w;
}

bool is_int_kind(SchemeKind k) {
  return k == SchemeKind::kWNA16 || k == SchemeKind::kINT8W8A8 || k == SchemeKind::kW4A8FP8 ||
         k == SchemeKind::kW4A8INT8;
}

// The fields of qmoe_expert_weights_t marked "inferred" (c_api.h), resolved into a SchemeSpec.
ref::SchemeSpec spec_from_c(const qmoe_expert_weights_t& c, const ExpertWeights& w, const std::string& where) {
  ref::SchemeSpec s;
  s.kind = static_cast<SchemeKind>(c.scheme);
  s.act_dtype = w.act_dtype;
  s.weight_dtype = w.w13.weight.dtype();
  s.bias = w.w13.bias.defined() || w.w2.bias.defined();
  if (w.w13.scale.defined()) s.scale_dtype = w.w13.scale.dtype();
  s.group_size = c.group_size;
  s.block = {c.block_n, c.block_k};
  s.actorder = w.w13.g_idx.defined() || w.w2.g_idx.defined();

  int bits = c.weight_bits;
  if (bits == 0) {
    switch (s.kind) {
      case SchemeKind::kUnquantized: bits = 16; break;
      case SchemeKind::kWNA16:  // two 4-bit codes per byte: the weight is H/2 columns wide
        bits = w.w13.weight.dim() == 3 && w.w13.weight.size(2) * 2 == c.hidden ? 4 : 8;
        break;
      case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: case SchemeKind::kINT8W8A8: bits = 8; break;
      default: bits = 4; break;
    }
  }
  s.bits = bits;

  int sym = c.weight_symmetric;
  s.symmetric = sym < 0 ? !(w.w13.zero_point.defined() || w.w2.zero_point.defined()) : sym != 0;

  int strategy = c.weight_strategy;
  if (strategy < 0) {
    if (c.block_n > 0 || c.block_k > 0) {
      strategy = QMOE_STRATEGY_BLOCK;
    } else if (c.group_size > 0) {
      strategy = QMOE_STRATEGY_GROUP;
    } else if (w.w13.scale.defined() && w.w13.scale.dim() == 2) {
      strategy = QMOE_STRATEGY_TENSOR;  // [E, S]
    } else {
      strategy = QMOE_STRATEGY_CHANNEL;  // [E, N, 1]
    }
  }
  QMOE_CHECK(strategy >= QMOE_STRATEGY_TENSOR && strategy <= QMOE_STRATEGY_BLOCK, kBadInput, where,
             ": weight_strategy ", c.weight_strategy, " is not a qmoe_strategy_t");
  if (has_fp8_weights(s.kind)) s.fp8_strategy = static_cast<Strategy>(strategy);
  if (is_int_kind(s.kind) && strategy == QMOE_STRATEGY_CHANNEL) s.group_size = 0;
  if (is_int_kind(s.kind))
    QMOE_CHECK(strategy == QMOE_STRATEGY_GROUP || strategy == QMOE_STRATEGY_CHANNEL, kBadInput, where,
               ": integer weights are group or channel quantized, not ", strategy_name(static_cast<Strategy>(strategy)));
  if (!has_fp8_weights(s.kind)) s.block = {0, 0};

  int act = c.act_quant;
  if (act < 0) {
    switch (s.kind) {
      case SchemeKind::kFP8W8A8:
        act = w.w13.input_scale.defined() ? QMOE_ACT_FP8_TENSOR
              : strategy == QMOE_STRATEGY_BLOCK ? QMOE_ACT_FP8_GROUP128
                                                 : QMOE_ACT_FP8_TOKEN;
        break;
      case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8INT8: act = QMOE_ACT_INT8_TOKEN; break;
      case SchemeKind::kW4A8FP8: act = QMOE_ACT_FP8_TOKEN; break;
      case SchemeKind::kNVFP4: act = QMOE_ACT_NVFP4; break;
      default: act = QMOE_ACT_NONE; break;
    }
  }
  QMOE_CHECK(act >= QMOE_ACT_NONE && act <= QMOE_ACT_NVFP4, kBadInput, where, ": act_quant ", c.act_quant,
             " is not a qmoe_act_quant_t");
  s.act = static_cast<ActQuant>(act);
  return s;
}

}  // namespace

ExpertWeights expert_weights_from_c(const qmoe_expert_weights_t& c, bool borrow, void* stream, const char* where) {
  QMOE_CHECK(c.scheme >= QMOE_SCHEME_UNQUANTIZED && c.scheme <= QMOE_SCHEME_MXFP4_A16, kBadInput, where,
             ": scheme ", c.scheme, " is not a qmoe_scheme_kind_t");
  QMOE_CHECK(c.act_dtype == QMOE_DTYPE_BF16 || c.act_dtype == QMOE_DTYPE_F16 || c.act_dtype == QMOE_DTYPE_F32,
             kBadInput, where, ": act_dtype must be BF16, F16 or F32 (code ", c.act_dtype, ")");
  QMOE_CHECK(c.num_experts >= 1 && c.hidden >= 1 && c.intermediate >= 1, kBadInput, where,
             ": num_experts, hidden and intermediate must be >= 1; got ", c.num_experts, ", ", c.hidden, ", ",
             c.intermediate);
  ExpertWeights w;
  w.num_experts = c.num_experts;
  w.hidden = c.hidden;
  w.intermediate = c.intermediate;
  w.act_dtype = static_cast<DType>(c.act_dtype);
  w.w13 = proj_from_c(c.w13, borrow, stream, std::string(where) + ".w13");
  w.w2 = proj_from_c(c.w2, borrow, stream, std::string(where) + ".w2");
  ref::SchemeSpec spec = spec_from_c(c, w, where);
  w.scheme = ref::make_scheme(spec);
  w.group_size = spec.group_size;
  if (has_fp8_weights(spec.kind) && spec.fp8_strategy == Strategy::kBlock) w.block = spec.block;
  // The fp4 formats fix their group: NVFP4 16 (e4m3 scales), MXFP4 32 (e8m0 scales).
  if (spec.kind == SchemeKind::kNVFP4 || spec.kind == SchemeKind::kNVFP4A16) w.group_size = 16;
  if (spec.kind == SchemeKind::kMXFP4A16) w.group_size = 32;
  if (!is_int_kind(spec.kind) && spec.kind != SchemeKind::kNVFP4 && spec.kind != SchemeKind::kNVFP4A16 &&
      spec.kind != SchemeKind::kMXFP4A16)
    w.group_size = 0;
  return w;
}

qmoe_layer* make_layer(ExpertWeights w, MoeConfig cfg, Backend backend, std::optional<ExpertWeights> shared,
                       Tensor router_bias) {
  auto h = std::make_unique<qmoe_layer>();
  h->backend = backend;
  h->num_experts = w.num_experts;
  h->num_experts_global = cfg.num_experts;
  h->hidden = w.hidden;
  h->intermediate = w.intermediate;
  h->top_k = cfg.router.top_k;
  h->act_dtype = w.act_dtype;
  h->scheme = w.scheme.kind;
  h->scheme_key = w.scheme.key();
  if (backend == Backend::kCuda) {
    h->cuda = make_cuda_layer(std::move(w), std::move(cfg), std::move(shared), std::move(router_bias));
    h->method = cuda_layer_method(*h->cuda);
  } else {
    h->impl = MoeLayer::create(std::move(w), std::move(cfg), backend, std::move(shared), std::move(router_bias));
    h->method = h->impl->method_name();
  }
  return h.release();
}

namespace {

struct LayerBuild {
  ExpertWeights w;
  MoeConfig cfg;
  std::optional<ExpertWeights> shared;
  Tensor router_bias;
  Backend backend;
};

LayerBuild build_from_desc(const qmoe_layer_desc_t* d, bool borrow, void* stream) {
  QMOE_CHECK(d != nullptr, kBadInput, "layer descriptor is NULL");
  QMOE_CHECK(d->backend >= QMOE_BACKEND_REFERENCE && d->backend <= QMOE_BACKEND_CUDA, kBadInput,
             "layer descriptor: backend ", d->backend, " is not a qmoe_backend_t");
  QMOE_CHECK(d->activation >= QMOE_ACTIVATION_SILU_MUL && d->activation <= QMOE_ACTIVATION_SWIGLU_OAI, kBadInput,
             "layer descriptor: activation ", d->activation, " is not a qmoe_activation_t");
  LayerBuild b;
  b.backend = static_cast<Backend>(d->backend);
  b.w = expert_weights_from_c(d->experts, borrow, stream, "experts");
  b.cfg.num_experts = d->num_experts_global > 0 ? d->num_experts_global : d->experts.num_experts;
  b.cfg.router = router_config_from_c(d->router);
  b.cfg.activation = static_cast<Activation>(d->activation);
  if (d->expert_map != nullptr) b.cfg.expert_map.assign(d->expert_map, d->expert_map + b.cfg.num_experts);
  if (d->shared_expert != nullptr) b.shared = expert_weights_from_c(*d->shared_expert, borrow, stream, "shared expert");
  if (present(&d->router_bias)) b.router_bias = weight_tensor(d->router_bias, borrow, stream, "router bias");
  return b;
}

// Shapes, dtypes and devices of a forward call; returns M.
int64_t check_io(const qmoe_layer* l, const TensorDesc& x, const TensorDesc& y, const char* second,
                 const TensorDesc& s) {
  QMOE_CHECK(x.shape.size() == 2, kBadInput, "x: expected [M, ", l->hidden, "], got ", shape_str(x.shape));
  const int64_t m = x.shape[0];
  expect(x, "x", l->act_dtype, {m, l->hidden});
  expect(y, "y", l->act_dtype, {m, l->hidden});
  for (const TensorDesc* t : {&y, &s})
    QMOE_CHECK(t->cuda == x.cuda && (!x.cuda || t->device_id == x.device_id), kBadInput, "x is on ", x.device_str(),
               " but ", t == &y ? "y" : second, " is on ", t->device_str());
  return m;
}

void write_out(const Tensor& out, const TensorDesc& y, void* stream) {
  QMOE_CHECK(out.dtype() == y.dtype && out.shape() == y.shape, kInternal, "layer forward returned ",
             dtype_name(out.dtype()), " ", shape_str(out.shape()), " for y ", dtype_name(y.dtype), " ",
             shape_str(y.shape));
  from_host(out, y, stream, "y");
}

// Host tensors run on every backend (the CUDA backend stages them through device buffers); CUDA
// tensors on a host backend are refused rather than copied: that would hide a device mix-up.
void require_host_backend_inputs(const qmoe_layer* l, const TensorDesc& x) {
  QMOE_CHECK(!x.cuda || l->backend == Backend::kCuda, kBadInput, "the ", backend_name(l->backend),
             " backend runs on host tensors, but x is on ", x.device_str(),
             " (create the layer with backend cuda for device tensors)");
}

void forward_routed(qmoe_layer* l, const qmoe_tensor_t* x, const qmoe_tensor_t* topk_weights,
                    const qmoe_tensor_t* topk_ids, const qmoe_tensor_t* y, void* stream) {
  QMOE_CHECK(l != nullptr, kBadInput, "layer is NULL");
  TensorDesc xd = describe(x, "x"), yd = describe(y, "y");
  TensorDesc wd = describe(topk_weights, "topk_weights"), id = describe(topk_ids, "topk_ids");
  int64_t m = check_io(l, xd, yd, "topk_weights", wd);
  check_io(l, xd, yd, "topk_ids", id);
  expect(wd, "topk_weights", DType::kF32, {m, l->top_k});
  expect(id, "topk_ids", DType::kI32, {m, l->top_k});
  require_host_backend_inputs(l, xd);
  std::lock_guard<std::mutex> lock(l->mu);
  if (l->cuda) {
    cuda_layer_forward(*l->cuda, xd, nullptr, &wd, &id, yd, stream);
  } else {
    write_out(l->impl->forward_routed(host_view(xd, "x"), host_view(wd, "topk_weights"), host_view(id, "topk_ids")),
              yd, stream);
  }
}

}  // namespace
}  // namespace qmoe::capi

using namespace qmoe;
using namespace qmoe::capi;

extern "C" {

void qmoe_expert_weights_init(qmoe_expert_weights_t* w) {
  if (w == nullptr) return;
  std::memset(w, 0, sizeof(*w));
  w->scheme = QMOE_SCHEME_UNQUANTIZED;
  w->act_quant = QMOE_ACT_INFER;
  w->weight_strategy = QMOE_STRATEGY_INFER;
  w->weight_symmetric = -1;
  w->act_dtype = QMOE_DTYPE_BF16;
}

void qmoe_layer_desc_init(qmoe_layer_desc_t* d) {
  if (d == nullptr) return;
  std::memset(d, 0, sizeof(*d));
  qmoe_expert_weights_init(&d->experts);
  qmoe_router_config_init(&d->router);
  d->activation = QMOE_ACTIVATION_SILU_MUL;
  d->backend = QMOE_BACKEND_CPU;
}

qmoe_status_t qmoe_layer_create(const qmoe_layer_desc_t* desc, qmoe_layer_t** out) {
  return fence([&] {
    QMOE_CHECK(out != nullptr, kBadInput, "qmoe_layer_create: out is NULL");
    *out = nullptr;
    LayerBuild b = build_from_desc(desc, desc != nullptr && desc->borrow_weights != 0, nullptr);
    *out = make_layer(std::move(b.w), std::move(b.cfg), b.backend, std::move(b.shared), std::move(b.router_bias));
  });
}

void qmoe_layer_free(qmoe_layer_t* layer) { delete layer; }

qmoe_status_t qmoe_layer_get_props(const qmoe_layer_t* l, qmoe_layer_props_t* out) {
  return fence([&] {
    QMOE_CHECK(l != nullptr && out != nullptr, kBadInput, "qmoe_layer_get_props: NULL argument");
    out->backend = static_cast<int32_t>(l->backend);
    out->num_experts = l->num_experts;
    out->num_experts_global = l->num_experts_global;
    out->hidden = l->hidden;
    out->intermediate = l->intermediate;
    out->top_k = l->top_k;
    out->act_dtype = static_cast<int32_t>(l->act_dtype);
    out->scheme = static_cast<int32_t>(l->scheme);
    out->scheme_key = l->scheme_key.c_str();
    out->method_name = l->method.c_str();
  });
}

qmoe_status_t qmoe_layer_forward(qmoe_layer_t* l, const qmoe_tensor_t* x, const qmoe_tensor_t* router_logits,
                                 const qmoe_tensor_t* y, void* stream) {
  return fence([&] {
    QMOE_CHECK(l != nullptr, kBadInput, "layer is NULL");
    TensorDesc xd = describe(x, "x"), yd = describe(y, "y"), ld = describe(router_logits, "router_logits");
    int64_t m = check_io(l, xd, yd, "router_logits", ld);
    expect(ld, "router_logits", DType::kF32, {m, l->num_experts_global});
    require_host_backend_inputs(l, xd);
    std::lock_guard<std::mutex> lock(l->mu);
    if (l->cuda) {
      cuda_layer_forward(*l->cuda, xd, &ld, nullptr, nullptr, yd, stream);
    } else {
      write_out(l->impl->forward(host_view(xd, "x"), host_view(ld, "router_logits")), yd, stream);
    }
  });
}

qmoe_status_t qmoe_layer_forward_routed(qmoe_layer_t* l, const qmoe_tensor_t* x, const qmoe_tensor_t* topk_weights,
                                        const qmoe_tensor_t* topk_ids, const qmoe_tensor_t* y, void* stream) {
  return fence([&] { forward_routed(l, x, topk_weights, topk_ids, y, stream); });
}

qmoe_status_t qmoe_fused_experts(const qmoe_layer_desc_t* desc, const qmoe_tensor_t* x,
                                 const qmoe_tensor_t* topk_weights, const qmoe_tensor_t* topk_ids,
                                 const qmoe_tensor_t* y, void* stream) {
  return fence([&] {
    QMOE_CHECK(desc != nullptr, kBadInput, "qmoe_fused_experts: layer descriptor is NULL");
    QMOE_CHECK(topk_ids != nullptr && topk_ids->ndim == 2, kBadInput, "topk_ids: expected [M, top_k]");
    qmoe_layer_desc_t d = *desc;  // top_k comes from the routing given, not from desc->router
    d.router.top_k = static_cast<int32_t>(topk_ids->shape[1]);
    if (d.router.top_k < 1) d.router.top_k = 1;
    LayerBuild b = build_from_desc(&d, true, stream);
    std::unique_ptr<qmoe_layer> l(
        make_layer(std::move(b.w), std::move(b.cfg), b.backend, std::move(b.shared), std::move(b.router_bias)));
    forward_routed(l.get(), x, topk_weights, topk_ids, y, stream);
  });
}

}  // extern "C"
