// prepare(): canonical ExpertWeights (host) -> device experts in the kernels' layout, once at load.
// Weight codes are uploaded as they are and repacked into atoms on the device (repack_kernel);
// scales, zero points, biases are converted to fp32 on the host (exact for every stored dtype) and
// transposed to [E][k-chunk][row] so a warp's column scales are adjacent. prepare_random() makes
// the same structures from device-generated codes for the bench (full-size layers).
#include <algorithm>
#include <cmath>

#include "cuda/cuda_moe.h"
#include "cuda/cuda_moe_q.h"
#include "cuda/device_common.cuh"
#include "cuda/sm90_moe.cuh"

namespace qmoe::cuda {

void uploads_done() { QMOE_CUDA_OK(cudaDeviceSynchronize()); }

DevBuf::DevBuf(size_t n) : bytes(n) {
  if (n > 0) QMOE_CUDA_OK(cudaMalloc(&ptr, n));
}
DevBuf::~DevBuf() {
  if (ptr != nullptr) cudaFree(ptr);
}
DevBuf& DevBuf::operator=(DevBuf&& o) noexcept {
  if (this != &o) {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = o.ptr;
    bytes = o.bytes;
    o.ptr = nullptr;
    o.bytes = 0;
  }
  return *this;
}

namespace {

// One thread per (expert, n16 tile, atom, lane): gathers that lane's 16 bytes from the canonical
// [E][N][K] codes (bits 16 / 8 / 4; 4-bit: two per byte, low nibble = even k).
template <int BITS>
__global__ void repack_kernel(const uint8_t* __restrict__ src, int E, int N, int K, int np, int kp, int interleaved,
                              int half, uint8_t* __restrict__ dst) {
  constexpr int KA = BITS == 16 ? 16 : BITS == 8 ? 32 : 64;
  const int64_t ntile = np / 16, kat = kp / KA;
  const int64_t total = static_cast<int64_t>(E) * ntile * kat * 32;
  const int64_t row_bytes = BITS == 4 ? K / 2 : static_cast<int64_t>(K) * (BITS / 8);
  for (int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; id < total;
       id += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(id & 31);
    const int64_t ka = (id >> 5) % kat;
    const int64_t tile = ((id >> 5) / kat) % ntile;
    const int64_t e = ((id >> 5) / kat) / ntile;
    const int gid = lane >> 2, t4 = lane & 3;
    uint32_t words[4] = {0, 0, 0, 0};
    auto fetch = [&](int j, int k) -> uint32_t {
      int n = static_cast<int>(tile * 16 + j * 8 + gid);
      int r = interleaved ? j * half + static_cast<int>(tile) * 8 + gid : n;
      bool ok = k < K && (interleaved ? (static_cast<int>(tile) * 8 + gid < half) : n < N) && r < N;
      if (!ok) return 0u;
      const uint8_t* row = src + (e * N + r) * row_bytes;
      if (BITS == 16) return static_cast<uint32_t>(row[2 * k]) | (static_cast<uint32_t>(row[2 * k + 1]) << 8);
      if (BITS == 8) return row[k];
      return (row[k >> 1] >> ((k & 1) * 4)) & 0xFu;
    };
    if (BITS == 16) {
      for (int j = 0; j < 2; ++j)
        for (int bi = 0; bi < 2; ++bi)
          for (int e2 = 0; e2 < 2; ++e2) {
            int k = static_cast<int>(ka) * 16 + bi * 8 + t4 * 2 + e2;
            int vi = (j * 2 + bi) * 2 + e2;
            words[vi >> 1] |= fetch(j, k) << (16 * (vi & 1));
          }
    } else if (BITS == 8) {
      for (int s = 0; s < 2; ++s)
        for (int j = 0; j < 2; ++j)
          for (int bi = 0; bi < 2; ++bi)
            for (int e2 = 0; e2 < 2; ++e2) {
              int k = static_cast<int>(ka) * 32 + s * 16 + bi * 8 + t4 * 2 + e2;
              words[s * 2 + j] |= fetch(j, k) << (8 * (bi * 2 + e2));
            }
    } else {
      for (int s = 0; s < 4; ++s)
        for (int j = 0; j < 2; ++j)
          for (int bi = 0; bi < 2; ++bi)
            for (int e2 = 0; e2 < 2; ++e2) {
              int k = static_cast<int>(ka) * 64 + s * 16 + bi * 8 + t4 * 2 + e2;
              int nib = (j * 2 + bi) + 4 * e2;
              words[s] |= fetch(j, k) << (4 * nib);
            }
    }
    reinterpret_cast<uint4*>(dst)[id] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// int8_plain: also the Hopper path's plain copy of 8-bit integer weights, as signed values u - 128
// (INT8 W8A8 with symmetric weights, run by the IGMMA kernel). fp8_a16: fp8 weights that meet 16-bit
// activations (FP8 weight-only), which the Hopper path does not run: no plain copy.
void repack(const void* dsrc, int bits, int E, int N, int K, bool interleaved, int half, DevProj& pr,
            bool int8_plain, bool fp8_a16) {
  pr.np = (N + 63) / 64 * 64;
  if (interleaved) pr.np = std::max(pr.np, (half + 7) / 8 * 16 + 63) / 64 * 64;
  pr.kp = (K + 63) / 64 * 64;
  pr.n = N;
  pr.k = K;
  pr.interleaved = interleaved;
  size_t bytes = static_cast<size_t>(E) * pr.np * pr.kp * bits / 8;
  pr.w = DevBuf(bytes);
  int64_t lanes = static_cast<int64_t>(bytes / 16);
  int blocks = static_cast<int>(std::min<int64_t>((lanes + 255) / 256, 65535 * 8));
  const uint8_t* s = static_cast<const uint8_t*>(dsrc);
  uint8_t* d = pr.w.as<uint8_t>();
  if (bits == 16) repack_kernel<16><<<blocks, 256>>>(s, E, N, K, pr.np, pr.kp, interleaved, half, d);
  else if (bits == 8) repack_kernel<8><<<blocks, 256>>>(s, E, N, K, pr.np, pr.kp, interleaved, half, d);
  else repack_kernel<4><<<blocks, 256>>>(s, E, N, K, pr.np, pr.kp, interleaved, half, d);
  QMOE_CUDA_LAUNCH_OK();
  // The Hopper prefill path reads plain rows through TMA (sm90_moe.cuh). It costs a second copy of
  // the 16-bit / fp8 weights; other formats and other GPUs have none.
  if ((bits == 16 || (pr.fmt == WFmt::kFP8 && !fp8_a16) || (bits == 8 && int8_plain)) && sm90_available()) {
    pr.wp = DevBuf(sm90_plain_bytes(E, pr.np, pr.kp, bits));
    launch_make_plain(dsrc, bits, E, N, K, pr.np, pr.kp, interleaved, half, pr.wp.ptr, nullptr,
                      int8_plain ? 0x80 : 0);
  }
}

float to_f32(const Tensor& t, int64_t i) {
  const uint8_t* b = static_cast<const uint8_t*>(t.raw());
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF64: return static_cast<float>(t.data<double>()[i]);
    case DType::kBF16: return codec::bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF16: return codec::f16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF8E4M3: return codec::e4m3_to_f32(b[i]);
    case DType::kE8M0: return codec::e8m0_to_f32(b[i]);
    case DType::kU8: return static_cast<float>(b[i]);
    case DType::kI8: return static_cast<float>(static_cast<int8_t>(b[i]));
    case DType::kI32: return static_cast<float>(t.data<int32_t>()[i]);
    default: bad_input("CUDA prepare: tensor dtype ", dtype_name(t.dtype()), " is not a scale / zero-point dtype");
  }
}

template <class V>
DevBuf upload(const std::vector<V>& v) {
  DevBuf b(v.size() * sizeof(V));
  if (!v.empty()) QMOE_CUDA_OK(cudaMemcpy(b.ptr, v.data(), b.bytes, cudaMemcpyHostToDevice));
  return b;
}

// v rounded to the activation dtype (bf16 / fp16).
float round_act(DType act, float v) { return act == DType::kF16 ? codec::round_f16(v) : codec::round_bf16(v); }

// DevProj::scale16: every scale is exactly a value of the activation dtype and 16 x it stays
// finite there (int4 codes minus zero points are within [-15, 15]).
bool scales_exact16(const std::vector<float>& sc, DType act) {
  const float big = act == DType::kF16 ? 65504.f / 16.f : 3.0e38f / 16.f;
  for (float v : sc)
    if (!(round_act(act, v) == v && std::fabs(v) <= big)) return false;
  return true;
}

WFmt fmt_of(const ExpertWeights& w) {
  switch (w.scheme.kind) {
    case SchemeKind::kUnquantized: return WFmt::k16;
    case SchemeKind::kWNA16: return w.scheme.weights.num_bits == 4 ? WFmt::kU4 : WFmt::kU8;
    default: return WFmt::kFP8;
  }
}

// Scales, zero points, g_idx, bias, input scale of one projection (host side).
void prepare_aux(const ExpertWeights& w, const ProjWeights& pw, bool is_w13, DevProj& pr) {
  const int E = w.num_experts, N = pr.n;
  const int I = w.intermediate;
  const SchemeKind kind = w.scheme.kind;
  if (kind != SchemeKind::kUnquantized) {
    const Strategy st = w.scheme.weights.strat();
    std::vector<float> sc;
    if (st == Strategy::kTensor) {
      pr.kg = 1; pr.kchunk = 0; pr.nsc = N; pr.n_div = 1;
      sc.resize(static_cast<size_t>(E) * N);
      const int S = pw.scale.dim() >= 2 ? static_cast<int>(pw.scale.size(1)) : 1;
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < N; ++r) {
          int shard = (is_w13 && S == 2 && r >= I) ? 1 : 0;
          sc[static_cast<size_t>(e) * N + r] = to_f32(pw.scale, static_cast<int64_t>(e) * S + shard);
        }
    } else if (st == Strategy::kBlock) {
      const int nb = static_cast<int>(pw.scale.size(1)), kb = static_cast<int>(pw.scale.size(2));
      pr.kg = kb; pr.kchunk = w.block[1]; pr.nsc = nb; pr.n_div = w.block[0];
      sc.resize(static_cast<size_t>(E) * kb * nb);
      for (int e = 0; e < E; ++e)
        for (int a = 0; a < nb; ++a)
          for (int b = 0; b < kb; ++b)
            sc[(static_cast<size_t>(e) * kb + b) * nb + a] = to_f32(pw.scale, (static_cast<int64_t>(e) * nb + a) * kb + b);
    } else {  // channel or group: [E, N, KG]
      const int kg = static_cast<int>(pw.scale.size(2));
      pr.kg = kg; pr.nsc = N; pr.n_div = 1;
      pr.kchunk = (st == Strategy::kChannel || kg == 1) ? 0 : w.group_size;
      sc.resize(static_cast<size_t>(E) * kg * N);
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < N; ++r)
          for (int g = 0; g < kg; ++g)
            sc[(static_cast<size_t>(e) * kg + g) * N + r] = to_f32(pw.scale, (static_cast<int64_t>(e) * N + r) * kg + g);
      pr.scale16 = kind == SchemeKind::kWNA16 && scales_exact16(sc, w.act_dtype);
    }
    pr.scale = upload(sc);
    if (pw.zero_point.defined()) {
      const int kg = static_cast<int>(pw.zero_point.size(2));
      std::vector<float> z(static_cast<size_t>(E) * kg * N);
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < N; ++r)
          for (int g = 0; g < kg; ++g)
            z[(static_cast<size_t>(e) * kg + g) * N + r] = to_f32(pw.zero_point, (static_cast<int64_t>(e) * N + r) * kg + g);
      pr.zero = upload(z);
    }
    if (pw.g_idx.defined()) {
      std::vector<int32_t> g(pw.g_idx.data<int32_t>(), pw.g_idx.data<int32_t>() + pw.g_idx.numel());
      pr.g_idx = upload(g);
    }
  }
  if (pw.bias.defined()) {
    std::vector<float> b(static_cast<size_t>(E) * N);
    for (size_t i = 0; i < b.size(); ++i) b[i] = to_f32(pw.bias, static_cast<int64_t>(i));
    pr.bias = upload(b);
  }
  if (pw.input_scale.defined()) {
    // One static activation scale per expert and projection. w13's [E, 2] gate / up scales both
    // describe the same input; the reference quantizes it with their maximum (no clipping).
    const int S = static_cast<int>(pw.input_scale.numel() / E);
    pr.in_scale.resize(E);
    for (int e = 0; e < E; ++e) {
      float s = 0.f;
      for (int j = 0; j < S; ++j) s = std::max(s, to_f32(pw.input_scale, static_cast<int64_t>(e) * S + j));
      pr.in_scale[e] = s;
    }
    pr.in_scale_dev = upload(pr.in_scale);
  }
}

