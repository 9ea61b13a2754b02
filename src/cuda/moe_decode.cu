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

#include "cuda/device_common.cuh"
#include "cuda/moe_decode.cuh"

namespace qmoe::cuda {

bool decode_supports(WFmt fmt, int mode) {
  switch (fmt) {
    case WFmt::k16: return false;  // measured slower than the 16-row tile (config.h select_decode)
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

template <WFmt F> struct DecFmt;
template <> struct DecFmt<WFmt::k16> { static constexpr int KA = 16, U = 512, SPR = 0; };
template <> struct DecFmt<WFmt::kU8> { static constexpr int KA = 32, U = 512, SPR = 0; };
template <> struct DecFmt<WFmt::kFP8> { static constexpr int KA = 32, U = 512, SPR = 0; };
template <> struct DecFmt<WFmt::kU4> { static constexpr int KA = 64, U = 512, SPR = 0; };
template <> struct DecFmt<WFmt::kNV4> { static constexpr int KA = 64, U = 512 + 64, SPR = 4; };  // + e4m3 per 16
template <> struct DecFmt<WFmt::kMX4> { static constexpr int KA = 64, U = 512 + 32, SPR = 2; };  // + e8m0 per 32

// ---- fp4 operands: the same bit tricks as moe_gemm_fp4.cu (see its header for why every value is
//      exact): e2m1 bits placed in the operand's exponent / mantissa field are value * 2^-126
//      (bf16) / 2^-14 (fp16); kFold (in the block scale) and kUnscale (on the fp32 sum) undo it.
template <class Op> struct Fp4Bits;
template <> struct Fp4Bits<BF16> {
  static constexpr int kEmShift = 6;
  static constexpr uint32_t kEmMask = 0x01C001C0u;
  static constexpr uint32_t kFold = 0x5F005F00u;          // bf16 2^63
  static constexpr float kUnscale = 9223372036854775808.f;  // 2^63
};
template <> struct Fp4Bits<F16> {
  static constexpr int kEmShift = 9;
  static constexpr uint32_t kEmMask = 0x0E000E00u;
  static constexpr uint32_t kFold = 0x58005800u;  // fp16 2^7
  static constexpr float kUnscale = 128.f;
};
// Raw operand pair P (0..3) of an int4-atom word: nibble P = first element, nibble P + 4 = second.
template <class Op, int P>
__device__ __forceinline__ uint32_t e2m1_raw_pair(uint32_t w) {
  constexpr int se = Fp4Bits<Op>::kEmShift - 4 * P;
  constexpr int ss = 12 - 4 * P;
  uint32_t em, sg;
  if constexpr (se >= 0) em = w << se; else em = w >> (-se);
  if constexpr (ss >= 0) sg = w << ss; else sg = w >> (-ss);
  return (em & Fp4Bits<Op>::kEmMask) | (sg & 0x80008000u);
}
// MXFP4 group scale 2^(e - 127), folded, in both halves (prepare_q bounds e for fp16).
template <class Op>
__device__ __forceinline__ uint32_t mx_scale_pair(uint32_t e);
template <>
__device__ __forceinline__ uint32_t mx_scale_pair<BF16>(uint32_t e) {
  const uint32_t h = (e + 63u) << 7;  // 2^(e - 127) * 2^63, normal for e <= 191
  return h | (h << 16);
}
template <>
__device__ __forceinline__ uint32_t mx_scale_pair<F16>(uint32_t e) {
  const int x = static_cast<int>(e) - 120;  // 2^(e - 127) * 2^7; x in [-8, 15]
  const uint32_t h = x >= -14 ? static_cast<uint32_t>(x + 15) << 10 : 1u << (x + 24);
  return h | (h << 16);
}

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
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
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
  const float zsym = F == WFmt::kU4 ? 8.f : 128.f;
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
    // token (B) fragments of the atom's k16 steps: {k 2t..2t+1, k 2t+8..2t+9} of row g
    uint32_t xb[SS][2];
    const uint32_t xa = xlane + (k0 - kbase) * 2;
    if constexpr (SS == 1) {
      ldsm_x2(xb[0], xa);
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
    // fp4 block scales of rows g / g + 8 (two consecutive blocks per register, folded)
    uint32_t sp[kNT][2][2];
    if constexpr (kFp4) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t sw = sring[s][nt][j];
          if constexpr (F == WFmt::kNV4) {
            sp[nt][j][0] = Op::mul2(dq_fp8_pair<Op>(sw, 0), Fp4Bits<Op>::kFold);
            sp[nt][j][1] = Op::mul2(dq_fp8_pair<Op>(sw, 2), Fp4Bits<Op>::kFold);
          } else {
            sp[nt][j][0] = mx_scale_pair<Op>(sw & 0xFFu);
            sp[nt][j][1] = mx_scale_pair<Op>(sw >> 8);
          }
        }
    }
#pragma unroll
    for (int ss = 0; ss < SS; ++ss) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint4 v = ring[s][nt];
        const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
        // A operand of the swapped mma: a0 = (row g, k 2t..), a1 = (row g + 8, k 2t..),
        // a2 = (row g, k 2t + 8..), a3 = (row g + 8, k 2t + 8..) = the atom's B fragment pairs
        // (j, bi) = (0, 0), (1, 0), (0, 1), (1, 1)
        uint32_t af[4];
        if constexpr (F == WFmt::k16) {
          af[0] = wv[0]; af[1] = wv[2]; af[2] = wv[1]; af[3] = wv[3];
        } else if constexpr (F == WFmt::kU4) {
          af[0] = dq_u4_pair<Op>(wv[ss], 0, zmagic[nt][0]);
          af[1] = dq_u4_pair<Op>(wv[ss], 2, zmagic[nt][1]);
          af[2] = dq_u4_pair<Op>(wv[ss], 1, zmagic[nt][0]);
          af[3] = dq_u4_pair<Op>(wv[ss], 3, zmagic[nt][1]);
        } else if constexpr (F == WFmt::kU8) {
          af[0] = dq_u8_pair<Op>(wv[ss * 2], 0, zf[nt][0]);
          af[1] = dq_u8_pair<Op>(wv[ss * 2 + 1], 0, zf[nt][1]);
          af[2] = dq_u8_pair<Op>(wv[ss * 2], 2, zf[nt][0]);
          af[3] = dq_u8_pair<Op>(wv[ss * 2 + 1], 2, zf[nt][1]);
        } else if constexpr (F == WFmt::kFP8) {
          af[0] = dq_fp8_pair<Op>(wv[ss * 2], 0);
          af[1] = dq_fp8_pair<Op>(wv[ss * 2 + 1], 0);
          af[2] = dq_fp8_pair<Op>(wv[ss * 2], 2);
          af[3] = dq_fp8_pair<Op>(wv[ss * 2 + 1], 2);
        } else {
          // NVFP4: block ss of the atom (half ss & 1 of pair ss / 2, broadcast); MXFP4: group ss / 2
          uint32_t s2[2];
#pragma unroll
          for (int j = 0; j < 2; ++j)
            s2[j] = F == WFmt::kNV4 ? __byte_perm(sp[nt][j][ss >> 1], 0u, (ss & 1) ? 0x3232 : 0x1010)
                                    : sp[nt][j][ss >> 1];
          af[0] = Op::mul2(e2m1_raw_pair<Op, 0>(wv[ss]), s2[0]);
          af[1] = Op::mul2(e2m1_raw_pair<Op, 2>(wv[ss]), s2[1]);
          af[2] = Op::mul2(e2m1_raw_pair<Op, 1>(wv[ss]), s2[0]);
          af[3] = Op::mul2(e2m1_raw_pair<Op, 3>(wv[ss]), s2[1]);
        }
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
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) sum += red[((w * kNT + nt) * 4 + c) * 32 + lane];
    v[c] = sum;
  }

  const int tile = nb * kNT + nt;
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
  using T = typename Op::T;
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
        static_cast<T*>(p.out)[static_cast<size_t>(sid) * p.ldo + i] = Op::from_f(act_fn(p.act, gv, uv));
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
        if (p.splits > 1) atomicAdd(dst, val * w);
        else *dst = val * w;
      }
    }
  }
}

