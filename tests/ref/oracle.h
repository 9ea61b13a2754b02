// The tests' independent float64 model of the MoE layer (docs/numerics.md), written from the
// contract without the reference's code: weights dequantized element by element with the codecs in
// double; activations quantized by a plain transcription of the numerics.md fp32 formulas; GEMMs
// as triple loops in double. Each output also gets a rigorous per-element error bound for the
// reference's fp32 arithmetic, including the intermediate roundings it may resolve differently.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/tensor_check.h"
#include "core/codecs.h"
#include "qmoe/moe.h"

namespace qmoe::oracle {

using namespace qmoe::codec;

constexpr double kU = 5.9604644775390625e-08;  // 2^-24, unit roundoff of fp32

inline double scalar(const Tensor& t, int64_t i, bool u8_e8m0 = false) {
  switch (t.dtype()) {
    case DType::kU8: return u8_e8m0 ? std::ldexp(1.0, int(t.data<uint8_t>()[i]) - 127) : t.data<uint8_t>()[i];
    case DType::kE8M0: return std::ldexp(1.0, int(t.data<uint8_t>()[i]) - 127);
    default: return test::value_at(t, i);
  }
}

// W[e] of a projection as double [N, K], straight from numerics.md "Weight dequantization".
inline std::vector<double> dequant(const ExpertWeights& w, bool is_w13, int64_t e) {
  const ProjWeights& p = is_w13 ? w.w13 : w.w2;
  const int64_t N = is_w13 ? 2LL * w.intermediate : w.hidden, K = is_w13 ? w.hidden : w.intermediate;
  const int S = is_w13 ? 2 : 1;
  const SchemeKind kind = w.scheme.kind;
  std::vector<double> out(N * K);
  for (int64_t n = 0; n < N; ++n) {
    const int shard = static_cast<int>(n / (N / S));
    for (int64_t k = 0; k < K; ++k) {
      const int64_t flat = (e * N + n) * K + k;
      double v = 0;
      switch (kind) {
        case SchemeKind::kUnquantized: v = test::value_at(p.weight, flat); break;
        case SchemeKind::kWNA16: case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8FP8: case SchemeKind::kW4A8INT8: {
          const int b = w.scheme.weights.num_bits;
          const bool grouped = w.scheme.weights.strat() == Strategy::kGroup;
          const int64_t ng = grouped ? (K + w.group_size - 1) / w.group_size : 1;
          const int64_t g = p.g_idx.defined() ? p.g_idx.data<int32_t>()[e * K + k] : grouped ? k / w.group_size : 0;
          const int u = b == 4 ? (p.weight.data<uint8_t>()[(e * N + n) * (K / 2) + k / 2] >> (4 * (k % 2))) & 15
                               : p.weight.data<uint8_t>()[flat];
          const int z = w.scheme.weights.symmetric ? (1 << (b - 1)) : p.zero_point.data<uint8_t>()[(e * N + n) * ng + g];
          v = (u - z) * scalar(p.scale, (e * N + n) * ng + g);
          break;
        }
        case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: {
          double s;
          switch (w.scheme.weights.strat()) {
            case Strategy::kTensor: s = scalar(p.scale, e * S + shard); break;
            case Strategy::kBlock: {
              const int64_t bn = w.block[0], bk = w.block[1], nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
              s = scalar(p.scale, (e * nb + n / bn) * kb + k / bk);
              break;
            }
            default: s = scalar(p.scale, e * N + n);
          }
          v = e4m3_to_f32(p.weight.data<uint8_t>()[flat]) * s;
          break;
        }
        case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: case SchemeKind::kMXFP4A16: {
          const uint8_t c = (p.weight.data<uint8_t>()[(e * N + n) * (K / 2) + k / 2] >> (4 * (k % 2))) & 15;
          const bool nv = kind != SchemeKind::kMXFP4A16;
          const int64_t G = nv ? 16 : 32, ng = (K + G - 1) / G;
          const double s = scalar(p.scale, (e * N + n) * ng + k / G, !nv);
          v = e2m1_to_f32(c) * s * (nv ? p.global_scale.data<float>()[e * S + shard] : 1.0);
          break;
        }
      }
      out[n * K + k] = v;
    }
  }
  return out;
}

// Quantize-dequantize one activation row with the numerics.md formulas (fp32 arithmetic, as the
// contract defines them). `stat`: fp8 static scale or NVFP4 input multiplier A.
inline std::vector<double> quant_dequant(ActQuant kind, const std::vector<float>& x, float stat) {
  const int64_t K = static_cast<int64_t>(x.size());
  std::vector<double> out(K);
  auto unit = [&](int64_t k0, int64_t k1) {
    float m = 0;
    for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(x[k]));
    return m;
  };
  switch (kind) {
    case ActQuant::kNone:
      for (int64_t k = 0; k < K; ++k) out[k] = x[k];
      break;
    case ActQuant::kFP8Token: case ActQuant::kFP8Group128: case ActQuant::kFP8Tensor: {
      const int64_t G = kind == ActQuant::kFP8Group128 ? 128 : K;
      for (int64_t k0 = 0; k0 < K; k0 += G) {
        const int64_t k1 = std::min(K, k0 + G);
        const float s = kind == ActQuant::kFP8Tensor ? stat : std::max(unit(k0, k1), 1e-10f) / 448.f;
        for (int64_t k = k0; k < k1; ++k) out[k] = double(e4m3_to_f32(f32_to_e4m3(x[k] / s, true))) * s;
      }
      break;
    }
    case ActQuant::kINT8Token: {
      const float s = std::max(unit(0, K), 1e-10f) / 127.f;
      for (int64_t k = 0; k < K; ++k) out[k] = std::clamp(std::nearbyint(x[k] / s), -128.f, 127.f) * double(s);
      break;
    }
    case ActQuant::kNVFP4: {
      const float G = 1.f / stat, inv_G = 1.f / G;
      for (int64_t k0 = 0; k0 < K; k0 += 16) {
        const int64_t k1 = std::min(K, k0 + 16);
        const float s = e4m3_to_f32(f32_to_e4m3(G * (unit(k0, k1) * (1.f / 6.f)), true));
        const float r = s == 0.f ? 0.f : 1.f / (s * inv_G);
        for (int64_t k = k0; k < k1; ++k)
          out[k] = double(e2m1_to_f32(f32_to_e2m1(std::clamp(x[k] * r, -6.f, 6.f)))) * s * double(inv_G);
      }
      break;
    }
  }
  return out;
}