std::string method_of(const DevExperts& d, const ExpertWeights& w) {
  std::string s = "cuda/mma/" + w.scheme.key();
  return s;
}

}  // namespace

std::string can_prepare(const ExpertWeights& w) {
  if (w.act_dtype != DType::kBF16 && w.act_dtype != DType::kF16)
    return str("activation dtype ", dtype_name(w.act_dtype), " (the CUDA kernels take bf16 or fp16 activations)");
  if (w.hidden % 8 != 0 || w.intermediate % 8 != 0)
    return str("hidden ", w.hidden, " / intermediate ", w.intermediate,
               " must be multiples of 8 (16-byte rows for the CUDA kernels)");
  const SchemeKind k = w.scheme.kind;
  if (k == SchemeKind::kUnquantized) {
    if (w.w13.weight.dtype() != w.act_dtype || w.w2.weight.dtype() != w.act_dtype)
      return str("unquantized weights of dtype ", dtype_name(w.w13.weight.dtype()), " with ",
                 dtype_name(w.act_dtype), " activations (the CUDA kernels need weights in the activation dtype)");
    return "";
  }
  if (k == SchemeKind::kWNA16) {
    const int b = w.scheme.weights.num_bits;
    if (b != 4 && b != 8) return str("WNA16 with ", b, "-bit weights (4 or 8 supported)");
    const Strategy st = w.scheme.weights.strat();
    if (st != Strategy::kGroup && st != Strategy::kChannel) return str("WNA16 strategy ", strategy_name(st));
    if (st == Strategy::kGroup && !w.w13.g_idx.defined() && (w.group_size % 16 != 0 || w.group_size <= 0))
      return str("WNA16 group size ", w.group_size, " (multiples of 16 supported)");
    return "";
  }
  if (k == SchemeKind::kFP8W8A8 || k == SchemeKind::kFP8A16) {
    const Strategy st = w.scheme.weights.strat();
    if (st != Strategy::kTensor && st != Strategy::kChannel && st != Strategy::kBlock)
      return str("FP8 weight strategy ", strategy_name(st));
    if (st == Strategy::kBlock && (w.block[1] % 16 != 0 || w.block[1] <= 0 || w.block[0] <= 0))
      return str("FP8 block ", w.block[0], "x", w.block[1], " (k extent must be a multiple of 16)");
    if (k == SchemeKind::kFP8A16) return "";  // weight-only: 16-bit activations on bf16 / fp16 operands
    const ActQuant a = w.scheme.act;
    if (a != ActQuant::kFP8Tensor && a != ActQuant::kFP8Token && a != ActQuant::kFP8Group128)
      return str("FP8 activation quantization ", act_quant_name(a));
    if (st == Strategy::kBlock && a == ActQuant::kFP8Group128 && 128 % w.block[1] != 0 && w.block[1] % 128 != 0)
      return str("FP8 block k extent ", w.block[1], " does not nest with 1x128 activation groups");
    if (a == ActQuant::kFP8Tensor && (!w.w13.input_scale.defined() || !w.w2.input_scale.defined()))
      return "FP8 static activation quantization without input_scale tensors";
    return "";
  }
  if (q_scheme(k)) return can_prepare_q(w);  // backend II (prepare_q.cu)
  return str("scheme kind ", scheme_kind_name(k),
             " (the CUDA backend runs BF16/FP16, WNA16, FP8 and backend II's schemes)");
}

