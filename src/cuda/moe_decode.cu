// The decode grouped GEMM of the fused MoE (few rows per expert, memory-bound), mma.sync m16n8k16
// on sm_80 and up. Same prepared weights (cuda_moe.h atoms; fp4 units of moe_gemm_fp4.cu), same
// GemmParams, numerics and epilogues as moe_gemm.cu / moe_gemm_fp4.cu; what differs is the
// mapping onto the hardware:
//  * swapped MMA: the weights are the 16-row A operand (an atom's B fragments are exactly an A
//    fragment with its four registers reordered), the <= 8 token rows of an M-block the n8 B
//    operand. One mma covers n16 x k16 of the weights (two in moe_gemm.cu's 16-row tile, whose
//    rows are mostly padding at decode);
//  * B never touches shared memory: each warp streams its atoms from global straight into a
//    register ring kDepth atoms deep (16-byte ld.global.nc.L1::no_allocate per lane), so every
//    warp keeps ~4 KiB of weight loads in flight with no barrier in the main loop;
//  * a block covers kDecodeTileN output columns of one expert; its kDecodeWarps warps split the
//    block's K range in whole-scale-chunk slabs (interleaved, so the block reads one contiguous
//    stretch at a time) and reduce in shared memory at the end, in warp order;
//  * the M-block's valid token rows over the block's K range are staged once in shared memory
//    (cp.async) and read with ldmatrix; select_decode caps the range (kDecodeMaxK) and splits
//    longer K over the grid (fp32 atomics; GEMM1 then goes through partial sums + act_finish).
// Numerics: int / fp8 / fp4 codes become exact operands as in moe_gemm.cu / moe_gemm_fp4.cu; mode 1
// keeps fp32 partial sums per scale chunk (a chunk never straddles two warps when it is a multiple
// of 64 columns), each scaled once by (row scale x column scale); whole-K scales (int channel,
// fp8 mode 3, fp4 global scales) multiply the block's reduced fp32 sum once.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/cuda_moe.h"
#include "cuda/device_common.cuh"
#include "cuda/env_switch.h"
#include "cuda/fp4_ops.cuh"
#include "cuda/moe_decode.cuh"
#include "cuda/sm90_moe.cuh"
#include "cuda/sm90_sync.cuh"

namespace qmoe::cuda {

bool decode_supports(WFmt fmt, int mode) {
  switch (fmt) {
    // 16-bit weights: the sm_90 bulk kernel only (the register-ring one measured slower than the
    // 16-row tile; forward() keeps the tile where the bulk kernel does not run)
    case WFmt::k16: return mode == 0;
    case WFmt::kU4: case WFmt::kU8: return mode == 1;
    case WFmt::kFP8: return mode == 1 || mode == 3;
    case WFmt::kNV4: case WFmt::kMX4: return true;
  }
  return false;
}

namespace {

using namespace dev;

constexpr int kThreads = 32 * kDecodeWarps;
constexpr int kNT = kDecodeTileN / 16;  // n16 atom columns per block; every warp covers all of them
constexpr int kDepth = 4;               // atoms per column in flight per warp (register ring)
static_assert(kDecodeRows == 8, "the token side is the n8 operand of m16n8k16");

// Per weight format: k-columns per atom (KA), bytes per unit (U: the 512-byte atom, + the 16 rows'
// fp4 block scales) and scale bytes per row (SPR); functions of the format so that host code with a
// runtime format (dec90_plan) reads the same numbers.
constexpr int dec_ka(WFmt f) { return f == WFmt::k16 ? 16 : (f == WFmt::kU8 || f == WFmt::kFP8) ? 32 : 64; }
constexpr int dec_spr(WFmt f) { return f == WFmt::kNV4 ? 4 : f == WFmt::kMX4 ? 2 : 0; }  // e4m3 per 16 / e8m0 per 32
constexpr int dec_unit(WFmt f) { return 512 + 16 * dec_spr(f); }
// symmetric int codes' zero point (int4 8, int8 128): the kernels' and the scale tables' (build_decode_tiles)
constexpr float dec_zsym(WFmt f) { return f == WFmt::kU4 ? 8.f : 128.f; }
template <WFmt F> struct DecFmt {
  static constexpr int KA = dec_ka(F), U = dec_unit(F), SPR = dec_spr(F);
};

// 16-byte weight load: read-only path, no L1 allocation (each atom is read once; L1 keeps the
// scales). Volatile keeps it where it is written: right after the ring slot it refills is used.
__device__ __forceinline__ uint4 ld_stream16(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const void* ptr) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream2(const void* ptr) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];\n" : "=h"(v) : "l"(ptr));
  return v;
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ---- per-atom pieces shared by both decode kernels -------------------------------------------------
// Token (B) fragments of an atom's SS k16 steps from the staged rows ({k 2t..2t+1, k 2t+8..2t+9} of
// row g), xa = this lane's ldmatrix address at the atom's first column.
template <int SS>
__device__ __forceinline__ void load_token_frags(uint32_t (&xb)[SS][2], uint32_t xa) {
  static_assert(SS == 1 || SS % 2 == 0, "atoms of 16, 32 or 64 k-columns");
  if constexpr (SS == 1) {  // 16-bit atoms (16 k-columns): lanes 0-15 address k 0-7 / 8-15
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(xb[0][0]), "=r"(xb[0][1]) : "r"(xa));
  } else {
#pragma unroll
    for (int q = 0; q < SS / 2; ++q) {
      uint32_t r4[4];
      ldsm_x4(r4, xa + q * 64);
      xb[2 * q][0] = r4[0];
      xb[2 * q][1] = r4[1];
      xb[2 * q + 1][0] = r4[2];
      xb[2 * q + 1][1] = r4[3];
    }
  }
}
// fp4 block scales of rows g / g + 8 of a unit (sw[j] = the raw e4m3 quad / e8m0 pair of row
// j * 8 + g), as folded operand pairs: sp[j][0] blocks 0-1, sp[j][1] blocks 2-3 (NVFP4) or groups 0 / 1 (MXFP4).
template <class Op, WFmt F>
__device__ __forceinline__ void fp4_scale_pairs(const uint32_t (&sw)[2], uint32_t (&sp)[2][2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if constexpr (F == WFmt::kNV4) {
      sp[j][0] = Op::mul2(dq_fp8_pair<Op>(sw[j], 0), Fp4Bits<Op>::kFold);
      sp[j][1] = Op::mul2(dq_fp8_pair<Op>(sw[j], 2), Fp4Bits<Op>::kFold);
    } else {
      sp[j][0] = mx_scale_pair<Op>(sw[j] & 0xFFu);
      sp[j][1] = mx_scale_pair<Op>(sw[j] >> 8);
    }
  }
}
// A operand of the swapped mma for k16 step ss of an atom whose lane words are wv: a0 = (row g,
// k 2t..), a1 = (row g + 8, k 2t..), a2 = (row g, k 2t + 8..), a3 = (row g + 8, k 2t + 8..) = the
// atom's B fragment pairs (j, bi) = (0, 0), (1, 0), (0, 1), (1, 1), dequantized exactly: zmagic /
// zf the zero points of rows g / g + 8 (int codes), sp their fp4 scale pairs.
template <class Op, WFmt F>
__device__ __forceinline__ void atom_a_frag(const uint32_t (&wv)[4], int ss, const uint32_t (&zmagic)[2],
                                            const float (&zf)[2], const uint32_t (&sp)[2][2], uint32_t (&af)[4]) {
  if constexpr (F == WFmt::k16) {
    // a 16-bit atom's words are the B fragment pairs (j, bi) in order 2 j + bi
    af[0] = wv[0];
    af[1] = wv[2];
    af[2] = wv[1];
    af[3] = wv[3];
  } else if constexpr (F == WFmt::kU4) {
    af[0] = dq_u4_pair<Op>(wv[ss], 0, zmagic[0]);
    af[1] = dq_u4_pair<Op>(wv[ss], 2, zmagic[1]);
    af[2] = dq_u4_pair<Op>(wv[ss], 1, zmagic[0]);
    af[3] = dq_u4_pair<Op>(wv[ss], 3, zmagic[1]);
  } else if constexpr (F == WFmt::kU8) {
    af[0] = dq_u8_pair<Op>(wv[ss * 2], 0, zf[0]);
    af[1] = dq_u8_pair<Op>(wv[ss * 2 + 1], 0, zf[1]);
    af[2] = dq_u8_pair<Op>(wv[ss * 2], 2, zf[0]);
    af[3] = dq_u8_pair<Op>(wv[ss * 2 + 1], 2, zf[1]);
  } else if constexpr (F == WFmt::kFP8) {
    af[0] = dq_fp8_weight_pair<Op>(wv[ss * 2], 0);
    af[1] = dq_fp8_weight_pair<Op>(wv[ss * 2 + 1], 0);
    af[2] = dq_fp8_weight_pair<Op>(wv[ss * 2], 2);
    af[3] = dq_fp8_weight_pair<Op>(wv[ss * 2 + 1], 2);
  } else {
    // NVFP4: block ss of the atom (half ss & 1 of pair ss / 2, broadcast); MXFP4: group ss / 2
    uint32_t s2[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
      s2[j] = F == WFmt::kNV4 ? __byte_perm(sp[j][ss >> 1], 0u, (ss & 1) ? 0x3232 : 0x1010) : sp[j][ss >> 1];
    af[0] = Op::mul2(e2m1_raw_pair<Op, 0>(wv[ss]), s2[0]);
    af[1] = Op::mul2(e2m1_raw_pair<Op, 2>(wv[ss]), s2[1]);
    af[2] = Op::mul2(e2m1_raw_pair<Op, 1>(wv[ss]), s2[0]);
    af[3] = Op::mul2(e2m1_raw_pair<Op, 3>(wv[ss]), s2[1]);
  }
}

// Sum of the kDecodeWarps K-group partials of column nt, token half hh (of NH n8 halves),
// red[warp][nt][hh][c][lane], in K order.
template <int NH = 1>
__device__ __forceinline__ void sum_k_groups(const float* red, int nt, int hh, int lane, float (&v)[4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) sum += red[(((w * kNT + nt) * NH + hh) * 4 + c) * 32 + lane];
    v[c] = sum;
  }
}

