// The reference backend: the exact MoE forward of docs/numerics.md for every scheme, fp32
// accumulation, activation quantization emulated bit-exactly (act_quant.h). Per touched expert:
// quantize its token rows, then for each output row (OpenMP) decode the weight row once and
// reduce it against every routed token with the scheme's product formula (numerics.md "Products").
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/codecs.h"
#include "cpu/ref/act_quant.h"
#include "cpu/ref/proj_view.h"
#include "cpu/ref/reference.h"
#include "dispatch/backends.h"

namespace qmoe::ref {

using namespace qmoe::codec;
using detail::ProjView;
using detail::WKind;

namespace {

float round_act(DType dt, float v) {
  switch (dt) {
    case DType::kBF16: return round_bf16(v);
    case DType::kF16: return round_f16(v);
    default: return v;
  }
}

// One expert's GEMM input rows after activation quantization.
struct ActRows {
  ActQuant kind = ActQuant::kNone;
  int64_t n = 0, K = 0, S = 0;   // rows, columns, scales per row
  std::vector<float> val;        // [n, K]: the value (A16) or the decoded code (e4m3 / e2m1 value)
  std::vector<int32_t> ival;     // [n, K]: int8 codes (kINT8Token)
  std::vector<float> scale;      // [n, S]: fp8 / int8 scale, or NVFP4 block scale (decoded e4m3)
  float inv_G = 0.f;             // NVFP4: 1.f / G with G = 1.f / A
};

// Static scale of expert e for this projection: the larger of the shards' scales (the GEMM input
// is quantized once, and gate and up see the same input: calibrated checkpoints store equal values).
float static_scale(const ProjWeights& p, int64_t e) {
  const int64_t S = p.input_scale.size(1);
  float s = 0.f;
  for (int64_t i = 0; i < S; ++i) s = std::max(s, p.input_scale.data<float>()[e * S + i]);
  return s;
}

ActRows quantize_rows(ActQuant kind, const float* a, int64_t n, int64_t K, float stat) {
  ActRows r;
  r.kind = kind;
  r.n = n;
  r.K = K;
  r.S = act_scales_per_row(kind, K);
  r.val.assign(a, a + n * K);
  if (kind == ActQuant::kNone) return r;
  r.scale.resize(n * r.S);
  std::vector<uint8_t> q(K), s8(r.S);
  if (kind == ActQuant::kINT8Token) r.ival.resize(n * K);
  if (kind == ActQuant::kNVFP4) r.inv_G = 1.f / (1.f / stat);
  for (int64_t j = 0; j < n; ++j) {
    const float* x = a + j * K;
    float* v = r.val.data() + j * K;
    float* s = r.scale.data() + j * r.S;
    switch (kind) {
      case ActQuant::kFP8Token: s[0] = quantize_fp8_token(x, K, q.data()); break;
      case ActQuant::kFP8Group128: quantize_fp8_group128(x, K, q.data(), s); break;
      case ActQuant::kFP8Tensor: quantize_fp8_static(x, K, stat, q.data()); s[0] = stat; break;
      case ActQuant::kINT8Token: {
        s[0] = quantize_int8_token(x, K, reinterpret_cast<int8_t*>(q.data()));
        for (int64_t k = 0; k < K; ++k) r.ival[j * K + k] = static_cast<int8_t>(q[k]);
        break;
      }
      case ActQuant::kNVFP4:
        quantize_nvfp4(x, K, stat, q.data(), s8.data());
        for (int64_t b = 0; b < r.S; ++b) s[b] = e4m3_to_f32(s8[b]);
        break;
      case ActQuant::kNone: break;
    }
    if (kind == ActQuant::kNVFP4) {
      for (int64_t k = 0; k < K; ++k) v[k] = e2m1_to_f32(q[k]);
    } else if (kind != ActQuant::kINT8Token) {
      for (int64_t k = 0; k < K; ++k) v[k] = e4m3_to_f32(q[k]);
    }
  }
  return r;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t k = 0; k < n; ++k) acc += a[k] * b[k];
  return acc;
}

inline int32_t idot(const int32_t* a, const int32_t* b, int64_t n) {
  int32_t acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t k = 0; k < n; ++k) acc += a[k] * b[k];
  return acc;
}

