// The grouped MoE GEMM for fp4 weights (NVFP4, MXFP4) on mma.sync m16n8k16 with bf16 / fp16
// operands: Hopper has no fp4 tensor cores. Same tiles, A pipeline and epilogue as backend I's
// moe_gemm.cu; the weights are "fp4 units": per (n16 tile, 64-k atom) the 512 bytes of backend I's
// int4 atom (each lane's B-fragment nibbles) followed by the 16 rows' block scales (NVFP4: 4 e4m3
// per row, 64 B; MXFP4: 2 e8m0 per row, 32 B), so one linear cp.async stream carries both.
// Each B pair is dequantized to e2m1(q) * block_scale, EXACT in the operand dtype:
//  * e2m1 has 2 significant bits, e4m3 4 (subnormals 3): the NVFP4 product has <= 6 significant
//    bits and lies in [2^-11 (lowest bit), 6 * 448 = 2688] — exact in bf16 (8 bits, fp32 range)
//    and in fp16 (11 bits, subnormals down to 2^-24, max 65504);
//  * MXFP4: e2m1 * 2^(e - 127) is a power-of-two scaling of a 2-bit value: exact in bf16 for every
//    e <= 252 and in fp16 for e in [104, 140] (prepare_q refuses other scales).
// bf16 x bf16 (fp16 x fp16) products are exact in the MMA's fp32, so GEMM = the reference's exact
// dequantized products summed in fp32; W4A4 activations arrive as e2m1(qa) * s_a (exact for the
// same reason), making each MMA product e2m1(qa) s_a e2m1(qw) s_w exactly (numerics.md "Products").
// The per-row fp32 factors (global scale; W4A4 also 1/G via the row scale) multiply the fp32 sum
// once in the epilogue.
#include "cuda/device_common.cuh"
#include "cuda/moe_q.cuh"