// Epilogue of both decode kernels for one n16 column `tile` of expert e: v = the block's fp32 sums
// in the mma accumulator layout (c0..c3 = (row g, token 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)).
// Whole-K scales multiply the sum once (numerics.md's product order); then GEMM1's activation on
// the interleaved gate / up rows or GEMM2's router weight (moe_gemm.cu's epilogues).
template <class Op, WFmt F, int MODE>
__device__ __forceinline__ void decode_epilogue(const GemmParams& p, int e, int tile, int split, float (&v)[4],
                                                const int32_t* rows, int g, int t, const int (&tok_arow)[2],
                                                bool per_chunk) {
  constexpr bool kFp4 = DecFmt<F>::SPR > 0;
  // ---- whole-K scales: the fp32 sum is scaled once (numerics.md product order)
  if (MODE == 3 || (MODE == 1 && !per_chunk) || kFp4) {
    float csf[2], rsf[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = tile * 16 + j * 8 + g;
      const int r = orig_row(p, n);
      float c = kFp4 ? 1.f : 0.f;
      if (p.col_scale != nullptr && r < p.n) c = p.col_scale[static_cast<size_t>(e) * p.kg * p.nsc + r / p.n_div];
      csf[j] = c;
    }
    const float stat = (!kFp4 && p.in_scale != nullptr) ? p.in_scale[e] : 1.f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rsf[h] = p.row_scale == nullptr ? stat
               : tok_arow[h] >= 0     ? p.row_scale[static_cast<size_t>(tok_arow[h]) * p.rs_groups]
                                      : 0.f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if constexpr (kFp4) v[c] *= (rsf[c & 1] * csf[c >> 1]) * Fp4Bits<Op>::kUnscale;  // 2^-c exact
      else v[c] *= rsf[c & 1] * csf[c >> 1];
    }
  }

  // ---- epilogue (moe_gemm.cu's): GEMM1 activation on interleaved gate / up, or GEMM2 router weight
  using OutT = typename Op::OutT;
  float habs[2] = {0.f, 0.f};  // GemmParams::h_amax: |h| of this lane's two tokens as stored
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int sid = rows[2 * t + h];
    if (sid >= p.numel) continue;
    if (p.stage == 1) {
      const int i = tile * 8 + g;  // intermediate column: gate = v[h] (row g), up = v[2 + h] (row g + 8)
      if (i >= p.half) continue;
      if (p.partial != nullptr) {
        float* dst = p.partial + static_cast<size_t>(sid) * p.np + tile * 16 + g;
        atomicAdd(dst, v[h]);
        atomicAdd(dst + 8, v[2 + h]);
      } else {
        float gv = v[h], uv = v[2 + h];
        if (p.bias != nullptr) {
          gv += p.bias[static_cast<size_t>(e) * p.n + i];
          uv += p.bias[static_cast<size_t>(e) * p.n + p.half + i];
        }
        const OutT hv = Op::out_f(act_fn(p.act, gv, uv));
        static_cast<OutT*>(p.out)[static_cast<size_t>(sid) * p.ldo + i] = hv;
        habs[h] = fmaxf(0.f, fabsf(static_cast<float>(hv)));  // NaN: 0, as act_prep's fmaxf skips it
      }
    } else {
      const float w = p.topk_w != nullptr ? p.topk_w[sid] : 1.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = tile * 16 + j * 8 + g;
        if (n >= p.n) continue;
        float val = v[j * 2 + h];
        if (p.bias != nullptr && split == 0) val += p.bias[static_cast<size_t>(e) * p.n + n];
        float* dst = static_cast<float*>(p.out) + static_cast<size_t>(sid) * p.ldo + n;
        // (a fire-and-forget REDG in the SASS: a GPU-scope fence anywhere in the bulk kernel made ptxas
        // emit these and GEMM1's h_amax maxima as returning ATOMGs, each item's epilogue then waiting
        // out L2 round trips; with the spills that came too, 0.77x on qwen3-30b-a3b fp8 M = 16: docs/perf.md,
        // forty-eighth session; bench/sass_stats.py counts REDG / ATOMG / MEMBAR per kernel)
        if (p.splits > 1) atomicAdd(dst, val * w);
        else *dst = val * w;
      }
    }
  }
  // GEMM1 with GemmParams::h_amax (GEMM2 quantizes h as it stages it): each token's maximum over
  // this warp's 8 intermediate columns (lanes of one t), then one atomic maximum per token on the
  // float's bits (non-negative: ordered as integers); the whole warp runs the epilogue
  if (p.stage == 1 && p.h_amax != nullptr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) habs[h] = fmaxf(habs[h], __shfl_xor_sync(0xffffffffu, habs[h], o));
      const int sid = rows[2 * t + h];
      if (g == 0 && sid < p.numel) atomicMax(reinterpret_cast<int*>(p.h_amax) + sid, __float_as_int(habs[h]));
    }
  }
}

// Accumulator layout of the swapped mma (D = W[16 n][k] x A^T[k][8 tokens]), lane = 4 g + t:
// c0 = (n g, token 2t), c1 = (n g, token 2t + 1), c2 = (n g + 8, token 2t), c3 = (n g + 8, 2t + 1);
// j = c >> 1 picks the weight row (w13: gate / up of one intermediate column), h = c & 1 the token.
template <class Op, WFmt F, int MODE>
__global__ void __launch_bounds__(kThreads) moe_decode_kernel(const GemmParams p, const int slab_kt) {
  constexpr int KA = DecFmt<F>::KA, U = DecFmt<F>::U, SPR = DecFmt<F>::SPR;
  constexpr int SS = KA / 16;  // k16 steps per atom
  constexpr int APK = 64 / KA;  // atoms per 64-column k-tile
  constexpr bool kFp4 = SPR > 0;
  constexpr bool kInt = F == WFmt::kU4 || F == WFmt::kU8;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_wait();  // launch_kernel: may start while the previous kernel finishes
  pdl_trigger();

  const int mb = blockIdx.x, nb = blockIdx.y, split = blockIdx.z;
  if (mb * kDecodeRows >= *p.num_post) return;
  const int e = p.expert_ids[mb];
  if (e < 0) return;  // expert on another rank: its slots stay zero (pre-cleared)
  const int ktiles = p.kp / 64;
  const int kt0 = split * p.ktiles_per_split;
  const int kt1 = min(ktiles, kt0 + p.ktiles_per_split);
  if (kt0 >= kt1) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kbase = kt0 * 64, krange = (kt1 - kt0) * 64;
  // bytes per staged row: the +16 puts ldmatrix's 8 row addresses on 8 distinct 16-byte bank groups
  const int xstride = krange * 2 + 16;

  // moe_align fills an M-block from its first row: rows [0, nvalid) hold entries, row 0 always
  const int32_t* rows = p.sorted_ids + mb * kDecodeRows;
  const int my_sid = rows[lane & 7];
  const int nvalid = __popc(__ballot_sync(0xffffffffu, lane < 8 && my_sid < p.numel));

  // ---- stage the valid rows' A over [kbase, kbase + krange); columns >= k are zero-filled (the
  //      weights' K padding dequantizes to -z for int codes, so A must be exactly 0 there)
  {
    const char* abase = static_cast<const char*>(p.a);
    const int cpr = krange / 8;  // 16-byte chunks per row
    for (int idx = tid; idx < nvalid * cpr; idx += kThreads) {
      const int r = idx / cpr, c = idx - r * cpr;
      const int sid = rows[r];
      const int kcol = kbase + c * 8;
      const bool ok = kcol < p.k;
      const char* src = ok ? abase + (static_cast<size_t>(sid / p.a_row_div) * p.lda + kcol) * 2 : abase;
      cp_async16(smem + r * xstride + c * 16, src, ok ? 16 : 0);
    }
    cp_async_commit();
  }

  // ---- this warp's atoms: slabs of SA atoms (per column), slab w, w + W, ... of the block range
  const int a_begin = kt0 * APK, a_end = kt1 * APK;
  const int SA = slab_kt * APK;
  const int nslabs = (a_end - a_begin + SA - 1) / SA;
  int nsteps = 0;
  if (warp < nslabs) {
    nsteps = ((nslabs - 1 - warp) / kDecodeWarps + 1) * SA;
    if ((nslabs - 1) % kDecodeWarps == warp) nsteps -= nslabs * SA - (a_end - a_begin);
  }
  const int katoms = p.kp / KA;
  const uint8_t* col[kNT];  // first atom / unit of each of the block's n16 columns for expert e
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
    col[nt] = p.w + (static_cast<size_t>(e) * (p.np / 16) + nb * kNT + nt) * katoms * U;

  uint4 ring[kDepth][kNT];
  uint32_t sring[kDepth][kNT][2];  // fp4: rows g and g + 8's block scales of the atom
  auto load = [&](int s, int a) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const uint8_t* unit = col[nt] + static_cast<size_t>(a) * U;
      ring[s][nt] = ld_stream16(unit + lane * 16);
      if constexpr (kFp4) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint8_t* sp = unit + 512 + (j * 8 + g) * SPR;
          sring[s][nt][j] = SPR == 4 ? ld_stream4(sp) : ld_stream2(sp);
        }
      }
    }
  };
  // cursor over the warp's atoms: atom index along k (per column) and position inside its slab
  auto advance = [&](int& a, int& in) {
    ++a;
    if (++in == SA) {
      in = 0;
      a += (kDecodeWarps - 1) * SA;
    }
  };
  int pa = a_begin + warp * SA, pin = 0;  // prefetch cursor
#pragma unroll
  for (int s = 0; s < kDepth; ++s) {
    if (s < nsteps) load(s, pa);
    advance(pa, pin);
  }

  // token rows of this lane's accumulator columns (2t, 2t + 1): A row index, -1 = padding
  int tok_arow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int sid = rows[2 * t + h];
    tok_arow[h] = sid < p.numel ? sid / p.a_row_div : -1;
  }

  float acc[kNT][4], out[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[nt][c] = out[nt][c] = 0.f;

  // chunk state (mode 1): column scales of rows g / g + 8, row scales of tokens 2t / 2t + 1,
  // zero points (int) of rows g / g + 8
  const bool per_chunk = MODE == 1 && p.chunk < p.kp;
  float cs[kNT][2], rs[2];
  float zf[kNT][2];
  uint32_t zmagic[kNT][2];
  const float zsym = dec_zsym(F);
  // per-row offsets, fixed for the block: zero-point row r (original row) and scale column
  // r / n_div, -1 for padding rows (no division in the main loop)
  int zrow[kNT][2], scol[kNT][2];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r = orig_row(p, (nb * kNT + nt) * 16 + j * 8 + g);
      zrow[nt][j] = r < p.n ? r : -1;
      scol[nt][j] = r < p.n ? (p.n_div == 1 ? r : r / p.n_div) : -1;
    }
  // chunk index of a chunk start k0 (a multiple of 16) without an integer division: (k0 + 8) / c
  // lies >= 8 / c inside its integer interval, far beyond the fp32 error (k0 < 2^24)
  const float inv_kchunk = p.kchunk > 0 ? 1.f / static_cast<float>(p.kchunk) : 0.f;
  const float inv_rs = p.rs_kchunk > 0 ? 1.f / static_cast<float>(p.rs_kchunk) : 0.f;
  const float inv_chunk = 1.f / static_cast<float>(p.chunk);
  auto idx_of = [](int k0, float inv) { return static_cast<int>(static_cast<float>(k0 + 8) * inv); };
  auto load_chunk = [&](int k0) {
    const int gi = min(idx_of(k0, inv_kchunk), p.kg - 1);  // k0 may lie in the K padding
    const size_t gbase = static_cast<size_t>(e) * p.kg + gi;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (per_chunk) cs[nt][j] = scol[nt][j] >= 0 ? __ldg(p.col_scale + gbase * p.nsc + scol[nt][j]) : 0.f;
        if constexpr (kInt) {
          const float z = (p.zero != nullptr && zrow[nt][j] >= 0) ? __ldg(p.zero + gbase * p.n + zrow[nt][j]) : zsym;
          zf[nt][j] = z;
          zmagic[nt][j] = Op::pack(Op::kInt4Base + z, Op::kInt4Base + z);
        }
      }
    if (per_chunk) {
      const float stat = p.in_scale != nullptr ? p.in_scale[e] : 1.f;
      const int rg = min(idx_of(k0, inv_rs), p.rs_groups - 1);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        rs[h] = p.row_scale == nullptr ? stat
                : tok_arow[h] >= 0     ? __ldg(p.row_scale + static_cast<size_t>(tok_arow[h]) * p.rs_groups + rg)
                                       : 0.f;
    }
  };
  auto flush = [&](int k0) {
    // out += acc * (row scale * column scale) for the chunk that starts at k0; acc = 0. A chunk
    // that starts in the K padding holds only zero products (and has no scale entry).
    const bool live = k0 < p.k;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (live) out[nt][c] += acc[nt][c] * (rs[c & 1] * cs[nt][c >> 1]);
        acc[nt][c] = 0.f;
      }
  };
  if constexpr (kInt) {
    if (!per_chunk) load_chunk(0);  // one zero point per row for all of K
  }
  int chunk_k0 = 0, chunk_end = 0;

  cp_async_wait<0>();
  __syncthreads();  // A staged

  // ldmatrix row addresses: lane l -> row l & 7 (padding rows read row 0: their columns are
  // dropped, and the MMA keeps columns apart), 8-column group l >> 3
  const uint32_t xlane = smem_u32(smem) + ((lane & 7) < nvalid ? (lane & 7) : 0) * xstride + (lane >> 3) * 16;

  auto compute = [&](int s, int a, int in) {
    const int k0 = a * KA;  // absolute k of the atom
    if (per_chunk && in == 0) {
      chunk_k0 = k0;
      chunk_end = (idx_of(k0, inv_chunk) + 1) * p.chunk;
      load_chunk(k0);
    }
    uint32_t xb[SS][2];
    load_token_frags<SS>(xb, xlane + (k0 - kbase) * 2);
    uint32_t sp[kNT][2][2];  // fp4 block scales of rows g / g + 8 (two consecutive blocks per register, folded)
    if constexpr (kFp4) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) fp4_scale_pairs<Op, F>(sring[s][nt], sp[nt]);
    }
