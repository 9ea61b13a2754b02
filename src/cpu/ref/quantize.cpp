// Round-to-nearest quantizers into the canonical encoding, scheme construction and random
// ExpertWeights. Rows are produced by a RowSource so Mixtral-size layers quantize without a full
// fp32 copy; tensor-wise scales (fp8 tensor, NVFP4 global) take one extra amax pass.
#include "cpu/ref/quantize.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/codecs.h"
#include "cpu/ref/proj_view.h"

namespace qmoe::ref {

using namespace qmoe::codec;
using detail::round_to;
using detail::store_scalar;

// ---- random numbers: splitmix64 of (seed, index), independent of the thread count ----------------
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float random_uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  uint64_t r = mix64(mix64(seed) ^ (i * 0xd6e8feb86659fd93ull));
  float u = static_cast<float>(r >> 40) * (1.f / 16777216.f);  // 24 random bits -> [0, 1)
  return lo + (hi - lo) * u;
}

// ---- per-row quantizers --------------------------------------------------------------------------
namespace {

constexpr float kTinyAmax = 1e-30f;  // an all-zero group still gets a positive, finite scale

float positive_scale(DType dt, float s) {
  float r = round_to(dt, std::max(s, kTinyAmax));
  if (!(r > 0.f)) r = dt == DType::kF16 ? 5.9604644775390625e-8f : round_to(dt, 1e-30f);  // f16 underflow
  return r;
}

void put_code4(uint8_t* row, int64_t k, uint8_t c) {
  uint8_t& b = row[k >> 1];
  b = (k & 1) ? static_cast<uint8_t>((b & 0x0f) | (c << 4)) : static_cast<uint8_t>((b & 0xf0) | (c & 0xf));
}

struct Outputs {
  ProjWeights p;
  int64_t E, N, K, n_groups = 1;
};

void quantize_int_row(const ProjFormat& f, Outputs& o, int64_t e, int64_t n, const float* w,
                      std::vector<float>& lo, std::vector<float>& hi) {
  const int64_t K = o.K, G = o.n_groups, row = e * o.N + n;
  const int32_t* gi = f.g_idx.defined() ? f.g_idx.data<int32_t>() + e * K : nullptr;
  auto grp = [&](int64_t k) -> int64_t { return gi ? gi[k] : (f.group_size > 0 ? k / f.group_size : 0); };
  std::fill(lo.begin(), lo.end(), 0.f);  // ranges include 0 (compressed-tensors does the same)
  std::fill(hi.begin(), hi.end(), 0.f);
  for (int64_t k = 0; k < K; ++k) {
    int64_t g = grp(k);
    lo[g] = std::min(lo[g], w[k]);
    hi[g] = std::max(hi[g], w[k]);
  }
  const int qmax_s = (1 << (f.bits - 1)) - 1, umax = (1 << f.bits) - 1;
  std::vector<float> s(G);
  std::vector<int> zp(G);
  for (int64_t g = 0; g < G; ++g) {
    if (f.symmetric) {
      s[g] = positive_scale(f.scale_dtype, std::max(-lo[g], hi[g]) / static_cast<float>(qmax_s));
      zp[g] = 1 << (f.bits - 1);
    } else {
      s[g] = positive_scale(f.scale_dtype, (hi[g] - lo[g]) / static_cast<float>(umax));
      zp[g] = static_cast<int>(std::clamp(std::nearbyint(-lo[g] / s[g]), 0.f, static_cast<float>(umax)));
      o.p.zero_point.data_mut<uint8_t>()[row * G + g] = static_cast<uint8_t>(zp[g]);
    }
    store_scalar(o.p.scale, row * G + g, s[g]);
  }
  uint8_t* dst = o.p.weight.data_mut<uint8_t>() + (f.bits == 4 ? row * (K / 2) : row * K);
  for (int64_t k = 0; k < K; ++k) {
    int64_t g = grp(k);
    float q = std::nearbyint(w[k] / s[g]) + static_cast<float>(zp[g]);
    // sym: q in [-2^(b-1), 2^(b-1) - 1] before the offset, i.e. u in [0, 2^b - 1]
    uint8_t u = static_cast<uint8_t>(std::clamp(q, 0.f, static_cast<float>(umax)));
    if (f.bits == 4) put_code4(dst, k, u);
    else dst[k] = u;
  }
}

void check_format(const ProjFormat& f, int64_t E, int64_t N, int64_t K) {
  QMOE_CHECK(E > 0 && N > 0 && K > 0, kBadInput, "quantize_proj: empty shape [", E, ", ", N, ", ", K, "]");
  QMOE_CHECK(f.shards == 1 || (f.shards == 2 && N % 2 == 0), kBadInput,
             "quantize_proj: shards must be 1 or 2 (with N even), got ", f.shards, " for N = ", N);
  switch (f.kind) {
    case ProjFormat::Kind::kDense:
      QMOE_CHECK(f.dense_dtype == DType::kBF16 || f.dense_dtype == DType::kF16 || f.dense_dtype == DType::kF32,
                 kBadInput, "quantize_proj: dense dtype must be BF16/F16/F32, got ", dtype_name(f.dense_dtype));
      break;
    case ProjFormat::Kind::kInt:
      QMOE_CHECK(f.bits == 4 || f.bits == 8, kBadInput, "quantize_proj: int bits must be 4 or 8, got ", f.bits);
      QMOE_CHECK(f.bits == 8 || K % 2 == 0, kBadInput, "quantize_proj: int4 needs an even K, got ", K);
      QMOE_CHECK(f.group_size >= 0, kBadInput, "quantize_proj: group_size must be >= 0, got ", f.group_size);
      QMOE_CHECK(!f.g_idx.defined() || f.group_size > 0, kBadInput, "quantize_proj: g_idx needs group_size > 0");
      QMOE_CHECK(f.scale_dtype == DType::kBF16 || f.scale_dtype == DType::kF16 || f.scale_dtype == DType::kF32,
                 kBadInput, "quantize_proj: int scale dtype must be BF16/F16/F32");
      if (f.g_idx.defined()) {
        QMOE_CHECK(f.g_idx.dtype() == DType::kI32 && f.g_idx.shape() == Shape({E, K}), kBadInput,
                   "quantize_proj: g_idx must be I32 [", E, ", ", K, "], got ", dtype_name(f.g_idx.dtype()), " ",
                   shape_str(f.g_idx.shape()));
        int64_t ng = (K + f.group_size - 1) / f.group_size;
        for (int64_t i = 0; i < E * K; ++i)
          QMOE_CHECK(f.g_idx.data<int32_t>()[i] >= 0 && f.g_idx.data<int32_t>()[i] < ng, kBadInput,
                     "quantize_proj: g_idx[", i / K, ", ", i % K, "] = ", f.g_idx.data<int32_t>()[i],
                     " outside [0, ", ng, ")");
      }
      break;
    case ProjFormat::Kind::kFP8:
      QMOE_CHECK(f.fp8_strategy == Strategy::kTensor || f.fp8_strategy == Strategy::kChannel ||
                     f.fp8_strategy == Strategy::kBlock, kBadInput,
                 "quantize_proj: fp8 strategy must be tensor, channel or block");
      if (f.fp8_strategy == Strategy::kBlock)
        QMOE_CHECK(f.block[0] > 0 && f.block[1] > 0 && (f.shards == 1 || (N / f.shards) % f.block[0] == 0), kBadInput,
                   "quantize_proj: fp8 block [", f.block[0], ", ", f.block[1], "] must be positive and divide the ",
                   N / f.shards, " rows of each w13 shard");
      break;
    case ProjFormat::Kind::kNVFP4: case ProjFormat::Kind::kMXFP4:
      QMOE_CHECK(K % 2 == 0, kBadInput, "quantize_proj: fp4 needs an even K, got ", K);
      break;
  }
}

// amax over each (expert, shard): the pass tensor-wise scales need.
std::vector<float> shard_amax(const RowSource& src, int64_t E, int64_t N, int64_t K, int shards) {
  std::vector<float> amax(E * shards, 0.f);
  const int64_t rows = N / shards;
#pragma omp parallel
  {
    std::vector<float> row(K), local(E * shards, 0.f);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < E * N; ++r) {
      src(r / N, r % N, row.data());
      float m = 0.f;
      for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(row[k]));
      float& l = local[(r / N) * shards + (r % N) / rows];
      l = std::max(l, m);
    }
#pragma omp critical
    for (size_t i = 0; i < amax.size(); ++i) amax[i] = std::max(amax[i], local[i]);
  }
  return amax;
}

}  // namespace