inline float round_act(DType dt, double v) {
  const float f = static_cast<float>(v);
  return dt == DType::kBF16 ? round_bf16(f) : dt == DType::kF16 ? round_f16(f) : f;
}

inline double act_fn(Activation a, double g, double u) {
  switch (a) {
    case Activation::kSiluMul: return g / (1 + std::exp(-g)) * u;
    case Activation::kGeluMul: return 0.5 * g * (1 + std::erf(g / std::sqrt(2.0))) * u;
    case Activation::kSwigluOai: {
      const double gc = std::min(g, 7.0), uc = std::clamp(u, -7.0, 7.0);
      return (uc + 1) * gc / (1 + std::exp(-1.702 * gc));
    }
  }
  return 0;
}

// Output of one expert on one input row: value and error bound, both [H].
struct ExpertOut {
  std::vector<double> o, tol;
};

// Expected quantized GEMM input and, per element, how far the reference's may be from it when its
// fp32 value (within +-err of `v`) rounds or quantizes differently: the dequantized input under
// every extreme choice (each element at the low / high end of its interval, and the choices that
// give the smallest / largest quantization-unit amax).
inline void quantize_with_slack(ActQuant kind, DType act_dtype, const std::vector<double>& v,
                                const std::vector<double>& err, float stat, std::vector<double>& q,
                                std::vector<double>& slack) {
  const size_t K = v.size();
  std::vector<float> mid(K), lo(K), hi(K), big(K), small(K);
  bool any = false;
  for (size_t i = 0; i < K; ++i) {
    mid[i] = round_act(act_dtype, v[i]);
    lo[i] = round_act(act_dtype, v[i] - err[i]);
    hi[i] = round_act(act_dtype, v[i] + err[i]);
    big[i] = std::fabs(lo[i]) > std::fabs(hi[i]) ? lo[i] : hi[i];
    small[i] = std::fabs(lo[i]) > std::fabs(hi[i]) ? hi[i] : lo[i];
    any |= lo[i] != hi[i];
  }
  q = quant_dequant(kind, mid, stat);
  slack.assign(K, 0.0);
  if (!any) return;
  for (const auto* alt : {&lo, &hi, &big, &small}) {
    std::vector<double> a = quant_dequant(kind, *alt, stat);
    for (size_t i = 0; i < K; ++i) slack[i] = std::max(slack[i], std::fabs(a[i] - q[i]));
  }
}