#pragma unroll
    for (int ss = 0; ss < SS; ++ss) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint4 v = ring[s][nt];
        const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
        uint32_t af[4];
        atom_a_frag<Op, F>(wv, ss, zmagic[nt], zf[nt], sp[nt], af);
        mma16816<Op>(acc[nt], af, xb[ss][0], xb[ss][1]);
      }
      if (per_chunk) {
        const int kend = k0 + (ss + 1) * 16;
        const bool last = ss == SS - 1 && (in == SA - 1 || a == a_end - 1);  // end of the slab
        if (last || kend == chunk_end) {
          flush(chunk_k0);
          chunk_k0 = kend;
          chunk_end = kend + p.chunk;
          if (!last) load_chunk(kend);
        }
      }
    }
  };

  // ---- main loop: consume ring slot s, refill it kDepth atoms ahead; no barriers
  int ca = a_begin + warp * SA, cin = 0;  // consume cursor
  for (int j0 = 0; j0 < nsteps; j0 += kDepth) {
#pragma unroll
    for (int s = 0; s < kDepth; ++s) {
      if (j0 + s < nsteps) {
        compute(s, ca, cin);
        if (j0 + s + kDepth < nsteps) load(s, pa);
        advance(pa, pin);
        advance(ca, cin);
      }
    }
  }

  // ---- reduce the warps' sums in shared memory (A is no longer read), in warp order
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);  // [warp][nt][c][lane]
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) red[((warp * kNT + nt) * 4 + c) * 32 + lane] = per_chunk ? out[nt][c] : acc[nt][c];
  __syncthreads();
  if (tid >= kNT * 32) return;
  const int nt = warp;  // threads [32 nt, 32 nt + 32) finish column nt with the mma lane layout
  float v[4];
  sum_k_groups(red, nt, 0, lane, v);

  const int tile = nb * kNT + nt;
  decode_epilogue<Op, F, MODE>(p, e, tile, split, v, rows, g, t, tok_arow, per_chunk);
}

// ---- sm_90: bulk-streaming decode kernel ---------------------------------------------------------
// Same M-blocks, numerics and epilogue as moe_decode_kernel; what differs is how the weights arrive.
// Persistent: one wave of blocks per K split, each walking a contiguous share of the (M-block,
// 32-column tile) items of the used M-blocks (count read on the device), M-block-major, so every
// SM streams the same number of bytes whatever the routing. One producer warp streams each item's
// two n16 columns over the K range into a kStages90-deep ring of shared-memory stages with 1-D
// bulk copies (cp.async.bulk, completing on mbarriers) and runs on into the next item while the
// consumers finish the current one: HBM sees one uninterrupted stream per block at one
// instruction per column per stage. The 8 consumer warps each own one K group of both columns:
// per stage a slab of `slab_atoms` consecutive atoms (whole scale chunks) per column, one 16-byte
// shared load per lane per atom; scale chunks never straddle two warps. An M-block's rows and row
// scales are staged by the consumers when a block reaches it (behind block barriers); each item's
// column scales / zero points by a second producer warp (cp.async completing on mbarriers,
// double-buffered), so items follow each other without a block barrier; the K groups meet once
// per item, in shared memory, for the reduction in K order.
// Measured on the H200 (ncu, mixtral-8x7b int4 M = 1, GEMM1): the register-ring kernel reached 30%
// of DRAM bandwidth at ~180 instructions per 512-byte atom; a first version of this kernel with one
// tile per block 26% (each block's start cost several DRAM latencies and the ring stood empty
// between blocks), one walking tiles of a single M-block left SMs idle when few M-blocks are used.
// Ring depth. Measured on the H200 (forced decode90, int4 / fp8, mixtral / gpt-oss / qwen3 at M = 1
// and 16): 2 stages fastest, 4 up to 60% slower, 6-8 slower still: each stage costs shared memory
// that otherwise holds another block of consumers, and the consumers, not the bytes in flight, are
// the limit. Since the item / stage bookkeeping lost its integer divisions, 3 or 4 stages where
// two blocks still fit an SM measure the same as 2 (docs/perf.md, fourth session of 2026-11-30).
// QMOE_CUDA_DECODE90_STAGES (2..8): the deepest ring up to that many stages that still lets two
// blocks share an SM, for measurements (2-8 stages measured the same again in the sixth session).
// Since the twenty-seventh session dec90_plan also balances the warps' slabs and, where blocks walk
// several items and no per-chunk scales are staged, picks the ring depth (up to 3) that keeps the
// blocks per SM: with the plan's blocks fixed, a third stage measured 1.02-1.08x on int8 (W8A16)
// rows and up to 1.05x on MXFP4 / bf16 ones (dec90_plan).
// Since the sixth session it also runs 16-bit weights (each atom's words are the A fragment,
// reordered; three blocks per SM) and int4 M-blocks of 16 rows (template R: two n8 token operands
// per dequantized fragment), and forward() splits K further where the staged rows would otherwise
// leave room for one block per SM (decode90_fit). A math-free build streams 88-90% of DRAM
// bandwidth at three blocks per SM (bf16 mixtral-8x7b GEMM1); with int4 math, ~50%: the consumers'
// instructions (ncu: ~130 per 512-byte atom, 44 of them dequantization) are the limit.
#ifdef QMOE_D90_TRACE
// Diagnostic build only (scripts/build_variant.sh NAME "-DQMOE_D90_TRACE" moe_decode.cu bench.cu):
// per block of the bulk decode kernel's latest GEMM1 / GEMM2 launch (each launch overwrites),
// %globaltimer (ns) at: 0 entry, 1 the consumers past pdl_wait, 2 the first M-block's rows staged,
// 3 the first stage's weights there, 4 item 0's atoms done, 5 item 0's epilogue done (warp 0),
// 6 the block's last item done, 7 smid | items << 16, 8 the producer's first copy issued, 9 its last.
// qmoe bench writes the records of its last replay to QMOE_D90_TRACE_FILE (bench/d90_trace.py).
constexpr int kD90TraceMax = 4096, kD90TraceF = 10;
__device__ unsigned long long g_d90_trace[2][kD90TraceMax * kD90TraceF];
int g_d90_grid[2] = {0, 0};  // blocks of the latest GEMM1 / GEMM2 launch (host)
__device__ __forceinline__ unsigned long long d90_gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
#define QMOE_D90_T(i, v)                                                                                 \
  do {                                                                                                 \
    const unsigned b_ = blockIdx.x + gridDim.x * blockIdx.z;                                           \
    if (b_ < kD90TraceMax) g_d90_trace[(p.stage - 1) & 1][b_ * kD90TraceF + (i)] = (v);                  \
  } while (0)
#else
#define QMOE_D90_T(i, v) \
  do {                   \
  } while (0)
#endif
constexpr int kStages90 = 2;
constexpr int kMaxStages90 = 8;

// Ring cursor: the slot and the parity of its current phase, advanced without a division.
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next(int stages) {
    if (++slot == stages) {
      slot = 0;
      phase ^= 1u;
    }
  }
};
constexpr int kThreads90 = 32 * (kDecodeWarps + 2);  // consumers, the weight producer, the scale producer

// Shared-memory layout of one block (host and device agree through this function).
struct Dec90Smem {
  int a = 0, cs = 0, z = 0, rs = 0, red = 0, qs = 0, bar = 0, total = 0;
};
__host__ __device__ inline Dec90Smem dec90_smem(int stages, int stage_bytes, int max_rows, int krange, int nch,
                                                int nzch, int red_bufs, int rows) {
  Dec90Smem L;
  L.a = stages * stage_bytes;
  L.cs = L.a + (max_rows * (krange * 2 + 16) + 15) / 16 * 16;
  L.z = L.cs + 2 * nch * 32 * 4;                      // two tiles' column scales
  L.rs = L.z + 2 * nzch * 32 * 4;                     // two tiles' zero points
  L.red = L.rs + nch * rows * 4;                      // row scales of the block's tokens
  L.qs = L.red + red_bufs * kDecodeWarps * kNT * (rows / 8) * 4 * 32 * 4;   // cross-warp reduction (1 or 2 items)
  L.bar = L.qs + rows * 4;                            // GemmParams::q_rows: the rows' scales
  L.total = L.bar + (2 * stages + 5) * 8;             // ring full / empty, scales full / empty x 2, red free
  return L;
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}

// Blocks per SM the registers are sized for: the consumers are the limit (ncu: "wait" on the mma
// and dequantization chains), so more resident warps help where registers allow. Measured on the
// H200: 3 blocks (<= 75 registers) spill the int4 kernel (76 bytes) and slow it by 5-10%, but take
// the fp8 rows (one scale pair for K) up to 10% faster; fp4 rows are even; fp8 with scale chunks
// would spill at 3.
// 16-row M-blocks keep two blocks (their token fragments and sums take the registers).
// 16-bit weights (64 registers) run three.
// (dec90_plan reads the same number for a runtime format.)
constexpr int dec90_reg_blocks(WFmt f, int mode, int rows) {
  return (f == WFmt::kFP8 && mode == 3 && rows == 8) || f == WFmt::k16 ? 3 : 2;
}
template <WFmt F, int MODE, int R>
constexpr int dec90_min_blocks() { return dec90_reg_blocks(F, MODE, R); }

