// Random canonical expert weights for `qmoe bench` (see bench_weights.h).
#include "bench_weights.h"

#include <cstring>

#include "core/codecs.h"

namespace qmoe::cli {

const std::vector<BenchShape>& anchor_shapes() {
  static const std::vector<BenchShape> s = {
      {"llama4-scout", 16, 1, 5120, 8192, Activation::kSiluMul, true},
      {"mixtral-8x7b", 8, 2, 4096, 14336, Activation::kSiluMul, false},
      {"qwen3-30b-a3b", 128, 8, 2048, 768, Activation::kSiluMul, false},
      {"deepseek-v3", 256, 8, 7168, 2048, Activation::kSiluMul, false},
      {"gpt-oss-120b", 128, 4, 2880, 2880, Activation::kSwigluOai, false},
  };
  return s;
}

std::optional<BenchShape> bench_shape(const std::string& s) {
  for (const BenchShape& a : anchor_shapes())
    if (a.name == s) return a;
  BenchShape c;
  if (std::sscanf(s.c_str(), "%d,%d,%d,%d", &c.num_experts, &c.top_k, &c.hidden, &c.intermediate) == 4 &&
      c.num_experts > 0 && c.top_k > 0 && c.top_k <= c.num_experts && c.hidden > 0 && c.intermediate > 0) {
    c.name = s;
    return c;
  }
  return std::nullopt;
}

std::string bench_scheme_names() {
  return "bf16, int4 (W4A16 g128), int4-g32, int4-ch (W4A16 channel), int8 (W8A16 channel), fp8 (W8A8 channel/token), "
         "fp8-block (128x128 / 1x128), fp8-a16 (FP8 weight-only, channel), w8a8-int8, w4a8-int8, w4a8-fp8, "
         "nvfp4 (W4A4), nvfp4a16, mxfp4";
}

std::optional<BenchScheme> bench_scheme(const std::string& n) {
  BenchScheme b;
  b.name = n;
  ref::SchemeSpec& s = b.spec;
  if (n == "bf16") {
    s.kind = SchemeKind::kUnquantized;
  } else if (n == "int4" || n == "int4-g32" || n == "int4-ch" || n == "int8") {
    s.kind = SchemeKind::kWNA16;
    s.bits = n == "int8" ? 8 : 4;
    s.group_size = n == "int4" ? 128 : n == "int4-g32" ? 32 : 0;
  } else if (n == "fp8" || n == "fp8-block" || n == "fp8-a16") {
    const bool a16 = n == "fp8-a16";  // weight-only: channel weights, bf16 activations (bf16 operands)
    s.kind = a16 ? SchemeKind::kFP8A16 : SchemeKind::kFP8W8A8;
    s.fp8_strategy = n == "fp8-block" ? Strategy::kBlock : Strategy::kChannel;
    s.act = a16 ? ActQuant::kNone : n == "fp8" ? ActQuant::kFP8Token : ActQuant::kFP8Group128;
    s.scale_dtype = DType::kF32;
    b.fp8 = !a16;
  } else if (n == "w8a8-int8") {
    s.kind = SchemeKind::kINT8W8A8;
    s.bits = 8;
    s.group_size = 0;
    s.act = ActQuant::kINT8Token;
    b.int8_acts = true;
  } else if (n == "w4a8-int8" || n == "w4a8-fp8") {
    s.kind = n == "w4a8-int8" ? SchemeKind::kW4A8INT8 : SchemeKind::kW4A8FP8;
    s.group_size = 128;
    s.act = n == "w4a8-int8" ? ActQuant::kINT8Token : ActQuant::kFP8Token;
    b.int8_acts = n == "w4a8-int8";
    b.fp8 = !b.int8_acts;
  } else if (n == "nvfp4") {
    s.kind = SchemeKind::kNVFP4;
    s.act = ActQuant::kNVFP4;
  } else if (n == "nvfp4a16") {
    s.kind = SchemeKind::kNVFP4A16;
  } else if (n == "mxfp4") {
    s.kind = SchemeKind::kMXFP4A16;
  } else {
    return std::nullopt;
  }
  return b;
}

namespace {

inline uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills bytes with f(random 64 bits, element index) per element of `esize` bytes, in parallel.
template <class F>
void fill(Tensor& t, uint64_t seed, F f) {
  const int64_t n = t.numel();
  const size_t es = dtype_size(t.dtype());
  uint8_t* p = static_cast<uint8_t*>(t.raw_mut());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t v = f(mix(seed ^ (uint64_t(i) * 0x2545f4914f6cdd1dull)));
    std::memcpy(p + size_t(i) * es, &v, es);  // little endian: the low bytes
  }
}

struct ProjShape {
  int64_t E, N, K, S;
};

ProjWeights make_proj(const BenchScheme& b, const ExpertWeights& ew, ProjShape p, uint64_t seed) {
  const ref::SchemeSpec& s = b.spec;
  ProjWeights w;
  const int64_t E = p.E, N = p.N, K = p.K;
  auto bf16_bits = [](float f) { return uint64_t(codec::f32_to_bf16(f)); };
  // positive scale near `base` (x [1, 2)), in bf16
  auto bf16_scale = [&](float base) { return [=](uint64_t r) { return bf16_bits(base * (1.f + float(r & 255) / 256.f)); }; };
  auto f32_scale = [&](float base) {
    return [=](uint64_t r) {
      float f = base * (1.f + float(r & 255) / 256.f);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return uint64_t(u);
    };
  };
  switch (s.kind) {
    case SchemeKind::kUnquantized:
      w.weight = Tensor(DType::kBF16, {E, N, K});
      // |w| in [2^-7, 2^-6) with random sign and mantissa: bf16 sign | exponent 120 | 7 random bits
      fill(w.weight, seed, [](uint64_t r) { return (r & 0x807f) | 0x3c00; });
      break;
    case SchemeKind::kWNA16: case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8INT8: case SchemeKind::kW4A8FP8: {
      const int bits = s.kind == SchemeKind::kWNA16 ? s.bits : s.kind == SchemeKind::kINT8W8A8 ? 8 : 4;
      w.weight = Tensor(DType::kU8, {E, N, bits == 4 ? K / 2 : K});
      fill(w.weight, seed, [](uint64_t r) { return r; });
      const int64_t ng = ew.group_size > 0 ? (K + ew.group_size - 1) / ew.group_size : 1;
      w.scale = Tensor(DType::kBF16, {E, N, ng});
      fill(w.scale, seed + 1, bf16_scale(1e-3f));
      break;
    }
    case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: {
      w.weight = Tensor(DType::kF8E4M3, {E, N, K});
      fill(w.weight, seed, [](uint64_t r) { return r & 0xb7; });  // exponent <= 6: never NaN, |w| < 1
      if (s.fp8_strategy == Strategy::kBlock)
        w.scale = Tensor(DType::kF32, {E, (N + ew.block[0] - 1) / ew.block[0], (K + ew.block[1] - 1) / ew.block[1]});
      else
        w.scale = Tensor(DType::kF32, {E, N, 1});
      fill(w.scale, seed + 1, f32_scale(1e-2f));
      break;
    }
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16:
      w.weight = Tensor(DType::kU8, {E, N, K / 2});
      fill(w.weight, seed, [](uint64_t r) { return r; });
      w.scale = Tensor(DType::kF8E4M3, {E, N, (K + 15) / 16});
      fill(w.scale, seed + 1, [](uint64_t r) { return (r & 7) | 0x30; });  // 0.5 .. 0.94
      w.global_scale = Tensor(DType::kF32, {E, p.S});
      fill(w.global_scale, seed + 2, f32_scale(1e-3f));
      if (s.kind == SchemeKind::kNVFP4) {
        w.input_scale = Tensor(DType::kF32, {E, p.S});
        fill(w.input_scale, seed + 3, [](uint64_t) {
          float f = 4.f / (6.f * 448.f);
          uint32_t u;
          std::memcpy(&u, &f, 4);
          return uint64_t(u);
        });
      }
      break;
    case SchemeKind::kMXFP4A16:
      w.weight = Tensor(DType::kU8, {E, N, K / 2});
      fill(w.weight, seed, [](uint64_t r) { return r; });
      w.scale = Tensor(DType::kU8, {E, N, (K + 31) / 32});
      fill(w.scale, seed + 1, [](uint64_t r) { return 118 + (r & 3); });  // 2^-9 .. 2^-6
      break;
  }
  return w;
}

}  // namespace

