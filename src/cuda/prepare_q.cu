// prepare_q(): backend II's schemes into backend I's device experts (cuda_moe_q.h).
//  * NVFP4 / MXFP4: codes and block scales are uploaded as stored and repacked on the device into
//    fp4 units (moe_gemm_fp4.cu): per (n16 tile, 64-k atom) 512 bytes of int4-atom nibbles, then
//    the 16 rows' block-scale bytes (NVFP4 4 per row, MXFP4 2 per row). The fp32 global scale of
//    the row's shard becomes the column scale; W4A4's static input multiplier A the per-expert
//    in_scale that act_prep quantizes with.
//  * INT8 W8A8 / W4A8: the weights are exactly WNA16's (int8 channel / int4 group codes, scales),
//    so backend I's prepare() repacks them; only the activation quantization differs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/cuda_moe_q.h"
#include "cuda/device_common.cuh"

namespace qmoe::cuda {

bool q_scheme(SchemeKind k) {
  return k == SchemeKind::kNVFP4 || k == SchemeKind::kNVFP4A16 || k == SchemeKind::kMXFP4A16 ||
         k == SchemeKind::kINT8W8A8 || k == SchemeKind::kW4A8FP8 || k == SchemeKind::kW4A8INT8;
}

namespace {

bool fp4_kind(SchemeKind k) {
  return k == SchemeKind::kNVFP4 || k == SchemeKind::kNVFP4A16 || k == SchemeKind::kMXFP4A16;
}

float to_f32(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kBF16: return codec::bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF16: return codec::f16_to_f32(t.data<uint16_t>()[i]);
    default: bad_input("CUDA prepare: tensor dtype ", dtype_name(t.dtype()), " where F32 / BF16 / F16 was expected");
  }
}

template <class V>
DevBuf upload(const std::vector<V>& v) {
  DevBuf b(v.size() * sizeof(V));
  if (!v.empty()) QMOE_CUDA_OK(cudaMemcpy(b.ptr, v.data(), b.bytes, cudaMemcpyHostToDevice));
  return b;
}

// One thread per (expert, n16 tile, 64-k atom, lane): the lane's 16 code bytes (backend I's int4
// atom layout) and, for lanes < 16, row `lane`'s SPR scale bytes of this atom. Codes [E][N][K/2]
// (low nibble = even k), scales [E][N][kgs] one byte each; padding rows / columns get code 0 and
// scale byte 0 (value 0 either way).
template <int SPR>
__global__ void repack_fp4_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales, int E, int N,
                                  int K, int kgs, int np, int kp, int interleaved, int half,
                                  uint8_t* __restrict__ dst) {
  constexpr int U = 512 + 16 * SPR;
  const int64_t ntile = np / 16, kat = kp / 64;
  const int64_t total = static_cast<int64_t>(E) * ntile * kat * 32;
  const int64_t row_bytes = K / 2;
  for (int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; id < total;
       id += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(id & 31);
    const int64_t unit = id >> 5;  // (e * ntile + tile) * kat + ka
    const int64_t ka = unit % kat;
    const int64_t tile = (unit / kat) % ntile;
    const int64_t e = (unit / kat) / ntile;
    // original row of prepared row (j, g) of this tile, or -1 for padding
    auto orig = [&](int j, int g) -> int64_t {
      if (interleaved) {
        int64_t i = tile * 8 + g;
        return i < half ? j * half + i : -1;
      }
      int64_t n = tile * 16 + j * 8 + g;
      return n < N ? n : -1;
    };
    const int gid = lane >> 2, t4 = lane & 3;
    uint32_t words[4] = {0, 0, 0, 0};
    for (int s = 0; s < 4; ++s)
      for (int j = 0; j < 2; ++j) {
        const int64_t r = orig(j, gid);
        if (r < 0) continue;
        const uint8_t* row = codes + (e * N + r) * row_bytes;
        for (int bi = 0; bi < 2; ++bi)
          for (int e2 = 0; e2 < 2; ++e2) {
            const int64_t k = ka * 64 + s * 16 + bi * 8 + t4 * 2 + e2;
            if (k >= K) continue;
            const uint32_t c = (row[k >> 1] >> ((k & 1) * 4)) & 0xFu;
            words[s] |= c << (4 * ((j * 2 + bi) + 4 * e2));
          }
      }
    uint8_t* u = dst + unit * U;
    reinterpret_cast<uint4*>(u)[lane] = make_uint4(words[0], words[1], words[2], words[3]);
    if (lane < 16) {
      const int64_t r = orig(lane >> 3, lane & 7);
      for (int s = 0; s < SPR; ++s) {
        const int64_t g = ka * SPR + s;
        u[512 + lane * SPR + s] = (r >= 0 && g < kgs) ? scales[(e * N + r) * kgs + g] : 0;
      }
    }
  }
}