ProjWeights quantize_proj(const RowSource& src, int64_t E, int64_t N, int64_t K, const ProjFormat& f) {
  check_format(f, E, N, K);
  Outputs o{{}, E, N, K};
  const int S = f.shards;
  switch (f.kind) {
    case ProjFormat::Kind::kDense: {
      o.p.weight = Tensor(f.dense_dtype, {E, N, K});
#pragma omp parallel
      {
        std::vector<float> row(K);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < E * N; ++r) {
          src(r / N, r % N, row.data());
          for (int64_t k = 0; k < K; ++k) store_scalar(o.p.weight, r * K + k, row[k]);
        }
      }
      break;
    }
    case ProjFormat::Kind::kInt: {
      o.n_groups = f.group_size > 0 ? (K + f.group_size - 1) / f.group_size : 1;
      o.p.weight = Tensor(DType::kU8, {E, N, f.bits == 4 ? K / 2 : K});
      o.p.scale = Tensor(f.scale_dtype, {E, N, o.n_groups});
      if (!f.symmetric) o.p.zero_point = Tensor(DType::kU8, {E, N, o.n_groups});
      if (f.g_idx.defined()) o.p.g_idx = f.g_idx.clone();
#pragma omp parallel
      {
        std::vector<float> row(K), lo(o.n_groups), hi(o.n_groups);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < E * N; ++r) {
          src(r / N, r % N, row.data());
          quantize_int_row(f, o, r / N, r % N, row.data(), lo, hi);
        }
      }
      break;
    }
    case ProjFormat::Kind::kFP8: {
      o.p.weight = Tensor(DType::kF8E4M3, {E, N, K});
      uint8_t* W = o.p.weight.data_mut<uint8_t>();
      if (f.fp8_strategy == Strategy::kBlock) {
        const int64_t bn = f.block[0], bk = f.block[1], nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
        o.p.scale = Tensor(DType::kF32, {E, nb, kb});
#pragma omp parallel
        {
          std::vector<float> rows(bn * K);
#pragma omp for schedule(dynamic)
          for (int64_t b = 0; b < E * nb; ++b) {
            const int64_t e = b / nb, n0 = (b % nb) * bn, n1 = std::min(N, n0 + bn);
            for (int64_t n = n0; n < n1; ++n) src(e, n, rows.data() + (n - n0) * K);
            for (int64_t j = 0; j < kb; ++j) {
              const int64_t k0 = j * bk, k1 = std::min(K, k0 + bk);
              float m = 0.f;
              for (int64_t n = n0; n < n1; ++n)
                for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(rows[(n - n0) * K + k]));
              const float s = std::max(m, kTinyAmax) / 448.f;
              o.p.scale.data_mut<float>()[b * kb + j] = s;
              for (int64_t n = n0; n < n1; ++n)
                for (int64_t k = k0; k < k1; ++k) W[(e * N + n) * K + k] = f32_to_e4m3(rows[(n - n0) * K + k] / s);
            }
          }
        }
        break;
      }
      std::vector<float> tensor_scale;
      if (f.fp8_strategy == Strategy::kTensor) {
        tensor_scale = shard_amax(src, E, N, K, S);
        o.p.scale = Tensor(DType::kF32, {E, S});
        for (int64_t i = 0; i < E * S; ++i) {
          tensor_scale[i] = std::max(tensor_scale[i], kTinyAmax) / 448.f;
          o.p.scale.data_mut<float>()[i] = tensor_scale[i];
        }
      } else {
        o.p.scale = Tensor(f.scale_dtype, {E, N, 1});
      }
