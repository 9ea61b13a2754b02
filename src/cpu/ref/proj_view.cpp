// Row decoders of the canonical weight encoding (include/qmoe/moe.h), shared by the reference
// forward, dequantize_proj and validate. Every value is produced exactly as docs/numerics.md says.
#include "cpu/ref/proj_view.h"

#include <cmath>

namespace qmoe::ref::detail {

using namespace qmoe::codec;

WKind weight_kind(SchemeKind k) {
  switch (k) {
    case SchemeKind::kUnquantized: return WKind::kDense;
    case SchemeKind::kWNA16: case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8FP8:
    case SchemeKind::kW4A8INT8: return WKind::kInt;
    case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: return WKind::kFP8;
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: return WKind::kNVFP4;
    case SchemeKind::kMXFP4A16: return WKind::kMXFP4;
  }
  return WKind::kDense;
}

ProjView make_view(const ExpertWeights& w, bool is_w13) {
  ProjView v;
  v.p = is_w13 ? &w.w13 : &w.w2;
  v.kind = weight_kind(w.scheme.kind);
  v.E = w.num_experts;
  v.N = is_w13 ? 2LL * w.intermediate : w.hidden;
  v.K = is_w13 ? w.hidden : w.intermediate;
  v.shards = is_w13 ? 2 : 1;
  v.strat = w.scheme.weights.strat();
  switch (v.kind) {
    case WKind::kDense: break;
    case WKind::kInt:
      v.bits = w.scheme.weights.num_bits;
      v.symmetric = w.scheme.weights.symmetric;
      v.group = v.strat == Strategy::kGroup ? w.group_size : 0;
      v.n_groups = v.group > 0 ? (v.K + v.group - 1) / v.group : 1;
      // With g_idx the scale holds the groups g_idx indexes into, which a TP rank's w2 keeps
      // unsliced (all ceil(I_full/G) of them): its last dim, not ceil(K/G), is the row stride.
      if (v.group > 0 && v.p->g_idx.defined() && v.p->scale.defined() && v.p->scale.dim() == 3)
        v.n_groups = v.p->scale.size(2);
      break;
    case WKind::kFP8:
      v.bits = 8;
      if (v.strat == Strategy::kBlock) {
        v.bn = w.block[0];
        v.bk = w.block[1];
        v.n_groups = v.bk > 0 ? (v.K + v.bk - 1) / v.bk : 1;
      }
      break;
    case WKind::kNVFP4:
      v.bits = 4;
      v.group = 16;
      v.n_groups = (v.K + 15) / 16;
      break;
    case WKind::kMXFP4:
      v.bits = 4;
      v.group = 32;
      v.n_groups = (v.K + 31) / 32;
      break;
  }
  return v;
}

float load_scalar(const Tensor& t, int64_t i, bool u8_is_e8m0) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kBF16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF8E4M3: return e4m3_to_f32(t.data<uint8_t>()[i]);
    case DType::kE8M0: return e8m0_to_f32(t.data<uint8_t>()[i]);
    case DType::kU8: return u8_is_e8m0 ? e8m0_to_f32(t.data<uint8_t>()[i]) : t.data<uint8_t>()[i];
    case DType::kF64: return static_cast<float>(t.data<double>()[i]);
    default: fail(ErrorKind::kInternal, "load_scalar: unexpected dtype ", dtype_name(t.dtype()));
  }
}

float round_to(DType t, float v) {
  switch (t) {
    case DType::kF32: return v;
    case DType::kBF16: return round_bf16(v);
    case DType::kF16: return round_f16(v);
    case DType::kF8E4M3: return round_e4m3(v);
    default: fail(ErrorKind::kInternal, "round_to: unexpected dtype ", dtype_name(t));
  }
}

void store_scalar(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::kF32: t.data_mut<float>()[i] = v; break;
    case DType::kBF16: t.data_mut<uint16_t>()[i] = f32_to_bf16(v); break;
    case DType::kF16: t.data_mut<uint16_t>()[i] = f32_to_f16(v); break;
    case DType::kF8E4M3: t.data_mut<uint8_t>()[i] = f32_to_e4m3(v, true); break;
    default: fail(ErrorKind::kInternal, "store_scalar: unexpected dtype ", dtype_name(t.dtype()));
  }
}