// This block's share of GemmParams::zero_out, by `nt` threads (t = 0 .. nt - 1): whole float4s split
// evenly over the grid's blocks, the last count % 4 floats by block 0. Called after pdl_wait.
__device__ __forceinline__ void zero_out_share(const GemmParams& p, int t, int nt) {
  if (p.zero_out == nullptr) return;
  const int64_t nb = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z;
  const int64_t b = blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z);
  const int64_t n4 = p.zero_count >> 2;
  const int64_t per = (n4 + nb - 1) / nb;
  const int64_t i1 = min(n4, (b + 1) * per);
  float4* o4 = reinterpret_cast<float4*>(p.zero_out);
  for (int64_t i = b * per + t; i < i1; i += nt) o4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (b == 0)
    for (int64_t i = (n4 << 2) + t; i < p.zero_count; i += nt) p.zero_out[i] = 0.f;
}

// R: rows per M-block, 8 (one n8 token operand) or 16 (two: 5-16 rows per expert; each dequantized
// weight fragment feeds two mma, so the weights are streamed once for up to 16 tokens).
template <class Op, WFmt F, int MODE, int R>
__global__ void __launch_bounds__(kThreads90, dec90_min_blocks<F, MODE, R>())
    moe_decode90_kernel(const GemmParams p, const int slab_atoms, const int max_rows, const int stages,
                        const int red_bufs) {
#if QMOE_SM90A
  constexpr int KA = DecFmt<F>::KA, U = DecFmt<F>::U, SPR = DecFmt<F>::SPR;
  constexpr int SS = KA / 16;
  constexpr int APK = 64 / KA;
  constexpr bool kFp4 = SPR > 0;
  constexpr bool kInt = F == WFmt::kU4 || F == WFmt::kU8;
  constexpr int NH = R / 8;  // n8 token halves of an M-block
  static_assert(R == 8 || R == 16, "M-blocks of 8 or 16 rows");
  extern __shared__ __align__(128) uint8_t smem[];

  // ---- this block's items: (M-block, 32-column tile) pairs of the used M-blocks, M-block-major,
  //      a contiguous share of them per block (one wave of blocks per K split)
  // programmatic dependent launch: the weights never depend on the previous kernel, the expert ids
  // and M-block count do unless p.ids_ready (then the producer streams before the previous kernel
  // ends); the consumers wait before they read the rows (below). Every block waits before it exits.
#ifdef QMOE_D90_TRACE
  if (threadIdx.x == 0) {
    for (int i = 1; i < kD90TraceF; ++i) QMOE_D90_T(i, 0ull);
    QMOE_D90_T(0, d90_gtimer());
  }
#endif
  if (!p.ids_ready) pdl_wait();
  const int split = blockIdx.z;
  const int ntiles = p.np / kDecodeTileN;
  // direct routing (one token, no align; GemmParams::direct_ids): M-block b is slot b alone
  const bool direct = p.direct_ids != nullptr;
  const auto expert_of = [&p, direct](int mb) {
    if (!direct) return p.expert_ids[mb];
    const int e = p.direct_ids[mb];
    return p.direct_emap != nullptr ? p.direct_emap[e] : e;
  };
  const int nmb = direct ? min(p.max_blocks, p.numel) : min(p.max_blocks, (*p.num_post + R - 1) / R);
  const int total = nmb * ntiles;
  // an even split (shares differ by at most one item): ceil(total / blocks) per block left the
  // last blocks empty (ncu, mixtral-8x7b fp8 M = 1 GEMM1: 37 of 396 blocks without an item)
  const int item0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * total / gridDim.x);
  const int item1 = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * total / gridDim.x);
  if (item0 >= item1) {
    pdl_wait();
    zero_out_share(p, threadIdx.x, blockDim.x);
    return;
  }
  // cursor over the items: index and (M-block, tile), advanced without divisions (ncu: the integer
  // divisions of the item and stage bookkeeping were ~15% of the consumers' instructions)
  struct Item {
    int it, mb, nb;
  };
  const auto step = [ntiles](Item& c) {
    ++c.it;
    if (++c.nb == ntiles) {
      c.nb = 0;
      ++c.mb;
    }
  };
  const Item first{item0, item0 / ntiles, item0 % ntiles};
#ifdef QMOE_D90_TRACE
  if (threadIdx.x == 0) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    QMOE_D90_T(7, static_cast<unsigned long long>(item1 - item0) << 16 | smid);
  }