// out [n, N] = a [n, K] x W[e]^T with the scheme's product formula, + bias.
void gemm(const ProjView& v, int64_t e, const ActRows& a, float* out) {
  const int64_t N = v.N, K = v.K, n = a.n;
  const bool int_acts = a.kind == ActQuant::kINT8Token;
#pragma omp parallel
  {
    std::vector<float> w(K);
    std::vector<int32_t> wi(int_acts ? K : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      if (a.kind == ActQuant::kNone) {
        // Everything 16-bit: weights dequantized exactly to fp32, fp32 products and sums.
        detail::dequant_row(v, e, r, w.data());
        for (int64_t j = 0; j < n; ++j) out[j * N + r] = dot(a.val.data() + j * K, w.data(), K);
        continue;
      }
      detail::decode_row_codes(v, e, r, w.data());
      if (int_acts)
        for (int64_t k = 0; k < K; ++k) wi[k] = static_cast<int32_t>(w[k]);  // u - z, exact
      for (int64_t j = 0; j < n; ++j) {
        const float* qa = a.val.data() + j * K;
        const float* sa = a.scale.data() + j * a.S;
        float acc = 0.f, res = 0.f;
        switch (v.kind) {
          case WKind::kFP8: {
            // Segments on which both scales are constant: act group (128) and weight block (bk).
            const int64_t ga = a.kind == ActQuant::kFP8Group128 ? kFP8GroupSize : K;
            const int64_t gw = v.strat == Strategy::kBlock ? v.bk : K;
            for (int64_t k0 = 0; k0 < K;) {
              const int64_t k1 = std::min({K, (k0 / ga + 1) * ga, (k0 / gw + 1) * gw});
              const float part = dot(qa + k0, w.data() + k0, k1 - k0);  // e4m3 * e4m3 products are exact
              const float s_a = sa[a.kind == ActQuant::kFP8Group128 ? k0 / ga : 0];
              const float s_w = detail::row_scale(v, e, r, v.strat == Strategy::kBlock ? k0 / gw : 0);
              acc += part * (s_a * s_w);
              k0 = k1;
            }
            res = acc;
            break;
          }
          case WKind::kInt: {
            // Per weight group: exact sum of qa * (u - z), times the group scale; then times sa.
            const int64_t G = v.group > 0 ? v.group : K;
            for (int64_t g = 0, k0 = 0; k0 < K; ++g, k0 += G) {
              const int64_t len = std::min(K, k0 + G) - k0;
              const float part = int_acts ? static_cast<float>(idot(a.ival.data() + j * K + k0, wi.data() + k0, len))
                                          : dot(qa + k0, w.data() + k0, len);
              acc += part * detail::row_scale(v, e, r, g);
            }
            res = acc * sa[0];
            break;
          }
          case WKind::kNVFP4: {
            // Per 16-block: exact e2m1 x e2m1 sum times the exact product of the two e4m3 scales.
            for (int64_t b = 0, k0 = 0; k0 < K; ++b, k0 += 16) {
              const float part = dot(qa + k0, w.data() + k0, std::min<int64_t>(16, K - k0));
              acc += part * (sa[b] * detail::row_scale(v, e, r, b));
            }
            res = (acc * a.inv_G) * v.p->global_scale.data<float>()[e * v.shards + v.shard_of(r)];
            break;
          }
          default: fail(ErrorKind::kInternal, "reference: quantized activations with weight kind ", int(v.kind));
        }
        out[j * N + r] = res;
      }
    }
  }
  if (v.p->bias.defined())
    for (int64_t j = 0; j < n; ++j)
      for (int64_t r = 0; r < N; ++r) out[j * N + r] += detail::load_scalar(v.p->bias, e * N + r);
}

void to_f32_rows(const Tensor& x, float* out) {
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::kF32: std::copy_n(x.data<float>(), n, out); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x.data<uint16_t>()[i]); break;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(x.data<uint16_t>()[i]); break;
    default: bad_input("reference: x has dtype ", dtype_name(x.dtype()), ", expected BF16/F16/F32");
  }
}

}  // namespace

float apply_activation(Activation act, float g, float u) {
  switch (act) {
    case Activation::kSiluMul: return (g / (1.f + std::exp(-g))) * u;
    case Activation::kGeluMul: return (0.5f * g * (1.f + std::erf(g * 0.7071067811865476f))) * u;
    case Activation::kSwigluOai: {
      const float gc = std::min(g, 7.f), uc = std::clamp(u, -7.f, 7.f);
      const float glu = gc * (1.f / (1.f + std::exp(-(gc * 1.702f))));
      return (uc + 1.f) * glu;
    }
  }
  return 0.f;
}