DevExperts prepare(const ExpertWeights& w, Activation activation, bool int8_plain) {
  if (q_scheme(w.scheme.kind)) return prepare_q(w, activation);  // backend II (prepare_q.cu)
  std::string why = can_prepare(w);
  QMOE_CHECK(why.empty(), kUnsupported, "CUDA backend cannot prepare these weights: ", why);
  DevExperts d;
  d.num_experts = w.num_experts;
  d.hidden = w.hidden;
  d.intermediate = w.intermediate;
  d.act = w.act_dtype;
  d.fmt = fmt_of(w);
  d.act_quant = w.scheme.kind == SchemeKind::kFP8W8A8 ? w.scheme.act : ActQuant::kNone;
  d.activation = activation;
  const int bits = wfmt_bits(d.fmt);
  const int E = w.num_experts, H = w.hidden, I = w.intermediate;
  auto one = [&](const ProjWeights& pw, bool is_w13, DevProj& pr) {
    const int N = is_w13 ? 2 * I : H, K = is_w13 ? H : I;
    DevBuf tmp(pw.weight.nbytes());
    QMOE_CUDA_OK(cudaMemcpy(tmp.ptr, pw.weight.raw(), pw.weight.nbytes(), cudaMemcpyHostToDevice));
    pr.fmt = d.fmt;
    repack(tmp.ptr, bits, E, N, K, is_w13, I, pr, int8_plain && !pw.zero_point.defined(),
           w.scheme.kind == SchemeKind::kFP8A16);
    QMOE_CUDA_OK(cudaDeviceSynchronize());
    prepare_aux(w, pw, is_w13, pr);
    build_decode_tiles(pr, E, I);
  };
  one(w.w13, true, d.w13);
  one(w.w2, false, d.w2);
  d.method = method_of(d, w);
  uploads_done();
  return d;
}