// Codes + scale bytes already on the device -> fp4 units in pr.w.
void repack_fp4(const void* dcodes, const void* dscales, int spr, int E, int N, int K, int kgs, bool interleaved,
                int half, DevProj& pr) {
  // the same padded sizes as backend I's repack (prepare.cu), so forward()'s tiling agrees
  pr.np = (N + 63) / 64 * 64;
  if (interleaved) pr.np = std::max(pr.np, (half + 7) / 8 * 16 + 63) / 64 * 64;
  pr.kp = (K + 63) / 64 * 64;
  pr.n = N;
  pr.k = K;
  pr.interleaved = interleaved;
  const int64_t units = static_cast<int64_t>(E) * (pr.np / 16) * (pr.kp / 64);
  pr.w = DevBuf(static_cast<size_t>(units) * (512 + 16 * spr));
  const int64_t threads = units * 32;
  const int blocks = static_cast<int>(std::min<int64_t>((threads + 255) / 256, 65535 * 8));
  const uint8_t* c = static_cast<const uint8_t*>(dcodes);
  const uint8_t* s = static_cast<const uint8_t*>(dscales);
  if (spr == 4)
    repack_fp4_kernel<4><<<blocks, 256>>>(c, s, E, N, K, kgs, pr.np, pr.kp, interleaved, half, pr.w.as<uint8_t>());
  else
    repack_fp4_kernel<2><<<blocks, 256>>>(c, s, E, N, K, kgs, pr.np, pr.kp, interleaved, half, pr.w.as<uint8_t>());
  QMOE_CUDA_LAUNCH_OK();
}

// The global scale of each original row (w13: gate rows shard 0, up rows shard 1) as backend I's
// column-scale table [E][1][N].
void set_row_scales(const std::vector<float>& per_row, int N, DevProj& pr) {
  pr.kg = 1;
  pr.kchunk = 0;
  pr.nsc = N;
  pr.n_div = 1;
  pr.scale = upload(per_row);
}

// The static multiplier per expert: the larger of the shards' (w13's gate / up see one input),
// exactly as the reference (ref_layer.cpp static_scale).
void set_input_scale(const ProjWeights& pw, int E, DevProj& pr) {
  const int64_t S = pw.input_scale.numel() / E;
  pr.in_scale.resize(E);
  for (int e = 0; e < E; ++e) {
    float s = 0.f;
    for (int64_t j = 0; j < S; ++j) s = std::max(s, pw.input_scale.data<float>()[e * S + j]);
    pr.in_scale[e] = s;
  }
  pr.in_scale_dev = upload(pr.in_scale);
}

// The WNA16 view of INT8 W8A8 / W4A8 weights (same canonical tensors; activations 16-bit).
ExpertWeights wna16_view(const ExpertWeights& w) {
  ExpertWeights v = w;
  v.scheme.kind = SchemeKind::kWNA16;
  v.scheme.act = ActQuant::kNone;
  v.scheme.input_activations.reset();
  return v;
}
MoeScheme wna16_scheme(const MoeScheme& s) {
  MoeScheme v = s;
  v.kind = SchemeKind::kWNA16;
  v.act = ActQuant::kNone;
  v.input_activations.reset();
  return v;
}