#endif
  const int ktiles = p.kp / 64;
  const int kt0 = split * p.ktiles_per_split;
  const int kt1 = min(ktiles, kt0 + p.ktiles_per_split);
  if (kt0 >= kt1) {
    pdl_wait();
    zero_out_share(p, threadIdx.x, blockDim.x);
    return;
  }
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kbase = kt0 * 64;
  const int natoms = (kt1 - kt0) * APK;         // atoms per column in the block's K range
  const int per_stage = kDecodeWarps * slab_atoms;  // atoms per column per stage (one slab per warp)
  const int nst = (natoms + per_stage - 1) / per_stage;
  const int stage_bytes = kNT * per_stage * U;
  const bool per_chunk = MODE == 1 && p.chunk < p.kp;
  const bool hz = kInt && p.zero != nullptr;
  const int krange_alloc = p.ktiles_per_split * 64;
  const int nch = per_chunk ? (krange_alloc + p.chunk - 1) / p.chunk : 0;
  const int nzch = hz ? (per_chunk ? nch : 1) : 0;
  const Dec90Smem L = dec90_smem(stages, stage_bytes, max_rows, krange_alloc, nch, nzch, red_bufs, R);
  uint8_t* sW = smem;
  uint8_t* sA = smem + L.a;
  float* sCS = reinterpret_cast<float*>(smem + L.cs);
  float* sZ = reinterpret_cast<float*>(smem + L.z);
  float* sRS = reinterpret_cast<float*>(smem + L.rs);
  float* red_base = reinterpret_cast<float*>(smem + L.red);  // [item % red_bufs][warp][nt][half][c][lane]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L.bar);
  uint64_t* empty = full + stages;
  uint64_t* sfull = empty + stages;  // [2]: an item's column scales / zero points landed
  uint64_t* sempty = sfull + 2;      // [2]: the consumers are done with them
  uint64_t* redfree = sempty + 2;    // the epilogue warps have read an item's K-group sums
  const int katoms = p.kp / KA;
  // per-chunk scales / zero points from their item-contiguous copy (GemmParams::col_tiled; the
  // launch passes it only where the chunks are the weight groups and the block's K range starts
  // on a group): one bulk copy each per item instead of a 4-byte gather per lane and chunk
  const bool tiled = per_chunk && p.col_tiled != nullptr;

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kDecodeWarps);
    }
    for (int b = 0; b < 2; ++b) {
      // one cp.async-completion arrival per scale-producer lane, or the bulk copies' expect_tx
      mbar_init(&sfull[b], tiled ? 1 : 32);
      mbar_init(&sempty[b], kDecodeWarps);
    }
    mbar_init(redfree, kNT);
    mbar_init_fence();
  }
  __syncthreads();

  // ---- column scales (per chunk) and zero points of tile nb of expert e into buffer `buf`, by the
  //      32 lanes of the scale producer: lane r covers row r of the tile (its offsets once per item)
  //      and every chunk; a chunk's weight group by idx_of (chunk starts are multiples of 16)
  const int krange = (kt1 - kt0) * 64;
  const int nchb = per_chunk ? (krange + p.chunk - 1) / p.chunk : 0;  // chunks of this block's range
  const float zsym = dec_zsym(F);
  const float inv_kchunk = p.kchunk > 0 ? 1.f / static_cast<float>(p.kchunk) : 0.f;
  const auto idx_of = [](int k0, float inv) { return static_cast<int>(static_cast<float>(k0 + 8) * inv); };
  const int g0t = tiled ? kbase / p.kchunk : 0;  // the block's first group (kbase is a multiple)
  const int kgt = tiled ? (p.kp + p.kchunk - 1) / p.kchunk : 0;  // groups per item in the tables
  auto stage_tile = [&](int e, int nb, int buf) {
    if (tiled) {  // chunk c of the block is group g0t + c: nchb x 32 contiguous floats per table
      if (lane == 0) {
        const size_t off = ((static_cast<size_t>(e) * ntiles + nb) * kgt + g0t) * 32;
        const uint32_t bytes = static_cast<uint32_t>(nchb) * 32 * 4;
        mbar_expect_tx(&sfull[buf], hz ? 2 * bytes : bytes);
        bulk_load(sCS + buf * nch * 32, p.col_tiled + off, bytes, &sfull[buf]);
        if (hz) bulk_load(sZ + buf * nzch * 32, p.zero_tiled + off, bytes, &sfull[buf]);
      }
      return;
    }
    const int r = lane;
    const int orow = orig_row(p, (nb * kNT + (r >> 4)) * 16 + (r & 15));
    const bool live = orow < p.n;
    const int scol = live ? (p.n_div == 1 ? orow : orow / p.n_div) : 0;
    const float* csrc = p.col_scale + static_cast<size_t>(e) * p.kg * p.nsc + scol;
    for (int c = 0; c < nchb; ++c) {
      const int k0 = kbase + c * p.chunk;
      float* dst = sCS + (buf * nch + c) * 32 + r;
      if (k0 >= p.k || !live) *dst = 0.f;
      else cp_async4(dst, csrc + static_cast<size_t>(min(idx_of(k0, inv_kchunk), p.kg - 1)) * p.nsc);
    }
    if (hz) {
      const int nz = per_chunk ? nchb : 1;
      const float* zsrc = p.zero + static_cast<size_t>(e) * p.kg * p.n + orow;
      for (int c = 0; c < nz; ++c) {
        float* dst = sZ + (buf * nzch + c) * 32 + r;
        if (!live) *dst = zsym;
        else {
          const int gi = per_chunk && p.kchunk > 0 ? min(idx_of(kbase + c * p.chunk, inv_kchunk), p.kg - 1) : 0;
          cp_async4(dst, zsrc + static_cast<size_t>(gi) * p.n);
        }
      }
    }
  };
  // the next item of this block with a local expert, from c on (c.it == item1 when none)
  auto next_live = [&](Item c) {
    while (c.it < item1 && expert_of(c.mb) < 0) step(c);
    return c;
  };

  if (warp == kDecodeWarps + 1) {  // ---- scale producer: item ti's scales into buffer ti & 1
    // (ncu: staged by all consumer threads with a block barrier per item, this was ~12% of their
    // stall samples). Buffer ti & 1 is refilled once the consumers released item ti - 2; the
    // cp.async completions arrive on sfull (noinc: counted by the barrier's 32).
    int ti = 0;
    for (Item c = next_live(first); c.it < item1; ++ti) {
      const int buf = ti & 1;
      if (ti >= 2) mbar_wait(&sempty[buf], ((ti >> 1) - 1) & 1);
      stage_tile(expert_of(c.mb), c.nb, buf);
      if (!tiled)
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(&sfull[buf])) : "memory");
      step(c);
      c = next_live(c);
    }
    return;
  }

  if (warp == kDecodeWarps) {  // ---- producer: one bulk copy per column per stage, item after item
    // (the 32 lanes issuing 16-byte cp.async instead measured the same on the H200)
    if (lane == 0) {
      RingPos rp;  // over the block's items
      for (Item c = first; c.it < item1; step(c)) {
        const int e = expert_of(c.mb), nb = c.nb;
        if (e < 0) continue;  // expert on another rank: its slots stay zero (pre-cleared)
        for (int st = 0; st < nst; ++st, rp.next(stages)) {
          const int slot = rp.slot;
          mbar_wait(&empty[slot], rp.phase ^ 1u);
          const int a0 = st * per_stage;
          const int n = min(per_stage, natoms - a0);
          mbar_expect_tx(&full[slot], kNT * n * U);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const uint8_t* src =
                p.w + ((static_cast<size_t>(e) * (p.np / 16) + nb * kNT + nt) * katoms + kt0 * APK + a0) * U;
            bulk_load(sW + slot * stage_bytes + nt * per_stage * U, src, n * U, &full[slot]);
          }
#ifdef QMOE_D90_TRACE
          if (st == 0 && c.it == first.it) QMOE_D90_T(8, d90_gtimer());
          QMOE_D90_T(9, d90_gtimer());
#endif
        }
      }
    }
    return;
  }

  // ---- consumers
  pdl_wait();  // the rows (and row scales) come from the previous kernel
  if (tid == 0) QMOE_D90_T(1, d90_gtimer());
  pdl_trigger();
  constexpr int kCT = kDecodeWarps * 32;  // consumer threads
  zero_out_share(p, tid, kCT);
  const int xstride = krange_alloc * 2 + 16;
  // rows of M-block mb over the K range (zero past k) and their row scales per chunk
  auto stage_rows = [&](int mb, int e, int nvalid) {
    const int32_t* rows = p.sorted_ids + mb * R;
    const char* abase = static_cast<const char*>(p.a);
    const int cpr = krange / 8;
    for (int idx = tid; idx < nvalid * cpr; idx += kCT) {
      const int r = idx / cpr, c = idx - r * cpr;
      const int kcol = kbase + c * 8;
      const bool ok = kcol < p.k;
      const char* src = ok ? abase + (static_cast<size_t>(rows[r] / p.a_row_div) * p.lda + kcol) * 2 : abase;
      cp_async16(sA + r * xstride + c * 16, src, ok ? 16 : 0);
    }
    if (per_chunk) {
      const float stat = p.in_scale != nullptr ? p.in_scale[e] : 1.f;
      for (int idx = tid; idx < nchb * R; idx += kCT) {
        const int c = idx / R, t = idx - c * R;
        const int k0 = kbase + c * p.chunk;
        const int sid = rows[t];
        float* dst = sRS + idx;
        // a chunk in the K padding holds zero products and has no scale: 0
        if (k0 >= p.k || sid >= p.numel) *dst = 0.f;
        else if (p.row_scale == nullptr) *dst = stat;
        else {
          const int rg = p.rs_kchunk > 0 ? min(k0 / p.rs_kchunk, p.rs_groups - 1) : 0;
          cp_async4(dst, p.row_scale + static_cast<size_t>(sid / p.a_row_div) * p.rs_groups + rg);
        }
      }
    }
  };
  // GemmParams::q_rows (fp8 weights, mode 3, 8-row M-blocks): GEMM2's h rows in the model dtype,
  // quantized to e4m3 here with act_prep's arithmetic (moe_kernels.cu act_prep_vec_kernel: s =
  // max(amax, 1e-10) / 448 from the row's absolute maximum, or the static scale; each value
  // RN-saturated to e4m3 after the correctly rounded x / s; fp16 operands), so no act_prep launch sits
  // between the GEMMs. The row's maximum comes from GEMM1's epilogue (GemmParams::h_amax: an atomic
  // maximum per row over the stored 16-bit values, which act_prep(x) zeroed), so staging a row reads
  // only the block's K range of it (the fifteenth session's form found each row's maximum here, from
  // all of K at every M-block a block staged: 0.95-0.97x at M = 16 / 64). The block stores each
  // row's scale as its row_scale, which the epilogue reads (every block that stages the row stores
  // the same value); then every consumer thread quantizes 16-byte chunks of the K range.
  constexpr bool kQRows = F == WFmt::kFP8 && MODE == 3 && R == 8;
  float* sQS = reinterpret_cast<float*>(smem + L.qs);
  auto stage_rows_q = [&](int mb, int e, int nvalid) {
    using HT = typename Op::OutT;  // h as GEMM1 wrote it
    const int32_t* rows = p.sorted_ids + mb * R;
    const HT* hb = static_cast<const HT*>(p.a);
    const int cpr = krange / 8;
    auto chunk_src = [&](int idx) {
      const int r = idx / cpr, c = idx - r * cpr;
      return hb + static_cast<size_t>(rows[r] / p.a_row_div) * p.lda + kbase + c * 8;
    };
    auto chunk_live = [&](int idx) { return kbase + (idx % cpr) * 8 < p.k; };
    // this thread's first chunk is loaded before the scales, so its latency overlaps the maxima's
    // (one chunk per thread covers a one-token M-block's K range up to 2048 columns); the rest in
    // the loop. H200 (thirtieth session): the trace had staging at 4.2-4.7 us of one-token
    // qwen3-30b-a3b / deepseek-v3 GEMM2s against 1.6-1.8 us for rows act_prep had quantized; with
    // this and RowDiv, fp8 qwen3-30b-a3b M = 1 / 16 1.04 / 1.02x, deepseek-v3 M = 1 1.01x (r4).
    // (It costs the 3-blocks-per-SM instantiations an 8-byte spill of a pointer, reloaded once per
    // M-block; the division alone spilled 16 bytes.)
    uint4 u0 = make_uint4(0u, 0u, 0u, 0u);
    if (tid < nvalid * cpr && chunk_live(tid)) u0 = *reinterpret_cast<const uint4*>(chunk_src(tid));
    if (tid < R) {
      float s = 0.f;
      if (tid < nvalid) {
        const int row = rows[tid] / p.a_row_div;
        s = p.q_rows == 3 ? p.in_scale[e] : fmaxf(p.h_amax[row], 1e-10f) / 448.f;
        // row_scale is the forward's own h_scale buffer here (moe_forward.cu), writable
        const_cast<float*>(p.row_scale)[static_cast<size_t>(row) * p.rs_groups] = s;
      }
      sQS[tid] = s;
    }
    asm volatile("bar.sync 1, %0;\n" ::"r"(kCT) : "memory");
    for (int idx = tid; idx < nvalid * cpr; idx += kCT) {
      const int r = idx / cpr, c = idx - r * cpr;
      uint4 o = make_uint4(0u, 0u, 0u, 0u);
      if (chunk_live(idx)) {
        const uint4 u = idx == tid ? u0 : *reinterpret_cast<const uint4*>(chunk_src(idx));
        const HT* hv = reinterpret_cast<const HT*>(&u);
        const float s = sQS[r];
        // x / s correctly rounded (act_prep's IEEE division): RowDiv where it is exact for s
        // (row_div.h; a one-token row's s = max(amax, 1e-10) / 448 always is), else the division
        const RowDiv div(s);
        float q[8];
        if (RowDiv::safe(s)) {
#pragma unroll
          for (int j = 0; j < 8; ++j) q[j] = div(static_cast<float>(hv[j]));
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) q[j] = static_cast<float>(hv[j]) / s;
        }
        __half h8[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) h8[j] = __float2half_rn(round_e4m3_sat(q[j]));
        o = *reinterpret_cast<const uint4*>(h8);
      }
      *reinterpret_cast<uint4*>(sA + r * xstride + c * 16) = o;
    }
  };
  const int g = lane >> 2, t = lane & 3;
  const int kj = warp;  // this warp's K group; it covers both n16 columns of an item
  const int fs = per_chunk ? p.chunk / 16 : 1 << 30;  // k16 steps per scale chunk
  const bool fine = per_chunk && fs % SS != 0;         // chunks end inside atoms (int4 groups of 32)
  const bool coarse = per_chunk && !fine;
  int cur_mb = -1, nvalid = 0;
  const int32_t* rows = p.sorted_ids;
  int tok_arow[NH][2];
  uint32_t xlane[NH];
  // chunks per slab (a slab holds whole chunks): a slab's first chunk without a division
  const int cps = per_chunk ? slab_atoms * KA / p.chunk : 0;
  RingPos rp;  // over the block's items (as the producer's)
  Item cur = next_live(first);
  for (int ti = 0; cur.it < item1; ++ti) {
    const int mb = cur.mb, nb = cur.nb;
    const int e = expert_of(mb);
    const int buf = ti & 1;
    Item nxt = cur;
    step(nxt);
    nxt = next_live(nxt);
    if (mb != cur_mb) {  // a new M-block: its rows and row scales, once every warp is done with the last ones
      if (cur_mb >= 0) asm volatile("bar.sync 1, %0;\n" ::"r"(kCT) : "memory");
      cur_mb = mb;
      rows = p.sorted_ids + mb * R;
      const int my_sid = rows[lane & (R - 1)];
      nvalid = __popc(__ballot_sync(0xffffffffu, lane < R && my_sid < p.numel));
      if constexpr (kQRows) {
        if (p.q_rows != 0) stage_rows_q(mb, e, nvalid);
        else stage_rows(mb, e, nvalid);
      } else {
        stage_rows(mb, e, nvalid);
      }
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int sid = rows[hh * 8 + 2 * t + h];
          tok_arow[hh][h] = sid < p.numel ? sid / p.a_row_div : -1;
        }
        // ldmatrix row addresses: lane -> row hh * 8 + (lane & 7) (rows past the valid ones read
        // row 0: their columns are dropped), 8-column group lane >> 3
        const int row = hh * 8 + (lane & 7);
        xlane[hh] = smem_u32(sA) + (row < nvalid ? row : 0) * xstride + (lane >> 3) * 16;
      }
      cp_async_commit();
      cp_async_wait<0>();
      asm volatile("bar.sync 1, %0;\n" ::"r"(kCT) : "memory");
      if (tid == 0 && ti == 0) QMOE_D90_T(2, d90_gtimer());
    }
    mbar_wait(&sfull[buf], (ti >> 1) & 1);  // this item's column scales / zero points
    const float* cs = sCS + buf * nch * 32;
    const float* zs = sZ + buf * nzch * 32;
    float zf[kNT][2];
    uint32_t zmagic[kNT][2];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) zf[nt][0] = zf[nt][1] = zsym;
    auto set_zero = [&](int ci) {
      if constexpr (kInt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (hz) zf[nt][j] = zs[ci * 32 + nt * 16 + j * 8 + g];
            zmagic[nt][j] = Op::pack(Op::kInt4Base + zf[nt][j], Op::kInt4Base + zf[nt][j]);
          }
      }
    };
    set_zero(0);  // channel zero points (chunk 0), or the symmetric offset
    // 8-row M-blocks: two accumulators per column (even / odd k16 steps; 16-bit atoms hold one
    // k16 step and use one): four independent mma chains per warp (ncu with one chain per column:
    // "wait" on the previous mma the top stall); a chunk's sum is acc[.][0] + acc[.][1], still the
    // fp32 sum of the chunk's exact products, scaled once. 16-row M-blocks: acc[.][h] is token
    // half h (four chains as well)
    float acc[kNT][2][4], out[kNT][NH][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[nt][0][c] = acc[nt][1][c] = 0.f;
#pragma unroll
        for (int hh = 0; hh < NH; ++hh) out[nt][hh][c] = 0.f;
      }
    int ci = 0, cnt = 0;  // chunk (block-relative) and its k16 steps so far
    auto flush = [&]() {
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) {
        const float r0 = sRS[ci * R + hh * 8 + 2 * t], r1 = sRS[ci * R + hh * 8 + 2 * t + 1];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float c0 = cs[ci * 32 + nt * 16 + g], c1 = cs[ci * 32 + nt * 16 + 8 + g];
          float a[4];
#pragma unroll
          for (int c = 0; c < 4; ++c) a[c] = NH == 1 ? acc[nt][0][c] + acc[nt][1][c] : acc[nt][hh][c];
          out[nt][hh][0] += a[0] * (r0 * c0);
          out[nt][hh][1] += a[1] * (r1 * c0);
          out[nt][hh][2] += a[2] * (r0 * c1);
          out[nt][hh][3] += a[3] * (r1 * c1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[nt][0][c] = acc[nt][1][c] = 0.f;
      cnt = 0;
      ++ci;
    };

    for (int st = 0; st < nst; ++st, rp.next(stages)) {
      const int slot = rp.slot;
      const int a0 = st * per_stage + kj * slab_atoms;  // first atom of this warp's slab (block-relative)
      const int na = min(slab_atoms, natoms - a0);
      mbar_wait(&full[slot], rp.phase);
      if (tid == 0 && ti == 0 && st == 0) QMOE_D90_T(3, d90_gtimer());
#ifdef QMOE_D90_NOCOMPUTE  // measurement build (docs/perf.md): the ring and item steps alone, no math
      if (false) {
#else
      if (na > 0) {
#endif
        const uint8_t* wst = sW + slot * stage_bytes + kj * slab_atoms * U;  // column nt: + nt * per_stage * U
        if (per_chunk) {
          ci = (st * kDecodeWarps + kj) * cps;  // = a0 * KA / chunk: slabs start on chunk boundaries
          if (hz) set_zero(ci);
        }
        // the slab's atoms; chunks ending inside atoms (FINE: int4 groups of 32) are checked per
        // k16 step, else once per atom: two copies of the loop, so the common case carries no
        // per-k16 chunk test (ncu: a branch and a NOP per k16 step, ~10% of the consumers' instructions)
        // (16-row M-blocks keep one copy with both tests: two copies spilled more of their registers)
        auto run_atoms = [&](auto fine_tag) {
          constexpr int FINE = decltype(fine_tag)::value;  // 0: per atom, 1: per k16 step, 2: both, by `fine`
#pragma unroll 2
          for (int i = 0; i < na; ++i) {
            uint32_t wv[kNT][4];
            uint32_t sp[kNT][2][2];  // fp4 block scales of rows g / g + 8, folded
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
              const uint8_t* unit = wst + (nt * per_stage + i) * U;
              const uint4 v = *reinterpret_cast<const uint4*>(unit + lane * 16);
              wv[nt][0] = v.x; wv[nt][1] = v.y; wv[nt][2] = v.z; wv[nt][3] = v.w;
              if constexpr (kFp4) {
                uint32_t sw[2];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                  const uint8_t* spp = unit + 512 + (j * 8 + g) * SPR;
                  sw[j] = SPR == 4 ? *reinterpret_cast<const uint32_t*>(spp)
                                   : static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(spp));
                }
                fp4_scale_pairs<Op, F>(sw, sp[nt]);
              }
            }
            const uint32_t xoff = ((a0 + i) * KA) * 2;
            [[maybe_unused]] uint32_t xb[NH == 1 ? SS : 1][2];
            if constexpr (NH == 1) load_token_frags<SS>(xb, xlane[0] + xoff);
            // 16-row M-blocks: both halves' fragments of two k16 steps at a time (all of the atom's
            // at once spilled the int4 / int8 kernels)
            [[maybe_unused]] uint32_t xq[NH][2][2];
#pragma unroll
            for (int ss = 0; ss < SS; ++ss) {
              if constexpr (NH == 2) {
                if ((ss & 1) == 0) {
#pragma unroll
                  for (int hh = 0; hh < NH; ++hh) {
                    uint32_t r4[4];
                    ldsm_x4(r4, xlane[hh] + xoff + (ss >> 1) * 64);
                    xq[hh][0][0] = r4[0];
                    xq[hh][0][1] = r4[1];
                    xq[hh][1][0] = r4[2];
                    xq[hh][1][1] = r4[3];
                  }
                }
              }
#pragma unroll
              for (int nt = 0; nt < kNT; ++nt) {
                uint32_t af[4];
#ifdef QMOE_D90_NODEQ  // measurement build (docs/perf.md): the raw codes as operands, no dequantization
                af[0] = wv[nt][ss]; af[1] = wv[nt][(ss + 1) & 3]; af[2] = wv[nt][(ss + 2) & 3]; af[3] = wv[nt][(ss + 3) & 3];
#else
                atom_a_frag<Op, F>(wv[nt], ss, zmagic[nt], zf[nt], sp[nt], af);
#endif
                if constexpr (NH == 1) {
                  // a constant index: (i * SS + ss) & 1 is not one for 16-bit atoms (SS = 1), and a
                  // variable index put the accumulators in local memory
                  mma16816<Op>(acc[nt][SS == 1 ? 0 : (ss & 1)], af, xb[ss][0], xb[ss][1]);
                } else {
#pragma unroll
                  for (int hh = 0; hh < NH; ++hh) mma16816<Op>(acc[nt][hh], af, xq[hh][ss & 1][0], xq[hh][ss & 1][1]);
                }
              }
              if constexpr (FINE != 0) {
                if ((FINE == 1 || fine) && ++cnt == fs) {
                  flush();
                  if (hz) set_zero(ci);
                }
              }
            }
            if constexpr (FINE != 1) {
              if (coarse && (cnt += SS) == fs) {  // one check per atom where chunks hold whole atoms
                flush();
                if (hz) set_zero(ci);
              }
            }
          }
        };
        if constexpr (MODE == 1 && NH == 1) {
          if (fine) run_atoms(std::integral_constant<int, 1>{});
          else run_atoms(std::integral_constant<int, 0>{});
        } else if constexpr (MODE == 1) {
          run_atoms(std::integral_constant<int, 2>{});
        } else {
          run_atoms(std::integral_constant<int, 0>{});
        }
        if (per_chunk && cnt > 0) flush();  // the K range ended inside a chunk
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
    if (lane == 0) mbar_arrive(&sempty[buf]);  // the last read of this item's scales is behind
    if (tid == 0 && ti == 0) QMOE_D90_T(4, d90_gtimer());

    // ---- reduce the K groups of each column (in K order), then the epilogue. Two buffers (where
    //      two blocks still fit an SM): a warp writes item ti's sums only after item ti - 1's
    //      reduction barrier, which the epilogue warps reach once they have read item ti - 2's;
    //      one buffer: free once the epilogue warps have read the previous item's sums (redfree)
    float* red = red_base + (ti & (red_bufs - 1)) * (kDecodeWarps * kNT * NH * 4 * 32);
    if (red_bufs == 1 && ti > 0) mbar_wait(redfree, (ti - 1) & 1);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float whole = NH == 1 ? acc[nt][0][c] + acc[nt][1][c] : acc[nt][hh][c];
          red[(((warp * kNT + nt) * NH + hh) * 4 + c) * 32 + lane] = per_chunk ? out[nt][hh][c] : whole;
        }
    asm volatile("bar.sync 1, %0;\n" ::"r"(kCT) : "memory");
    if (warp < kNT) {
      float v[NH][4];
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) sum_k_groups<NH>(red, warp, hh, lane, v[hh]);
      __syncwarp();
      if (lane == 0) mbar_arrive(redfree);
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
        decode_epilogue<Op, F, MODE>(p, e, nb * kNT + warp, split, v[hh], rows + hh * 8, g, t, tok_arow[hh],
                                     per_chunk);
    }
    // no barrier here: the next item's sums go to the other buffer or wait for redfree, rows are
    // restaged behind a barrier at an M-block change, and the scale producer refills this item's
    // scale buffer after sempty
    if (tid == 0) {
      if (ti == 0) QMOE_D90_T(5, d90_gtimer());
      QMOE_D90_T(6, d90_gtimer());
    }
    cur = nxt;
  }
