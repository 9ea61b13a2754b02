// Activation quantization emulation: the formulas of docs/numerics.md, written once, scalar fp32,
// in exactly the operation order the contract states (divisions stay divisions).
#include "cpu/ref/act_quant.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/codecs.h"

namespace qmoe::ref {

using namespace qmoe::codec;

int64_t act_scales_per_row(ActQuant kind, int64_t K) {
  switch (kind) {
    case ActQuant::kFP8Group128: return (K + kFP8GroupSize - 1) / kFP8GroupSize;
    case ActQuant::kNVFP4: return (K + kNVFP4GroupSize - 1) / kNVFP4GroupSize;
    case ActQuant::kNone: return 0;
    default: return 1;
  }
}

static float amax_of(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

float quantize_fp8_token(const float* x, int64_t K, uint8_t* q) {
  float s = std::max(amax_of(x, K), 1e-10f) / 448.f;
  for (int64_t k = 0; k < K; ++k) q[k] = f32_to_e4m3(x[k] / s, true);
  return s;
}

void quantize_fp8_group128(const float* x, int64_t K, uint8_t* q, float* s) {
  for (int64_t g = 0, k0 = 0; k0 < K; ++g, k0 += kFP8GroupSize) {
    int64_t n = std::min<int64_t>(kFP8GroupSize, K - k0);
    s[g] = quantize_fp8_token(x + k0, n, q + k0);
  }
}

void quantize_fp8_static(const float* x, int64_t K, float s, uint8_t* q) {
  for (int64_t k = 0; k < K; ++k) q[k] = f32_to_e4m3(x[k] / s, true);
}

float quantize_int8_token(const float* x, int64_t K, int8_t* q) {
  float s = std::max(amax_of(x, K), 1e-10f) / 127.f;
  for (int64_t k = 0; k < K; ++k) {
    float r = std::nearbyint(x[k] / s);  // default rounding mode: to nearest even
    q[k] = static_cast<int8_t>(std::clamp(r, -128.f, 127.f));
  }
  return s;
}

void quantize_nvfp4(const float* x, int64_t K, float A, uint8_t* q, uint8_t* s) {
  const float G = 1.f / A;
  const float inv_G = 1.f / G;
  for (int64_t b = 0, k0 = 0; k0 < K; ++b, k0 += kNVFP4GroupSize) {
    int64_t n = std::min<int64_t>(kNVFP4GroupSize, K - k0);
    float vmax = amax_of(x + k0, n);
    uint8_t sc = f32_to_e4m3(G * (vmax * (1.f / 6.f)), true);
    s[b] = sc;
    float sf = e4m3_to_f32(sc);
    float r = sf == 0.f ? 0.f : 1.f / (sf * inv_G);
    for (int64_t i = 0; i < n; ++i) q[k0 + i] = f32_to_e2m1(std::clamp(x[k0 + i] * r, -6.f, 6.f));
  }
}

static void row_to_f32(const Tensor& x, int64_t m, float* out) {
  int64_t K = x.size(1);
  switch (x.dtype()) {
    case DType::kF32: std::copy_n(x.data<float>() + m * K, K, out); break;
    case DType::kBF16:
      for (int64_t k = 0; k < K; ++k) out[k] = bf16_to_f32(x.data<uint16_t>()[m * K + k]);
      break;
    case DType::kF16:
      for (int64_t k = 0; k < K; ++k) out[k] = f16_to_f32(x.data<uint16_t>()[m * K + k]);
      break;
    default: bad_input("quantize_activations: x has dtype ", dtype_name(x.dtype()), ", expected BF16/F16/F32");
  }
}

QuantizedActs quantize_activations(const Tensor& x, ActQuant kind, float static_scale) {
  QMOE_CHECK(x.defined() && x.dim() == 2, kBadInput, "quantize_activations: x must be [M, K], got ",
             x.defined() ? shape_str(x.shape()) : std::string("absent"));
  QMOE_CHECK(kind != ActQuant::kNone, kBadInput, "quantize_activations: kind is none");
  if (kind == ActQuant::kFP8Tensor || kind == ActQuant::kNVFP4)
    QMOE_CHECK(std::isfinite(static_scale) && static_scale > 0.f, kBadInput,
               "quantize_activations: ", kind == ActQuant::kNVFP4 ? "nvfp4" : "fp8 tensor", " needs a finite static scale > 0, got ",
               static_scale);
  int64_t M = x.size(0), K = x.size(1), S = act_scales_per_row(kind, K);
  QuantizedActs r;
  r.kind = kind;
  r.static_scale = static_scale;
  r.q = Tensor(kind == ActQuant::kINT8Token ? DType::kI8 : kind == ActQuant::kNVFP4 ? DType::kU8 : DType::kF8E4M3,
               {M, K});
  r.scale = Tensor(kind == ActQuant::kNVFP4 ? DType::kF8E4M3 : DType::kF32, {M, S});
  uint8_t* q = r.q.data_mut<uint8_t>();
#pragma omp parallel
  {
    std::vector<float> row(K);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      row_to_f32(x, m, row.data());
      uint8_t* qm = q + m * K;
      switch (kind) {
        case ActQuant::kFP8Token: r.scale.data_mut<float>()[m] = quantize_fp8_token(row.data(), K, qm); break;
        case ActQuant::kFP8Group128: quantize_fp8_group128(row.data(), K, qm, r.scale.data_mut<float>() + m * S); break;
        case ActQuant::kFP8Tensor:
          quantize_fp8_static(row.data(), K, static_scale, qm);
          r.scale.data_mut<float>()[m] = static_scale;
          break;
        case ActQuant::kINT8Token:
          r.scale.data_mut<float>()[m] = quantize_int8_token(row.data(), K, reinterpret_cast<int8_t*>(qm));
          break;
        case ActQuant::kNVFP4: quantize_nvfp4(row.data(), K, static_scale, qm, r.scale.data_mut<uint8_t>() + m * S); break;
        case ActQuant::kNone: break;
      }
    }
  }
  return r;
}

Tensor dequantize_activations(const QuantizedActs& a) {
  int64_t M = a.q.size(0), K = a.q.size(1), S = a.scale.size(1);
  Tensor out(DType::kF32, {M, K});
  float* o = out.data_mut<float>();
  const float inv_G = a.kind == ActQuant::kNVFP4 ? 1.f / (1.f / a.static_scale) : 0.f;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      uint8_t c = a.q.data<uint8_t>()[m * K + k];
      switch (a.kind) {
        case ActQuant::kFP8Token: case ActQuant::kFP8Tensor:
          o[m * K + k] = e4m3_to_f32(c) * a.scale.data<float>()[m];
          break;
        case ActQuant::kFP8Group128:
          o[m * K + k] = e4m3_to_f32(c) * a.scale.data<float>()[m * S + k / kFP8GroupSize];
          break;
        case ActQuant::kINT8Token:
          o[m * K + k] = static_cast<float>(static_cast<int8_t>(c)) * a.scale.data<float>()[m];
          break;
        case ActQuant::kNVFP4:
          o[m * K + k] = e2m1_to_f32(c) * e4m3_to_f32(a.scale.data<uint8_t>()[m * S + k / kNVFP4GroupSize]) * inv_G;
          break;
        case ActQuant::kNone: break;
      }
    }
  return out;
}

}  // namespace qmoe::ref