template <class Op, WFmt F, int MODE>
void launch_one(int slab_kt, const GemmParams& p, cudaStream_t s) {
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
  kern<<<grid, kThreads, smem, s>>>(p, slab_kt);
  QMOE_CUDA_LAUNCH_OK();
}

template <class Op>
void launch_fmt(WFmt fmt, int mode, int slab_kt, const GemmParams& p, cudaStream_t s) {
  switch (fmt) {
    case WFmt::k16: break;
    case WFmt::kU4: return launch_one<Op, WFmt::kU4, 1>(slab_kt, p, s);
    case WFmt::kU8: return launch_one<Op, WFmt::kU8, 1>(slab_kt, p, s);
    case WFmt::kFP8:
      return mode == 3 ? launch_one<Op, WFmt::kFP8, 3>(slab_kt, p, s) : launch_one<Op, WFmt::kFP8, 1>(slab_kt, p, s);
    case WFmt::kNV4: return launch_one<Op, WFmt::kNV4, 0>(slab_kt, p, s);
    case WFmt::kMX4: return launch_one<Op, WFmt::kMX4, 0>(slab_kt, p, s);
  }
}

}  // namespace

void launch_moe_decode(bool f16, WFmt fmt, int mode, int slab_ktiles, const GemmParams& p, cudaStream_t s) {
  QMOE_CHECK(decode_supports(fmt, mode), kInternal, "moe_decode: no kernel for format ", static_cast<int>(fmt),
             " mode ", mode);
  if (f16) launch_fmt<F16>(fmt, mode, slab_ktiles, p, s);
  else launch_fmt<BF16>(fmt, mode, slab_ktiles, p, s);
}

}  // namespace qmoe::cuda