#endif
}

template <class Op, WFmt F, int MODE>
void launch_one(int slab_kt, const GemmParams& p, cudaStream_t s) {
  QMOE_CHECK(p.zero_out == nullptr, kInternal, "moe_decode: zero_out is the sm_90 bulk kernel's (GEMM1 before a split GEMM2)");
  const int krange = p.ktiles_per_split * 64;
  const int smem = std::max(kDecodeRows * (krange * 2 + 16), kDecodeWarps * kNT * 4 * 32 * 4);
  QMOE_CHECK(smem <= 200 * 1024, kInternal, "moe_decode: K range ", krange, " per block is too long");
  QMOE_CHECK(p.np % kDecodeTileN == 0 && p.ktiles_per_split % slab_kt == 0, kInternal,
             "moe_decode: np ", p.np, " / ktiles_per_split ", p.ktiles_per_split, " do not fit the tiling");
  auto kern = moe_decode_kernel<Op, F, MODE>;
  static int smem_set = 48 * 1024;  // per instantiation; benign if two threads race (both set enough)
  if (smem > smem_set) {
    QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    smem_set = smem;
  }
  dim3 grid(p.max_blocks, p.np / kDecodeTileN, p.splits);
  launch_kernel(kern, grid, dim3(kThreads), smem, s, p, slab_kt);
}

// Whether the bulk kernel copies this GEMM's per-chunk scales / zero points from the item-contiguous
// tables (DevProj::scale_t): they exist (and the zero points' where there are zero points), the chunks
// are the weight groups, and every K split starts on a group. QMOE_CUDA_D90_TILED_SCALES=0 keeps
// the per-lane gathers (read per launch: A/B measurements, and the tests run both).
bool decode_tiles_apply(const GemmParams& p, int mode) {
  if (p.col_tiled == nullptr || (p.zero != nullptr && p.zero_tiled == nullptr)) return false;
  if (mode != 1 || p.chunk >= p.kp || p.kchunk <= 0 || p.chunk != p.kchunk) return false;
  if (p.splits > 1 && (p.ktiles_per_split * 64) % p.kchunk != 0) return false;
  return env_on("QMOE_CUDA_D90_TILED_SCALES");
}