void decode_row_codes(const ProjView& v, int64_t e, int64_t n, float* out) {
  const int64_t K = v.K, row = e * v.N + n;
  const Tensor& W = v.p->weight;
  switch (v.kind) {
    case WKind::kDense:
      switch (W.dtype()) {
        case DType::kF32: for (int64_t k = 0; k < K; ++k) out[k] = W.data<float>()[row * K + k]; break;
        case DType::kBF16: for (int64_t k = 0; k < K; ++k) out[k] = bf16_to_f32(W.data<uint16_t>()[row * K + k]); break;
        case DType::kF16: for (int64_t k = 0; k < K; ++k) out[k] = f16_to_f32(W.data<uint16_t>()[row * K + k]); break;
        default: fail(ErrorKind::kInternal, "decode_row_codes: dense dtype ", dtype_name(W.dtype()));
      }
      break;
    case WKind::kInt: {
      const uint8_t* w = W.data<uint8_t>() + (v.bits == 4 ? row * (K / 2) : row * K);
      if (v.bits == 4) {
        for (int64_t k = 0; k < K; k += 2) {  // low nibble = even k
          out[k] = static_cast<float>(w[k >> 1] & 0xf);
          out[k + 1] = static_cast<float>(w[k >> 1] >> 4);
        }
      } else {
        for (int64_t k = 0; k < K; ++k) out[k] = static_cast<float>(w[k]);
      }
      if (v.symmetric) {
        const float z = static_cast<float>(1 << (v.bits - 1));
        for (int64_t k = 0; k < K; ++k) out[k] -= z;
      } else {
        const uint8_t* zp = v.p->zero_point.data<uint8_t>() + row * v.n_groups;
        for (int64_t k = 0; k < K; ++k) out[k] -= static_cast<float>(zp[group_of(v, e, k)]);
      }
      break;
    }
    case WKind::kFP8: {
      const uint8_t* w = W.data<uint8_t>() + row * K;
      for (int64_t k = 0; k < K; ++k) out[k] = e4m3_to_f32(w[k]);
      break;
    }
    case WKind::kNVFP4: case WKind::kMXFP4: {
      const uint8_t* w = W.data<uint8_t>() + row * (K / 2);
      for (int64_t k = 0; k < K; k += 2) {
        out[k] = e2m1_to_f32(w[k >> 1] & 0xf);
        out[k + 1] = e2m1_to_f32(w[k >> 1] >> 4);
      }
      break;
    }
  }
}

float row_scale(const ProjView& v, int64_t e, int64_t n, int64_t g) {
  const Tensor& S = v.p->scale;
  switch (v.kind) {
    case WKind::kDense: return 1.f;
    case WKind::kInt: case WKind::kNVFP4: return load_scalar(S, (e * v.N + n) * v.n_groups + g);
    case WKind::kMXFP4: return load_scalar(S, (e * v.N + n) * v.n_groups + g, true);
    case WKind::kFP8:
      switch (v.strat) {
        case Strategy::kTensor: return load_scalar(S, e * v.shards + v.shard_of(n));
        case Strategy::kBlock: {
          int64_t nb = (v.N + v.bn - 1) / v.bn;
          return load_scalar(S, (e * nb + n / v.bn) * v.n_groups + g);
        }
        default: return load_scalar(S, e * v.N + n);
      }
  }
  return 1.f;
}

void dequant_row(const ProjView& v, int64_t e, int64_t n, float* out) {
  decode_row_codes(v, e, n, out);
  const int64_t K = v.K;
  // Multiplies each K-group of `gsize` (the last one may be partial; gsize = K: one scale for the
  // row) by its scale, then by `outer` (NVFP4's global scale: e2m1 * e4m3 is exact, then * g;
  // elsewhere 1, an exact no-op).
  auto scale_groups = [&](int64_t gsize, float outer = 1.f) {
    for (int64_t g = 0, k0 = 0; k0 < K; ++g, k0 += gsize) {
      const float s = row_scale(v, e, n, g);
      const int64_t k1 = std::min(K, k0 + gsize);
      for (int64_t k = k0; k < k1; ++k) out[k] = (out[k] * s) * outer;
    }
  };
  switch (v.kind) {
    case WKind::kDense: break;
    case WKind::kInt:
      if (v.p->g_idx.defined()) {
        for (int64_t k = 0; k < K; ++k) out[k] *= row_scale(v, e, n, group_of(v, e, k));
      } else {
        scale_groups(v.group > 0 ? v.group : K);
      }
      break;
    case WKind::kFP8: scale_groups(v.strat == Strategy::kBlock ? v.bk : K); break;
    case WKind::kNVFP4: scale_groups(16, v.p->global_scale.data<float>()[e * v.shards + v.shard_of(n)]); break;
    case WKind::kMXFP4: scale_groups(32); break;
  }
}

}  // namespace qmoe::ref::detail