namespace qmoe::cuda {
namespace {

using namespace dev;

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct Cfg {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MI = WM / 16, NT = WN / 16;
};
// The same two tile families as backend I (config.h Tile).
using SmallCfg = Cfg<16, 64, 1, 4, 6>;
using LargeCfg = Cfg<128, 128, 2, 4, 3>;

template <WFmt F>
constexpr int unit_bytes() {
  return F == WFmt::kNV4 ? 512 + 64 : 512 + 32;
}
template <class C, WFmt F>
constexpr int smem_bytes() {
  return C::STAGES * (C::BM * 128 + (C::BN / 16) * unit_bytes<F>()) + C::BM * 4;
}

// e2m1 codes -> operand bits: sign to bit 15, the 3 exponent/mantissa bits to the top of the
// operand's mantissa / bottom of its exponent; that bit pattern is value * 2^-126 (bf16) or
// value * 2^-14 (fp16), subnormal for 0.5 — one exact multiply by the power of two fixes it.
template <class Op> struct Fp4Traits;
template <> struct Fp4Traits<BF16> {
  static constexpr int kEmShift = 6;
  static constexpr uint32_t kFix = 0x7E807E80u;  // bf16 2^126 in both halves
};
template <> struct Fp4Traits<F16> {
  static constexpr int kEmShift = 9;
  static constexpr uint32_t kFix = 0x74007400u;  // fp16 2^14
};

// Pair p (0..3) of an int4-atom word: nibble p = first element, nibble p + 4 = second.
template <class Op>
__device__ __forceinline__ uint32_t dq_e2m1_pair(uint32_t w, int p) {
  const uint32_t t = (w >> (4 * p)) & 0x000F000Fu;
  const uint32_t r = ((t & 0x00080008u) << 12) | ((t & 0x00070007u) << Fp4Traits<Op>::kEmShift);
  return Op::mul2(r, Fp4Traits<Op>::kFix);
}

// Block scale of one row as an operand pair (both halves).
template <class Op, WFmt F>
__device__ __forceinline__ uint32_t scale_pair(uint32_t byte);
template <>
__device__ __forceinline__ uint32_t scale_pair<BF16, WFmt::kNV4>(uint32_t b) {
  return dq_fp8_pair<BF16>(b * 0x0101u, 0);
}
template <>
__device__ __forceinline__ uint32_t scale_pair<F16, WFmt::kNV4>(uint32_t b) {
  return dq_fp8_pair<F16>(b * 0x0101u, 0);
}
template <>
__device__ __forceinline__ uint32_t scale_pair<BF16, WFmt::kMX4>(uint32_t e) {
  const uint32_t h = e != 0 ? e << 7 : 0x0040u;  // 2^(e-127); e = 0 is the bf16 subnormal 2^-127
  return h | (h << 16);
}
template <>
__device__ __forceinline__ uint32_t scale_pair<F16, WFmt::kMX4>(uint32_t e) {
  const int x = static_cast<int>(e) - 127;  // in [-23, 13] (prepare_q checks)
  const uint32_t h = x >= -14 ? static_cast<uint32_t>(x + 15) << 10 : 1u << (x + 24);
  return h | (h << 16);
}

// Original weight row of prepared column n (w13: 8 gate rows then the 8 matching up rows).
__device__ __forceinline__ int orig_row(const GemmParams& p, int n) {
  if (!p.interleaved) return n;
  return ((n >> 3) & 1) * p.half + (n >> 4) * 8 + (n & 7);
}

template <class Op, class C, WFmt F>
__global__ void __launch_bounds__(C::kThreads) moe_gemm_fp4_kernel(const GemmParams p) {
  constexpr int U = unit_bytes<F>();
  constexpr int A_BYTES = C::BM * 128;
  constexpr int B_BYTES = (C::BN / 16) * U;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + C::STAGES * A_BYTES;
  int* s_rows = reinterpret_cast<int*>(smem + C::STAGES * (A_BYTES + B_BYTES));

  const int mb = blockIdx.x, nb = blockIdx.y, split = blockIdx.z;
  if (mb * C::BM >= *p.num_post) return;
  const int e = p.expert_ids[mb];
  if (e < 0) return;  // expert on another rank: its slots stay zero (pre-cleared)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;

  for (int r = tid; r < C::BM; r += C::kThreads) s_rows[r] = p.sorted_ids[mb * C::BM + r];
  __syncthreads();

  const int ktiles = p.kp / 64;
  const int kt0 = split * p.ktiles_per_split;
  const int kt1 = min(ktiles, kt0 + p.ktiles_per_split);
  if (kt0 >= kt1) return;
  const int ntiles16 = p.np / 16;
  const uint8_t* wexp = p.w + static_cast<size_t>(e) * ntiles16 * ktiles * U;
  const char* abase = static_cast<const char*>(p.a);

  auto load_stage = [&](int stage, int kt) {
    uint8_t* dA = sA + stage * A_BYTES;
    for (int idx = tid; idx < C::BM * 8; idx += C::kThreads) {
      int r = idx >> 3, c = idx & 7;
      int sid = s_rows[r];
      int kcol = kt * 64 + c * 8;
      bool ok = sid < p.numel && kcol < p.k;
      const char* src = ok ? abase + (static_cast<size_t>(sid / p.a_row_div) * p.lda + kcol) * 2 : abase;
      cp_async16(dA + r * 128 + ((c ^ (r & 7)) << 4), src, ok ? 16 : 0);
    }
    uint8_t* dB = sB + stage * B_BYTES;
    for (int idx = tid; idx < B_BYTES / 16; idx += C::kThreads) {
      int t = idx / (U / 16), rem = idx % (U / 16);
      int gt = nb * (C::BN / 16) + t;
      bool ok = gt < ntiles16;
      const uint8_t* src = ok ? wexp + ((static_cast<size_t>(gt) * ktiles + kt) * U + rem * 16) : p.w;
      cp_async16(dB + idx * 16, src, ok ? 16 : 0);
    }
  };

  float acc[C::MI][C::NT][2][4];
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mi][nt][j][c] = 0.f;