#pragma omp parallel
      {
        std::vector<float> row(K);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < E * N; ++r) {
          const int64_t e = r / N, n = r % N;
          src(e, n, row.data());
          float s;
          if (f.fp8_strategy == Strategy::kTensor) {
            s = tensor_scale[e * S + n / (N / S)];
          } else {
            float m = 0.f;
            for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(row[k]));
            s = positive_scale(f.scale_dtype, m / 448.f);
            store_scalar(o.p.scale, r, s);
          }
          for (int64_t k = 0; k < K; ++k) W[r * K + k] = f32_to_e4m3(row[k] / s);
        }
      }
      break;
    }
    case ProjFormat::Kind::kNVFP4: {
      const int64_t nb = (K + 15) / 16;
      o.p.weight = Tensor(DType::kU8, {E, N, K / 2});
      o.p.scale = Tensor(DType::kF8E4M3, {E, N, nb});
      o.p.global_scale = Tensor(DType::kF32, {E, S});
      std::vector<float> gs = shard_amax(src, E, N, K, S);
      for (int64_t i = 0; i < E * S; ++i) {
        gs[i] = std::max(gs[i], kTinyAmax) / (6.f * 448.f);  // ModelOpt weight_scale_2
        o.p.global_scale.data_mut<float>()[i] = gs[i];
      }
#pragma omp parallel
      {
        std::vector<float> row(K);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < E * N; ++r) {
          const int64_t e = r / N, n = r % N;
          src(e, n, row.data());
          const float g = gs[e * S + n / (N / S)];
          uint8_t* dst = o.p.weight.data_mut<uint8_t>() + r * (K / 2);
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t k0 = b * 16, k1 = std::min(K, k0 + 16);
            float m = 0.f;
            for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(row[k]));
            // ModelOpt: block scale = amax / (6 g), at least 2^-9 (the smallest e4m3 subnormal)
            const uint8_t sc = f32_to_e4m3(std::max(m / (6.f * g), 0.001953125f), true);
            o.p.scale.data_mut<uint8_t>()[r * nb + b] = sc;
            const float denom = e4m3_to_f32(sc) * g;
            for (int64_t k = k0; k < k1; ++k) put_code4(dst, k, f32_to_e2m1(row[k] / denom));
          }
        }
      }
      break;
    }
    case ProjFormat::Kind::kMXFP4: {
      const int64_t nb = (K + 31) / 32;
      o.p.weight = Tensor(DType::kU8, {E, N, K / 2});
      o.p.scale = Tensor(DType::kU8, {E, N, nb});
#pragma omp parallel
      {
        std::vector<float> row(K);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < E * N; ++r) {
          src(r / N, r % N, row.data());
          uint8_t* dst = o.p.weight.data_mut<uint8_t>() + r * (K / 2);
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t k0 = b * 32, k1 = std::min(K, k0 + 32);
            float m = 0.f;
            for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(row[k]));
            // compressed-tensors round_to_power_2 on the bf16 amax: add 2^5 to the bf16 bits (a
            // mantissa >= 1.75 carries into the exponent), keep sign + exponent; then
            // e = 127 + floor(log2(p)) - 2 = (exponent field of p) - 2.
            const uint32_t bits = (static_cast<uint32_t>(f32_to_bf16(m)) + 0x20u) & 0xff80u;
            const int ef = static_cast<int>(bits >> 7);
            const int e8 = ef == 0 ? 0 : std::clamp(ef - 2, 0, 254);
            o.p.scale.data_mut<uint8_t>()[r * nb + b] = static_cast<uint8_t>(e8);
            for (int64_t k = k0; k < k1; ++k) put_code4(dst, k, f32_to_e2m1(std::ldexp(row[k], 127 - e8)));
          }
        }
      }
      break;
    }
  }
  return std::move(o.p);
}

