// The grouped GEMM of the fused MoE on mma.sync m16n8k16 (sm_80 and up), for every weight format.
// A rows are gathered through sorted_token_ids (one expert per M-block), staged with a
// multi-stage cp.async pipeline into XOR-swizzled shared memory and read with ldmatrix; weights
// are prepared "atoms" (cuda_moe.h) copied linearly with cp.async, so each lane's B fragments are
// one conflict-free 16-byte shared load, dequantized in registers:
//   mode 0: 16-bit weights used as they are;
//   mode 1: int / fp8 codes turned into exact operands ((u - z) is an integer <= 255 in
//           magnitude, e4m3 values are exact in bf16 and fp16; fp8 always runs on fp16 operands,
//           device_common.cuh F16B, whose hardware e4m3 conversion is one instruction per pair),
//           fp32 partial sums per K chunk,
//           each scaled by its activation (row) and weight (column) scale — the exact product
//           order of numerics.md, so no rounding of dequantized weights;
//   mode 2: g_idx (act-order) int weights, dequantized per element to (u - z) * s rounded to
//           the operand dtype (the one rounding numerics.md allows kernels).
#include "cuda/device_common.cuh"
#include "cuda/mma_tile.cuh"
#include "cuda/moe_gemm.cuh"
#include "cuda/moe_q.cuh"

namespace qmoe::cuda {
namespace {

using namespace dev;

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
using Cfg = MmaCfg<BM, BN, WARPS_M, WARPS_N, STAGES>;
// Decode streams weights and is issue-bound at low occupancy (ncu on the H200, mixtral M = 1:
// ~5.5 cycles per issued instruction per warp, 12-19% occupancy, limited by shared memory at 6
// stages and by registers for the quantized formats). Four stages let 4-5 blocks share an SM;
// 8-bit and 4-bit warps cover n32 so the fixed per-k-step work (barrier, A fragments) is shared
// by two weight atoms.
using SmallCfg = Cfg<16, 64, 1, 4, 4>;
using Small8Cfg = Cfg<16, 128, 1, 4, 4>;
using Small4Cfg = Cfg<16, 128, 1, 4, 4>;
using MediumCfg = Cfg<64, 128, 2, 2, 4>;
using LargeCfg = Cfg<128, 128, 2, 4, 3>;
// 16-bit weights carry no per-chunk accumulators, so their large tile can be twice as wide
// (64 x 64 warp tiles): half the L2 -> shared traffic per FLOP of the 128 x 128 tile.
using WideCfg = Cfg<128, 256, 2, 4, 3>;

template <WFmt F> struct FmtTraits;
template <> struct FmtTraits<WFmt::k16> { static constexpr int KA = 16; };
template <> struct FmtTraits<WFmt::kU8> { static constexpr int KA = 32; };
template <> struct FmtTraits<WFmt::kFP8> { static constexpr int KA = 32; };
template <> struct FmtTraits<WFmt::kU4> { static constexpr int KA = 64; };

template <class C, WFmt F>
constexpr int smem_bytes() {
  return C::STAGES * (C::BM * 128 + (C::BN / 16) * (64 / FmtTraits<F>::KA) * 512) + C::BM * 8;
}

template <class Op, class C, WFmt F, int MODE>
__global__ void __launch_bounds__(C::kThreads) moe_gemm_kernel(const GemmParams p) {
  constexpr int KA = FmtTraits<F>::KA;
  constexpr int ATOMS = 64 / KA;
  constexpr int A_BYTES = C::BM * 128;
  constexpr int B_BYTES = (C::BN / 16) * ATOMS * 512;
  pdl_wait();  // launch_kernel: may start while the previous kernel finishes
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + C::STAGES * A_BYTES;
  int* s_rows = reinterpret_cast<int*>(smem + C::STAGES * (A_BYTES + B_BYTES));
  int* s_arow = s_rows + C::BM;  // A row of each tile row (sorted id / a_row_div), -1 = padding

  const int mb = blockIdx.x, nb = blockIdx.y, split = blockIdx.z;
  if (mb * C::BM >= *p.num_post) return;
  const int e = p.expert_ids[mb];
  if (e < 0) return;  // expert on another rank: its slots stay zero (pre-cleared)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;

  for (int r = tid; r < C::BM; r += C::kThreads) {
    const int sid = p.sorted_ids[mb * C::BM + r];
    s_rows[r] = sid;
    s_arow[r] = sid < p.numel ? sid / p.a_row_div : -1;
  }
  __syncthreads();

  const int ktiles = p.kp / 64;
  const int kt0 = split * p.ktiles_per_split;
  const int kt1 = min(ktiles, kt0 + p.ktiles_per_split);
  if (kt0 >= kt1) return;
  const int ntiles16 = p.np / 16;
  const uint8_t* wexp = p.w + static_cast<size_t>(e) * ntiles16 * (p.kp / KA) * 512;
  const char* abase = static_cast<const char*>(p.a);

  auto load_stage = [&](int stage, int kt) {
    uint8_t* dA = sA + stage * A_BYTES;
    for (int idx = tid; idx < C::BM * 8; idx += C::kThreads) {
      int r = idx >> 3, c = idx & 7;
      const int arow = s_arow[r];
      const int kcol = kt * 64 + c * 8;
      const bool ok = arow >= 0 && kcol < p.k;
      const char* src = ok ? abase + (static_cast<size_t>(arow) * p.lda + kcol) * 2 : abase;
      cp_async16(dA + r * 128 + ((c ^ (r & 7)) << 4), src, ok ? 16 : 0);
    }
    uint8_t* dB = sB + stage * B_BYTES;
    for (int idx = tid; idx < B_BYTES / 16; idx += C::kThreads) {
      int t = idx / (ATOMS * 32), rem = idx % (ATOMS * 32);
      int gt = nb * (C::BN / 16) + t;
      bool ok = gt < ntiles16;
      const uint8_t* src =
          ok ? wexp + ((static_cast<size_t>(gt) * (p.kp / KA) + kt * ATOMS) * 512 + rem * 16) : p.w;
      cp_async16(dB + idx * 16, src, ok ? 16 : 0);
    }
  };

  float acc[C::MI][C::NT][2][4];
  float out[MODE == 1 ? C::MI : 1][MODE == 1 ? C::NT : 1][2][4];
  zero_acc<C>(acc);
  if constexpr (MODE == 1) zero_acc<C>(out);

  // prepared column of B-fragment n (lane >> 2) and of accumulator columns (2 * (lane & 3) + e2)
  const int ncol0 = nb * C::BN + warp_n * C::WN;
  // zero points of the current chunk for this lane's B-fragment rows (mode 1 int)
  uint32_t zmagic[C::NT][2];
  float zf[C::NT][2];
  const float zsym = F == WFmt::kU4 ? 8.f : 128.f;
  auto load_zero = [&](int k0) {
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float z = zsym;
        if (p.zero != nullptr) {
          int n = ncol0 + nt * 16 + j * 8 + (lane >> 2);
          int r = orig_row(p, n);
          int g = p.kchunk > 0 ? min(k0 / p.kchunk, p.kg - 1) : 0;  // k0 may lie in the K padding
          if (n < p.np && r < p.n) z = p.zero[(static_cast<size_t>(e) * p.kg + g) * p.n + r];
        }
        zf[nt][j] = z;
        zmagic[nt][j] = Op::pack(Op::kInt4Base + z, Op::kInt4Base + z);
      }
  };
  int chunk_k0 = kt0 * 64;
  if constexpr (MODE == 1 && (F == WFmt::kU4 || F == WFmt::kU8)) load_zero(chunk_k0);