// One thread per entry (e, tile, g, r) of the tables (DevProj::scale_t): the value the per-lane
// gather of moe_decode90_kernel reads for prepared row 32 tile + r at chunk start g * kchunk.
__global__ void decode_tiles_kernel(const float* __restrict__ scale, const float* __restrict__ zero, int E,
                                    int ntiles, int kgt, int kg, int nsc, int n_div, int n, int interleaved,
                                    int half, float zsym, float* __restrict__ st, float* __restrict__ zt) {
  const int64_t total = static_cast<int64_t>(E) * ntiles * kgt * 32;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i & 31);
    const int64_t q = i >> 5;
    const int g = static_cast<int>(q % kgt);
    const int64_t et = q / kgt;
    const int tile = static_cast<int>(et % ntiles);
    const int e = static_cast<int>(et / ntiles);
    const int prow = tile * 32 + r;
    const int orow = interleaved ? interleaved_row(prow, half) : prow;
    const bool live = orow < n;
    st[i] = live && g < kg ? scale[(static_cast<int64_t>(e) * kg + g) * nsc + orow / n_div] : 0.f;
    if (zt != nullptr) zt[i] = live ? zero[(static_cast<int64_t>(e) * kg + min(g, kg - 1)) * n + orow] : zsym;
  }
}

}  // namespace

void build_decode_tiles(DevProj& pr, int num_experts, int half) {
  pr.scale_t = DevBuf();
  pr.zero_t = DevBuf();
  if ((pr.fmt != WFmt::kU4 && pr.fmt != WFmt::kU8) || pr.g_idx.ptr != nullptr || pr.kchunk <= 0 ||
      pr.kchunk >= pr.kp || pr.np % kDecodeTileN != 0 || pr.scale.ptr == nullptr || !decode90_available())
    return;
  const int kgt = (pr.kp + pr.kchunk - 1) / pr.kchunk;
  const int ntiles = pr.np / kDecodeTileN;
  const size_t entries = static_cast<size_t>(num_experts) * ntiles * kgt * 32;
  pr.scale_t = DevBuf(entries * 4);
  if (pr.zero.ptr != nullptr) pr.zero_t = DevBuf(entries * 4);
  const int blocks = static_cast<int>(std::min<size_t>((entries + 255) / 256, 65535));
  decode_tiles_kernel<<<blocks, 256>>>(pr.scale.as<float>(), pr.zero.as<float>(), num_experts, ntiles, kgt, pr.kg,
                                       pr.nsc, pr.n_div, pr.n, pr.interleaved ? 1 : 0, half,
                                       dec_zsym(pr.fmt), pr.scale_t.as<float>(),
                                       pr.zero_t.as<float>());
  QMOE_CUDA_LAUNCH_OK();
}

namespace {

// Atoms per warp slab and the shared memory of one block of the sm_90 kernel for this GEMM.
struct Dec90Plan {
  int slab_atoms = 0, stages = kStages90, red_bufs = 1;
  Dec90Smem L;
};
// Deepest ring (up to kStages90, or QMOE_CUDA_DECODE90_STAGES for measurements) that still lets
// two blocks share an SM (the plan of QMOE_CUDA_DECODE90_BALANCE=0; the balanced plan keeps its blocks).
int dec90_max_stages() {
  static const int v = std::min(kMaxStages90, std::max(2, env_int("QMOE_CUDA_DECODE90_STAGES", kStages90)));
  return v;
}
constexpr bool dec90_two_fit(int smem) { return 2 * (smem + 1024) <= 228 * 1024; }
constexpr int dec90_smem_blocks(int smem) { return 228 * 1024 / (smem + 1024); }
// many_items: the launch walks enough items per block (>= 4) for slabs longer than the base one
Dec90Plan dec90_plan(WFmt fmt, int mode, int chunk, int kp, int ktiles_per_split, int slab_kt, int max_rows,
                     bool zero, int rows, bool many_items = true) {
  const int KA = dec_ka(fmt), U = dec_unit(fmt);
  // a warp's slab: whole scale chunks, at least 2 atoms; 2 without chunks (a stage: 2 columns x 8
  // slabs, 16 KiB for 512-byte atoms)
  const bool per_chunk = mode == 1 && chunk < kp;
  Dec90Plan d;
  int base = per_chunk ? slab_kt * (64 / KA) : 2;
  while (base < 2) base *= 2;
  const int krange = ktiles_per_split * 64;
  const int nch = per_chunk ? (krange + chunk - 1) / chunk : 0;
  const bool hz = (fmt == WFmt::kU4 || fmt == WFmt::kU8) && zero;
  const int nzch = hz ? (per_chunk ? nch : 1) : 0;
  auto stage_bytes = [&](int slab) { return kNT * kDecodeWarps * slab * U; };
  auto stages_for = [&](int slab) {
    int st = dec90_max_stages();
    for (; st > 2; --st)
      if (dec90_two_fit(dec90_smem(st, stage_bytes(slab), max_rows, krange, nch, nzch, 1, rows).total)) break;
    return st;
  };
  // QMOE_CUDA_DECODE90_BALANCE (default 1): the slab and reduction buffers by dec90_balance (config.h:
  // the slowest warp's atoms per item over the blocks an SM holds), then the ring depth; 0: 2-atom
  // (or one-chunk) slabs, the deepest ring up to kStages90 (QMOE_CUDA_DECODE90_STAGES) that lets two
  // blocks share an SM, and a second reduction buffer wherever two blocks still fit (measurements).
  // Measured on the H200 (docs/perf.md, twenty-seventh session, against 0): qwen3-30b-a3b GEMM2
  // (K = 768) on 3-atom slabs and GEMM1 on three blocks with one buffer, fp8 M = 16 / 64 1.03 /
  // 1.04x, int8 1.04-1.05x; but qwen3-30b-a3b fp8 M = 1 (1-2 items per block) 0.96x with the longer
  // slab (a longer first stage to wait for), and deepseek-v3 bf16 M = 16 0.91x on three blocks with
  // one buffer. Hence longer slabs only where blocks walk several items, and 16-bit weights keep
  // the second buffer.
  static const int balance = env_int("QMOE_CUDA_DECODE90_BALANCE", 1);
  if (balance != 0) {
    const int natoms = krange / KA;
    const int reg = dec90_reg_blocks(fmt, mode, rows);
    // blocks per SM with `st` stages (0: two blocks do not fit)
    const auto blocks_at = [&](int st, int slab, int rb) {
      const int total = dec90_smem(st, stage_bytes(slab), max_rows, krange, nch, nzch, rb, rows).total;
      return total <= kSm90MaxSmem && dec90_two_fit(total) ? std::min(reg, dec90_smem_blocks(total)) : 0;
    };
    const bool keep_two = fmt == WFmt::k16 && blocks_at(2, base, 2) > 0;
    const Dec90Shape sh = dec90_balance(natoms, base, many_items ? (per_chunk ? base : 1) : 0, [&](int slab, int rb) {
      return keep_two && rb == 1 ? 0 : blocks_at(2, slab, rb);
    });
    if (sh.blocks > 0) {
      // then, where blocks walk several items and the weights have no per-chunk scales, the deepest
      // ring (up to 3 stages, QMOE_CUDA_DECODE90_STAGES for measurements) that keeps those blocks.
      // Measured on the H200 (twenty-seventh session; r3: 3 / 4 stages against 2 under this plan at
      // M = 16 / 64, r4: a third stage wherever it kept the blocks, against QMOE_CUDA_DECODE90_BALANCE=0):
      // int8 (W8A16, channel scales) 1.02-1.08x, MXFP4 up to 1.05x (gpt-oss-120b), bf16 up to 1.03x,
      // fp8 1.00x where the blocks stay (0.93-0.98x where a third stage cost qwen3-30b-a3b its third
      // block); but qwen3-30b-a3b fp8 M = 1 0.96x (1-2 items per block: a larger first burst of
      // copies to wait for) and int4 g128 M = 16 / 64 0.98x (per-chunk scales); 4 stages as 3.
      static const int smax = std::min(kMaxStages90, std::max(2, env_int("QMOE_CUDA_DECODE90_STAGES", 3)));
      d.slab_atoms = sh.slab;
      d.red_bufs = sh.red_bufs;
      d.stages = 2;
      for (int st = many_items && !per_chunk ? smax : 2; st > 2; --st)
        if (blocks_at(st, sh.slab, sh.red_bufs) >= sh.blocks) {
          d.stages = st;
          break;
        }
      d.L = dec90_smem(d.stages, stage_bytes(sh.slab), max_rows, krange, nch, nzch, d.red_bufs, rows);
      return d;
    }
  }
  d.slab_atoms = base;
  d.stages = stages_for(base);
  // a second reduction buffer where it still lets two blocks share an SM (measured 2-3% faster
  // than waiting for the epilogue warps)
  d.red_bufs = dec90_two_fit(dec90_smem(d.stages, stage_bytes(base), max_rows, krange, nch, nzch, 2, rows).total) ? 2 : 1;
  d.L = dec90_smem(d.stages, stage_bytes(base), max_rows, krange, nch, nzch, d.red_bufs, rows);
  return d;
}

template <class Op, WFmt F, int MODE, int R>
void launch_one90(int slab_kt, int max_rows, const GemmParams& p, cudaStream_t s) {
  QMOE_CHECK(p.np % kDecodeTileN == 0 && p.ktiles_per_split % slab_kt == 0 && max_rows >= 1 &&
                 max_rows <= R, kInternal, "moe_decode90: np ", p.np, " / ktiles_per_split ",
             p.ktiles_per_split, " / rows ", max_rows, " do not fit the tiling");
  // (M-block, 32-column tile) items of the grid, and whether a block walks >= 4 of them: at most
  // min(M-blocks, slots) M-blocks are used, over about reg-blocks x SMs / splits blocks per K split
  // (QMOE_CUDA_DECODE90_TILES, below, sets the items per block: tests run both slab choices with it)
  const int64_t tiles = p.np / kDecodeTileN, items = static_cast<int64_t>(p.max_blocks) * tiles;
  const int forced_items = env_int("QMOE_CUDA_DECODE90_TILES", 0);
  const bool many = forced_items > 0 ? forced_items >= 4
                                     : static_cast<int64_t>(std::min(p.max_blocks, p.numel)) * tiles * p.splits >=
                                           int64_t{4} * dec90_reg_blocks(F, MODE, R) * device_sm_count();
  const Dec90Plan d =
      dec90_plan(F, MODE, p.chunk, p.kp, p.ktiles_per_split, slab_kt, max_rows, p.zero != nullptr, R, many);
  const Dec90Smem& L = d.L;
  const int slab_atoms = d.slab_atoms;
  const int krange = p.ktiles_per_split * 64;
  QMOE_CHECK(!(MODE == 1 && p.chunk < p.kp) || (slab_atoms * DecFmt<F>::KA) % p.chunk == 0, kInternal,
             "moe_decode90: a slab of ", slab_atoms, " atoms does not hold whole scale chunks of ", p.chunk);
  QMOE_CHECK(L.total <= kSm90MaxSmem, kInternal, "moe_decode90: K range ", krange, " per block is too long");
  auto kern = moe_decode90_kernel<Op, F, MODE, R>;
  static int smem_set = 48 * 1024;  // per instantiation; benign if two threads race (both set enough)
  if (L.total > smem_set) {
    QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, L.total));
    smem_set = L.total;
  }
  GemmParams q = p;
  if (!decode_tiles_apply(p, MODE)) q.col_tiled = q.zero_tiled = nullptr;
  // one wave of blocks per K split; each walks an equal share of the (M-block, tile) items. The
  // occupancy query runs once per shared-memory size (cached per instantiation: smem << 8 | blocks).
  static std::atomic<int64_t> occ{-1};
  int64_t o = occ.load(std::memory_order_relaxed);
  if (o < 0 || (o >> 8) != L.total) {
    int per_sm = 1;
    QMOE_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kThreads90, L.total));
    o = (static_cast<int64_t>(L.total) << 8) | std::min(std::max(per_sm, 1), 255);
    occ.store(o, std::memory_order_relaxed);
  }
  int64_t blocks = std::max<int64_t>(1, (o & 255) * device_sm_count() / p.splits);
  // tests force about `v` items per block on small layers (read per launch so a test can set it)
  if (forced_items > 0) {
    const int64_t per = forced_items;
    blocks = (items + per - 1) / per;
  }
  blocks = std::min(blocks, items);
  dim3 grid(static_cast<unsigned>(blocks), 1, p.splits);
  launch_kernel(kern, grid, dim3(kThreads90), L.total, s, q, slab_atoms, max_rows, d.stages, d.red_bufs);