ProjWeights quantize_proj(const Tensor& w, const ProjFormat& fmt) {
  QMOE_CHECK(w.defined() && w.dim() == 3 &&
                 (w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || w.dtype() == DType::kF16),
             kBadInput, "quantize_proj: weights must be F32/BF16/F16 [E, N, K], got ",
             w.defined() ? dtype_name(w.dtype()) : "absent", " ", w.defined() ? shape_str(w.shape()) : "");
  const int64_t N = w.size(1), K = w.size(2);
  RowSource src = [&w, N, K](int64_t e, int64_t n, float* row) {
    for (int64_t k = 0; k < K; ++k) row[k] = detail::load_scalar(w, (e * N + n) * K + k);
  };
  return quantize_proj(src, w.size(0), N, K, fmt);
}

float dequantize_weight(const ExpertWeights& w, bool is_w13, int64_t e, int64_t n, int64_t k) {
  detail::ProjView v = detail::make_view(w, is_w13);
  std::vector<float> row(v.K);
  detail::dequant_row(v, e, n, row.data());
  return row[k];
}

Tensor dequantize_proj(const ExpertWeights& w, bool is_w13) {
  detail::ProjView v = detail::make_view(w, is_w13);
  Tensor out(DType::kF32, {v.E, v.N, v.K});
  float* o = out.data_mut<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < v.E * v.N; ++r) detail::dequant_row(v, r / v.N, r % v.N, o + r * v.K);
  return out;
}