DevExperts prepare_fp4(const ExpertWeights& w, Activation activation) {
  DevExperts d;
  d.num_experts = w.num_experts;
  d.hidden = w.hidden;
  d.intermediate = w.intermediate;
  d.act = w.act_dtype;
  const bool nv = w.scheme.kind != SchemeKind::kMXFP4A16;
  d.fmt = nv ? WFmt::kNV4 : WFmt::kMX4;
  d.act_quant = w.scheme.kind == SchemeKind::kNVFP4 ? ActQuant::kNVFP4 : ActQuant::kNone;
  d.activation = activation;
  const int E = w.num_experts, H = w.hidden, I = w.intermediate;
  auto one = [&](const ProjWeights& pw, bool is_w13, DevProj& pr) {
    const int N = is_w13 ? 2 * I : H, K = is_w13 ? H : I;
    const int kgs = static_cast<int>(pw.scale.size(2));
    DevBuf codes(pw.weight.nbytes()), sc(pw.scale.nbytes());
    QMOE_CUDA_OK(cudaMemcpy(codes.ptr, pw.weight.raw(), pw.weight.nbytes(), cudaMemcpyHostToDevice));
    QMOE_CUDA_OK(cudaMemcpy(sc.ptr, pw.scale.raw(), pw.scale.nbytes(), cudaMemcpyHostToDevice));
    pr.fmt = d.fmt;
    repack_fp4(codes.ptr, sc.ptr, nv ? 4 : 2, E, N, K, kgs, is_w13, I, pr);
    QMOE_CUDA_OK(cudaDeviceSynchronize());
    if (nv) {
      const int64_t S = pw.global_scale.size(1);
      std::vector<float> rs(static_cast<size_t>(E) * N);
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < N; ++r) {
          const int64_t shard = (is_w13 && S == 2 && r >= I) ? 1 : 0;
          rs[static_cast<size_t>(e) * N + r] = pw.global_scale.data<float>()[e * S + shard];
        }
      set_row_scales(rs, N, pr);
    }
    if (pw.bias.defined()) {
      std::vector<float> b(static_cast<size_t>(E) * N);
      for (size_t i = 0; i < b.size(); ++i) b[i] = to_f32(pw.bias, static_cast<int64_t>(i));
      pr.bias = upload(b);
    }
    if (d.act_quant == ActQuant::kNVFP4) set_input_scale(pw, E, pr);
  };
  one(w.w13, true, d.w13);
  one(w.w2, false, d.w2);
  d.method = "cuda/mma-fp4/" + w.scheme.key();
  uploads_done();
  return d;
}

// ---- device-random fp4 weights (bench) ----
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27; x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Random bytes; with span > 0 every byte is lo + (random % span) (scale bytes in a tame range).
__global__ void fill_bytes_kernel(uint8_t* dst, size_t n, uint32_t lo, uint32_t span, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t r = mix64(seed ^ (i * 0x9E3779B97F4A7C15ull));
    dst[i] = static_cast<uint8_t>(span > 0 ? lo + static_cast<uint32_t>(r % span) : r);
  }
}

}  // namespace