  // Column (weight) and row (activation) scales of the current chunk, loaded when the chunk starts
  // so their latency hides behind the chunk's MMAs; used by flush() at its end.
  float cs[C::NT][2][2];
  float rsc[C::MI][2];
  auto load_scales = [&](int k0) {
    if constexpr (MODE == 1 || MODE == 3) {
      const int g = p.kchunk > 0 ? min(k0 / p.kchunk, p.kg - 1) : 0;
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) {
            const int n = ncol0 + nt * 16 + j * 8 + 2 * (lane & 3) + e2;
            const int r = orig_row(p, n);
            cs[nt][j][e2] = (n < p.np && r < p.n)
                                ? __ldg(p.col_scale + (static_cast<size_t>(e) * p.kg + g) * p.nsc + (p.n_div == 1 ? r : r / p.n_div))
                                : 0.f;
          }
      const float stat = p.in_scale != nullptr ? p.in_scale[e] : 1.f;
      const int rg = p.rs_kchunk > 0 ? min(k0 / p.rs_kchunk, p.rs_groups - 1) : 0;
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float rs = stat;
          if (p.row_scale != nullptr) {
            const int arow = s_arow[warp_m * C::WM + mi * 16 + (lane >> 2) + h * 8];
            rs = arow >= 0 ? __ldg(p.row_scale + static_cast<size_t>(arow) * p.rs_groups + rg) : 0.f;
          }
          rsc[mi][h] = rs;
        }
    }
  };
  auto flush = [&](int k0) {
    // out += acc * row_scale * col_scale for the chunk that starts at k0; acc = 0. A chunk that
    // starts in the K padding has only zero products (and no scale entry): it adds nothing.
    // (MODE 1 only: the other modes never call it, and their `out` is a placeholder)
    if constexpr (MODE == 1) {
      const bool live = k0 < p.k;
      for_each_acc<C>([&](int mi, int h, int nt, int j, int e2) {
        if (live) out[mi][nt][j][h * 2 + e2] += acc[mi][nt][j][h * 2 + e2] * (rsc[mi][h] * cs[nt][j][e2]);
        acc[mi][nt][j][h * 2 + e2] = 0.f;
      });
    } else {
      (void)k0;
    }
  };
  // next k at which the current chunk ends
  int chunk_end = (chunk_k0 / p.chunk + 1) * p.chunk;
  load_scales(chunk_k0);

  pipeline_start<C>(kt0, kt1, load_stage);
  for (int kt = kt0; kt < kt1; ++kt) {
    const int st = pipeline_next<C>(kt, kt0, kt1, load_stage);
    const uint8_t* cA = sA + st * A_BYTES;
    const uint8_t* cB = sB + st * B_BYTES;
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      uint32_t a[C::MI][4];
      load_a_frags<C>(a, cA, warp_m, lane, step);
      uint32_t b[C::NT][2][2];
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt) {
        int t = warp_n * C::NT + nt;
        int atom = (step * 16) / KA;
        uint4 v = *reinterpret_cast<const uint4*>(cB + ((t * ATOMS + atom) * 32 + lane) * 16);
        uint32_t wv[4] = {v.x, v.y, v.z, v.w};
        if constexpr (F == WFmt::k16) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            b[nt][j][0] = wv[j * 2];
            b[nt][j][1] = wv[j * 2 + 1];
          }
        } else if constexpr (MODE == 1 || MODE == 3) {
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int bi = 0; bi < 2; ++bi) {
              if constexpr (F == WFmt::kU4) {
                b[nt][j][bi] = dq_u4_pair<Op>(wv[step], j * 2 + bi, zmagic[nt][j]);
              } else if constexpr (F == WFmt::kU8) {
                b[nt][j][bi] = dq_u8_pair<Op>(wv[(step & 1) * 2 + j], bi * 2, zf[nt][j]);
              } else {
                b[nt][j][bi] = dq_fp8_weight_pair<Op>(wv[(step & 1) * 2 + j], bi * 2);
              }
            }
        } else {  // MODE 2: per-element (u - z[g]) * s[g], g = g_idx[k]
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            int n = ncol0 + nt * 16 + j * 8 + (lane >> 2);
            int r = orig_row(p, n);
            bool nok = n < p.np && r < p.n;
#pragma unroll
            for (int bi = 0; bi < 2; ++bi) {
              float f[2];
#pragma unroll
              for (int e2 = 0; e2 < 2; ++e2) {
                int k = kt * 64 + step * 16 + bi * 8 + 2 * (lane & 3) + e2;
                uint32_t u;
                if constexpr (F == WFmt::kU4) {
                  int nib = (j * 2 + bi) + (e2 ? 4 : 0);
                  u = (wv[step] >> (4 * nib)) & 0xFu;
                } else {
                  u = (wv[(step & 1) * 2 + j] >> (8 * (bi * 2 + e2))) & 0xFFu;
                }
                float val = 0.f;
                if (nok && k < p.k) {
                  int g = p.g_idx[static_cast<size_t>(e) * p.k + k];
                  size_t gi = static_cast<size_t>(e) * p.kg + g;
                  float z = p.zero != nullptr ? p.zero[gi * p.n + r] : zsym;
                  val = (static_cast<float>(u) - z) * p.col_scale[gi * p.nsc + r / p.n_div];
                }
                f[e2] = val;
              }
              b[nt][j][bi] = Op::pack(f[0], f[1]);
            }
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) mma16816<Op>(acc[mi][nt][j], a[mi], b[nt][j][0], b[nt][j][1]);
      if constexpr (MODE == 1) {
        int kend = kt * 64 + (step + 1) * 16;
        const bool last = kt == kt1 - 1 && step == 3;
        if (last || kend == chunk_end) {
          flush(chunk_k0);
          chunk_k0 = kend;
          chunk_end = kend + p.chunk;
          if (!last) {
            load_scales(chunk_k0);
            if constexpr (F == WFmt::kU4 || F == WFmt::kU8) load_zero(chunk_k0);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (MODE == 3) {
    // one scale pair for the whole K (fp8 tensor / channel weights, token / tensor activations):
    // the exact fp32 sum is scaled once, as numerics.md's product order says
    for_each_acc<C>([&](int mi, int h, int nt, int j, int e2) { acc[mi][nt][j][h * 2 + e2] *= rsc[mi][h] * cs[nt][j][e2]; });
  }

  // ---- epilogue ----
  auto val = [&](int mi, int nt, int j, int c) -> float {
    if constexpr (MODE == 1) return out[mi][nt][j][c];
    else return acc[mi][nt][j][c];
  };
  mma_tile_epilogue<Op, C>(p, val, s_rows, warp_m, lane, ncol0, ntiles16, e, split);
}

template <class Op0, class C, WFmt F, int MODE>
void launch_one(const GemmParams& p, cudaStream_t s) {
  using Op = OperandOf<Op0, F>;  // fp8 W8A8 of a bf16 model: fp16 operands
  constexpr int smem = smem_bytes<C, F>();
  auto kern = moe_gemm_kernel<Op, C, F, MODE>;
  static bool attr_set = false;  // per instantiation; benign if two threads race (same value)
  if (!attr_set) {
    QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attr_set = true;
  }
  dim3 grid(p.max_blocks, (p.np + C::BN - 1) / C::BN, p.splits);
  launch_kernel(kern, grid, dim3(C::kThreads), smem, s, p);
}

template <class Op, class C>
void launch_fmt(WFmt fmt, int mode, const GemmParams& p, cudaStream_t s) {
  switch (fmt) {
    case WFmt::k16: return launch_one<Op, C, WFmt::k16, 0>(p, s);
    case WFmt::kFP8:
      return mode == 3 ? launch_one<Op, C, WFmt::kFP8, 3>(p, s) : launch_one<Op, C, WFmt::kFP8, 1>(p, s);
    case WFmt::kU4:
      return mode == 2 ? launch_one<Op, C, WFmt::kU4, 2>(p, s) : launch_one<Op, C, WFmt::kU4, 1>(p, s);
    case WFmt::kU8:
      return mode == 2 ? launch_one<Op, C, WFmt::kU8, 2>(p, s) : launch_one<Op, C, WFmt::kU8, 1>(p, s);
  }
}

template <class Op>
void launch_tile(WFmt fmt, int mode, Tile tile, const GemmParams& p, cudaStream_t s) {
  switch (tile) {
    case Tile::kSmall:
      if (fmt == WFmt::kU4) return mode == 2 ? launch_one<Op, Small4Cfg, WFmt::kU4, 2>(p, s)
                                             : launch_one<Op, Small4Cfg, WFmt::kU4, 1>(p, s);
      if (fmt == WFmt::kU8) return mode == 2 ? launch_one<Op, Small8Cfg, WFmt::kU8, 2>(p, s)
                                             : launch_one<Op, Small8Cfg, WFmt::kU8, 1>(p, s);
      if (fmt == WFmt::kFP8) return mode == 3 ? launch_one<Op, Small8Cfg, WFmt::kFP8, 3>(p, s)
                                              : launch_one<Op, Small8Cfg, WFmt::kFP8, 1>(p, s);
      return launch_one<Op, SmallCfg, WFmt::k16, 0>(p, s);
    case Tile::kMedium: return launch_fmt<Op, MediumCfg>(fmt, mode, p, s);
    case Tile::kLarge:
      if (fmt == WFmt::k16) return launch_one<Op, WideCfg, WFmt::k16, 0>(p, s);
      return launch_fmt<Op, LargeCfg>(fmt, mode, p, s);
  }
}

}  // namespace

int tile_bn_for(Tile tile, WFmt fmt) {
  switch (tile) {
    case Tile::kSmall: return fmt == WFmt::kU4 ? Small4Cfg::BN : fmt == WFmt::k16 ? SmallCfg::BN : Small8Cfg::BN;
    case Tile::kMedium: return MediumCfg::BN;
    case Tile::kLarge: return fmt == WFmt::k16 ? WideCfg::BN : LargeCfg::BN;
  }
  return 64;
}

void launch_moe_gemm(bool f16, WFmt fmt, int mode, Tile tile, const GemmParams& p, cudaStream_t s) {
  if (fmt == WFmt::kNV4 || fmt == WFmt::kMX4) return launch_moe_gemm_fp4(f16, fmt, tile, p, s);  // backend II
  if (f16) launch_tile<F16>(fmt, mode, tile, p, s);
  else if (fmt == WFmt::kFP8 && p.a16) launch_tile<BF16A16>(fmt, mode, tile, p, s);
  else launch_tile<BF16>(fmt, mode, tile, p, s);
}

}  // namespace qmoe::cuda