  const int ncol0 = nb * C::BN + warp_n * C::WN;

#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (kt0 + s < kt1) load_stage(s, kt0 + s);
    cp_async_commit();
  }

  for (int kt = kt0; kt < kt1; ++kt) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    {
      int pf = kt + C::STAGES - 1;
      if (pf < kt1) load_stage((pf - kt0) % C::STAGES, pf);
      cp_async_commit();
    }
    const int st = (kt - kt0) % C::STAGES;
    const uint8_t* cA = sA + st * A_BYTES;
    const uint8_t* cB = sB + st * B_BYTES;
    // this lane's codes and its two rows' scales for the whole 64-k atom
    uint32_t wv[C::NT][4];
    uint32_t sc[C::NT][2];
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt) {
      const uint8_t* unit = cB + (warp_n * C::NT + nt) * U;
      uint4 v = *reinterpret_cast<const uint4*>(unit + lane * 16);
      wv[nt][0] = v.x; wv[nt][1] = v.y; wv[nt][2] = v.z; wv[nt][3] = v.w;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = j * 8 + (lane >> 2);
        if constexpr (F == WFmt::kNV4) sc[nt][j] = *reinterpret_cast<const uint32_t*>(unit + 512 + row * 4);
        else sc[nt][j] = *reinterpret_cast<const uint16_t*>(unit + 512 + row * 2);
      }
    }
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      uint32_t a[C::MI][4];
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi) {
        int row = warp_m * C::WM + mi * 16 + (lane & 15);
        int c = step * 2 + (lane >> 4);
        ldmatrix_x4(a[mi], cA + row * 128 + ((c ^ (row & 7)) << 4));
      }
      uint32_t b[C::NT][2][2];
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          // NVFP4: block `step` of this atom; MXFP4: group step / 2
          const uint32_t sb = F == WFmt::kNV4 ? (sc[nt][j] >> (8 * step)) & 0xFFu : (sc[nt][j] >> (8 * (step >> 1))) & 0xFFu;
          const uint32_t s2 = scale_pair<Op, F>(sb);