// act16 > 0: the GEMM inputs enter in 16-bit block fixed point (the avx2 kernels' bf16 activations,
// docs/numerics.md "Products"): per block of act16 columns q = rint(x * 2^(14 - E)), 2^E <= amax (E
// floored at -112), so each input is off by at most 2^(E - 15) <= max(2^-15 amax, 2^-127) of its
// block. Bound on one row's inputs (their magnitudes at most `mag`): that per column.
inline std::vector<double> act16_err(const std::vector<double>& mag, int act16) {
  std::vector<double> d(mag.size(), 0.0);
  for (size_t b = 0; b < mag.size(); b += size_t(act16)) {
    const size_t e = std::min(mag.size(), b + size_t(act16));
    double amax = 0;
    for (size_t i = b; i < e; ++i) amax = std::max(amax, mag[i]);
    for (size_t i = b; i < e; ++i) d[i] = std::max(std::ldexp(amax, -15), std::ldexp(1.0, -127));
  }
  return d;
}

// One expert (weights w13d [2I, H], w2d [H, I] dequantized) on input row a (exact act-dtype values).
inline ExpertOut expert(const ExpertWeights& w, Activation act, int64_t e, const std::vector<double>& w13d,
                        const std::vector<double>& w2d, const std::vector<float>& a, int act16 = 0) {
  const int64_t H = w.hidden, I = w.intermediate;
  const ActQuant aq = w.scheme.act;
  auto stat_of = [&](const ProjWeights& p) {
    if (!p.input_scale.defined()) return 0.f;
    float s = 0;
    for (int64_t i = 0; i < p.input_scale.size(1); ++i) s = std::max(s, p.input_scale.data<float>()[e * p.input_scale.size(1) + i]);
    return s;
  };
  const std::vector<double> qa = quant_dequant(aq, a, stat_of(w.w13));
  std::vector<double> qa16(H, 0.0);  // act16: bound on each input's fixed-point error
  if (act16 > 0) {
    std::vector<double> mag(H);
    for (int64_t k = 0; k < H; ++k) mag[k] = std::fabs(qa[k]);
    qa16 = act16_err(mag, act16);
  }
  std::vector<double> g(2 * I), ge(2 * I);
  for (int64_t r = 0; r < 2 * I; ++r) {
    double s = 0, m2 = 0;
    for (int64_t k = 0; k < H; ++k) {
      s += qa[k] * w13d[r * H + k];
      m2 += qa[k] * w13d[r * H + k] * qa[k] * w13d[r * H + k];
    }
    double b = w.w13.bias.defined() ? test::value_at(w.w13.bias, e * 2 * I + r) : 0.0;
    g[r] = s + b;
    // Window in which the reference's fp32 g may lie. The worst-case bound (K u sum|t|) would call
    // almost every h ambiguous and make the test blind, so this uses the statistical size of fp32
    // summation error, ~u sqrt(K) |t|_2 (rounding errors of the partial sums add like a random
    // walk), with a 6x margin; a rounding of h that still differs is then allowed for explicitly.
    ge[r] = 6 * kU * std::sqrt(double(H)) * std::sqrt(m2) + 2 * kU * std::fabs(g[r]);
    if (act16 > 0)  // rigorous: sum |w| x the inputs' fixed-point error
      for (int64_t k = 0; k < H; ++k) ge[r] += std::fabs(w13d[r * H + k]) * qa16[k];
  }
  std::vector<double> h(I), he(I);
  for (int64_t i = 0; i < I; ++i) {
    const double gg = g[i], uu = g[I + i], c = act_fn(act, gg, uu);
    double d = 0;
    for (double sg : {-1.0, 1.0})
      for (double su : {-1.0, 1.0}) d = std::max(d, std::fabs(act_fn(act, gg + sg * ge[i], uu + su * ge[I + i]) - c));
    // fp32 evaluation of exp/erf and a few products: 16 ulps relative, plus the cancellation in
    // 1 + erf(x) (gelu) and 1 + exp(-x) for very negative gates: an absolute u * |g| * |u| term.
    h[i] = c;
    he[i] = 2 * d + 16 * kU * std::fabs(c) + 4 * kU * (std::fabs(gg) + 1) * (std::fabs(uu) + 1);
  }
  std::vector<double> qh, slack;
  quantize_with_slack(aq, w.act_dtype, h, he, stat_of(w.w2), qh, slack);
  std::vector<double> qh16(I, 0.0);  // act16: h's blocks, their magnitudes at most |qh| + slack
  if (act16 > 0) {
    std::vector<double> mag(I);
    for (int64_t i = 0; i < I; ++i) mag[i] = std::fabs(qh[i]) + slack[i];
    qh16 = act16_err(mag, act16);
  }
  ExpertOut out{std::vector<double>(H), std::vector<double>(H)};
  for (int64_t c = 0; c < H; ++c) {
    double s = 0, m = 0, sl = 0, q16 = 0;
    for (int64_t i = 0; i < I; ++i) {
      s += qh[i] * w2d[c * I + i];
      m += std::fabs(qh[i] * w2d[c * I + i]);
      sl += slack[i] * std::fabs(w2d[c * I + i]);
      q16 += qh16[i] * std::fabs(w2d[c * I + i]);
    }
    double b = w.w2.bias.defined() ? test::value_at(w.w2.bias, e * H + c) : 0.0;
    out.o[c] = s + b;
    out.tol[c] = (I + 8) * kU * (m + sl + q16) + sl + q16 + kU * std::fabs(out.o[c]);
  }
  return out;
}