std::string can_prepare_q(const ExpertWeights& w) {
  const SchemeKind k = w.scheme.kind;
  if (w.act_dtype != DType::kBF16 && w.act_dtype != DType::kF16)
    return str("activation dtype ", dtype_name(w.act_dtype), " (the CUDA kernels take bf16 or fp16 activations)");
  if (w.hidden % 8 != 0 || w.intermediate % 8 != 0)
    return str("hidden ", w.hidden, " / intermediate ", w.intermediate,
               " must be multiples of 8 (16-byte rows for the CUDA kernels)");
  if (fp4_kind(k)) {
    const bool nv = k != SchemeKind::kMXFP4A16;
    const int G = nv ? 16 : 32;
    if (w.group_size != G) return str(scheme_kind_name(k), " with group size ", w.group_size, " (", G, " expected)");
    for (const ProjWeights* pw : {&w.w13, &w.w2}) {
      if (dtype_size(pw->scale.dtype()) != 1 || pw->scale.dim() != 3)
        return str(scheme_kind_name(k), " block scales of dtype ", dtype_name(pw->scale.dtype()),
                   " (one byte per block expected)");
      if (nv && pw->scale.dtype() != DType::kF8E4M3)
        return str("NVFP4 block scales of dtype ", dtype_name(pw->scale.dtype()), " (F8E4M3 expected)");
      if (nv && (!pw->global_scale.defined() || pw->global_scale.dtype() != DType::kF32 || pw->global_scale.dim() != 2))
        return "NVFP4 without an F32 [E, S] global_scale";
      if (k == SchemeKind::kNVFP4 && (!pw->input_scale.defined() || pw->input_scale.dtype() != DType::kF32))
        return "NVFP4 W4A4 without F32 input_scale tensors (the static activation multiplier)";
    }
    if (k == SchemeKind::kNVFP4 && w.scheme.act != ActQuant::kNVFP4)
      return str("NVFP4 W4A4 with activation quantization ", act_quant_name(w.scheme.act));
    if (!nv) {
      // every e8m0 scale must keep e2m1 * 2^(e - 127) exact in the operand dtype (moe_gemm_fp4.cu)
      const bool f16 = w.act_dtype == DType::kF16;
      const int lo = f16 ? 112 : 59, hi = f16 ? 135 : 191;
      for (const ProjWeights* pw : {&w.w13, &w.w2}) {
        const uint8_t* s = static_cast<const uint8_t*>(pw->scale.raw());
        const auto mm = std::minmax_element(s, s + pw->scale.numel());
        if (pw->scale.numel() > 0 && (*mm.first < lo || *mm.second > hi))
          return str("MXFP4 e8m0 scales in [2^", int(*mm.first) - 127, ", 2^", int(*mm.second) - 127, "] with ",
                     dtype_name(w.act_dtype), " activations (the CUDA kernels need [2^", lo - 127, ", 2^", hi - 127,
                     "] so that e2m1 x scale is exact in the MMA operand)");
      }
    }
    return "";
  }
  // int schemes: backend I runs the weights; check the activation side here
  const QuantArgs& qa = w.scheme.weights;
  if (w.w13.g_idx.defined() || w.w2.g_idx.defined())
    return str(scheme_kind_name(k), " with act-order g_idx (per-group activation products need contiguous groups)");
  if (k == SchemeKind::kINT8W8A8) {
    if (qa.num_bits != 8 || qa.strat() != Strategy::kChannel)
      return str("INT8 W8A8 with ", qa.num_bits, "-bit ", strategy_name(qa.strat()), " weights (int8 channel expected)");
    if (w.scheme.act != ActQuant::kINT8Token) return str("INT8 W8A8 with activations ", act_quant_name(w.scheme.act));
  } else {
    if (qa.num_bits != 4) return str(scheme_kind_name(k), " with ", qa.num_bits, "-bit weights (int4 expected)");
    const ActQuant want = k == SchemeKind::kW4A8FP8 ? ActQuant::kFP8Token : ActQuant::kINT8Token;
    if (w.scheme.act != want)
      return str(scheme_kind_name(k), " with activations ", act_quant_name(w.scheme.act), " (", act_quant_name(want),
                 " expected)");
  }
  return can_prepare(wna16_view(w));
}