// ---- schemes ---------------------------------------------------------------------------------------
MoeScheme make_scheme(const SchemeSpec& s) {
  MoeScheme m;
  m.kind = s.kind;
  QuantArgs& w = m.weights;
  auto int_weights = [&](int bits) {
    w.num_bits = bits;
    w.type = QuantType::kInt;
    w.symmetric = s.symmetric;
    if (s.group_size > 0 && s.kind != SchemeKind::kINT8W8A8) {
      w.strategy = Strategy::kGroup;
      w.group_size = s.group_size;
      if (s.actorder) w.actorder = ActOrder::kGroup;
    } else {
      w.strategy = Strategy::kChannel;
      w.group_size = -1;
    }
    w.scale_dtype = s.scale_dtype;
  };
  auto fp8_weights = [&]() {
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = s.fp8_strategy;
    if (s.fp8_strategy == Strategy::kBlock) w.block_structure = s.block;
    w.scale_dtype = s.fp8_strategy == Strategy::kChannel ? s.scale_dtype : DType::kF32;
  };
  auto acts = [&](int bits, QuantType t, Strategy st, Dynamic d, std::optional<int> g = std::nullopt) {
    QuantArgs a;
    a.num_bits = bits;
    a.type = t;
    a.strategy = st;
    a.dynamic = d;
    a.group_size = g;
    m.input_activations = a;
  };
  switch (s.kind) {
    case SchemeKind::kUnquantized: m.format = "dense"; break;
    case SchemeKind::kWNA16: int_weights(s.bits); m.format = "pack-quantized"; break;
    case SchemeKind::kFP8A16: fp8_weights(); m.format = "float-quantized"; break;
    case SchemeKind::kFP8W8A8: {
      fp8_weights();
      m.act = s.act == ActQuant::kNone ? (s.fp8_strategy == Strategy::kBlock ? ActQuant::kFP8Group128
                                          : s.fp8_strategy == Strategy::kTensor ? ActQuant::kFP8Tensor
                                                                               : ActQuant::kFP8Token)
                                      : s.act;
      QMOE_CHECK(m.act == ActQuant::kFP8Tensor || m.act == ActQuant::kFP8Token || m.act == ActQuant::kFP8Group128,
                 kBadInput, "make_scheme: FP8 W8A8 activations must be fp8 tensor / token / group128");
      if (m.act == ActQuant::kFP8Tensor) acts(8, QuantType::kFloat, Strategy::kTensor, Dynamic::kStatic);
      else if (m.act == ActQuant::kFP8Token) acts(8, QuantType::kFloat, Strategy::kToken, Dynamic::kDynamic);
      else acts(8, QuantType::kFloat, Strategy::kGroup, Dynamic::kDynamic, 128);
      m.format = "float-quantized";
      break;
    }
    case SchemeKind::kINT8W8A8:
      int_weights(8);
      m.act = ActQuant::kINT8Token;
      acts(8, QuantType::kInt, Strategy::kToken, Dynamic::kDynamic);
      m.format = "int-quantized";
      break;
    case SchemeKind::kW4A8FP8: case SchemeKind::kW4A8INT8: {
      const bool fp8 = s.kind == SchemeKind::kW4A8FP8;  // per-token 8-bit activations: fp8 or int8
      int_weights(4);
      m.act = fp8 ? ActQuant::kFP8Token : ActQuant::kINT8Token;
      acts(8, fp8 ? QuantType::kFloat : QuantType::kInt, Strategy::kToken, Dynamic::kDynamic);
      m.format = "pack-quantized";
      break;
    }
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16:
      w.num_bits = 4;
      w.type = QuantType::kFloat;
      w.strategy = Strategy::kTensorGroup;
      w.group_size = 16;
      w.scale_dtype = DType::kF8E4M3;
      if (s.kind == SchemeKind::kNVFP4) {
        m.act = ActQuant::kNVFP4;
        acts(4, QuantType::kFloat, Strategy::kTensorGroup, Dynamic::kLocal, 16);
      }
      m.format = "nvfp4-pack-quantized";
      break;
    case SchemeKind::kMXFP4A16:
      w.num_bits = 4;
      w.type = QuantType::kFloat;
      w.strategy = Strategy::kGroup;
      w.group_size = 32;
      w.scale_dtype = DType::kU8;
      m.format = "mxfp4-pack-quantized";
      break;
  }
  return m;
}