struct LayerOut {
  std::vector<double> y, tol;  // [M, H]
};

// The whole layer: routing given; Llama 4 (on_input) scales the expert input; shared expert added.
// act16 / act16_shared: the routed / shared experts' inputs in 16-bit block fixed point (see expert()).
inline LayerOut layer(const ExpertWeights& w, const MoeConfig& cfg, const ExpertWeights* shared, const Tensor& x,
                      const Tensor& topk_w, const Tensor& topk_ids, int act16 = 0, int act16_shared = 0) {
  const int64_t M = x.size(0), H = w.hidden, k = topk_ids.size(1);
  const bool on_input = cfg.router.apply_router_weight_on_input;
  LayerOut r{std::vector<double>(M * H, 0.0), std::vector<double>(M * H, 0.0)};
  std::vector<double> mag(M * H, 0.0);
  std::vector<std::vector<double>> w13d(w.num_experts), w2d(w.num_experts);
  for (int64_t t = 0; t < M; ++t) {
    std::vector<float> xr(H);
    for (int64_t c = 0; c < H; ++c) xr[c] = static_cast<float>(test::value_at(x, t * H + c));
    auto add = [&](const ExpertOut& o, double wt) {
      for (int64_t c = 0; c < H; ++c) {
        r.y[t * H + c] += wt * o.o[c];
        r.tol[t * H + c] += std::fabs(wt) * o.tol[c];
        mag[t * H + c] += std::fabs(wt * o.o[c]);
      }
    };
    for (int64_t j = 0; j < k; ++j) {
      const int32_t g = topk_ids.data<int32_t>()[t * k + j];
      const int32_t e = cfg.expert_map.empty() ? g : cfg.expert_map[g];
      if (e < 0) continue;
      if (w13d[e].empty()) {
        w13d[e] = dequant(w, true, e);
        w2d[e] = dequant(w, false, e);
      }
      const float wt = topk_w.data<float>()[t * k + j];
      std::vector<float> a = xr;
      if (on_input)
        for (auto& v : a) v = round_act(w.act_dtype, double(v * wt));  // fp32 product, then act-dtype rounding
      add(expert(w, cfg.activation, e, w13d[e], w2d[e], a, act16), on_input ? 1.0 : wt);
    }
    if (shared)
      add(expert(*shared, cfg.activation, 0, dequant(*shared, true, 0), dequant(*shared, false, 0), xr, act16_shared), 1.0);
  }
  for (int64_t i = 0; i < M * H; ++i) {
    // fp32 weighting and summation over the k (+ shared) terms, then the final act-dtype rounding.
    const double acc = r.tol[i] + (k + 3) * kU * mag[i];
    r.tol[i] = 2 * acc + test::half_ulp_rel(w.act_dtype) * (std::fabs(r.y[i]) + acc) * 1.0001 + 1e-30;
  }
  return r;
}

}  // namespace qmoe::oracle