std::vector<float> reference_expert(const ExpertWeights& w, Activation act, int64_t e, const float* a, int64_t n) {
  const ProjView v13 = detail::make_view(w, true), v2 = detail::make_view(w, false);
  const int64_t H = w.hidden, I = w.intermediate;
  const ActQuant aq = w.scheme.act;
  const bool stat = aq == ActQuant::kFP8Tensor || aq == ActQuant::kNVFP4;
  ActRows a1 = quantize_rows(aq, a, n, H, stat ? static_scale(w.w13, e) : 0.f);
  std::vector<float> g(n * 2 * I);
  gemm(v13, e, a1, g.data());
  std::vector<float> h(n * I);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < I; ++i)
      h[j * I + i] = round_act(w.act_dtype, apply_activation(act, g[j * 2 * I + i], g[j * 2 * I + I + i]));
  ActRows a2 = quantize_rows(aq, h.data(), n, I, stat ? static_scale(w.w2, e) : 0.f);
  std::vector<float> o(n * H);
  gemm(v2, e, a2, o.data());
  return o;
}

Tensor reference_forward_routed(const ExpertWeights& w, const MoeConfig& cfg, const ExpertWeights* shared,
                                const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids) {
  const int64_t H = w.hidden;
  QMOE_CHECK(x.defined() && x.dim() == 2 && x.size(1) == H && x.dtype() == w.act_dtype, kBadInput,
             "reference forward: x must be ", dtype_name(w.act_dtype), " [M, ", H, "], got ",
             x.defined() ? dtype_name(x.dtype()) : "absent", " ", x.defined() ? shape_str(x.shape()) : "");
  const int64_t M = x.size(0);
  QMOE_CHECK(topk_weights.defined() && topk_ids.defined() && topk_weights.dtype() == DType::kF32 &&
                 topk_ids.dtype() == DType::kI32 && topk_weights.dim() == 2 && topk_weights.shape() == topk_ids.shape() &&
                 topk_weights.size(0) == M,
             kBadInput, "reference forward: expected topk_weights F32 [", M, ", k] and topk_ids I32 [", M, ", k], got ",
             topk_weights.defined() ? dtype_name(topk_weights.dtype()) : "absent", " ",
             topk_weights.defined() ? shape_str(topk_weights.shape()) : "", " and ",
             topk_ids.defined() ? dtype_name(topk_ids.dtype()) : "absent", " ",
             topk_ids.defined() ? shape_str(topk_ids.shape()) : "");
  const int64_t k = topk_ids.size(1);
  const int num_global = cfg.num_experts > 0 ? cfg.num_experts : w.num_experts;
  const bool on_input = cfg.router.apply_router_weight_on_input;

  // Flat (token, slot) indices per local expert, in increasing flat order.
  std::vector<std::vector<int64_t>> lists(w.num_experts);
  for (int64_t i = 0; i < M * k; ++i) {
    const int32_t g = topk_ids.data<int32_t>()[i];
    QMOE_CHECK(g >= 0 && g < num_global, kBadInput, "reference forward: topk_ids[", i / k, ", ", i % k, "] = ", g,
               " outside [0, ", num_global, ")");
    const int32_t l = cfg.expert_map.empty() ? g : cfg.expert_map[g];
    if (l < 0) continue;  // expert on another rank: contributes nothing here
    QMOE_CHECK(l < w.num_experts, kBadInput, "reference forward: expert_map[", g, "] = ", l, " but only ",
               w.num_experts, " local experts");
    lists[l].push_back(i);
  }

  std::vector<float> xf(M * H), y(M * H, 0.f), a;
  to_f32_rows(x, xf.data());
  const float* tw = topk_weights.data<float>();
  // y accumulates expert by expert in increasing local id (kernels may use another order).
  for (int64_t e = 0; e < w.num_experts; ++e) {
    const auto& L = lists[e];
    if (L.empty()) continue;
    const int64_t n = static_cast<int64_t>(L.size());
    a.resize(n * H);
    for (int64_t j = 0; j < n; ++j) {
      const float* xr = xf.data() + (L[j] / k) * H;
      if (on_input) {
        for (int64_t c = 0; c < H; ++c) a[j * H + c] = round_act(w.act_dtype, xr[c] * tw[L[j]]);
      } else {
        std::copy_n(xr, H, a.data() + j * H);
      }
    }
    std::vector<float> o = reference_expert(w, cfg.activation, e, a.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      const float wt = on_input ? 1.f : tw[L[j]];
      float* yr = y.data() + (L[j] / k) * H;
      for (int64_t c = 0; c < H; ++c) yr[c] += wt * o[j * H + c];
    }
  }
  if (shared) {
    std::vector<float> s = reference_expert(*shared, cfg.activation, 0, xf.data(), M);
    for (int64_t i = 0; i < M * H; ++i) y[i] += s[i];
  }
  Tensor out(w.act_dtype, {M, H});
  for (int64_t i = 0; i < M * H; ++i) {
    switch (w.act_dtype) {
      case DType::kBF16: out.data_mut<uint16_t>()[i] = f32_to_bf16(y[i]); break;
      case DType::kF16: out.data_mut<uint16_t>()[i] = f32_to_f16(y[i]); break;
      default: out.data_mut<float>()[i] = y[i]; break;
    }
  }
  return out;
}