ProjFormat make_proj_format(const SchemeSpec& s, bool is_w13) {
  ProjFormat f;
  f.shards = is_w13 ? 2 : 1;
  f.scale_dtype = s.scale_dtype;
  switch (detail::weight_kind(s.kind)) {
    case detail::WKind::kDense: f.kind = ProjFormat::Kind::kDense; f.dense_dtype = s.weight_dtype; break;
    case detail::WKind::kInt:
      f.kind = ProjFormat::Kind::kInt;
      f.bits = s.kind == SchemeKind::kWNA16 ? s.bits : s.kind == SchemeKind::kINT8W8A8 ? 8 : 4;
      f.group_size = s.kind == SchemeKind::kINT8W8A8 ? 0 : s.group_size;
      f.symmetric = s.symmetric;
      break;
    case detail::WKind::kFP8:
      f.kind = ProjFormat::Kind::kFP8;
      f.fp8_strategy = s.fp8_strategy;
      f.block = s.block;
      break;
    case detail::WKind::kNVFP4: f.kind = ProjFormat::Kind::kNVFP4; break;
    case detail::WKind::kMXFP4: f.kind = ProjFormat::Kind::kMXFP4; break;
  }
  return f;
}

// ---- whole layers ----------------------------------------------------------------------------------
namespace {

// Fills the ExpertWeights metadata and the static activation scales.
ExpertWeights assemble(const SchemeSpec& spec, int E, int H, int I, ProjWeights w13, ProjWeights w2,
                       float act_amax, uint64_t seed, bool random_u) {
  ExpertWeights ew;
  ew.scheme = make_scheme(spec);
  ew.num_experts = E;
  ew.hidden = H;
  ew.intermediate = I;
  ew.act_dtype = spec.act_dtype;
  switch (detail::weight_kind(spec.kind)) {
    case detail::WKind::kInt: ew.group_size = make_proj_format(spec, true).group_size; break;
    case detail::WKind::kNVFP4: ew.group_size = 16; break;
    case detail::WKind::kMXFP4: ew.group_size = 32; break;
    case detail::WKind::kFP8:
      if (spec.fp8_strategy == Strategy::kBlock) ew.block = spec.block;
      break;
    default: break;
  }
  ew.w13 = std::move(w13);
  ew.w2 = std::move(w2);
  const ActQuant act = ew.scheme.act;
  if (act == ActQuant::kFP8Tensor || act == ActQuant::kNVFP4) {
    const float denom = act == ActQuant::kFP8Tensor ? 448.f : 6.f * 448.f;
    for (int p = 0; p < 2; ++p) {
      const int S = p == 0 ? 2 : 1;
      Tensor t(DType::kF32, {E, S});
      for (int e = 0; e < E; ++e) {
        const float u = random_u ? random_uniform(seed ^ 0x5ca1e, static_cast<uint64_t>(p * E + e), 0.75f, 1.25f) : 1.f;
        for (int s = 0; s < S; ++s) t.data_mut<float>()[e * S + s] = act_amax * u / denom;
      }
      (p == 0 ? ew.w13 : ew.w2).input_scale = std::move(t);
    }
  }
  return ew;
}

}  // namespace