// ---- device-random weights (bench) -------------------------------------------------------------------
namespace {
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27; x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// kind 0: random bf16/fp16 values in about [-1/16, 1/16] (bits of a uniform float), 1: random bytes,
// 2: random e4m3 bytes without NaN codes.
__global__ void fill_random_kernel(uint8_t* dst, size_t bytes, int kind, int f16, uint64_t seed) {
  size_t words = bytes / 8;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t r = mix64(seed ^ (i * 0x9E3779B97F4A7C15ull));
    if (kind == 0) {
      uint64_t out = 0;
      for (int h = 0; h < 4; ++h) {
        float f = (static_cast<float>((r >> (16 * h)) & 0xFFFF) / 65536.f - 0.5f) * 0.125f;
        uint16_t b = f16 ? codec::f32_to_f16(f) : codec::f32_to_bf16(f);
        out |= static_cast<uint64_t>(b) << (16 * h);
      }
      r = out;
    } else if (kind == 2) {
      uint64_t out = 0;
      for (int h = 0; h < 8; ++h) {
        uint8_t b = static_cast<uint8_t>(r >> (8 * h));
        if ((b & 0x7F) == 0x7F) b ^= 0x01;
        out |= static_cast<uint64_t>(b) << (8 * h);
      }
      r = out;
    }
    reinterpret_cast<uint64_t*>(dst)[i] = r;
  }
}
}  // namespace