DevExperts prepare_q(const ExpertWeights& w, Activation activation) {
  const std::string why = can_prepare_q(w);
  QMOE_CHECK(why.empty(), kUnsupported, "CUDA backend cannot prepare these weights: ", why);
  if (fp4_kind(w.scheme.kind)) return prepare_fp4(w, activation);
  DevExperts d = prepare(wna16_view(w), activation, w.scheme.kind == SchemeKind::kINT8W8A8);
  d.act_quant = w.scheme.act;
  d.method = "cuda/mma/" + w.scheme.key();
  return d;
}

DevExperts prepare_random_q(const MoeScheme& scheme, int E, int H, int I, int group_size, DType act,
                            Activation activation, bool with_bias, uint64_t seed) {
  QMOE_CHECK(q_scheme(scheme.kind), kInternal, "prepare_random_q: scheme ", scheme.key());
  if (!fp4_kind(scheme.kind)) {
    DevExperts d = prepare_random(wna16_scheme(scheme), E, H, I, group_size, {0, 0}, act, activation, with_bias, seed,
                                  scheme.kind == SchemeKind::kINT8W8A8);
    d.act_quant = scheme.act;
    d.method = "cuda/mma/" + scheme.key();
    return d;
  }
  DevExperts d;
  d.num_experts = E;
  d.hidden = H;
  d.intermediate = I;
  d.act = act;
  d.activation = activation;
  const bool nv = scheme.kind != SchemeKind::kMXFP4A16;
  d.fmt = nv ? WFmt::kNV4 : WFmt::kMX4;
  d.act_quant = scheme.kind == SchemeKind::kNVFP4 ? ActQuant::kNVFP4 : ActQuant::kNone;
  uint64_t sd = seed;
  auto one = [&](bool is_w13, DevProj& pr) {
    const int N = is_w13 ? 2 * I : H, K = is_w13 ? H : I;
    const int G = nv ? 16 : 32, kgs = (K + G - 1) / G;
    DevBuf codes(static_cast<size_t>(E) * N * (K / 2)), sc(static_cast<size_t>(E) * N * kgs);
    fill_bytes_kernel<<<4096, 256>>>(codes.as<uint8_t>(), codes.bytes, 0, 0, sd++);
    // e4m3 0x30..0x3F = 0.5 .. 1.875; e8m0 120..127 = 2^-7 .. 1
    fill_bytes_kernel<<<4096, 256>>>(sc.as<uint8_t>(), sc.bytes, nv ? 0x30 : 120, nv ? 16 : 8, sd++);
    QMOE_CUDA_LAUNCH_OK();
    pr.fmt = d.fmt;
    repack_fp4(codes.ptr, sc.ptr, nv ? 4 : 2, E, N, K, kgs, is_w13, I, pr);
    QMOE_CUDA_OK(cudaDeviceSynchronize());
    if (nv) set_row_scales(std::vector<float>(static_cast<size_t>(E) * N, 1.f / 64), N, pr);
    if (with_bias) {
      std::vector<float> b(static_cast<size_t>(E) * N);
      for (size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * static_cast<float>(static_cast<int>(i % 97) - 48);
      pr.bias = upload(b);
    }
    if (d.act_quant == ActQuant::kNVFP4) {
      pr.in_scale.assign(E, 4.f / (6 * 448));
      pr.in_scale_dev = upload(pr.in_scale);
    }
  };
  one(true, d.w13);
  one(false, d.w2);
  d.method = "cuda/mma-fp4/" + scheme.key();
  uploads_done();
  return d;
}

double q_scale_bytes(const MoeScheme& scheme, int group_size, int n, int k) {
  switch (scheme.kind) {
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: return static_cast<double>(n) * ((k + 15) / 16);
    case SchemeKind::kMXFP4A16: return static_cast<double>(n) * ((k + 31) / 32);
    case SchemeKind::kINT8W8A8: return static_cast<double>(n) * 2;
    case SchemeKind::kW4A8FP8: case SchemeKind::kW4A8INT8:
      return static_cast<double>(n) * (group_size > 0 ? (k + group_size - 1) / group_size : 1) * 2;
    default: return 0;
  }
}

}  // namespace qmoe::cuda