ExpertWeights bench_weights(const BenchScheme& b, int E, int H, int I, uint64_t seed) {
  ExpertWeights ew;
  ew.scheme = ref::make_scheme(b.spec);
  ew.num_experts = E;
  ew.hidden = H;
  ew.intermediate = I;
  ew.act_dtype = DType::kBF16;
  const SchemeKind k = b.spec.kind;
  if (k == SchemeKind::kNVFP4 || k == SchemeKind::kNVFP4A16) ew.group_size = 16;
  else if (k == SchemeKind::kMXFP4A16) ew.group_size = 32;
  else if (k == SchemeKind::kWNA16 || k == SchemeKind::kW4A8INT8 || k == SchemeKind::kW4A8FP8) ew.group_size = b.spec.group_size;
  if (k == SchemeKind::kFP8W8A8 && b.spec.fp8_strategy == Strategy::kBlock) ew.block = b.spec.block;
  ew.w13 = make_proj(b, ew, {E, 2LL * I, H, 2}, seed * 4 + 1);
  ew.w2 = make_proj(b, ew, {E, H, I, 1}, seed * 4 + 2);
  return ew;
}

double bench_expert_bytes(const BenchScheme& b, int H, int I) {
  const ref::SchemeSpec& s = b.spec;
  auto proj = [&](double N, double K, double S) {
    auto cdiv = [](double a, double g) { return double(int64_t((a + g - 1) / g)); };
    switch (s.kind) {
      case SchemeKind::kUnquantized: return 2 * N * K;
      case SchemeKind::kWNA16: case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8INT8: case SchemeKind::kW4A8FP8: {
        const int bits = s.kind == SchemeKind::kWNA16 ? s.bits : s.kind == SchemeKind::kINT8W8A8 ? 8 : 4;
        const int g = s.kind == SchemeKind::kINT8W8A8 ? 0 : s.group_size;
        return N * K * bits / 8 + N * (g > 0 ? cdiv(K, g) : 1) * 2;  // bf16 scales
      }
      case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16:
        return N * K + (s.fp8_strategy == Strategy::kBlock ? cdiv(N, s.block[0]) * cdiv(K, s.block[1]) * 4 : N * 4);
      case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: return N * K / 2 + N * cdiv(K, 16) + S * 4;
      case SchemeKind::kMXFP4A16: return N * K / 2 + N * cdiv(K, 32);
    }
    return 0.0;
  };
  return proj(2.0 * I, H, 2) + proj(H, I, 1);
}

}  // namespace qmoe::cli