DevExperts prepare_random(const MoeScheme& scheme, int E, int H, int I, int group_size, std::array<int, 2> block,
                          DType act, Activation activation, bool with_bias, uint64_t seed, bool int8_plain) {
  if (q_scheme(scheme.kind))  // backend II (prepare_q.cu)
    return prepare_random_q(scheme, E, H, I, group_size, act, activation, with_bias, seed);
  DevExperts d;
  d.num_experts = E;
  d.hidden = H;
  d.intermediate = I;
  d.act = act;
  d.activation = activation;
  d.fmt = scheme.kind == SchemeKind::kUnquantized ? WFmt::k16
          : scheme.kind == SchemeKind::kWNA16     ? (scheme.weights.num_bits == 4 ? WFmt::kU4 : WFmt::kU8)
                                                  : WFmt::kFP8;
  QMOE_CHECK(scheme.kind == SchemeKind::kUnquantized || scheme.kind == SchemeKind::kWNA16 ||
                 scheme.kind == SchemeKind::kFP8W8A8 || scheme.kind == SchemeKind::kFP8A16,
             kUnsupported, "CUDA bench: scheme ", scheme.key(), " is not run by the CUDA backend");
  d.act_quant = scheme.kind == SchemeKind::kFP8W8A8 ? scheme.act : ActQuant::kNone;
  const int bits = wfmt_bits(d.fmt);
  uint64_t sd = seed;
  auto one = [&](bool is_w13, DevProj& pr) {
    const int N = is_w13 ? 2 * I : H, K = is_w13 ? H : I;
    size_t bytes = static_cast<size_t>(E) * N * K * bits / 8;
    DevBuf tmp((bytes + 7) / 8 * 8);
    fill_random_kernel<<<4096, 256>>>(tmp.as<uint8_t>(), tmp.bytes, d.fmt == WFmt::k16 ? 0 : d.fmt == WFmt::kFP8 ? 2 : 1,
                                      act == DType::kF16, sd++);
    QMOE_CUDA_LAUNCH_OK();
    pr.fmt = d.fmt;
    repack(tmp.ptr, bits, E, N, K, is_w13, I, pr, int8_plain && scheme.weights.symmetric,
           scheme.kind == SchemeKind::kFP8A16);
    QMOE_CUDA_OK(cudaDeviceSynchronize());
    // scales: small positive values, deterministic from the seed; WNA16 scales in the model dtype,
    // as its checkpoints store them
    auto scale_val = [&](size_t i) { return 0.01f + 0.001f * static_cast<float>((i * 2654435761u + sd) % 97); };
    const bool wna16 = scheme.kind == SchemeKind::kWNA16;
    if (scheme.kind != SchemeKind::kUnquantized) {
      const Strategy st = scheme.weights.strat();
      if (st == Strategy::kBlock) {
        pr.nsc = (N + block[0] - 1) / block[0]; pr.kg = (K + block[1] - 1) / block[1];
        pr.n_div = block[0]; pr.kchunk = block[1];
      } else if (st == Strategy::kGroup) {
        pr.nsc = N; pr.kg = (K + group_size - 1) / group_size; pr.n_div = 1; pr.kchunk = group_size;
      } else {
        pr.nsc = N; pr.kg = 1; pr.n_div = 1; pr.kchunk = 0;
      }
      std::vector<float> sc(static_cast<size_t>(E) * pr.kg * pr.nsc);
      for (size_t i = 0; i < sc.size(); ++i)
        sc[i] = wna16 ? round_act(act, scale_val(i)) : scale_val(i);
      pr.scale16 = wna16 && scales_exact16(sc, act);
      pr.scale = upload(sc);
      if (!scheme.weights.symmetric && scheme.kind == SchemeKind::kWNA16) {
        std::vector<float> z(static_cast<size_t>(E) * pr.kg * N);
        for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>((i * 7 + 3) % (1u << bits));
        pr.zero = upload(z);
      }
      if (scheme.act == ActQuant::kFP8Tensor) {
        pr.in_scale.assign(E, 0.05f);
        pr.in_scale_dev = upload(pr.in_scale);
      }
    }
    if (with_bias) {
      std::vector<float> b(static_cast<size_t>(E) * N);
      for (size_t i = 0; i < b.size(); ++i) b[i] = scale_val(i) - 0.05f;
      pr.bias = upload(b);
    }
    build_decode_tiles(pr, E, I);
  };
  one(true, d.w13);
  one(false, d.w2);
  d.method = "cuda/mma/" + scheme.key();
  uploads_done();
  return d;
}

}  // namespace qmoe::cuda