#ifdef QMOE_D90_TRACE
  g_d90_grid[(p.stage - 1) & 1] = static_cast<int>(blocks * p.splits);
#endif
}

template <class Op, bool SM90, int R = 8>
void launch_fmt(WFmt fmt, int mode, int slab_kt, int max_rows, const GemmParams& p, cudaStream_t s) {
  auto one = [&](auto f, auto m) {
    constexpr WFmt F = decltype(f)::value;
    constexpr int M = decltype(m)::value;
    using O = OperandOf<Op, F>;  // fp8 W8A8 of a bf16 model: fp16 operands
    if constexpr (SM90 && (R == 8 || F == WFmt::kU4)) launch_one90<O, F, M, R>(slab_kt, max_rows, p, s);
    else if constexpr (SM90) QMOE_CHECK(false, kInternal, "moe_decode90: 16-row M-blocks are int4 only");
    else launch_one<O, F, M>(slab_kt, p, s);
  };
  using std::integral_constant;
  switch (fmt) {
    case WFmt::k16:
      if constexpr (SM90 && R == 8) {
        return one(integral_constant<WFmt, WFmt::k16>{}, integral_constant<int, 0>{});
      } else {
        QMOE_CHECK(false, kInternal, "moe_decode: 16-bit weights run on the sm_90 bulk kernel with 8-row M-blocks only");
        break;
      }
    case WFmt::kU4: return one(integral_constant<WFmt, WFmt::kU4>{}, integral_constant<int, 1>{});
    case WFmt::kU8: return one(integral_constant<WFmt, WFmt::kU8>{}, integral_constant<int, 1>{});
    case WFmt::kFP8:
      if (mode == 3) return one(integral_constant<WFmt, WFmt::kFP8>{}, integral_constant<int, 3>{});
      return one(integral_constant<WFmt, WFmt::kFP8>{}, integral_constant<int, 1>{});
    case WFmt::kNV4: return one(integral_constant<WFmt, WFmt::kNV4>{}, integral_constant<int, 0>{});
    case WFmt::kMX4: return one(integral_constant<WFmt, WFmt::kMX4>{}, integral_constant<int, 0>{});
  }
}

}  // namespace

bool decode90_available() {
  static const bool ok = [] {
    if (!env_on("QMOE_CUDA_DECODE90")) return false;
    return sm90_kernel_runs(reinterpret_cast<const void*>(moe_decode90_kernel<BF16, WFmt::kU4, 1, 8>));
  }();
  return ok;
}

bool decode90_use(WFmt fmt, int mode, int chunk, int kp, int ktiles_per_split, int slab_ktiles, int max_rows,
                  bool zero, int rows) {
  if (!decode90_available() || !decode_supports(fmt, mode)) return false;
  // Measured on the H200 (docs/perf.md): the bulk kernel wins where two blocks share an SM and
  // loses at one block per SM (gpt-oss-120b M = 16 with a 4-stage ring: 8 staged rows of K = 2880).
  const Dec90Plan d = dec90_plan(fmt, mode, chunk, kp, ktiles_per_split, slab_ktiles, max_rows, zero, rows);
  if (d.L.total > kSm90MaxSmem) return false;
  // its warps' slabs must hold whole scale chunks (a chunk index per slab, flushes counted from the
  // slab's start); groups such as 48 or 96 columns do not divide a 128-column slab: the register-ring
  // kernel, which tracks chunk ends by absolute column, takes those
  if (mode == 1 && chunk < kp && (d.slab_atoms * dec_ka(fmt)) % chunk != 0) return false;
  static const bool force = env_int("QMOE_CUDA_DECODE90", 1) == 2;
  return force || dec90_two_fit(d.L.total);  // QMOE_CUDA_DECODE90=2: wherever it fits (measurements)
}

Decode90Plan decode90_plan(WFmt fmt, int mode, int chunk, int kp, int ktiles_per_split, int slab_ktiles, int max_rows,
                           bool zero, int rows) {
  const Dec90Plan d = dec90_plan(fmt, mode, chunk, kp, ktiles_per_split, slab_ktiles, max_rows, zero, rows);
  return Decode90Plan{d.slab_atoms, d.red_bufs, d.stages, d.L.total};
}

bool decode90_fit(WFmt fmt, int mode, int chunk, int kp, DecodeConfig& d, int max_rows, bool zero, int rows) {
  if (decode90_use(fmt, mode, chunk, kp, d.ktiles_per_split, d.slab_ktiles, max_rows, zero, rows)) return true;
  static const bool refit = env_on("QMOE_CUDA_DECODE90_REFIT");
  if (!refit || !decode90_available()) return false;
  const int ktiles = kp / 64;
  const int slabs = d.ktiles_per_split / d.slab_ktiles;  // slabs per split now
  for (int f = 2; f <= 4 && slabs >= f; f *= 2) {
    DecodeConfig e = d;
    e.ktiles_per_split = (slabs + f - 1) / f * d.slab_ktiles;
    e.splits = (ktiles + e.ktiles_per_split - 1) / e.ktiles_per_split;
    if (e.splits > 16) break;
    if (decode90_use(fmt, mode, chunk, kp, e.ktiles_per_split, e.slab_ktiles, max_rows, zero, rows)) {
      d = e;
      return true;
    }
  }
  return false;
}

namespace {
// Direct routing's table (moe_gemm.cuh direct_rows_table): block b = {b, sentinels}.
struct DirectRows {
  int32_t v[kDirectMaxSlots * kDecodeRows];
  constexpr DirectRows() : v{} {
    for (int i = 0; i < kDirectMaxSlots * kDecodeRows; ++i) v[i] = i % kDecodeRows == 0 ? i / kDecodeRows : 0x7fffffff;
  }
};
__device__ const DirectRows g_direct_rows = DirectRows();

}  // namespace

const int32_t* direct_rows_table() {
  static const int32_t* t = [] {
    void* a = nullptr;
    QMOE_CUDA_OK(cudaGetSymbolAddress(&a, g_direct_rows));
    return static_cast<const int32_t*>(a);
  }();
  return t;
}

void launch_moe_decode(bool f16, WFmt fmt, int mode, int slab_ktiles, int max_rows, bool sm90, int rows,
                       const GemmParams& p, cudaStream_t s) {
  QMOE_CHECK(decode_supports(fmt, mode), kInternal, "moe_decode: no kernel for format ", static_cast<int>(fmt),
             " mode ", mode);
  QMOE_CHECK(!sm90 || decode90_available(), kInternal, "moe_decode: the sm_90 kernel is not available");
  QMOE_CHECK(rows == 8 || (rows == 16 && sm90), kInternal, "moe_decode: ", rows,
             "-row M-blocks need the sm_90 kernel (the register-ring one has 8)");
  QMOE_CHECK(p.direct_ids == nullptr || (sm90 && rows == kDecodeRows && p.numel <= kDirectMaxSlots), kInternal,
             "moe_decode: direct routing needs the sm_90 kernel, 8-row blocks and at most ", kDirectMaxSlots, " slots");
  if (f16) {
    if (sm90 && rows == 16) launch_fmt<F16, true, 16>(fmt, mode, slab_ktiles, max_rows, p, s);
    else if (sm90) launch_fmt<F16, true>(fmt, mode, slab_ktiles, max_rows, p, s);
    else launch_fmt<F16, false>(fmt, mode, slab_ktiles, max_rows, p, s);
  } else if (fmt == WFmt::kFP8 && p.a16) {  // FP8 weight-only of a bf16 model: bf16 operands
    QMOE_CHECK(rows == 8, kInternal, "moe_decode: fp8 weights run 8-row M-blocks");
    if (sm90) launch_fmt<BF16A16, true>(fmt, mode, slab_ktiles, max_rows, p, s);
    else launch_fmt<BF16A16, false>(fmt, mode, slab_ktiles, max_rows, p, s);
  } else {
    if (sm90 && rows == 16) launch_fmt<BF16, true, 16>(fmt, mode, slab_ktiles, max_rows, p, s);
    else if (sm90) launch_fmt<BF16, true>(fmt, mode, slab_ktiles, max_rows, p, s);
    else launch_fmt<BF16, false>(fmt, mode, slab_ktiles, max_rows, p, s);
  }
}

#ifdef QMOE_D90_TRACE
// Appends the latest GEMM1 / GEMM2 records (see QMOE_D90_T) to path: "# stage S blocks B", then
// one line per block: index and the ten fields.
void decode90_trace_dump(const char* path) {
  QMOE_CUDA_OK(cudaDeviceSynchronize());
  std::vector<unsigned long long> t(2 * kD90TraceMax * kD90TraceF);
  QMOE_CUDA_OK(cudaMemcpyFromSymbol(t.data(), g_d90_trace, t.size() * sizeof(unsigned long long)));
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) return;
  for (int st = 0; st < 2; ++st) {
    const int n = std::min(g_d90_grid[st], kD90TraceMax);
    if (n == 0) continue;
    std::fprintf(f, "# stage %d blocks %d\n", st + 1, g_d90_grid[st]);
    for (int b = 0; b < n; ++b) {
      std::fprintf(f, "%d", b);
      for (int i = 0; i < kD90TraceF; ++i) std::fprintf(f, " %llu", t[(static_cast<size_t>(st) * kD90TraceMax + b) * kD90TraceF + i]);
      std::fprintf(f, "\n");
    }
    g_d90_grid[st] = 0;
  }
  std::fclose(f);
}
#endif

}  // namespace qmoe::cuda