namespace {

class ReferenceLayer final : public MoeLayer {
 public:
  explicit ReferenceLayer(qmoe::detail::LayerArgs a) : a_(std::move(a)) {}

  Tensor forward(const Tensor& x, const Tensor& router_logits) override {
    QMOE_CHECK(router_logits.defined() && router_logits.dim() == 2 && router_logits.size(1) == a_.cfg.num_experts &&
                   x.defined() && x.dim() == 2 && router_logits.size(0) == x.size(0),
               kBadInput, "reference forward: router_logits must be [M, ", a_.cfg.num_experts, "] with M = rows of x, got ",
               router_logits.defined() ? shape_str(router_logits.shape()) : "absent");
    RoutingResult r = route(router_logits, a_.cfg.router, a_.router_bias);
    return forward_routed(x, r.topk_weights, r.topk_ids);
  }
  Tensor forward_routed(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids) override {
    return reference_forward_routed(a_.weights, a_.cfg, a_.shared ? &*a_.shared : nullptr, x, topk_weights, topk_ids);
  }
  Backend backend() const override { return Backend::kReference; }
  std::string method_name() const override { return "reference/" + a_.weights.scheme.key(); }

 private:
  qmoe::detail::LayerArgs a_;
};

}  // namespace
}  // namespace qmoe::ref

namespace qmoe::detail {

std::string reference_can_implement(const LayerArgs& a) {
  const ExpertWeights& w = a.weights;
  const MoeConfig& c = a.cfg;
  if (c.num_experts <= 0) return str("MoeConfig.num_experts must be > 0, got ", c.num_experts);
  if (c.expert_map.empty()) {
    if (c.num_experts != w.num_experts)
      return str("without an expert_map the router width ", c.num_experts, " must equal the ", w.num_experts,
                 " experts of the weights");
  } else {
    if (static_cast<int64_t>(c.expert_map.size()) != c.num_experts)
      return str("expert_map has ", c.expert_map.size(), " entries, expected num_experts = ", c.num_experts);
    for (size_t g = 0; g < c.expert_map.size(); ++g)
      if (c.expert_map[g] < -1 || c.expert_map[g] >= w.num_experts)
        return str("expert_map[", g, "] = ", c.expert_map[g], " outside [-1, ", w.num_experts, ")");
  }
  if (c.router.top_k <= 0 || c.router.top_k > c.num_experts)
    return str("top_k = ", c.router.top_k, " outside [1, ", c.num_experts, "]");
  const ExpertWeights* all[2] = {&w, a.shared ? &*a.shared : nullptr};
  for (const ExpertWeights* p : all) {
    if (!p) continue;
    const SchemeKind k = p->scheme.kind;
    if ((k == SchemeKind::kW4A8FP8 || k == SchemeKind::kW4A8INT8 || k == SchemeKind::kINT8W8A8) &&
        (p->w13.g_idx.defined() || p->w2.g_idx.defined()))
      return str("scheme ", p->scheme.key(), " with g_idx (actorder) has no exact integer product form");
  }
  if (a.shared) {
    if (a.shared->num_experts != 1) return str("the shared expert must have E = 1, got ", a.shared->num_experts);
    if (a.shared->hidden != w.hidden || a.shared->act_dtype != w.act_dtype)
      return str("the shared expert has H = ", a.shared->hidden, " / ", dtype_name(a.shared->act_dtype),
                 ", the routed experts H = ", w.hidden, " / ", dtype_name(w.act_dtype));
  }
  return "";
}

std::unique_ptr<MoeLayer> make_reference_layer(LayerArgs a) { return std::make_unique<ref::ReferenceLayer>(std::move(a)); }

}  // namespace qmoe::detail