ExpertWeights make_random_expert_weights(const RandomWeightsSpec& r) {
  const SchemeSpec& s = r.scheme;
  const int E = r.num_experts, H = r.hidden, I = r.intermediate;
  QMOE_CHECK(E > 0 && H > 0 && I > 0, kBadInput, "make_random_expert_weights: E, H, I must be > 0, got ", E, ", ",
             H, ", ", I);
  ProjWeights p[2];
  for (int which = 0; which < 2; ++which) {
    const bool is_w13 = which == 0;
    const int64_t N = is_w13 ? 2LL * I : H, K = is_w13 ? H : I;
    const uint64_t stream = r.seed * 0x100000001b3ull + static_cast<uint64_t>(which) * 0x9e37ull;
    const float inv_sqrt_k = 1.f / std::sqrt(static_cast<float>(K));
    RowSource src = [=](int64_t e, int64_t n, float* row) {
      const uint64_t row_id = static_cast<uint64_t>(e * N + n);
      const float row_scale = std::exp2(random_uniform(stream ^ 0xabcdull, row_id, -1.f, 1.f)) * inv_sqrt_k;
      for (int64_t k = 0; k < K; ++k)
        row[k] = round_bf16(random_uniform(stream, row_id * static_cast<uint64_t>(K) + k, -1.f, 1.f) * row_scale);
    };
    ProjFormat f = make_proj_format(s, is_w13);
    if (s.kind == SchemeKind::kWNA16 && s.actorder && f.group_size > 0) {
      // actorder: groups are contiguous in a random column permutation (what GPTQ's desc_act stores)
      Tensor g(DType::kI32, {E, K});
      std::vector<int64_t> perm(K);
      for (int e = 0; e < E; ++e) {
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t i = K - 1; i > 0; --i) {  // Fisher-Yates with the counter-based generator
          int64_t j = static_cast<int64_t>(random_uniform(stream ^ 0x6a1d, static_cast<uint64_t>(e * K + i), 0.f, 1.f) * (i + 1));
          std::swap(perm[i], perm[std::min(j, i)]);
        }
        for (int64_t i = 0; i < K; ++i) g.data_mut<int32_t>()[e * K + perm[i]] = static_cast<int32_t>(i / f.group_size);
      }
      f.g_idx = g;
    }
    p[which] = quantize_proj(src, E, N, K, f);
    if (s.bias) {
      Tensor b(DType::kF32, {E, N});
      for (int64_t i = 0; i < E * N; ++i) b.data_mut<float>()[i] = random_uniform(stream ^ 0xb1a5ull, i, -0.5f, 0.5f);
      p[which].bias = b;
    }
  }
  ExpertWeights ew = assemble(s, E, H, I, std::move(p[0]), std::move(p[1]), r.act_amax, r.seed, true);
  ew.validate("make_random_expert_weights");
  return ew;
}

ExpertWeights quantize_expert_weights(const Tensor& w13, const Tensor& w2, const SchemeSpec& s, float act_amax,
                                      const Tensor& w13_g_idx, const Tensor& w2_g_idx) {
  QMOE_CHECK(w13.defined() && w2.defined() && w13.dim() == 3 && w2.dim() == 3 && w13.size(0) == w2.size(0) &&
                 w13.size(1) == 2 * w2.size(2) && w13.size(2) == w2.size(1),
             kBadInput, "quantize_expert_weights: expected w13 [E, 2I, H] and w2 [E, H, I], got ",
             w13.defined() ? shape_str(w13.shape()) : "absent", " and ", w2.defined() ? shape_str(w2.shape()) : "absent");
  ProjFormat f13 = make_proj_format(s, true), f2 = make_proj_format(s, false);
  f13.g_idx = w13_g_idx;
  f2.g_idx = w2_g_idx;
  ExpertWeights ew = assemble(s, static_cast<int>(w13.size(0)), static_cast<int>(w2.size(1)),
                              static_cast<int>(w2.size(2)), quantize_proj(w13, f13), quantize_proj(w2, f2),
                              act_amax, 0, false);
  ew.validate("quantize_expert_weights");
  return ew;
}

}  // namespace qmoe::ref