#pragma unroll
          for (int bi = 0; bi < 2; ++bi) b[nt][j][bi] = Op::mul2(dq_e2m1_pair<Op>(wv[nt][step], j * 2 + bi), s2);
        }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) mma16816<Op>(acc[mi][nt][j], a[mi], b[nt][j][0], b[nt][j][1]);
    }
  }
  cp_async_wait<0>();

  // ---- per-output fp32 factors: column (global) scale x row scale (W4A4: 1/G of the slot's expert)
  {
    float cs[C::NT][2][2];
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          int n = ncol0 + nt * 16 + j * 8 + 2 * (lane & 3) + e2;
          int r = orig_row(p, n);
          float s = 1.f;
          if (p.col_scale != nullptr && n < p.np && r < p.n)
            s = p.col_scale[static_cast<size_t>(e) * p.nsc + r / p.n_div];
          cs[nt][j][e2] = s;
        }
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float rs = 1.f;
        if (p.row_scale != nullptr) {
          int sid = s_rows[warp_m * C::WM + mi * 16 + (lane >> 2) + h * 8];
          rs = sid < p.numel ? p.row_scale[static_cast<size_t>(sid / p.a_row_div) * p.rs_groups] : 0.f;
        }
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) acc[mi][nt][j][h * 2 + e2] *= rs * cs[nt][j][e2];
      }
  }

  // ---- epilogue (backend I's): GEMM1 activation on interleaved gate/up, or GEMM2 router weight
  using T = typename Op::T;
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int sid = s_rows[warp_m * C::WM + mi * 16 + (lane >> 2) + h * 8];
      if (sid >= p.numel) continue;
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt) {
        const int tile = (ncol0 >> 4) + nt;
        if (p.stage == 1) {
          const int i = tile * 8 + 2 * (lane & 3);  // intermediate column (pair i, i + 1)
          if (tile >= ntiles16 || i >= p.half) continue;
          if (p.partial != nullptr) {
            float* dst = p.partial + static_cast<size_t>(sid) * p.np + tile * 16 + 2 * (lane & 3);
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              atomicAdd(dst + e2, acc[mi][nt][0][h * 2 + e2]);
              atomicAdd(dst + 8 + e2, acc[mi][nt][1][h * 2 + e2]);
            }
          } else {
            float hv[2];
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              float g = acc[mi][nt][0][h * 2 + e2], u = acc[mi][nt][1][h * 2 + e2];
              if (p.bias != nullptr) {
                g += p.bias[static_cast<size_t>(e) * p.n + i + e2];
                u += p.bias[static_cast<size_t>(e) * p.n + p.half + i + e2];
              }
              hv[e2] = act_fn(p.act, g, u);
            }
            *reinterpret_cast<uint32_t*>(static_cast<T*>(p.out) + static_cast<size_t>(sid) * p.ldo + i) =
                Op::pack(hv[0], hv[1]);
          }
        } else {
          const float w = p.topk_w != nullptr ? p.topk_w[sid] : 1.f;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int n = tile * 16 + j * 8 + 2 * (lane & 3);
            if (n >= p.n) continue;
            float v0 = acc[mi][nt][j][h * 2], v1 = acc[mi][nt][j][h * 2 + 1];
            if (p.bias != nullptr && split == 0) {
              v0 += p.bias[static_cast<size_t>(e) * p.n + n];
              v1 += p.bias[static_cast<size_t>(e) * p.n + n + 1];
            }
            float* dst = static_cast<float*>(p.out) + static_cast<size_t>(sid) * p.ldo + n;
            if (p.splits > 1) {
              atomicAdd(dst, v0 * w);
              atomicAdd(dst + 1, v1 * w);
            } else {
              *reinterpret_cast<float2*>(dst) = make_float2(v0 * w, v1 * w);
            }
          }
        }
      }
    }
}

template <class Op, class C, WFmt F>
void launch_one(const GemmParams& p, cudaStream_t s) {
  constexpr int smem = smem_bytes<C, F>();
  auto kern = moe_gemm_fp4_kernel<Op, C, F>;
  static bool attr_set = false;  // per instantiation; benign if two threads race (same value)
  if (!attr_set) {
    QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attr_set = true;
  }
  dim3 grid(p.max_blocks, (p.np + C::BN - 1) / C::BN, p.splits);
  kern<<<grid, C::kThreads, smem, s>>>(p);
  QMOE_CUDA_LAUNCH_OK();
}

template <class Op, class C>
void launch_fmt(WFmt fmt, const GemmParams& p, cudaStream_t s) {
  if (fmt == WFmt::kNV4) launch_one<Op, C, WFmt::kNV4>(p, s);
  else launch_one<Op, C, WFmt::kMX4>(p, s);
}

}  // namespace

void launch_moe_gemm_fp4(bool f16, WFmt fmt, Tile tile, const GemmParams& p, cudaStream_t s) {
  QMOE_CHECK(fmt == WFmt::kNV4 || fmt == WFmt::kMX4, kInternal, "launch_moe_gemm_fp4: format ", static_cast<int>(fmt),
             " is not an fp4 format");
  if (tile == Tile::kSmall) {
    if (f16) launch_fmt<F16, SmallCfg>(fmt, p, s);
    else launch_fmt<BF16, SmallCfg>(fmt, p, s);
  } else {
    if (f16) launch_fmt<F16, LargeCfg>(fmt, p, s);
    else launch_fmt<BF16, LargeCfg>(fmt, p, s);
  }
}

}  // namespace qmoe::cuda
