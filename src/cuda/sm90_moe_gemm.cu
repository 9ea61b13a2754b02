// Hopper (sm_90a) grouped GEMMs of the fused MoE for the large-M regime (sm90_moe.cuh).
//
// One CTA computes a 128 x BN tile of one expert: 3 warpgroups, warp-specialized.
//   warpgroup 0 (producer, 40 registers): one thread issues the TMA loads of A (rows of the
//     M-block, already in sorted order; a 2-D tensor map, 128B swizzle) and the 1-D bulk copies of
//     B (boxes of the expert's plain weights, stored pre-swizzled: sm90_moe.cuh) into a
//     STAGES-deep ring of 128-byte-swizzled stages, completing on mbarriers;
//   warpgroups 1, 2 (consumers, 232 registers): each multiplies 64 of the 128 rows with wgmma
//     (both operands from shared memory through 128B-swizzle descriptors) and runs the epilogue.
// 16-bit: BK = 64, BN = 256, m64n256k16 (HGMMA), fp32 accumulators, 4 stages.
// fp8: BK = 128, BN = 128, m64n128k32 e4m3 x e4m3 (QGMMA). The tensor core sums the four k32 steps
//   of one 128-wide k-block in its own accumulator format; that partial is added into fp32
//   registers once per k-block ("promotion", as DeepSeek-V3 and CUTLASS do), scaled there by the
//   block's activation x weight scales when they change along K (1x128 / 128x128 scales), else
//   the fp32 sum is scaled once at the end (numerics.md's product order).
// Tiles are visited in groups of 8 M-blocks (all N tiles of a group before the next), so a wave
// of CTAs shares each A tile and each weight tile through L2.
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <vector>

#include "cuda/cuda_moe.h"
#include "cuda/device_common.cuh"
#include "cuda/env_switch.h"
#include "cuda/fp4_ops.cuh"
#include "cuda/sm90_moe.cuh"
#include "cuda/sm90_sync.cuh"

namespace qmoe::cuda {
namespace {

using namespace dev;


#if QMOE_SM90A
#include "cuda/sm90_wgmma.inc"
#endif

constexpr int kBM = 128;
constexpr int kGroupM = 8;

// BM = 128: each consumer warpgroup multiplies 64 of the rows by all BN columns; BM = 64 (few rows
// per expert, where 128-row M-blocks were half padding): both warpgroups multiply the 64 rows, each
// by half of the BN columns (m64n128 HGMMA / m64n64 QGMMA), so a weight tile still streams once.
#ifndef QMOE_SM90_I8_BN
#define QMOE_SM90_I8_BN 256  // INT8 W8A8's tile width (128: the earlier form, for A/B builds)
#endif
template <bool FP8, int BM = kBM, bool I8 = false, bool W8 = false>
struct Sm90Cfg {
  // fp8 keeps 64 k-block partials beside the 64 accumulators, so its tile was n128 (n256 as two
  // sequential n128 halves measured 20-27% slower at M = 4096 on the H200 in an early form; W8
  // below, the same idea on 4 one-box stages, measured 1.12-1.18x faster, twenty-sixth session;
  // the n128 tile stays for scales that change along K). An fp8 stage holds
  // two 128-k blocks (KH = 2 boxes per operand), so one wait covers 8 QGMMAs (ncu at one block per
  // stage: 33% SM throughput, latency-bound).
  // INT8 (I8) sums exactly in int32 accumulators over all of K, with no partials to promote, so it
  // takes the 16-bit tile: 128 x 256, one 128-byte k box per stage, 4 stages. Per MAC a BM x BN
  // tile reads (BM + BN) / (BM * BN) operand elements: 1/64 byte for a 128 x 128 byte tile, 3/256
  // for 128 x 256. At the byte MMA rate (twice 16-bit's) the 128 x 128 tile needs 4/3 of the 16-bit
  // tile's L2 bandwidth (fp8, mixtral-8x7b M = 4096 GEMM1: 7.1 TB/s from L2 at 56% tensor activity);
  // n256 needs 3/4 of it. (But L2 is not the fp8 tile's limit: CTA pairs sharing A cut its L2 bytes
  // by 20% at the same activity, and 6 one-box stages instead of 3 two-box ones measured the same,
  // twenty-fourth session.)
  // W8 (fp8 with one scale pair for all of K): the n256 tile too (Sm90Gemm::fp8_wide: 128 x 128
  // moved 4/3 of the operand bytes per MAC through L2 and into shared memory, where the consumers'
  // QGMMA reads compete with the fills). 128-row M-blocks: each consumer warpgroup multiplies its
  // n256 as two n128 halves into one set of 64 partials; 64-row M-blocks: each its n128 half.
  static_assert(!W8 || (FP8 && !I8), "W8: fp8");
  static constexpr bool kWide = !FP8 || (I8 && QMOE_SM90_I8_BN == 256) || W8;
  static constexpr int BN = kWide ? 256 : 128;
  // (one box per stage with 6 stages, the same 192 KiB: 0.98x, twenty-fourth session r4)
  static constexpr int KH = kWide ? 1 : 2;           // 128-byte k boxes per stage
  static constexpr int BK = KH * (FP8 ? 128 : 64);   // elements per stage
  static constexpr int STAGES = kWide ? 4 : 3;
  static constexpr int A_ST = KH * BM * 128;         // bytes per stage
  static constexpr int B_ST = KH * BN * 128;
  static constexpr int WN = BM == kBM ? BN : BN / 2;  // columns of one consumer warpgroup
  static constexpr int NACC = WN / 2;                 // fp32 accumulators per thread (64 rows x WN / 128 threads)
  // + barriers, the tile's column / row scales (fp8, INT8) and bias, the tile of each stage
  // (persistent kernel), the producers' next tile (two), the M-block's token rows (Sm90Gemm::a_src),
  // the CTA pairs' mailbox (two slots) and its barriers (four), alignment
  static constexpr int SMEM =
      STAGES * (A_ST + B_ST) + 2 * STAGES * 8 + (2 * BN + BM) * 4 + (STAGES + 4 + BM) * 4 + 8 + 4 * 8 + 1024;
};

// ---- PTX helpers (sm_90) -------------------------------------------------------------------------
// Pointer arithmetic on the shared array itself: a round trip through an integer loses the address
// space, and every access through the result then compiled to generic LD / ST with their address
// conversion (H200 ncu, seventeenth session: the wq kernel's per-stage atom loads were LD.E.128).
__device__ __forceinline__ uint8_t* align_1024(uint8_t* p) {
  return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// tma_load_2d with an L2 cache policy (l2_evict_last_policy).
__device__ __forceinline__ void tma_load_2d_hint(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                 uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, %4}], "
      "[%2], %5;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "l"(pol)
      : "memory");
}
// tma_load_2d into the same shared-memory offset of every CTA in `mask` of the cluster, completing
// on the barrier at the same offset in each.
__device__ __forceinline__ void tma_load_2d_mc(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                               uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
      "%4}], [%2], %5;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
// K-major operand tile with 128-byte rows, 128B swizzle (what TMA's SWIZZLE_128B writes): 8-row
// core groups 1024 bytes apart. The start address moves by 32 bytes per k16 (bf16) / k32 (fp8) step.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

#if QMOE_SM90A
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

#ifdef QMOE_SM90_TRACE
// Diagnostic build only (scripts/build_variant.sh ... "-DQMOE_SM90_TRACE"): per CTA of the first
// GEMM launches, %globaltimer (ns) at entry, when the first stage's data is there, after the last
// stage's MMAs and after the epilogue, plus the SM; written by the first consumer thread.
constexpr int kTraceMax = 1 << 17;
__device__ unsigned long long g_sm90_trace[kTraceMax * 6];
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
#define QMOE_TRACE(i)                                                                               \
  do {                                                                                              \
    if (threadIdx.x == 128 && blockIdx.x < kTraceMax) g_sm90_trace[blockIdx.x * 6 + (i)] = gtimer(); \
  } while (0)
#else
#define QMOE_TRACE(i) \
  do {                \
  } while (0)
#endif

// Tile L of the grouped raster (kGroupM M-blocks of `rows` token rows x all ntn N tiles, M fastest:
// a wave of CTAs shares each A and weight tile through L2): its M-block, N tile and expert; false
// where it has none (past the used M-blocks, or an expert of another rank).
__device__ __forceinline__ bool raster_tile(const Sm90Gemm& p, int L, int ntn, int rows, int used_rows, int& mb,
                                            int& nb, int& e) {
  const int group = L / (kGroupM * ntn), rem = L % (kGroupM * ntn);
  nb = rem / kGroupM;
  mb = group * kGroupM + rem % kGroupM;
  if (mb >= p.max_blocks || mb * rows >= used_rows) return false;
  e = p.expert_ids[mb];
  return e >= 0;
}

// MC (Sm90Gemm::cluster2, 128-row M-blocks, A by TMA): clusters of two CTAs on N tiles 2 j and
// 2 j + 1 of one M-block; each CTA's producer loads half of the A box's rows (64) and multicasts them
// into both CTAs' stages, so A crosses from L2 once per pair (H200, twenty-fourth session: 16-bit
// 1.01x geomean, up to 1.05x; fp8 neutral: its L2 bytes fell 20% at the same tensor activity, so L2
// is not what limits the fp8 tile; select_pairs in config.h). A stage is
// refilled only when the consumers of both CTAs released it (their warps arrive on both CTAs' empty
// barriers). Rank 0 takes the pairs from the tile counter and mails each to rank 1 (a two-slot
// mailbox in rank 1's shared memory with full / empty barriers across the pair); every thread
// of both CTAs meets at a cluster barrier before it exits (no remote write or arrival can then
// reach a CTA that has gone). With an odd number of N tiles the last pair's second tile is past the
// weights: its CTA loads no B (its stages expect A's bytes alone) and multiplies what the stage
// holds, but stores nothing (columns past n), while its A half still feeds the first CTA.
// I8: byte operands as signed int8 (IGMMA); W8: fp8 on n256 tiles (Sm90Cfg)
template <class Op, bool FP8, bool I8 = false, int BM = kBM, bool MC = false, bool W8 = false>
__global__ void __launch_bounds__(384, 1)
    sm90_moe_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const Sm90Gemm p) {
#if QMOE_SM90A
  using C = Sm90Cfg<FP8, BM, I8, W8>;
  constexpr int BN = C::BN, BK = C::BK, STAGES = C::STAGES, NACC = C::NACC, WN = C::WN;
  static_assert(BM == kBM || BM == 64, "M-blocks of 128 or 64 rows");
  static_assert(!MC || (!I8 && BM == kBM), "CTA pairs: the 16-bit / fp8 128-row tiles");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);  // 128B-swizzled stages start on 1024-byte boundaries
  uint8_t* sA = smem;
  uint8_t* sB = smem + STAGES * C::A_ST;
  uint64_t* full = reinterpret_cast<uint64_t*>(sB + STAGES * C::B_ST);
  uint64_t* empty = full + STAGES;
  int* s_tile = reinterpret_cast<int*>(reinterpret_cast<float*>(empty + STAGES) + 2 * BN + BM);  // [STAGES]
  int* s_next = s_tile + STAGES;  // [2] the producer warpgroup's next tile (A rows from x)
  int* s_tok = s_next + 2;         // [BM] the M-block's token rows (A rows from x; -1: padding)
  int* s_mail = s_tok + BM;        // [2] CTA pairs: rank 1's mailbox
  uint64_t* mail_full = reinterpret_cast<uint64_t*>(
      reinterpret_cast<uintptr_t>(s_mail + 2) + 7 & ~static_cast<uintptr_t>(7));  // [2]
  uint64_t* mail_empty = mail_full + 2;                                          // [2]

#ifdef QMOE_SM90_TRACE
  const unsigned long long t_entry = gtimer();
  if (threadIdx.x == 128 && blockIdx.x < kTraceMax) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    g_sm90_trace[blockIdx.x * 6 + 0] = t_entry;
    for (int i = 1; i < 5; ++i) g_sm90_trace[blockIdx.x * 6 + i] = 0;
    g_sm90_trace[blockIdx.x * 6 + 5] = smid;
  }
#endif
  // Persistent (Sm90Gemm::tile_counter non-null; else one tile per CTA): CTA b takes tile L = b of
  // the grouped raster (kGroupM M-blocks x all N tiles, M fastest: a wave of CTAs shares each A and
  // weight tile through L2), then gridDim.x + atomicAdd(tile_counter, 1) until past the tiles: the
  // tiles go out in raster order as CTAs free up, as the block scheduler hands out one-tile CTAs
  // (striding by gridDim.x instead was 0.97x: CTAs drifted apart, the tiles' costs differ). The
  // producer writes each tile's index beside its first stage (s_tile, -1: no more) and the ring
  // position `it` runs on across tiles, so the next tile's first stages load while the consumers
  // run an epilogue (one CTA per SM: one tile per CTA left each SM idle for the fill and the
  // epilogue, a third of the tile on K = 768).
  // (MC: the raster's N tiles are pairs of N tiles, L a pair, the CTA's rank its tile of the pair)
  const int ntn_w = (p.np + BN - 1) / BN;  // the weights' N tiles
  const int ntn = MC ? (ntn_w + 1) / 2 : ntn_w;
  const int ntiles = (p.max_blocks + kGroupM - 1) / kGroupM * kGroupM * ntn;  // raster_tiles(p.max_blocks, ntn)
  const int used_rows = *p.num_post;
  const uint32_t rank = MC ? cluster_ctarank() : 0;
  // (an expert of another rank: its slots stay zero, pre-cleared)
  auto tile_at = [&](int L, int& mb, int& nb, int& e) {
    const bool ok = raster_tile(p, L, ntn, BM, used_rows, mb, nb, e);
    if constexpr (MC) nb = 2 * nb + static_cast<int>(rank);
    return ok;
  };

  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
  // A rows straight from the token rows (16-bit only, not CTA pairs): the producer warpgroup's 128
  // threads copy them and arrive on the stage's full barrier when their copies land (+ 128 arrivals)
  const bool direct = !FP8 && !MC && p.a_src != nullptr;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], direct ? 1 + 128 : 1);
      mbar_init(&empty[s], MC ? 16 : 8);  // one arrival per consumer warp (both warpgroups, tail tiles too; MC: of both CTAs)
    }
    if constexpr (MC) {
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        mbar_init(&mail_full[b], 1);
        mbar_init(&mail_empty[b], 1);
      }
    }
    mbar_init_fence();
  }
  if constexpr (MC) cluster_sync();  // both CTAs' barriers initialized before any remote arrival or multicast
  else __syncthreads();
  const int nk = (p.k + BK - 1) / BK;
  const int w_nt = sm90_plain_nt(p.np), w_kt = sm90_plain_kt(p.kp, FP8 ? 8 : 16);
  // n256 tiles whose weight rows end in the first half (Sm90Gemm::trim_box; the last N tile of
  // gpt-oss-120b's N = 2880 / 5760): only the box's first 128 rows are loaded; 128-row M-blocks
  // multiply them as n128 (fp8: one QGMMA half), and on 64-row M-blocks fp8's second warpgroup skips
  // its half while 16-bit / INT8 ones multiply stale shared memory there (columns past N, never stored)
  auto half_box = [&](int nb) { return C::kWide && p.trim_box && p.np - nb * BN <= 128; };
  auto b_rows = [&](int nb) { return half_box(nb) ? 128 : BN; };
  auto load_b = [&](int s, int kt, int nb, int e) {  // the plain copy is stored swizzled: one 1-D bulk copy per box
    bulk_load(sB + s * C::B_ST + (kt % C::KH) * BN * 128,
              static_cast<const uint8_t*>(p.w) +
                  (static_cast<int64_t>((e * w_nt + nb * BN / 256) * w_kt + kt) * 256 + nb * BN % 256) * 128,
              b_rows(nb) * 128, &full[s]);
  };

  // the next tile (MC: pair) after the first: rank 0 stores pair m into slot m & 1 of rank 1's
  // mailbox with st.async, completing 4 bytes on rank 1's mail_full[m & 1] (which rank 1
  // expects); the slot is rewritten once rank 1 has read pair m - 2 (its arrival on rank 0's
  // mail_empty; none after the last pair)
  int m = 0;
  auto next_tile = [&]() -> int {
    if constexpr (!MC) {
      return p.tile_counter != nullptr ? static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1) : ntiles;
    } else {
      const int b = m & 1;
      int v;
      if (rank == 0) {
        v = p.tile_counter != nullptr ? static_cast<int>(gridDim.x / 2) + atomicAdd(p.tile_counter, 1) : ntiles;
        if (m >= 2) mbar_wait(&mail_empty[b], ((m >> 1) - 1) & 1);
        st_async_u32(cluster_addr(&s_mail[b], 1), static_cast<uint32_t>(v), cluster_addr(&mail_full[b], 1));
      } else {
        mbar_expect_tx(&mail_full[b], 4);
        mbar_wait(&mail_full[b], (m >> 1) & 1);
        v = s_mail[b];
        if (v < ntiles) mbar_arrive_remote(cluster_addr(&mail_empty[b], 0));
      }
      ++m;
      return v;
    }
  };
  const int first_tile = MC ? static_cast<int>(blockIdx.x / 2) : static_cast<int>(blockIdx.x);

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (direct) {
      // A row's 128-byte k box is 8 x 16 bytes, chunk c going to position c ^ (row & 7)
      // (SWIZZLE_128B: the stage is 1024-byte aligned), zeros past k and for padding positions (what
      // TMA's bounds gave the gathered rows). 8 threads per row: a warp's copy is 4 whole rows (a
      // thread per row, half a sector per copy, measured 0.98-1.00x of this up to 64 rows per
      // expert; a TMA box per row, 0.36-1.00x of the gather, twenty-fourth session); the M-block's
      // token rows are staged in shared memory per tile. Thread 0 also publishes the tile, expects
      // the weight box's bytes and issues its bulk copy; the next tile index goes to the warpgroup
      // through shared memory (two slots: a slot is rewritten two tiles later, after a barrier
      // every thread has passed).
      const char* xs = static_cast<const char*>(p.a_src);
      const int64_t pitch = static_cast<int64_t>(p.a_src_pitch) * 2;
      int it = 0, par = 0;
      for (int L = first_tile;;) {
        if (L >= ntiles) {  // no more tiles: -1 beside the next stage, its full barrier completed without data
          const int s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          if (tid == 0) {
            s_tile[s] = -1;
            mbar_arrive(&full[s]);
          }
          mbar_arrive(&full[s]);  // in place of the copies' arrivals
          break;
        }
        int mb, nb, e;
        if (tile_at(L, mb, nb, e)) {
          if (tid < BM) {
            const int sid = p.sorted_ids[mb * BM + tid];
            s_tok[tid] = sid < p.numel ? sid / p.a_row_div : -1;
          }
          named_bar_sync(3, 128);  // s_tok complete (its last reads came before the previous tile's index barrier)
          for (int kb = 0; kb < nk; ++kb, ++it) {
            const int s = it % STAGES;
            mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
            if (tid == 0) {
              if (kb == 0) s_tile[s] = L;  // published by the barrier's completion (release; the wait acquires)
              mbar_expect_tx(&full[s], b_rows(nb) * 128);  // KH = 1 (16-bit)
              load_b(s, kb, nb, e);
            }
            const int c = tid & 7, col = kb * 64 + c * 8;
#pragma unroll
            for (int i = 0; i < BM / 16; ++i) {
              const int r = i * 16 + (tid >> 3), tok = s_tok[r];
              const bool in = tok >= 0 && col < p.k;
              cp_async16(sA + s * C::A_ST + r * 128 + ((c ^ (r & 7)) << 4),
                         in ? xs + static_cast<int64_t>(tok) * pitch + col * 2 : xs, in ? 16 : 0);
            }
            cp_async_arrive_noinc(&full[s]);
          }
        }
        if (tid == 0) s_next[par] = next_tile();
        named_bar_sync(3, 128);
        L = s_next[par];
        par ^= 1;
      }
      return;
    }
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tma_a)) : "memory");
      int it = 0;
      for (int L = first_tile;; L = next_tile()) {
        int mb, nb, e;
        if (L >= ntiles) {  // no more tiles: -1 beside the next stage, its full barrier completed without data
          const int s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          s_tile[s] = -1;
          mbar_arrive(&full[s]);
          break;
        }
        if (!tile_at(L, mb, nb, e)) continue;
        for (int kb = 0; kb < nk; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          if (kb == 0) s_tile[s] = L;  // published by the barrier's arrival (release; the wait acquires)
          const bool has_b = !MC || nb < ntn_w;
          mbar_expect_tx(&full[s], has_b ? C::A_ST + C::KH * b_rows(nb) * 128 : C::A_ST);
#pragma unroll
          for (int h = 0; h < C::KH; ++h) {
            const int kt = kb * C::KH + h;  // 128-byte k tile
            if constexpr (MC)  // this CTA's half of the rows, into both CTAs (the map's box: BM / 2 rows)
              tma_load_2d_mc(sA + s * C::A_ST + h * BM * 128 + rank * (BM / 2) * 128, &tma_a, &full[s],
                             kt * (BK / C::KH), mb * BM + static_cast<int>(rank) * (BM / 2), 0x3);
            else
              tma_load_2d(sA + s * C::A_ST + h * BM * 128, &tma_a, &full[s], kt * (BK / C::KH), mb * BM);
            // (a 2-D TMA box of the weights' bytes streamed 4-7% slower than the bulk copy:
            // gpu_ceiling ring2 on the H200)
            if (has_b) load_b(s, kt, nb, e);
          }
        }
      }
    }
    if constexpr (MC) cluster_sync();
    return;
  }

  setmaxnreg_inc<232>();
  const int cw = wg - 1;  // BM 128: rows cw * 64 .. + 63 of the tile; BM 64: columns cw * WN .. + WN - 1
  const int warp = tid >> 5, lane = tid & 31;
  // a consumer warp is done with stage s (MC: in both CTAs, whose producers both write into it)
  auto release = [&](int s) {
    if (lane == 0) {
      mbar_arrive(&empty[s]);
      if constexpr (MC) mbar_arrive_remote(cluster_addr(&empty[s], rank ^ 1u));
    }
  };
  const int rw = BM == kBM ? cw * 64 : 0;   // the warpgroup's first row in the tile
  const int cn = BM == kBM ? 0 : cw * WN;   // ... and first column
  int it = 0;  // ring position of the tile's first stage
  for (;;) {
    mbar_wait(&full[it % STAGES], (it / STAGES) & 1);
    const int L = s_tile[it % STAGES];  // rewritten only after both warpgroups release the stage
    if (L < 0) break;
    int mb, nb, e;
    tile_at(L, mb, nb, e);  // a tile with an M-block and an expert (the producer skipped the others)
    // An expert's last 128-row M-block often holds few live rows (align puts an expert's padding
    // after its rows): with at most 64, rows 64..127 are all padding, so the first consumer
    // warpgroup multiplies alone (half the tensor work of the tile; its padding rows of h are never
    // written, and no output reads them: a padding position's GEMM2 row is its own, and the fp8
    // gather of h skips padding rows) while the second only releases the stages.
    const bool tail = BM == kBM && p.half_tail && p.sorted_ids[mb * BM + 64] >= p.numel;
    const int ncons = tail ? 128 : 256;  // consumer threads that multiply
    named_bar_sync(2, 256);  // both warpgroups are done with the previous tile's staged scales and biases
    if (wg == 2 && tail) {
      for (int kb = 0; kb < nk; ++kb) {
        const int s = (it + kb) % STAGES;
        mbar_wait(&full[s], ((it + kb) / STAGES) & 1);
        release(s);
      }
      it += nk;
      continue;
    }
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    // the tile's weight rows end in the first 128 (half_box): 128-row M-blocks multiply the n128
    // half of their n256 (fp8: one QGMMA half; on 64-row M-blocks fp8's second warpgroup skips its half)
    [[maybe_unused]] const bool hb = half_box(nb);

    // fp8 scales: rows r0, r0 + 8 of this thread; columns nb * BN + 8 j + 2 (lane & 3) + {0, 1}
    const int row_base = mb * BM + rw + warp * 16 + (lane >> 2);
    // GEMM2's output slots and router weights of this thread's two rows, loaded before the mainloop
    // (two dependent loads in the epilogue waited ~2 memory round trips per CTA)
    int o_sid[2] = {p.numel, p.numel};
    float o_w[2] = {1.f, 1.f};
    if (p.stage == 2) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o_sid[h] = p.sorted_ids[row_base + h * 8];
        if (o_sid[h] < p.numel && p.topk_w != nullptr) o_w[h] = p.topk_w[o_sid[h]];
      }
    }
    float rs[2] = {1.f, 1.f};
    auto load_rs = [&](int g) {
#pragma unroll
      for (int h = 0; h < 2; ++h) rs[h] = p.row_scale[static_cast<size_t>(row_base + h * 8) * p.rs_groups + g];
    };
    auto col_scale = [&](int n, int g) -> float {
      const int r = orig_row(p, n);
      if (n >= p.np || r >= p.n) return 0.f;
      return __ldg(p.col_scale + (static_cast<size_t>(e) * p.kg + g) * p.nsc + (p.n_div == 1 ? r : r / p.n_div));
    };
    // chunked fp8 (scales change along K): per k-block weight group / activation group
    const bool chunked = FP8 && (p.kchunk > 0 || p.rs_groups > 1);
    // One scale pair for all of K (fp8 unchunked, INT8): the tile's column and row scales are staged
    // in shared memory before the mainloop, so their loads and the column-order arithmetic overlap it
    // (loaded in the epilogue they were about a third of its stall samples; the epilogue was 36% of
    // the kernel's: ncu, mixtral-8x7b fp8 M = 4096 GEMM1).
    float* s_cs = reinterpret_cast<float*>(empty + STAGES);  // [BN]
    float* s_rs = s_cs + BN;                                   // [BM]
    float* s_bias = s_rs + BM;  // [BN]: stage 1 the tile's BN / 2 gate then up biases, stage 2 its columns'
    const bool staged = FP8 && !chunked;
    if (staged) {
      for (int t = threadIdx.x - 128; t < BN + BM; t += ncons) {
        if (t < BN) s_cs[t] = col_scale(nb * BN + t, 0);
        else
          s_rs[t - BN] = p.row_scale != nullptr ? p.row_scale[static_cast<size_t>(mb * BM + t - BN) * p.rs_groups] : 1.f;
      }
    }
    if (p.bias != nullptr) {
      for (int t = threadIdx.x - 128; t < BN; t += ncons) {
        const float* be = p.bias + static_cast<size_t>(e) * p.n;
        if (p.stage == 1) {
          const int c = t % (BN / 2), i = nb * (BN / 2) + c;
          s_bias[t] = i < p.half ? be[(t < BN / 2 ? 0 : p.half) + i] : 0.f;
        } else {
          const int n = nb * BN + t;
          s_bias[t] = n < p.n ? be[n] : 0.f;
        }
      }
    }
    // f(accumulator index, column scale, row scale) for every accumulator, with the scales of all of K
    auto each_scale = [&](auto&& f) {
      named_bar_sync(1, ncons);  // the consumer warpgroups' staged scales
      float r[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) r[h] = s_rs[rw + warp * 16 + (lane >> 2) + h * 8];
#pragma unroll
      for (int j = 0; j < NACC / 4; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const float cs = s_cs[cn + 8 * j + 2 * (lane & 3) + e2];
#pragma unroll
          for (int h = 0; h < 2; ++h) f(j * 4 + h * 2 + e2, cs, r[h]);
        }
    };
    // the wide tiles (16-bit, INT8 on 128 x 256): one 128-byte k box per stage, mma(da, db) per k
    // step; stage kb's wgmmas stay in flight while stage kb + 1 is awaited (kb - 1's are done)
    auto wide_kloop = [&](auto&& mma) {
      for (int kb = 0; kb < nk; ++kb) {
        const int s = (it + kb) % STAGES;
        mbar_wait(&full[s], ((it + kb) / STAGES) & 1);
        if (kb == 0) QMOE_TRACE(1);
        if (direct) fence_proxy_async_smem();  // A came by cp.async (the generic proxy); wgmma reads it
        const uint8_t* a_st = sA + s * C::A_ST + rw * 128;
        const uint8_t* b_st = sB + s * C::B_ST + cn * 128;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) mma(smem_desc(a_st + kk * 32), smem_desc(b_st + kk * 32));
        wgmma_commit();
        wgmma_wait1();
        if (kb > 0) release((it + kb - 1) % STAGES);
      }
      wgmma_wait0();
      release((it + nk - 1) % STAGES);
      QMOE_TRACE(2);
    };
    // byte operands (fp8 / int8): per stage wait for the data, issue its MMAs, wait for them,
    // release the stage, then after(kb) (fp8: promote the k-block partials)
    auto byte_kloop = [&](auto&& issue, auto&& after, auto&& before) {
      for (int kb = 0; kb < nk; ++kb) {
        const int s = (it + kb) % STAGES;
        before(kb);  // loads whose latency the wait and the MMAs hide
        mbar_wait(&full[s], ((it + kb) / STAGES) & 1);
        if (kb == 0) QMOE_TRACE(1);
        wgmma_fence();
        issue(sA + s * C::A_ST + rw * 128, sB + s * C::B_ST + cn * 128);
        wgmma_commit();
        wgmma_wait0();
        release(s);
        after(kb);
      }
      QMOE_TRACE(2);
    };

    if constexpr (I8) {
      // exact int32 sums of int8 x int8 over all of K (|sum| < 2^31 for K < 2^17), one scale pair
      int iacc[NACC];
#pragma unroll
      for (int i = 0; i < NACC; ++i) iacc[i] = 0;
      if constexpr (C::kWide) {
        if constexpr (WN == 256) {
          // (the n128 / n256 choice outside the k loop: chosen per wgmma, ptxas serialized them, C7520)
          if (hb) wide_kloop([&](uint64_t da, uint64_t db) { wgmma_n128_s8(*reinterpret_cast<int(*)[64]>(iacc), da, db, 1); });
          else wide_kloop([&](uint64_t da, uint64_t db) { wgmma_n256_s8(iacc, da, db, 1); });
        } else {
          // 64-row M-blocks: each warpgroup half of the columns
          wide_kloop([&](uint64_t da, uint64_t db) { wgmma_n128_s8(iacc, da, db, 1); });
        }
      } else {
        byte_kloop([&](const uint8_t* a_st, const uint8_t* b_st) {
#pragma unroll
          for (int h = 0; h < C::KH; ++h)
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
              wgmma_n128_s8(iacc, smem_desc(a_st + h * BM * 128 + kk * 32), smem_desc(b_st + h * BN * 128 + kk * 32), 1);
        }, [](int) {}, [](int) {});
      }
      each_scale([&](int i, float cs, float r) { acc[i] = (static_cast<float>(iacc[i]) * cs) * r; });
    } else if constexpr (W8) {
      // fp8 n256 (one scale pair for all of K: the host launches W8 only then). 128 x 256: per 128-k
      // stage, each consumer multiplies its 64 rows by the tile's two 128-column halves in turn,
      // four QGMMAs into the 64 partials, waited for, then promoted (added into the half's fp32
      // accumulators: acc[64 h + i] holds the n256 layout's column 128 h + that of tmp[i]); the
      // stage is released after the second half's QGMMAs are done. Sums in the order of the
      // 128 x 128 tile (k-block by k-block into fp32), so both tiles give the same bits.
      // 64-row M-blocks: one half per consumer warpgroup, its columns cn .. cn + 127 (acc = tmp's layout)
      constexpr int NH = WN / 128;
      float tmp[NACC / NH];
      for (int kb = 0; kb < nk; ++kb) {
        const int s = (it + kb) % STAGES;
        mbar_wait(&full[s], ((it + kb) / STAGES) & 1);
        if (kb == 0) QMOE_TRACE(1);
        const uint8_t* a_st = sA + s * C::A_ST + rw * 128;
#pragma unroll
        for (int h = 0; h < NH; ++h) {
          const bool run = !hb || cn + h * 128 < 128;  // half_box: the halves past the rows skipped
          const uint8_t* b_st = sB + s * C::B_ST + (cn + h * 128) * 128;
          if (run) {
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wgmma_n128_e4m3(tmp, smem_desc(a_st + kk * 32), smem_desc(b_st + kk * 32), kk);
            wgmma_commit();
            wgmma_wait0();
          }
          if (h == NH - 1) release(s);
          if (run)
#pragma unroll
            for (int i = 0; i < NACC / NH; ++i) acc[h * (NACC / NH) + i] += tmp[i];
        }
      }
      QMOE_TRACE(2);
      each_scale([&](int i, float cs, float r) { acc[i] *= r * cs; });  // one scale pair for all of K
    } else if constexpr (FP8) {
      float tmp0[NACC], tmp1[NACC];
      // Block weight scales (fp8 128 x 128 blocks and alike: n_div rows share a scale), where each
      // consumer's columns of one tile and k-block take at most two, one per 64-row gate / up half
      // (interleaved w13) or one (w2): those and the row scales of a stage's two k-blocks are loaded
      // before the stage is awaited. Per column, with the original-row arithmetic, after the QGMMAs
      // had finished, they made fp8-block layers 3-9x slower than fp8 per-channel ones (H200,
      // twentieth session, r4: deepseek-v3 M = 4096 47 ms against 5.4 ms; 7.9 ms by halves, r5).
      // Sm90Gemm::block_slots turns it on (the default; QMOE_CUDA_FP8_BLOCK_SLOTS=0: per column).
      const int slot_rows = p.interleaved ? WN / 2 : WN;
      const bool slots = p.block_slots && chunked && p.kchunk > 0 && p.n_div % slot_rows == 0 &&
                         (!p.interleaved || p.half % slot_rows == 0);
      const int r_slot0 = p.interleaved ? (nb * BN + cn) / 2 : nb * BN + cn;  // first gate (or w2) row
      float pre_rs[2][2], pre_ws[2][2];
      auto slot_scale = [&](int r, int gw) -> float {
        return r < p.n ? __ldg(p.col_scale + (static_cast<size_t>(e) * p.kg + gw) * p.nsc + r / p.n_div) : 0.f;
      };
      auto prefetch = [&](int kb) {
        if (!slots) return;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int k0 = kb * BK + b * 128;
          const int gw = min(k0 / p.kchunk, p.kg - 1);
          const int ga = p.rs_groups > 1 ? min(k0 / 128, p.rs_groups - 1) : 0;
#pragma unroll
          for (int h = 0; h < 2; ++h)
            pre_rs[b][h] = __ldg(p.row_scale + static_cast<size_t>(row_base + h * 8) * p.rs_groups + ga);
          pre_ws[b][0] = slot_scale(r_slot0, gw);
          pre_ws[b][1] = p.interleaved ? slot_scale(r_slot0 + p.half, gw) : pre_ws[b][0];
        }
      };
      auto promote = [&](const float (&t)[NACC], int k0, int b) {
        if (k0 >= p.k) return;  // a 128-k block wholly in the K padding: zero products
        if (slots) {
          // column 8 j + ... of the consumer's tile is a gate row for even j, an up row for odd j
          // (interleaved_row: nb * BN + cn is a multiple of 16)
#pragma unroll
          for (int j = 0; j < NACC / 4; ++j) {
            const float cs = pre_ws[b][j & 1];
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2)
#pragma unroll
              for (int h = 0; h < 2; ++h) acc[j * 4 + h * 2 + e2] += t[j * 4 + h * 2 + e2] * (pre_rs[b][h] * cs);
          }
        } else if (chunked) {
          const int gw = p.kchunk > 0 ? min(k0 / p.kchunk, p.kg - 1) : 0;
          const int ga = p.rs_groups > 1 ? min(k0 / 128, p.rs_groups - 1) : 0;
          load_rs(ga);
#pragma unroll
          for (int j = 0; j < NACC / 4; ++j)
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              const float cs = col_scale(nb * BN + cn + 8 * j + 2 * (lane & 3) + e2, gw);
#pragma unroll
              for (int h = 0; h < 2; ++h) acc[j * 4 + h * 2 + e2] += t[j * 4 + h * 2 + e2] * (rs[h] * cs);
            }
        } else {
#pragma unroll
          for (int i = 0; i < NACC; ++i) acc[i] += t[i];
        }
      };
      // QGMMA m64 x WN (n128, or n64 for 64-row M-blocks)
      auto qmma = [&](float (&t)[NACC], uint64_t da, uint64_t db, int sd) {
        if constexpr (WN == 128) wgmma_n128_e4m3(t, da, db, sd);
        else wgmma_n64_e4m3(t, da, db, sd);
      };
      byte_kloop([&](const uint8_t* a_st, const uint8_t* b_st) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) qmma(tmp0, smem_desc(a_st + kk * 32), smem_desc(b_st + kk * 32), kk);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          qmma(tmp1, smem_desc(a_st + BM * 128 + kk * 32), smem_desc(b_st + BN * 128 + kk * 32), kk);
      }, [&](int kb) {
        promote(tmp0, kb * BK, 0);
        promote(tmp1, kb * BK + 128, 1);
      }, prefetch);
      if (!chunked) each_scale([&](int i, float cs, float r) { acc[i] *= r * cs; });  // one scale pair for all of K
    } else {
      constexpr bool bf = std::is_same_v<Op, BF16>;
      if constexpr (WN == 256) {
        // half_box: the n256 layout's first 128 columns are the n128 layout's (the choice outside
        // the k loop: chosen per wgmma, ptxas serialized every wgmma of the kernel, C7520)
        float(&lo)[64] = *reinterpret_cast<float(*)[64]>(acc);
        if (hb)
          wide_kloop([&](uint64_t da, uint64_t db) { bf ? wgmma_n128_bf16(lo, da, db, 1) : wgmma_n128_f16(lo, da, db, 1); });
        else
          wide_kloop([&](uint64_t da, uint64_t db) { bf ? wgmma_n256_bf16(acc, da, db, 1) : wgmma_n256_f16(acc, da, db, 1); });
      } else {
        // 64-row M-blocks (half_box: warpgroup 1 multiplies stale columns past N, never stored;
        // skipping them serialized the kernel's wgmmas, as in the streaming kernel)
        wide_kloop([&](uint64_t da, uint64_t db) { bf ? wgmma_n128_bf16(acc, da, db, 1) : wgmma_n128_f16(acc, da, db, 1); });
      }
    }

    // ---- epilogue: thread holds rows row_base + {0, 8}, columns 8 j + 2 (lane & 3) + {0, 1}
    using T = typename Op::T;
    if (p.bias != nullptr && !staged) named_bar_sync(1, ncons);  // the staged biases (each_scale synced the others)
    // Sm90Gemm::wide_store: lane pairs (lane ^ 1, one row) swap halves of two adjacent column
    // groups, so each lane stores 4 consecutive columns (GEMM1: 8 bytes, GEMM2: 16) and a warp's
    // store covers twice the bytes of each row; the shuffles run on every lane, the stores are
    // predicated. Column counts are multiples of 8 (prepare), so a 4-column chunk is wholly in or out.
    const bool odd = lane & 1;
    if (p.stage == 1) {
      // prepared columns: n16 tile q holds 8 gate rows (j = 2q) then the 8 matching up rows (2q + 1).
      // Activation switch outside the loops (with_act): the per-element code is branch-free.
      with_act(p.act, [&](auto act) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          T* hrow = static_cast<T*>(p.out) + static_cast<size_t>(row_base + h * 8) * p.ldo;
          auto h_pair = [&](int q) {
            float hv[2];
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              float g = acc[(2 * q) * 4 + h * 2 + e2], u = acc[(2 * q + 1) * 4 + h * 2 + e2];
              if (p.bias != nullptr) {
                const int c = cn / 2 + q * 8 + 2 * (lane & 3) + e2;  // the tile's intermediate column i + e2
                g += s_bias[c];
                u += s_bias[BN / 2 + c];
              }
              hv[e2] = act(g, u);
            }
            return Op::pack(hv[0], hv[1]);
          };
          if (p.wide_store) {
#pragma unroll
            for (int q = 0; q < NACC / 8; q += 2) {
              const uint32_t a0 = h_pair(q), a1 = h_pair(q + 1);
              // even lanes keep tile q's pair and take the odd partner's; odd lanes tile q + 1's
              const uint32_t r = __shfl_xor_sync(0xffffffffu, odd ? a0 : a1, 1);
              const int tile = nb * (BN / 16) + cn / 16 + q + (odd ? 1 : 0);
              const int i = tile * 8 + 2 * ((lane & 3) & ~1);
              if (i < p.half) *reinterpret_cast<uint2*>(hrow + i) = odd ? make_uint2(r, a1) : make_uint2(a0, r);
            }
          } else {
#pragma unroll
            for (int q = 0; q < NACC / 8; ++q) {
              const int tile = nb * (BN / 16) + cn / 16 + q;
              const int i = tile * 8 + 2 * (lane & 3);
              if (i >= p.half) continue;
              *reinterpret_cast<uint32_t*>(hrow + i) = h_pair(q);
            }
          }
        }
      });
    } else if (p.wide_store) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int sid = o_sid[h];
        const bool live = sid < p.numel;
        const float w = o_w[h];
        float* orow = static_cast<float*>(p.out) + static_cast<size_t>(live ? sid : 0) * p.ldo;
#pragma unroll
        for (int j = 0; j < NACC / 4; j += 2) {
          float v[2][2];
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            const int c = cn + 8 * (j + jj) + 2 * (lane & 3);  // the tile's column
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              float x = acc[(j + jj) * 4 + h * 2 + e2];
              if (p.bias != nullptr) x += s_bias[c + e2];
              v[jj][e2] = x * w;
            }
          }
          // even lanes keep group j's pair and take the odd partner's; odd lanes group j + 1's
          const float r0 = __shfl_xor_sync(0xffffffffu, odd ? v[0][0] : v[1][0], 1);
          const float r1 = __shfl_xor_sync(0xffffffffu, odd ? v[0][1] : v[1][1], 1);
          const int n = nb * BN + cn + 8 * (j + (odd ? 1 : 0)) + 2 * ((lane & 3) & ~1);
          if (live && n < p.n)
            *reinterpret_cast<float4*>(orow + n) =
                odd ? make_float4(r0, r1, v[1][0], v[1][1]) : make_float4(v[0][0], v[0][1], r0, r1);
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int sid = o_sid[h];
        if (sid >= p.numel) continue;
        const float w = o_w[h];
        float* orow = static_cast<float*>(p.out) + static_cast<size_t>(sid) * p.ldo;
#pragma unroll
        for (int j = 0; j < NACC / 4; ++j) {
          const int n = nb * BN + cn + 8 * j + 2 * (lane & 3);
          if (n >= p.n) continue;
          float v0 = acc[j * 4 + h * 2], v1 = acc[j * 4 + h * 2 + 1];
          if (p.bias != nullptr) {
            v0 += s_bias[n - nb * BN];
            v1 += s_bias[n - nb * BN + 1];
          }
          *reinterpret_cast<float2*>(orow + n) = make_float2(v0 * w, v1 * w);
        }
      }
    }
    QMOE_TRACE(3);
    it += nk;
  }  // tiles
  if constexpr (MC) cluster_sync();
#endif
}

// ---- streaming kernel: memory-bound M on 16-bit / fp8 weights (the weights as wgmma's A) ------------
// D^T[n][pos] = W[n][:] . X[pos][:]: per item (an NT-row M-block, a 256-row box of the plain
// weights) wgmma m64 x NT with A = 64 weight rows and B = the M-block's NT token rows, both from
// shared memory (the same 128B-swizzled TMA boxes as the tile kernel). Persistent: one CTA per SM
// walks an equal, contiguous share of the (M-block, weight box) items, M-block-major; the producer
// streams 128-k stages (a 32 KiB weight box + NT token rows) item after item without a break, so
// the weights reach HBM's rate where the tile kernel paid each CTA's first-stage wait and
// epilogue on short K (~2 us of ~6-10, per-CTA timelines). Each of the two consumer warpgroups
// multiplies 128 of the box's 256 rows (two m64 slices); the tensor work is ~NT / rows-per-expert
// of the tile kernel's, and it waits on the bytes. fp8: the four k32 steps of a stage go to a
// partial that is added into fp32 once per 128 k (the tile kernel's promotion); one scale pair for
// all of K (per-channel / per-tensor weights, per-token / static activations). Epilogue in the
// accumulator layout: a thread holds weight rows g, g + 8 of each n16 tile (GEMM1: the gate and
// the up row of one intermediate column) for tokens 8 j + 2 t + {0, 1}.
template <int NT>
struct StreamCfg {
  static constexpr int W_ST = 256 * 128;  // one weight box: 256 rows x 128 bytes of k
  static constexpr int X_ST = NT * 128;   // the M-block's token rows x 128 bytes of k
  static constexpr int STAGES = NT == 64 ? 5 : 6;
  static constexpr int SMEM = STAGES * (W_ST + X_ST) + 2 * STAGES * 8 + 1024;
};

// I8 (INT8 W8A8, FP8 = true: byte operands): IGMMA m64 x NT x k32 s8, exact int32 sums over all of
// K (no promotion), converted once before the epilogue's scale pair.
template <class Op, bool FP8, int NT, bool I8 = false>
__global__ void __launch_bounds__(384, 1)
    sm90_stream_kernel(const __grid_constant__ CUtensorMap tma_x, const Sm90Gemm p) {
#if QMOE_SM90A
  using C = StreamCfg<NT>;
  constexpr int STAGES = C::STAGES, NA = NT / 2;  // accumulators per m64 slice per thread
  static_assert(NT == 16 || NT == 64, "M-blocks of 16 or 64 rows");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);  // 128B-swizzled stages start on 1024-byte boundaries
  uint8_t* sW = smem;
  uint8_t* sX = smem + STAGES * C::W_ST;
  uint64_t* full = reinterpret_cast<uint64_t*>(sX + STAGES * C::X_ST);
  uint64_t* empty = full + STAGES;

  const int ntn = sm90_plain_nt(p.np);
  const int nmb = min(p.max_blocks, (*p.num_post + NT - 1) / NT);
  const int total = nmb * ntn;
  const int item0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * total / gridDim.x);
  const int item1 = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * total / gridDim.x);
  if (item0 >= item1) return;  // every thread of the CTA alike
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();
  const int nk = FP8 ? (p.k + 127) / 128 : (p.k + 63) / 64;  // 128-byte k tiles holding K
  const int w_kt = sm90_plain_kt(p.kp, FP8 ? 8 : 16);
  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
  // rows of weight box nb that are loaded: whole 64-row slices up to the stored rows
  // (Sm90Gemm::trim_box; the rows past np within the last slice are the box's zero padding)
  auto box_rows = [&](int nb) { return p.trim_box ? min(256, (p.np - nb * 256 + 63) & ~63) : 256; };

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tma_x)) : "memory");
      int slot = 0;
      uint32_t ph = 0;
      const uint64_t pol = l2_evict_first_policy(), xpol = l2_evict_last_policy();
      for (int it = item0; it < item1; ++it) {
        const int mb = it / ntn, nb = it - mb * ntn;
        const int e = p.expert_ids[mb];
        if (e < 0) continue;  // expert of another rank: its slots stay zero (pre-cleared)
        const int w_bytes = box_rows(nb) * 128;
        for (int kt = 0; kt < nk; ++kt) {
          mbar_wait(&empty[slot], ph ^ 1u);
          mbar_expect_tx(&full[slot], w_bytes + C::X_ST);
          const uint8_t* wsrc = static_cast<const uint8_t*>(p.w) + static_cast<int64_t>((e * ntn + nb) * w_kt + kt) * C::W_ST;
          // a weight box is read once: evict first, so the token tiles (read for every box of
          // their M-block) stay in L2 (ncu: without, the tiles came from DRAM, +6% bytes at NT = 16)
          if (p.w_evict_first) bulk_load_hint(sW + slot * C::W_ST, wsrc, w_bytes, &full[slot], pol);
          else bulk_load(sW + slot * C::W_ST, wsrc, w_bytes, &full[slot]);
          // (x_evict_last: the token tile, read again for each of its M-block's boxes, kept in L2)
          if (p.x_evict_last) tma_load_2d_hint(sX + slot * C::X_ST, &tma_x, &full[slot], kt * (FP8 ? 128 : 64), mb * NT, xpol);
          else tma_load_2d(sX + slot * C::X_ST, &tma_x, &full[slot], kt * (FP8 ? 128 : 64), mb * NT);
          if (++slot == STAGES) {
            slot = 0;
            ph ^= 1u;
          }
        }
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int cw = wg - 1, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int slot = 0;
  uint32_t ph = 0;
  auto advance = [&] {
    if (++slot == STAGES) {
      slot = 0;
      ph ^= 1u;
    }
  };
  for (int it = item0; it < item1; ++it) {
    const int mb = it / ntn, nb = it - mb * ntn;
    const int e = p.expert_ids[mb];
    if (e < 0) continue;
    const int row0 = nb * 256 + cw * 128;  // the warpgroup's first weight row (slice s: + 64 s)
    // Slices past the box's loaded rows (box_rows) multiply stale shared memory: each weight row is
    // its own output row, so only rows past N (never stored) take those products. Skipping their
    // wgmmas instead made ptxas serialize every wgmma of the kernel (C7520: a compiler-inserted
    // warpgroup arrive on a divergent path), so they run.
    float acc[2][NA];
#pragma unroll
    for (int sl = 0; sl < 2; ++sl)
#pragma unroll
      for (int i = 0; i < NA; ++i) acc[sl][i] = 0.f;
    // one stage: wait for its data, then 4 k-steps x 2 slices: mma(slice, weight desc, token desc, k-step)
    auto issue_stage = [&](auto&& mma) {
      mbar_wait(&full[slot], ph);
      const uint8_t* w_st = sW + slot * C::W_ST + cw * 128 * 128;
      const uint8_t* x_st = sX + slot * C::X_ST;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) mma(sl, smem_desc(w_st + sl * 64 * 128 + kk * 32), smem_desc(x_st + kk * 32), kk);
      wgmma_commit();
    };
    // 16-bit and INT8 (exact sums, no promotion): stage kt's wgmmas stay in flight while kt + 1 is
    // awaited, and the stage before is released
    auto pipelined = [&](auto&& mma) {
      int prev = -1;
      for (int kt = 0; kt < nk; ++kt) {
        issue_stage(mma);
        wgmma_wait1();
        if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
        prev = slot;
        advance();
      }
      wgmma_wait0();
      if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
    };
    if constexpr (I8) {
      int iacc[2][NA];
#pragma unroll
      for (int sl = 0; sl < 2; ++sl)
#pragma unroll
        for (int i = 0; i < NA; ++i) iacc[sl][i] = 0;
      pipelined([&](int sl, uint64_t da, uint64_t db, int) {
        if constexpr (NT == 64) wgmma_n64_s8(iacc[sl], da, db, 1);
        else wgmma_n16_s8(iacc[sl], da, db, 1);
      });
#pragma unroll
      for (int sl = 0; sl < 2; ++sl)
#pragma unroll
        for (int i = 0; i < NA; ++i) acc[sl][i] = static_cast<float>(iacc[sl][i]);
    } else if constexpr (FP8) {
      float tmp[2][NA];
      for (int kt = 0; kt < nk; ++kt) {
        issue_stage([&](int sl, uint64_t da, uint64_t db, int kk) {
          if constexpr (NT == 64) wgmma_n64_e4m3(tmp[sl], da, db, kk);
          else wgmma_n16_e4m3(tmp[sl], da, db, kk);
        });
        wgmma_wait0();
        if (lane == 0) mbar_arrive(&empty[slot]);
        advance();
#pragma unroll
        for (int sl = 0; sl < 2; ++sl)
#pragma unroll
          for (int i = 0; i < NA; ++i) acc[sl][i] += tmp[sl][i];
      }
    } else {
      pipelined([&](int sl, uint64_t da, uint64_t db, int) {
        if constexpr (NT == 64) {
          if constexpr (std::is_same_v<Op, BF16>) wgmma_n64_bf16(acc[sl], da, db, 1);
          else wgmma_n64_f16(acc[sl], da, db, 1);
        } else {
          if constexpr (std::is_same_v<Op, BF16>) wgmma_n16_bf16(acc[sl], da, db, 1);
          else wgmma_n16_f16(acc[sl], da, db, 1);
        }
      });
    }

    // ---- epilogue: slice sl, half h: weight row row0 + 64 sl + 16 warp + g + 8 h; token position
    //      mb * NT + 8 j + 2 t + e2 = accumulator j * 4 + h * 2 + e2
    const float* be = p.bias != nullptr ? p.bias + static_cast<size_t>(e) * p.n : nullptr;
    auto col_scale = [&](int n) -> float {
      const int r = orig_row(p, n);
      if (n >= p.np || r >= p.n) return 0.f;
      return __ldg(p.col_scale + static_cast<size_t>(e) * p.kg * p.nsc + (p.n_div == 1 ? r : r / p.n_div));
    };
    float rsc[NT / 8][2];
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int pos = mb * NT + 8 * j + 2 * t + e2;
        rsc[j][e2] = FP8 && p.row_scale != nullptr ? p.row_scale[static_cast<size_t>(pos) * p.rs_groups] : 1.f;
      }
    if (p.stage == 1) {
      // n16 tile q holds 8 gate rows then the 8 matching up rows: intermediate column q * 8 + g
      using T = typename Op::T;
      with_act(p.act, [&](auto act) {
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {
          const int n0 = row0 + sl * 64 + warp * 16;
          const int i = (n0 / 16) * 8 + g;
          if (i >= p.half) continue;
          [[maybe_unused]] float cs[2] = {1.f, 1.f};
          float b[2] = {0.f, 0.f};
          if constexpr (FP8) {
            cs[0] = col_scale(n0 + g);
            cs[1] = col_scale(n0 + 8 + g);
          }
          if (be != nullptr) {
            b[0] = be[i];
            b[1] = be[p.half + i];
          }
#pragma unroll
          for (int j = 0; j < NT / 8; ++j)
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              const int pos = mb * NT + 8 * j + 2 * t + e2;
              float gv = acc[sl][j * 4 + e2], uv = acc[sl][j * 4 + 2 + e2];
              if constexpr (FP8) {
                gv *= rsc[j][e2] * cs[0];
                uv *= rsc[j][e2] * cs[1];
              }
              static_cast<T*>(p.out)[static_cast<size_t>(pos) * p.ldo + i] = Op::from_f(act(gv + b[0], uv + b[1]));
            }
        }
      });
    } else {
#pragma unroll
      for (int j = 0; j < NT / 8; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int pos = mb * NT + 8 * j + 2 * t + e2;
          const int sid = p.sorted_ids[pos];
          if (sid >= p.numel) continue;
          const float w = p.topk_w != nullptr ? p.topk_w[sid] : 1.f;
          float* orow = static_cast<float*>(p.out) + static_cast<size_t>(sid) * p.ldo;
#pragma unroll
          for (int sl = 0; sl < 2; ++sl)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int n = row0 + sl * 64 + warp * 16 + g + 8 * h;
              if (n >= p.n) continue;
              float v = acc[sl][j * 4 + h * 2 + e2];
              if constexpr (FP8) v *= rsc[j][e2] * col_scale(n);
              if (be != nullptr) v += be[n];
              orow[n] = v * w;
            }
        }
    }
  }
#endif
}

// ---- quantized weights (int4 / int8 atoms, fp4 units) as the register operand ------------------------
// D^T[n][t] = sum_k W[n][k] X[t][k]: wgmma m64n128k16 with A = 64 weight rows from registers (each
// warp dequantizes its own n16 atom into the A fragment: the atom's per-lane words are exactly the
// m16n8k16 fragment values of 16 rows x 16 k, in another register order) and B = the M-block's 128
// token rows from shared memory (TMA, as above). Weights arrive by bulk copies of whole atoms.
// Numerics as the mma.sync kernels: (u - z) is an exact operand, scaled as the weight-scale modes
// below say; the one exception is kScFold (int4 WNA16 group scales that are exact operand-dtype
// values, folded into the operand: one rounding per weight).
//  * fp4 units (NVFP4 / MXFP4, moe_gemm_fp4.cu): an int4 atom's code layout followed by the 16
//    rows' block scales; each pair becomes e2m1 * block scale * 2^c, exact in the operand dtype
//    (fp4_ops.cuh), accumulated straight into fp32 and multiplied once by the global scale and 2^-c.
//  * Quantized activations (W4A8 fp8 / int8, NVFP4 W4A4): the gather writes each quantized value
//    as an exact operand-dtype value (int8 and e4m3 values are exact in bf16 / fp16, as are NVFP4's
//    e2m1 * e4m3), so every product is the reference's exact product and each group's partial an
//    fp32 sum (numerics.md "Products"); the row's activation scale multiplies the fp32 result
//    (W4A8: acc = sum_g part_g * s_g, y = acc * s_a; W4A4: y = acc * ((1/G) * global) * 2^-c).
// Weight-scale modes of the kernel (template SC):
//  * kScGroup: per weight group the partials (scale_d = 0 at a group's first k16) are added into
//    fp32 with the group's scale ("promotion": each stage's wgmmas waited for, a second accumulator set);
//  * kScChannel: one scale per row (channel scales, fp4 units): accumulated straight into acc;
//  * kScFold (int4 WNA16 group scales that are exact operand-dtype values: Sm90Gemm::fold): the
//    group's scale multiplies the exact (u - z) pair once, in the operand dtype (HMUL2: one rounding,
//    the value an exact dequantization rounded to bf16 / fp16 has), and the products accumulate
//    straight into acc as channel scales do (numerics.md "Products"). H200 (thirteenth session):
//    int4 channel scales ran 1.16-1.32x faster than g128 with promotion on every anchor row at
//    M = 256-4096; the fold costs one HMUL2 per operand pair and measured 1.05-1.12x over the
//    promotion on 64- / 128-row tiles, 0.96-0.98x on 32-row ones (which keep the promotion).
enum : int { kScGroup = 0, kScChannel = 1, kScFold = 2 };
template <WFmt F> struct WqFmt;
template <> struct WqFmt<WFmt::kU4> { static constexpr int KA = 64, UNIT = 512; };
template <> struct WqFmt<WFmt::kU8> { static constexpr int KA = 32, UNIT = 512; };
template <> struct WqFmt<WFmt::kFP8> { static constexpr int KA = 32, UNIT = 512; };  // FP8 weight-only: int8's atoms
template <> struct WqFmt<WFmt::kNV4> { static constexpr int KA = 64, UNIT = 512 + 64; };  // + 16 rows x 4 e4m3
template <> struct WqFmt<WFmt::kMX4> { static constexpr int KA = 64, UNIT = 512 + 32; };  // + 16 rows x 2 e8m0
template <WFmt F> constexpr bool kWqFp4 = F == WFmt::kNV4 || F == WFmt::kMX4;

// One stage = 128 k-columns (two 64-wide TMA boxes of tokens, two atoms per n16 tile for int4,
// four for int8): 8 HGMMAs per wait, so the per-stage waits, barrier arrivals and loop control
// are paid once per 128 k (ncu, mixtral M = 4096 at 64 k per stage: ~340 instructions per warp per
// stage against 256 tensor cycles per warpgroup, 34% SM throughput, latency-bound).
// Ring depth: 4 stages for 128-row token tiles (5 measured 1-2% slower: H200, int4 / W4A8 / MXFP4,
// M = 1024 / 4096); smaller tiles make smaller stages, and the ring then holds as many as fit in
// ~192 KiB (up to 12), so the weight bytes in flight per SM stay at what streaming HBM needs.
constexpr int kWqStages = 4;
// Two CTAs per SM (80 registers at launch, 104 per consumer thread after setmaxnreg) where the
// consumers fit: 32-row token tiles, and 64-row ones that accumulate straight into acc (channel
// scales, fp4 units, folded group scales; a promoting kernel's second accumulator set spills
// there). One CTA's fill, per-stage waits and epilogue then overlap the other's work; each keeps
// half the ring. H200 (eleventh session): 32-row tiles 1.34-1.45x over one CTA; 64-row fp4 tiles
// 1.17-1.28x, int4 g128 / W4A8 ones (72-88 bytes of stack) 0.86-0.89x; thirteenth session (r5):
// one interleaved CTA instead of two for 64-row fp4 / folded tiles 0.91-0.95x.
template <WFmt F, int TN, int SC>
constexpr int wq_ctas() {
  return TN == 32 || (TN == 64 && (SC != kScGroup || F == WFmt::kNV4 || F == WFmt::kMX4)) ? 2 : 1;
}
constexpr int kWqRingBytes = 192 * 1024;
// Where the wq kernel has 256-row token tiles (WqCfg below): the layouts that accumulate straight
// into acc (no second accumulator set): fp4 units, int4 atoms with channel / folded scales, int8 /
// fp8 atoms with channel scales.
template <WFmt F, int SC>
constexpr bool wq_tn256() {
  return kWqFp4<F> || (F == WFmt::kU4 && SC != kScGroup) || (WqFmt<F>::KA == 32 && SC == kScChannel);
}
// TN: the M-block's token rows, wgmma's N (128, or 64 / 32 where experts hold few rows: a 128-row
// block there is mostly padding, and its tensor work and token bytes scale with TN; 256 where they
// hold many and the kernel accumulates straight into acc (int4 channel / folded scales, fp4 units,
// int8 WNA16 and FP8 weight-only with channel / tensor scales): each dequantized A fragment then feeds 256 token
// columns, half the conversion per multiply-add, with 128 accumulators per thread and three 72 KiB
// stages, or two 80 KiB ones for 8-bit atoms, whose three would not fit the 227 KiB an SM gives).
template <WFmt F, int TN = kBM, int SC = kScChannel, bool Q8 = false>
struct WqCfg {
  static_assert(TN == 256 || TN == 128 || TN == 64 || TN == 32, "token tiles of 256, 128, 64 or 32 rows");
  static constexpr int ATOMS = 128 / WqFmt<F>::KA;     // atoms per n16 tile per 128-k stage
  // TN tokens x 128 k: 16-bit values as two 64-k boxes, or (Q8) e4m3 codes as one 128-byte box
  static constexpr int X_ST = (Q8 ? 1 : 2) * TN * 128;
  static constexpr int W_ST = 8 * ATOMS * WqFmt<F>::UNIT;  // 8 n16 tiles
  static constexpr int RING = kWqRingBytes / wq_ctas<F, TN, SC>();
  // the stages + row scales, slots, weights, the tile of each stage (persistent kernel), alignment
  static constexpr int smem_for(int stages) { return stages * (X_ST + W_ST) + 2 * stages * 8 + 3 * TN * 4 + stages * 4 + 1024; }
  static constexpr int STAGES = TN == 256   ? (smem_for(3) <= kSm90MaxSmem ? 3 : 2)
                                : TN == 128 ? kWqStages
                                            : (RING / (X_ST + W_ST) < 12 ? RING / (X_ST + W_ST) : 12);
  static constexpr int SMEM = smem_for(STAGES);
  static_assert(SMEM <= kSm90MaxSmem, "the wq kernel's stages exceed an SM's shared memory");
};
// One-CTA wq kernels are persistent where Sm90Gemm::tile_counter is non-null (as the tile kernel);
// two-CTA kernels already overlap one CTA's fill and epilogue with the other's mainloop.
template <WFmt F, int TN, int SC>
constexpr bool wq_persist() {
  return wq_ctas<F, TN, SC>() == 1;
}
// W4A8 with fp8 activations on QGMMA (the wq kernel's Q8 form, Sm90Gemm::q8). The int4 codes become
// e4m3 operands in registers: each pair of (u - z) is made exact in fp16 (dq_u4_pair, |u - z| <= 15)
// and converted by cvt.rn.satfinite.e4m3x2.f16x2 (exact: e4m3 holds every integer up to 16), so
// every product is the reference's exact e4m3 x (u - z) product. The atoms keep their mma.sync
// layout (the decode and mma.sync kernels read the same copy): lane (g, q)'s words of k16 steps 2t
// and 2t + 1 hold k {2q, 2q + 1, 2q + 8, 2q + 9} (+ 16) of rows g and g + 8, where wgmma's k32 A
// fragment wants k 4q..4q + 3 (+ 16). Instead of moving weights between lanes, the token rows are
// stored with the same k order (Sm90Gather::kperm: within each 16 columns, position 4q + 2u + b
// holds column 8u + 2q + b), so both operands agree and the dot product is unchanged.
// Numerics as the fp8 W8A8 QGMMA kernels (numerics.md "Products"): the tensor core sums each 128-k
// stage's products in its own format; that partial is added into fp32 registers after the stage
// (times the group's scale; channel scales: unscaled, the row's scale applied once at the end).
__device__ __forceinline__ uint32_t e4m3x4(uint32_t lo, uint32_t hi) {  // two exact fp16 pairs -> 4 e4m3 bytes
  uint32_t r;
  asm("{\n.reg .b16 l, h;\ncvt.rn.satfinite.e4m3x2.f16x2 l, %1;\ncvt.rn.satfinite.e4m3x2.f16x2 h, %2;\n"
      "mov.b32 %0, {l, h};\n}\n"
      : "=r"(r)
      : "r"(lo), "r"(hi));
  return r;
}
// The four exact fp16 (u - z) pairs of one int4 atom word (pair p: nibbles p and p + 4; pairs 0, 1
// row g, pairs 2, 3 row g + 8) in Marlin's order of operations: pairs 1 / 3 are masked in place
// (1024 + 16 u) and scaled by 1/16 in the FMA that subtracts 64 + z, so a word takes one shift,
// four LOP3 and four HSUB2 / HFMA2 (dq_u4_pair per pair: three shifts more). zs: 1024 + z, zf:
// -(64 + z), per row (h = 0: g, 1: g + 8), fp16 pairs.
__device__ __forceinline__ void dq_u4_word_f16(uint32_t w, const uint32_t (&zs)[2], const uint32_t (&zf)[2],
                                               uint32_t (&o)[4]) {
  const uint32_t w8 = w >> 8;
  uint32_t t[4];
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(t[0]) : "r"(w), "n"(0x000F000Fu), "n"(F16::kInt4Magic));
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(t[1]) : "r"(w), "n"(0x00F000F0u), "n"(F16::kInt4Magic));
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(t[2]) : "r"(w8), "n"(0x000F000Fu), "n"(F16::kInt4Magic));
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(t[3]) : "r"(w8), "n"(0x00F000F0u), "n"(F16::kInt4Magic));
  const uint32_t sixteenth = 0x2C002C00u;  // fp16 1/16 in both halves
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    o[2 * h] = F16::sub2(t[2 * h], zs[h]);
    const __half2 r = __hfma2(*reinterpret_cast<const __half2*>(&t[2 * h + 1]),
                              *reinterpret_cast<const __half2*>(&sixteenth), *reinterpret_cast<const __half2*>(&zf[h]));
    o[2 * h + 1] = *reinterpret_cast<const uint32_t*>(&r);
  }
}
template <int TN, bool HALF = false>
__device__ __forceinline__ void wgmma_ra_q8(float (&d)[TN / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  static_assert(TN == 128 || TN == 64, "Q8: 128- or 64-row token tiles");
  if constexpr (TN == 128 && !HALF) wgmma_ra_n128_e4m3(d, a, db, scale_d);
  else if constexpr (TN == 128) wgmma_ra_n64_of128_e4m3(d, a, db, scale_d);
  else if constexpr (!HALF) wgmma_ra_n64_e4m3(d, a, db, scale_d);
  else wgmma_ra_n32_of64_e4m3(d, a, db, scale_d);
}

// f(std::integral_constant<int, N>{}) for the least N of 32, 64, .. TN with nu <= N; nu is
// warp-uniform, and each test a vote, so that the wgmmas in every branch stay on a convergent path
template <int TN, int N = 32, class F>
__device__ __forceinline__ void with_cols(int nu, F&& f) {
  if constexpr (N >= TN) f(std::integral_constant<int, TN>{});
  else if (__all_sync(0xffffffffu, nu <= N)) f(std::integral_constant<int, N>{});
  else with_cols<TN, N + 32>(nu, f);
}

// LIVE: the M-block's live token columns by 32 (Sm90Gemm::live_cols), a kernel of its own, so that the
// default one keeps the register allocation of its two column counts (whole, half)
template <class Op, WFmt F, int SC, int TN, bool Q8 = false, bool LIVE = false>
__global__ void __launch_bounds__(384, wq_ctas<F, TN, SC>())
    sm90_moe_wq_kernel(const __grid_constant__ CUtensorMap tma_x, const Sm90Gemm p) {
#if QMOE_SM90A
  using C = WqCfg<F, TN, SC, Q8>;
  constexpr bool CHANNEL = SC == kScChannel, FOLD = SC == kScFold;
  static_assert(!FOLD || F == WFmt::kU4, "folded group scales: int4 atoms");
  static_assert(!Q8 || (F == WFmt::kU4 && !FOLD && wq_ctas<F, TN, SC>() == 1),
                "Q8: int4 atoms, group or channel scales, one CTA per SM (the interleaved loop)");
  static_assert(!LIVE || (TN >= kBM && !Q8), "live token columns: 128- / 256-row tiles, not Q8");
  static_assert(TN != 256 || (wq_tn256<F, SC>() && !Q8),
                "256-row token tiles: int4 / int8 / fp8 atoms or fp4 units accumulating straight into acc (no second accumulator set)");
  // the zero-point magic and the exact (u - z) pairs: fp16 for Q8 (converted to e4m3 from there)
  using CvOp = std::conditional_t<Q8, F16, Op>;
  constexpr int NJ = TN / 8;  // n8 token groups of the accumulators
  constexpr int KA = WqFmt<F>::KA, UNIT = WqFmt<F>::UNIT, ATOMS = C::ATOMS, STAGES = C::STAGES;
  constexpr bool FP4 = kWqFp4<F>;
  constexpr bool kBf = std::is_same_v<Op, BF16>;  // the operands of wgmma_ra_cols
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);  // 128B-swizzled stages start on 1024-byte boundaries
  uint8_t* sX = smem;
  uint8_t* sW = smem + STAGES * C::X_ST;
  uint64_t* full = reinterpret_cast<uint64_t*>(sW + STAGES * C::W_ST);
  uint64_t* empty = full + STAGES;
  int* s_tile = reinterpret_cast<int*>(reinterpret_cast<float*>(empty + STAGES) + 3 * TN);  // [STAGES]

  constexpr bool PERSIST = wq_persist<F, TN, SC>();
  const int ntn = (p.np + 127) / 128;  // 128 weight rows per CTA
  const int ntiles = (p.max_blocks + kGroupM - 1) / kGroupM * kGroupM * ntn;  // raster_tiles(p.max_blocks, ntn)
  const int used_rows = *p.num_post;
  auto tile_at = [&](int L, int& mb, int& nb, int& e) { return raster_tile(p, L, ntn, TN, used_rows, mb, nb, e); };
  // PERSIST: tiles from p.tile_counter as the tile kernel takes them (CTA b: tile b, then gridDim.x +
  // atomicAdd), the producer writing each tile's index beside its first stage (s_tile, -1: no
  // more) and the ring running on across tiles, so the next tile's stages load during an epilogue.
  // Otherwise (two-CTA kernels) one tile per CTA, as before.
  int mb = 0, nb = 0, e = 0;
  if constexpr (!PERSIST) {
    if (!tile_at(blockIdx.x, mb, nb, e)) return;
  }
  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);
    }
    mbar_init_fence();
  }
  __syncthreads();
  const int nk = (p.k + 127) / 128;
  const int ntiles16 = p.np / 16;
  const int katoms = p.kp / KA;

  if (wg == 0) {
    if constexpr (wq_ctas<F, TN, SC>() == 2) setmaxnreg_dec<24>();  // 80 at launch: 128 x 24 + 256 x 104 <= 384 x 80
    else setmaxnreg_dec<40>();
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tma_x)) : "memory");
      int s = 0;
      uint32_t ph = 1;
      for (int L = blockIdx.x;; L = p.tile_counter != nullptr ? gridDim.x + atomicAdd(p.tile_counter, 1) : ntiles) {
        if constexpr (PERSIST) {
          if (L >= ntiles) {  // no more tiles: -1 beside the next stage, its full barrier completed without data
            mbar_wait(&empty[s], ph);
            s_tile[s] = -1;
            mbar_arrive(&full[s]);
            break;
          }
          if (!tile_at(L, mb, nb, e)) continue;
        }
        const uint8_t* wexp = static_cast<const uint8_t*>(p.w) + static_cast<size_t>(e) * ntiles16 * katoms * UNIT;
        for (int kb = 0; kb < nk; ++kb) {
          mbar_wait(&empty[s], ph);
          if (PERSIST && kb == 0) s_tile[s] = L;  // published by the barrier's arrival
          // the last stage may hold fewer atoms than a full one (kp is a multiple of 64 only)
          const int atoms = min(ATOMS, katoms - kb * ATOMS);
          mbar_expect_tx(&full[s], C::X_ST + 8 * atoms * UNIT);
          tma_load_2d(sX + s * C::X_ST, &tma_x, &full[s], kb * 128, mb * TN);
          if constexpr (!Q8) tma_load_2d(sX + s * C::X_ST + TN * 128, &tma_x, &full[s], kb * 128 + 64, mb * TN);
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            const int gt = min(nb * 8 + t, ntiles16 - 1);  // rows past np: any atoms, never stored
            bulk_load(sW + s * C::W_ST + t * ATOMS * UNIT, wexp + (static_cast<size_t>(gt) * katoms + kb * ATOMS) * UNIT,
                      atoms * UNIT, &full[s]);
          }
          if (++s == STAGES) { s = 0; ph ^= 1; }
        }
        if constexpr (!PERSIST) break;
      }
    }
    return;
  }

  if constexpr (wq_ctas<F, TN, SC>() == 2) setmaxnreg_inc<104>();
  else setmaxnreg_inc<232>();
  const int cw = wg - 1, warp = tid >> 5, lane = tid & 31;
  int s = 0;  // the ring's stage slot and phase, running on across tiles
  uint32_t ph = 0;
  for (;;) {
    if constexpr (PERSIST) {
      mbar_wait(&full[s], ph);
      const int L = s_tile[s];  // rewritten only after both warpgroups release the stage
      // every thread reads the same L, but ptxas cannot know that of a shared-memory load: the vote
      // (a warp-uniform predicate) keeps the loop, and the wgmmas in it, on a convergent path (a
      // branch on L itself: ptxas serialized the wgmmas, C7520)
      if (__any_sync(0xffffffffu, L < 0)) break;
      tile_at(L, mb, nb, e);  // a tile with an M-block and an expert (the producer skipped the others)
      named_bar_sync(2, 256);  // both warpgroups are done with the previous tile's staged scales and slots
    }
    // An expert's last M-block often holds few live rows (align puts its padding after them): with
    // at most TN / 2, the consumers multiply the first TN / 2 token columns only (half the tensor
    // work; the other half's accumulators stay zero and belong to padding positions). H200
    // (eleventh session, r5): int4 / W4A8 at M = 256-4096 1.037x geomean. fp4 units on 128-row tiles
    // measured 4-11% slower with it in the eleventh session (fragments-first kernel); with the
    // interleaved kernel 1.009x geomean over NVFP4A16 / MXFP4 / NVFP4 at M = 256-4096 (twelfth
    // session, r8: MXFP4 up to 1.08x, NVFP4A16 0.97-1.05x), so every tile takes it.
    // (a vote, for the same reason as the tile's: mb is uniform but comes from shared memory)
    // The token columns to multiply, nu (warp-uniform: votes, as above): TN, or TN / 2 where at most
    // half the rows are live (half_tail); LIVE: the live rows rounded up to 32 (lane c's vote: row 32 c
    // live; align puts an expert's padding after its rows), as wgmma n32 .. n256 over the first nu
    // columns, the rest of acc staying zero (padding positions).
    const int nu = LIVE ? 32 * __popc(__ballot_sync(0xffffffffu, lane < TN / 32 && p.sorted_ids[mb * TN + 32 * lane] < p.numel))
                 : __all_sync(0xffffffffu, p.half_tail && p.sorted_ids[mb * TN + TN / 2] >= p.numel) ? TN / 2
                                                                                                  : TN;
    const bool half = nu <= TN / 2;
    const int tile16 = nb * 8 + cw * 4 + warp;  // this warp's n16 tile of prepared rows
    // this thread's two weight rows (prepared order): tile16 * 16 + h * 8 + lane / 4
    int orow[2];
    bool rok[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = tile16 * 16 + h * 8 + (lane >> 2);
      orow[h] = orig_row(p, n);
      rok[h] = n < p.np && orow[h] < p.n;
    }
    const float zsym = F == WFmt::kU4 ? 8.f : 128.f;
    float zf[2] = {zsym, zsym};
    uint32_t zm[2], zq[2];  // zq (Q8): -(64 + z) for the pairs scaled by 1/16 (dq_u4_word_f16)
    zm[0] = zm[1] = CvOp::pack(CvOp::kInt4Base + zsym, CvOp::kInt4Base + zsym);
    zq[0] = zq[1] = F16::pack(-(64.f + zsym), -(64.f + zsym));
    // the two rows' scale / zero-point columns, so that a group's value is one 32-bit offset away
    // (the 64-bit index arithmetic per load was ~40 instructions per stage: ncu, seventeenth session)
    const float* zrow[2] = {nullptr, nullptr};
    const float* srow[2] = {nullptr, nullptr};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!rok[h]) continue;
      if (p.zero != nullptr) zrow[h] = p.zero + static_cast<size_t>(e) * p.kg * p.n + orow[h];
      if (!FP4) srow[h] = p.col_scale + static_cast<size_t>(e) * p.kg * p.nsc + orow[h];
    }
    auto zero_of = [&](int h, int g) -> float { return rok[h] ? zrow[h][g * p.n] : zsym; };
    auto set_zero = [&](float z0, float z1) {
      zf[0] = z0;
      zf[1] = z1;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        zm[h] = CvOp::pack(CvOp::kInt4Base + zf[h], CvOp::kInt4Base + zf[h]);
        if constexpr (Q8) zq[h] = F16::pack(-(64.f + zf[h]), -(64.f + zf[h]));
      }
    };
    auto scale_of = [&](int h, int g) -> float { return rok[h] ? __ldg(srow[h] + g * p.nsc) : 0.f; };
    constexpr bool grouped = !CHANNEL && !FP4;     // scales change along K (per weight group)
    // accumulate straight into acc; Q8 never does: QGMMA partials are promoted into fp32 every 128-k
    // stage (channel scales: added unscaled, the row scale applied once at the end)
    constexpr bool channel = (CHANNEL || FP4 || FOLD) && !Q8;
    // the M-block's activation scales (W4A8, W4A4), staged before the mainloop for the epilogue
    float* s_rs = reinterpret_cast<float*>(empty + STAGES);
    if (p.row_scale != nullptr && cw == 0)
      for (int t = tid; t < TN; t += 128) s_rs[t] = p.row_scale[static_cast<size_t>(mb * TN + t) * p.rs_groups];
    // GEMM2: the M-block's output slots and router weights, staged before the mainloop (two
    // dependent loads per token in the epilogue waited ~2 memory round trips)
    int* s_sid = reinterpret_cast<int*>(s_rs + TN);
    float* s_w = reinterpret_cast<float*>(s_sid + TN);
    if (p.stage == 2 && cw == 1)
      for (int t = tid; t < TN; t += 128) {
        const int sid = p.sorted_ids[mb * TN + t];
        s_sid[t] = sid;
        s_w[t] = sid < p.numel && p.topk_w != nullptr ? p.topk_w[sid] : 1.f;
      }
    // this thread's two rows' scales for all of K (channel / fp4 global) and biases, loaded before
    // the mainloop too (stage 1: the gate and up bias of intermediate column tile16 * 8 + lane / 4)
    float rsc[2] = {1.f, 1.f}, rb[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (FP4) {
        if (rok[h] && p.col_scale != nullptr) rsc[h] = p.col_scale[static_cast<size_t>(e) * p.nsc + orow[h] / p.n_div];
      } else if constexpr (CHANNEL) {
        rsc[h] = scale_of(h, 0);
      }
      if (p.bias != nullptr) {
        if (p.stage == 1) {
          const int i = tile16 * 8 + (lane >> 2);
          rb[h] = i < p.half ? p.bias[static_cast<size_t>(e) * p.n + h * p.half + i] : 0.f;
        } else {
          rb[h] = rok[h] ? p.bias[static_cast<size_t>(e) * p.n + orow[h]] : 0.f;
        }
      }
    }
    // stages per weight group (chunk % 128 == 0), per promotion (Q8 with channel scales: one)
    const int chunk_kb = grouped ? p.chunk / 128 : Q8 ? 1 : nk;

    float acc[TN / 2], tmp[TN / 2];
#pragma unroll
    for (int i = 0; i < TN / 2; ++i) acc[i] = tmp[i] = 0.f;
    int ic = 0, g = 0;  // stage within the group, group
    if (p.zero != nullptr) set_zero(zero_of(0, 0), zero_of(1, 0));
    // the current group's scales, and the next group's scales / zero points: loaded before the
    // group's last wgmmas are issued, used after they complete (a load at the promotion itself
    // stalled the consumers ~20% of the time: ncu, mixtral-8x7b int4 g128 M = 4096)
    float sc[2] = {0.f, 0.f}, sn[2] = {0.f, 0.f}, zn[2] = {zsym, zsym};
    if constexpr (grouped) sc[0] = scale_of(0, 0), sc[1] = scale_of(1, 0);
    // kScFold: the current group's scales of rows g / g + 8 as operand pairs (exact: Sm90Gemm::fold)
    uint32_t sf[2] = {0u, 0u};
    if constexpr (FOLD) sf[0] = Op::pack(sc[0], sc[0]), sf[1] = Op::pack(sc[1], sc[1]);
    // One stage's 8 k16 steps: step st's A fragment is dequantized, then its wgmma issued at once, so
    // the tensor pipe starts on step 0 while the warps dequantize the later steps (each step keeps its
    // own fragment registers until the stage's wait). The descriptors are the stage's base plus
    // constant offsets, and whole / half token tiles (LIVE: each count of token columns) are straight
    // copies of the stage (a branch per wgmma split the chain: one WARPGROUP.ARRIVE and scoreboard
    // per HGMMA in its own block).
    // H200, ncu (twelfth session): with all 8 fragments dequantized before the first wgmma the
    // tensor pipe was 46% busy on mixtral-8x7b int4 g128 M = 4096 (the 16-bit tile kernel 84%).
    // Two-CTA kernels (80 registers at launch) keep the fragments-first order: interleaved, ptxas
    // serializes their wgmmas for want of registers (C7512).
    constexpr bool kInterleave = wq_ctas<F, TN, SC>() == 1;
    // Interleaved kernels that accumulate straight into acc (channel or folded scales, fp4 units) or
    // have 64-row tiles load a stage's raw shared-memory words while the previous stage's wgmmas run (its full
    // barrier waited for there), so a stage starts on its first conversion. H200 (r5, A/B in one
    // run): fp4 / channel 128-row tiles 1.00-1.08x, int4 / W4A8 64-row tiles 1.02-1.03x; the
    // group-scale 128-row kernels 0.79-0.88x (and 0.78-0.89x with the words loaded after their
    // wgmmas complete, before the promotion: r7), so they load a stage's words at its start.
    constexpr bool kPrefetch = kInterleave && (channel || TN != kBM);
    // A stage's raw shared-memory words of this warp's n16 tile: unit u's 16 code bytes per lane and
    // (fp4) rows g / g + 8's block-scale words, then k16 step st's exact A fragment from them.
    constexpr int RAWN = 8 / (KA / 16);  // units per stage: 2 (int4 atoms, fp4 units), 4 (int8 atoms)
    struct Raw {
      uint4 v[RAWN];
      uint32_t sw[FP4 ? RAWN : 1][2];
    };
    // grp >= 0 (fragments-first order, step by step): an MXFP4 unit's group grp byte alone
    const auto load_unit = [&](const uint8_t* w_st, int u, Raw& r, int grp = -1) {
      const uint8_t* unit = w_st + u * UNIT;
      r.v[u] = *reinterpret_cast<const uint4*>(unit + lane * 16);
      if constexpr (FP4) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = h * 8 + (lane >> 2);
          if constexpr (F == WFmt::kNV4) r.sw[u][h] = *reinterpret_cast<const uint32_t*>(unit + 512 + row * 4);
          else if (grp >= 0) r.sw[u][h] = unit[512 + row * 2 + grp];
          else r.sw[u][h] = *reinterpret_cast<const uint16_t*>(unit + 512 + row * 2);  // e8m0 of k 0-31, 32-63
        }
      }
    };
    // k16 step st of stage kb lies in an atom / unit inside K. Where K ends inside the last stage,
    // that stage's other slots are stale shared memory: fp4 scale bytes there may decode to inf and
    // e4m3 codes to NaN (x the zero-filled tokens = NaN; stale int8 / int4 codes are finite, x 0 adds
    // 0). FP8 weight-only's first GPU run (s46, H100) had every output NaN without this check.
    const auto in_k = [&](int kb, int st) { return kb * ATOMS + st / (8 / RAWN) < katoms; };
    const auto convert = [&](const Raw& r, int kb, int st, uint32_t (&af)[4], bool one_grp = false) {
      if constexpr (FP4) {
        // unit st / 4, its k16 block b = st % 4; rows g (h = 0) and g + 8 (h = 1)
        const int u = st >> 2, b = st & 3;
        const uint4 v = r.v[u];
        const uint32_t w = b == 0 ? v.x : b == 1 ? v.y : b == 2 ? v.z : v.w;
        uint32_t s2[2] = {0u, 0u};
        if (in_k(kb, st))
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if constexpr (F == WFmt::kNV4) {
            // blocks (b & ~1, b | 1) as a pair, times 2^(126 + c); broadcast block b
            const uint32_t pr = Op::mul2(dq_fp8_pair<Op>(r.sw[u][h], b & 2), Fp4Bits<Op>::kFold);
            s2[h] = __byte_perm(pr, 0u, (b & 1) ? 0x3232 : 0x1010);
          } else {
            const uint32_t e = one_grp ? r.sw[u][h] : __byte_perm(r.sw[u][h], 0u, 0x4440 | (b >> 1));
            s2[h] = mx_scale_pair<Op>(e);  // group b / 2 of 32 k
          }
        }
        af[0] = Op::mul2(e2m1_raw_pair<Op, 0>(w), s2[0]);  // rows g,     k 2t..
        af[1] = Op::mul2(e2m1_raw_pair<Op, 2>(w), s2[1]);  // rows g + 8, k 2t..
        af[2] = Op::mul2(e2m1_raw_pair<Op, 1>(w), s2[0]);  // rows g,     k 2t + 8..
        af[3] = Op::mul2(e2m1_raw_pair<Op, 3>(w), s2[1]);  // rows g + 8, k 2t + 8..
      } else if constexpr (F == WFmt::kU4) {
        const uint4 v = r.v[st >> 2];
        const uint32_t w = (st & 3) == 0 ? v.x : (st & 3) == 1 ? v.y : (st & 3) == 2 ? v.z : v.w;
        af[0] = dq_u4_pair<Op>(w, 0, zm[0]);  // rows g,     k 2t..
        af[1] = dq_u4_pair<Op>(w, 2, zm[1]);  // rows g + 8, k 2t..
        af[2] = dq_u4_pair<Op>(w, 1, zm[0]);  // rows g,     k 2t + 8..
        af[3] = dq_u4_pair<Op>(w, 3, zm[1]);  // rows g + 8, k 2t + 8..
        if constexpr (FOLD) {  // (u - z) * scale, rounded once to the operand dtype
          af[0] = Op::mul2(af[0], sf[0]);
          af[1] = Op::mul2(af[1], sf[1]);
          af[2] = Op::mul2(af[2], sf[0]);
          af[3] = Op::mul2(af[3], sf[1]);
        }
      } else {  // 8-bit atoms: int8 codes minus zero points, or (FP8 weight-only) e4m3 codes, NaN kept
        if (F == WFmt::kFP8 && !in_k(kb, st)) {
          af[0] = af[1] = af[2] = af[3] = 0u;
          return;
        }
        const uint4 v = r.v[st >> 1];
        const uint32_t w0 = (st & 1) ? v.z : v.x, w1 = (st & 1) ? v.w : v.y;  // n half 0 / 1
        const auto dq = [&](uint32_t w, int b, int h) {
          if constexpr (F == WFmt::kFP8) return dq_fp8_weight_pair<Op>(w, b);
          else return dq_u8_pair<Op>(w, b, zf[h]);
        };
        af[0] = dq(w0, 0, 0);
        af[1] = dq(w1, 0, 1);
        af[2] = dq(w0, 2, 0);
        af[3] = dq(w1, 2, 1);
      }
    };
    // Q8: k32 step t of a stage from the words of k16 steps 2t, 2t + 1 (atom t / 2), rows g / g + 8
    const auto convert_q8 = [&](const Raw& r, int t, uint32_t (&af)[4]) {
      const uint4 v = r.v[t >> 1];
      uint32_t o0[4], o1[4];
      dq_u4_word_f16((t & 1) ? v.z : v.x, zm, zq, o0);  // k16 step 2t
      dq_u4_word_f16((t & 1) ? v.w : v.y, zm, zq, o1);  // k16 step 2t + 1
      af[0] = e4m3x4(o0[0], o0[1]);  // row g,     k 4q..
      af[1] = e4m3x4(o0[2], o0[3]);  // row g + 8, k 4q..
      af[2] = e4m3x4(o1[0], o1[1]);  // row g,     k 16 + 4q..
      af[3] = e4m3x4(o1[2], o1[3]);  // row g + 8, k 16 + 4q..
    };
    const auto stage_mma = [&](auto cols_tag, const uint8_t* x_st, const uint8_t* w_st, const Raw& rpre, int kb,
                               int sd0) {
      constexpr int NU = decltype(cols_tag)::value;  // token columns multiplied
      constexpr bool H = NU < TN;                     // Q8: NU is TN / 2 or TN
      const uint64_t d0 = smem_desc(x_st);
      Raw r;  // without the prefetch: all of the stage's shared-memory loads first
      if constexpr (kPrefetch) {
        r = rpre;
      } else {
#pragma unroll
        for (int u = 0; u < RAWN; ++u) load_unit(w_st, u, r);
      }
      if constexpr (Q8) {  // 4 QGMMA k32 steps over the stage's one 128-byte box of codes
        uint32_t aq[4][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          convert_q8(r, t, aq[t]);
          wgmma_fence();
          const uint64_t db = d0 + static_cast<uint64_t>((t * 32) >> 4);
          wgmma_ra_q8<TN, H>(tmp, aq[t], db, t == 0 ? sd0 : 1);  // promoted after the stage
        }
        return;
      }
      uint32_t af[8][4];
#pragma unroll
      for (int st = 0; st < 8; ++st) {
        convert(r, kb, st, af[st]);
        wgmma_fence();
        const uint64_t db = d0 + static_cast<uint64_t>(((st >> 2) * TN * 128 + (st & 3) * 32) >> 4);
        if constexpr (channel) wgmma_ra_cols<kBf, NU, TN / 2>(acc, af[st], db, 1);
        else wgmma_ra_cols<kBf, NU, TN / 2>(tmp, af[st], db, st == 0 ? sd0 : 1);
      }
    };
    // the fragments-first order with a branch per wgmma (two-CTA kernels)
    const auto stage_mma_ff = [&](const uint8_t* x_st, const uint8_t* w_st, int kb, int sd0, auto&& preload) {
      uint32_t af[8][4];
#pragma unroll
      for (int st = 0; st < 8; ++st) {
        Raw r;
        load_unit(w_st, st / (8 / RAWN), r, (st & 3) >> 1);
        convert(r, kb, st, af[st], true);
      }
      preload();
      wgmma_fence();
#pragma unroll
      for (int st = 0; st < 8; ++st) {
        const uint64_t db = smem_desc(x_st + (st >> 2) * TN * 128 + (st & 3) * 32);
        const int sd = st == 0 ? sd0 : 1;
        if (half) wgmma_ra_cols<kBf, TN / 2, TN / 2>(channel ? acc : tmp, af[st], db, channel ? 1 : sd);
        else wgmma_ra_cols<kBf, TN, TN / 2>(channel ? acc : tmp, af[st], db, channel ? 1 : sd);
      }
    };
    const int wtile = (cw * 4 + warp) * ATOMS * UNIT;  // this warp's n16 tile in a stage
    Raw rw;
    if constexpr (kPrefetch) {
      mbar_wait(&full[s], ph);
#pragma unroll
      for (int u = 0; u < RAWN; ++u) load_unit(sW + s * C::W_ST + wtile, u, rw);
    }
    // The K loop. LIVE: one copy per column count (a branch per stage among the 256-row tile's eight
    // made ptxas serialize their wgmmas for want of registers, C7511); otherwise one loop that picks the
    // whole or the half tile per stage, as before the LIVE kernels (one copy each spilled 184 / 176
    // bytes in the fp4 256-row kernels, against 128 / 156)
    const auto k_loop = [&](auto cols_tag) {
      for (int kb = 0; kb < nk; ++kb) {
        if constexpr (!kPrefetch) mbar_wait(&full[s], ph);
        const uint8_t* x_st = sX + s * C::X_ST;
        const uint8_t* w_st = sW + s * C::W_ST + wtile;
        const bool gdone = ic + 1 == chunk_kb || kb == nk - 1;  // this stage ends its weight group
        const auto preload = [&] {
          if (grouped && gdone && kb + 1 < nk) {
            const int gn = min(g + 1, p.kg - 1);
            sn[0] = scale_of(0, gn);
            sn[1] = scale_of(1, gn);
            if (p.zero != nullptr) zn[0] = zero_of(0, gn), zn[1] = zero_of(1, gn);
          }
        };
        const int sd0 = ic == 0 ? 0 : 1;  // a weight group's first k16 step starts its partial sums
        if constexpr (!kInterleave) {
          stage_mma_ff(x_st, w_st, kb, sd0, preload);
        } else {
          preload();
          if constexpr (LIVE) stage_mma(cols_tag, x_st, w_st, rw, kb, sd0);
          else if (half) stage_mma(std::integral_constant<int, TN / 2>{}, x_st, w_st, rw, kb, sd0);
          else stage_mma(std::integral_constant<int, TN>{}, x_st, w_st, rw, kb, sd0);
        }
        wgmma_commit();
        if constexpr (kPrefetch) {
          if (kb + 1 < nk) {
            const int s1 = s + 1 == STAGES ? 0 : s + 1;
            mbar_wait(&full[s1], s + 1 == STAGES ? ph ^ 1u : ph);
#pragma unroll
            for (int u = 0; u < RAWN; ++u) load_unit(sW + s1 * C::W_ST + wtile, u, rw);
          }
        }
        wgmma_wait0();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (++s == STAGES) { s = 0; ph ^= 1; }
        ++ic;
        if (gdone) {  // group done: promote with its scales, move to the next group's
          if constexpr (grouped) {
            if constexpr (!FOLD) {
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                acc[j * 4 + 0] += tmp[j * 4 + 0] * sc[0];
                acc[j * 4 + 1] += tmp[j * 4 + 1] * sc[0];
                acc[j * 4 + 2] += tmp[j * 4 + 2] * sc[1];
                acc[j * 4 + 3] += tmp[j * 4 + 3] * sc[1];
              }
            }
            sc[0] = sn[0];
            sc[1] = sn[1];
            if constexpr (FOLD) sf[0] = Op::pack(sc[0], sc[0]), sf[1] = Op::pack(sc[1], sc[1]);
            if (p.zero != nullptr && kb + 1 < nk) set_zero(zn[0], zn[1]);
          } else if constexpr (Q8) {
#pragma unroll
            for (int i = 0; i < TN / 2; ++i) acc[i] += tmp[i];
          }
          ic = 0;
          ++g;
        }
      }
    };
    if constexpr (LIVE) with_cols<TN>(nu, k_loop);
    else k_loop(std::integral_constant<int, TN>{});  // (the tag unused: half or whole per stage)
    if (p.row_scale != nullptr) named_bar_sync(1, 256);  // the staged activation scales
    if constexpr (FP4) {
      // (row scale x global scale) x 2^-c, as moe_gemm_fp4.cu; the row scale (W4A4: 1 / G) by position
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const float rs = p.row_scale != nullptr ? s_rs[8 * j + 2 * (lane & 3) + e2] : 1.f;
          acc[j * 4 + e2] *= (rs * rsc[0]) * Fp4Bits<Op>::kUnscale;
          acc[j * 4 + 2 + e2] *= (rs * rsc[1]) * Fp4Bits<Op>::kUnscale;
        }
    } else {
      if constexpr (CHANNEL) {
        const float s0 = rsc[0], s1 = rsc[1];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          acc[j * 4 + 0] *= s0;
          acc[j * 4 + 1] *= s0;
          acc[j * 4 + 2] *= s1;
          acc[j * 4 + 3] *= s1;
        }
      }
      if (p.row_scale != nullptr) {  // W4A8: y = acc * s_a of the position's token
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) {
            const float rs = s_rs[8 * j + 2 * (lane & 3) + e2];
            acc[j * 4 + e2] *= rs;
            acc[j * 4 + 2 + e2] *= rs;
          }
      }
    }

    // ---- epilogue: acc[j * 4 + h * 2 + e2] = (weight row tile16 * 16 + 8 h + lane / 4, token 8 j + 2 (lane & 3) + e2)
    using T = typename Op::T;
    if (p.stage == 1) {
      // rows h = 0 are 8 gate rows, h = 1 the matching up rows: intermediate column i
      const int i = tile16 * 8 + (lane >> 2);
      if (i < p.half) {
        const float bg = rb[0], bu = rb[1];
        with_act(p.act, [&](auto act) {  // the activation switch outside the loops: branch-free elements
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              const int pos = mb * TN + 8 * j + 2 * (lane & 3) + e2;
              const float hv = act(acc[j * 4 + e2] + bg, acc[j * 4 + 2 + e2] + bu);
              static_cast<T*>(p.out)[static_cast<size_t>(pos) * p.ldo + i] = Op::from_f(hv);
            }
        });
      }
    } else {
      named_bar_sync(1, 256);  // the staged slots and router weights
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int t = 8 * j + 2 * (lane & 3) + e2;
          const int sid = s_sid[t];
          if (sid >= p.numel) continue;
          const float w = s_w[t];
          float* orow_out = static_cast<float*>(p.out) + static_cast<size_t>(sid) * p.ldo;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (!rok[h]) continue;
            float v = acc[j * 4 + h * 2 + e2];
            v += rb[h];
            orow_out[orow[h]] = v * w;
          }
        }
    }
    if constexpr (!PERSIST) break;
  }  // tiles
#endif
}

// ---- A rows in sorted order (+ fp8 quantization) ---------------------------------------------------
__device__ __forceinline__ float block_max128(float v, float* red) {
  v = warp_max(v);
  const int warp = threadIdx.x >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  return fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
}

// 128 threads per position. The value of a source element is exactly what act_prep_kernel
// (moe_kernels.cu) computes: round_act(x * w) for weight-on-input rows, else x.
template <class Op>
__global__ void __launch_bounds__(128) sm90_gather_kernel(const Sm90Gather p) {
  using T = typename Op::T;
  __shared__ float red[4];
  const int pos = blockIdx.x;
  if (pos >= *p.num_post) return;
  const int sid = p.sorted_ids[pos];
  const bool live = sid < p.numel;
  const int tid = threadIdx.x;
  if (!live) {  // padding row: zeros (never read into an output)
    if (p.quant == 0 || p.out16) {
      T* dst = static_cast<T*>(p.out) + static_cast<size_t>(pos) * p.out_pitch;
      for (int i = tid; i < p.cols; i += 128) dst[i] = Op::from_f(0.f);
    } else {
      uint8_t* dst = static_cast<uint8_t*>(p.out) + static_cast<size_t>(pos) * p.out_pitch;
      const int cols = p.kperm ? sm90_kperm_cols(p.cols) : p.cols;
      for (int i = tid; i < cols; i += 128) dst[i] = 0;
    }
    if (p.quant != 0)
      for (int g = tid; g < p.groups; g += 128) p.scales[static_cast<size_t>(pos) * p.groups + g] = 0.f;
    return;
  }
  const int64_t srow = p.by_sorted ? sid / p.row_div : pos;
  const T* src = static_cast<const T*>(p.x) + srow * p.ldx;
  const float w = p.topk_w != nullptr ? p.topk_w[sid] : 1.f;
  auto val = [&](int i) -> float {
    float v = Op::to_f(src[i]);
    if (p.topk_w != nullptr) v = Op::to_f(Op::from_f(v * w));
    return v;
  };
  T* dst16 = static_cast<T*>(p.out) + static_cast<size_t>(pos) * p.out_pitch;
  uint8_t* dst = static_cast<uint8_t*>(p.out) + static_cast<size_t>(pos) * p.out_pitch;
  if (p.quant == 0) {
    if (p.topk_w == nullptr && p.cols % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
        p.out_pitch % 8 == 0) {
      const uint4* s4 = reinterpret_cast<const uint4*>(src);
      uint4* d4 = reinterpret_cast<uint4*>(dst16);
      for (int i = tid; i < p.cols / 8; i += 128) d4[i] = s4[i];
    } else {
      for (int i = tid; i < p.cols; i += 128) dst16[i] = Op::from_f(val(i));
    }
    return;
  }
  if (p.quant == 3 || p.quant == 1) {
    float s;
    if (p.quant == 3) {
      s = p.in_scale[p.expert_ids[pos / p.block]];
    } else {
      float mx = 0.f;
      for (int i = tid; i < p.cols; i += 128) mx = fmaxf(mx, fabsf(val(i)));
      s = fmaxf(block_max128(mx, red), 1e-10f) / 448.f;
    }
    for (int i = tid; i < p.cols; i += 128) {
      const uint8_t c = to_e4m3(val(i) / s);
      if (p.out16) dst16[i] = Op::from_f(e4m3_value(c));  // exact
      else dst[p.kperm ? sm90_kperm_pos(i) : i] = c;
    }
    if (p.kperm && !p.out16)  // the columns past cols of the last 16 land inside the row: zeros
      for (int i = p.cols + tid; i < sm90_kperm_cols(p.cols); i += 128) dst[sm90_kperm_pos(i)] = 0;
    if (tid == 0) p.scales[static_cast<size_t>(pos) * p.groups] = s;
    return;
  }
  if (p.quant == 4) {  // int8 per token, as act_prep_q (moe_act_q.cu): q = clamp(rint(x / s), -128, 127)
    float mx = 0.f;
    for (int i = tid; i < p.cols; i += 128) mx = fmaxf(mx, fabsf(val(i)));
    const float s = fmaxf(block_max128(mx, red), 1e-10f) / 127.f;
    for (int i = tid; i < p.cols; i += 128) {
      const float q = fminf(fmaxf(rintf(val(i) / s), -128.f), 127.f);
      if (p.out16) dst16[i] = Op::from_f(q);
      else dst[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
    if (tid == 0) p.scales[static_cast<size_t>(pos) * p.groups] = s;
    return;
  }
  if (p.quant == 5) {  // NVFP4 per 16, as act_prep_q: 16 consecutive lanes hold one block
    const float G = 1.f / p.in_scale[p.expert_ids[pos / p.block]];
    const float inv_G = 1.f / G;
    for (int base = 0; base < p.cols; base += 128) {
      const int i = base + tid;
      const float v = nvfp4_quant_lane(i < p.cols ? val(i) : 0.f, G, inv_G);
      if (i < p.cols) dst16[i] = Op::from_f(v);
    }
    if (tid == 0) p.scales[static_cast<size_t>(pos) * p.groups] = inv_G;
    return;
  }
  // quant 2: one warp per 128-column group
  const int warp = tid >> 5, lane = tid & 31;
  for (int g = warp; g < p.groups; g += 4) {
    const int c0 = g * 128, c1 = min(p.cols, c0 + 128);
    float mx = 0.f;
    for (int i = c0 + lane; i < c1; i += 32) mx = fmaxf(mx, fabsf(val(i)));
    mx = warp_max(mx);
    const float s = fmaxf(mx, 1e-10f) / 448.f;
    for (int i = c0 + lane; i < c1; i += 32) dst[i] = to_e4m3(val(i) / s);
    if (lane == 0) p.scales[static_cast<size_t>(pos) * p.groups + g] = s;
  }
}

// sm90_gather for quant 0..4 on 16-byte-aligned rows: one warp per position (device_common.cuh
// warp_row_chunks: 16-byte loads, 8- / 16-byte stores, up to 64 rows in flight per SM), four
// positions per block; same values as sm90_gather_kernel (ncu, qwen3-30b-a3b fp8 M = 4096: that
// kernel took 83 us for x and 96 us for h, 8% and 9% of the layer).
// WPR warps per position (device_common.cuh row_warps), 128 threads per block.
template <class Op, int WPR, bool PERM = false>
__global__ void __launch_bounds__(128) sm90_gather_warp_kernel(const Sm90Gather p) {
  using T = typename Op::T;
  __shared__ float red[4];
  const int pos = blockIdx.x * (4 / WPR) + (threadIdx.x >> 5) / WPR;
  // uniform over a block when WPR = 4; no sorted ids: every position is live (Sm90Gather::codes)
  if (pos >= p.rows || (p.num_post != nullptr && pos >= *p.num_post)) return;
  const int sid = p.sorted_ids != nullptr ? p.sorted_ids[pos] : pos;
  // A padding position (an expert's rows padded to its M-blocks) is left as it is: a GEMM row
  // depends only on its own A row, and no padding row reaches an output (GEMM2's epilogue skips
  // them), so writing zeros there (a third of the rows at 256 rows per expert) bought nothing.
  if (sid >= p.numel) return;
  const int nch = p.cols / 8;
  const bool codes = p.quant != 0 && !p.out16;  // e4m3 bytes, else 16-bit values
  const int64_t srow = p.by_sorted ? sid / p.row_div : pos;
  const bool w_on = p.topk_w != nullptr;
  const float w = w_on ? p.topk_w[sid] : 1.f;
  const float s_static = p.quant == 3 ? p.in_scale[p.expert_ids[pos / p.block]] : 1.f;
  auto scale = [&](int g, float sg) { p.scales[static_cast<size_t>(pos) * p.groups + g] = sg; };
  const T* src = static_cast<const T*>(p.x) + srow * p.ldx;
  if (codes) {
    uint2* row = reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.out) + static_cast<size_t>(pos) * p.out_pitch);
    warp_row_quant<Op, WPR, true, PERM>(src, nch, w_on, w, p.quant, s_static, red,
                                        [&](int c, uint2 v) { row[c] = v; }, scale);
  } else {
    uint4* row = reinterpret_cast<uint4*>(static_cast<T*>(p.out) + static_cast<size_t>(pos) * p.out_pitch);
    warp_row_quant<Op, WPR, false>(src, nch, w_on, w, p.quant, s_static, red,
                                   [&](int c, const float (&q)[8]) { row[c] = pack8<T>(q); }, scale);
  }
}

// Second pass of the once-per-token quantization (Sm90Gather::codes): one warp per position, four
// positions per block; position pos copies token sid / row_div's codes (16-byte pieces, an 8-byte
// one where cols is odd in 8s) and scales. Padding positions are left as they are (as
// sm90_gather_warp_kernel leaves them).
__global__ void __launch_bounds__(128) sm90_gather_codes_kernel(const Sm90Gather p) {
  const int pos = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (pos >= p.rows || pos >= *p.num_post) return;
  const int sid = p.sorted_ids[pos];
  if (sid >= p.numel) return;
  const int64_t srow = sid / p.row_div;
  const uint8_t* src = static_cast<const uint8_t*>(p.codes) + srow * p.codes_pitch;
  uint8_t* dst = static_cast<uint8_t*>(p.out) + static_cast<size_t>(pos) * p.out_pitch;
  const int n16 = p.kperm ? sm90_kperm_cols(p.cols) / 16 : p.cols / 16;  // kperm rows run to a multiple of 16
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  int c = lane;
  for (; c + 96 < n16; c += 128) {  // four 16-byte loads in flight per lane
    const uint4 v0 = __ldg(s4 + c), v1 = __ldg(s4 + c + 32), v2 = __ldg(s4 + c + 64), v3 = __ldg(s4 + c + 96);
    d4[c] = v0;
    d4[c + 32] = v1;
    d4[c + 64] = v2;
    d4[c + 96] = v3;
  }
  for (; c < n16; c += 32) d4[c] = __ldg(s4 + c);
  if (!p.kperm && p.cols % 16 != 0 && lane == 0)
    reinterpret_cast<uint2*>(dst)[2 * n16] = __ldg(reinterpret_cast<const uint2*>(src) + 2 * n16);
  for (int g = lane; g < p.groups; g += 32)
    p.scales[static_cast<size_t>(pos) * p.groups + g] = p.code_scales[srow * p.groups + g];
}

// Tiled plain copy (sm90_moe.cuh): one thread per 16 bytes of dst, dst index order
// [e][nb][kb][r][16-byte piece v].
__global__ void make_plain_kernel(const uint8_t* __restrict__ src, int esz, int E, int N, int K, int nt, int kt,
                                  int interleaved, int half, uint8_t* __restrict__ dst, uint32_t xor_mask) {
  const int64_t total = static_cast<int64_t>(E) * nt * kt * 256 * 8;
  const int64_t row_bytes = static_cast<int64_t>(K) * esz;
  for (int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; id < total;
       id += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int v = static_cast<int>(id & 7);
    const int r = static_cast<int>((id >> 3) & 255);
    const int64_t t = id >> 11;  // (e, nb, kb)
    const int64_t kb = t % kt, nb = (t / kt) % nt, e = t / kt / nt;
    const int64_t n = nb * 256 + r;
    int64_t row = n;
    bool ok = n < N;
    if (interleaved) {
      row = interleaved_row(static_cast<int>(n), half);
      ok = (n >> 4) * 8 + (n & 7) < half && row < N;
    }
    uint8_t b[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int64_t byte = kb * 128 + v * 16 + i;
      b[i] = (ok && byte < row_bytes) ? static_cast<uint8_t>(src[(e * N + row) * row_bytes + byte] ^ xor_mask) : 0;
    }
    uint4 o;
    o.x = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    o.y = b[4] | (b[5] << 8) | (b[6] << 16) | (static_cast<uint32_t>(b[7]) << 24);
    o.z = b[8] | (b[9] << 8) | (b[10] << 16) | (static_cast<uint32_t>(b[11]) << 24);
    o.w = b[12] | (b[13] << 8) | (b[14] << 16) | (static_cast<uint32_t>(b[15]) << 24);
    // stored 128B-swizzled (16-byte chunk v of row r at chunk v ^ (r & 7), TMA's SWIZZLE_128B
    // pattern): a 1-D bulk copy of a box lands exactly as a swizzled 2-D TMA box would
    reinterpret_cast<uint4*>(dst)[(id & ~int64_t{7}) | (v ^ (r & 7))] = o;
  }
}

// ---- host side ----------------------------------------------------------------------------------------
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// 2-D tensor map of a K-major operand: dims (inner first) {k, rows}, pitch in bytes per row, box
// {128 bytes of k, box_rows}, 128B swizzle, zero fill out of bounds.
CUtensorMap make_map(const void* base, bool byte_elems, int k, int rows, int64_t pitch_bytes, int box_rows) {
  CUtensorMap m;
  EncodeTiled enc = encode_fn();
  QMOE_CHECK(enc != nullptr, kInternal, "CUDA: cuTensorMapEncodeTiled is not available from the driver");
  const CUtensorMapDataType dt = byte_elems ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch_bytes)};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(byte_elems ? 128 : 64), static_cast<cuuint32_t>(box_rows)};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = enc(&m, dt, 2, const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  QMOE_CHECK(r == CUDA_SUCCESS, kInternal, "CUDA: cuTensorMapEncodeTiled failed (", static_cast<int>(r), ") for k ", k,
             " rows ", rows, " pitch ", pitch_bytes);
  return m;
}

// Tiles of the grouped raster (raster_tile): the M-blocks rounded up to whole groups of kGroupM,
// x ntn N tiles. The kernels spell the same expression out: as a call, ptxas scheduled 36 of them
// differently from the builds measured on the H200.
int raster_tiles(int max_blocks, int ntn) { return (max_blocks + kGroupM - 1) / kGroupM * kGroupM * ntn; }
// The grid of a raster of `tiles` tiles: one CTA per tile, or (persistent: the CTAs take tiles from
// Sm90Gemm::tile_counter) one per SM
dim3 raster_grid(int tiles, bool persistent) {
  return dim3(static_cast<unsigned>(persistent ? std::min(tiles, device_sm_count()) : tiles));
}

// The 128-row tile kernel as CTA pairs (Sm90Gemm::cluster2): clusters of two, the A map's box half
// the M-block's rows; persistent: as many pairs as can be resident at once (a GPC with an odd number
// of free SMs leaves one idle), taking pairs from the tile counter.
template <class Op, bool FP8>
void launch_gemm_pairs(const Sm90Gemm& p, cudaStream_t s) {
  using C = Sm90Cfg<FP8, kBM, false>;
  auto kern = sm90_moe_gemm_kernel<Op, FP8, false, kBM, true>;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(384);
  cfg.dynamicSmemBytes = C::SMEM;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  static int max_pairs = 0;
  static std::once_flag once;
  std::call_once(once, [&] {
    QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
    cudaLaunchConfig_t q = cfg;
    q.gridDim = dim3(2 * static_cast<unsigned>(device_sm_count()));
    int n = 0;
    QMOE_CUDA_OK(cudaOccupancyMaxActiveClusters(&n, kern, &q));
    max_pairs = std::max(1, n);
  });
  QMOE_CHECK(p.a_src == nullptr, kInternal, "sm90 GEMM: CTA pairs load A by TMA (no rows from x)");
  const CUtensorMap ma = make_map(p.a, FP8, p.k, p.a_rows, static_cast<int64_t>(p.a_pitch) * (FP8 ? 1 : 2), kBM / 2);
  const int pairs = raster_tiles(p.max_blocks, ((p.np + C::BN - 1) / C::BN + 1) / 2);
  cfg.gridDim = dim3(2 * static_cast<unsigned>(p.tile_counter != nullptr ? std::min(pairs, max_pairs) : pairs));
  QMOE_CUDA_OK(cudaLaunchKernelEx(&cfg, kern, ma, p));
  QMOE_CUDA_LAUNCH_OK();
}

template <class Op, bool FP8, bool I8 = false, int BM = kBM, bool W8 = false>
void launch_gemm(const Sm90Gemm& p, cudaStream_t s) {
  if constexpr (!I8 && BM == kBM) {
    if (p.cluster2) {
      launch_gemm_pairs<Op, FP8>(p, s);
      return;
    }
  }
  using C = Sm90Cfg<FP8, BM, I8, W8>;
  auto kern = sm90_moe_gemm_kernel<Op, FP8, I8, BM, false, W8>;
  static std::once_flag once;
  std::call_once(once, [&] { QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM)); });
  const int esz = FP8 ? 1 : 2;
  const CUtensorMap ma = make_map(p.a, FP8, p.k, p.a_rows, static_cast<int64_t>(p.a_pitch) * esz, BM);
  const dim3 grid = raster_grid(raster_tiles(p.max_blocks, (p.np + C::BN - 1) / C::BN), p.tile_counter != nullptr);
  kern<<<grid, 384, C::SMEM, s>>>(ma, p);
  QMOE_CUDA_LAUNCH_OK();
#ifdef QMOE_SM90_TRACE
  // the first two uncaptured launches of the process (GEMM1 and GEMM2 of the first forward)
  static int traced = 0;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(s, &cs);
  if (const char* path = std::getenv("QMOE_SM90_TRACE_FILE"); path != nullptr && traced < 2 && cs == cudaStreamCaptureStatusNone) {
    ++traced;
    QMOE_CUDA_OK(cudaStreamSynchronize(s));
    const unsigned n = std::min<unsigned>(grid.x, kTraceMax);
    std::vector<unsigned long long> t(static_cast<size_t>(n) * 6);
    QMOE_CUDA_OK(cudaMemcpyFromSymbol(t.data(), g_sm90_trace, t.size() * sizeof(unsigned long long)));
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "# launch fp8=%d bm=%d bn=%d grid=%u np=%d k=%d stage=%d\n", FP8 ? 1 : 0, BM, C::BN, grid.x, p.np, p.k, p.stage);
      for (unsigned i = 0; i < n; ++i)
        std::fprintf(f, "%u %llu %llu %llu %llu %llu\n", i, t[i * 6], t[i * 6 + 1], t[i * 6 + 2], t[i * 6 + 3], t[i * 6 + 5]);
      std::fclose(f);
    }
  }
#endif
}

template <class Op, bool FP8, int NT, bool I8 = false>
void launch_stream(const Sm90Gemm& p, cudaStream_t s) {
  using C = StreamCfg<NT>;
  auto kern = sm90_stream_kernel<Op, FP8, NT, I8>;
  static std::once_flag once;
  std::call_once(once, [&] { QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM)); });
  const int esz = FP8 ? 1 : 2;
  const CUtensorMap mx = make_map(p.a, FP8, p.k, p.a_rows, static_cast<int64_t>(p.a_pitch) * esz, NT);
  // one CTA per SM (the items are counted on the device; at most max_blocks x boxes of them)
  const int64_t items = static_cast<int64_t>(p.max_blocks) * sm90_plain_nt(p.np);
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(items, device_sm_count())));
  kern<<<grid, 384, C::SMEM, s>>>(mx, p);
  QMOE_CUDA_LAUNCH_OK();
}

template <class Op, WFmt F, int SC, int TN, bool Q8 = false, bool LIVE = false>
void launch_wq_tn(const Sm90Gemm& p, cudaStream_t s) {
  using C = WqCfg<F, TN, SC, Q8>;
  auto kern = sm90_moe_wq_kernel<Op, F, SC, TN, Q8, LIVE>;
  static std::once_flag once;
  std::call_once(once, [&] { QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM)); });
  // Q8: e4m3 code rows, permuted within each 16 columns, so a row's last 16 columns may hold codes
  // past k (the gather writes zeros where columns past k land): the map covers them
  const CUtensorMap mx = Q8 ? make_map(p.a, true, sm90_kperm_cols(p.k), p.a_rows, p.a_pitch, TN)
                            : make_map(p.a, false, p.k, p.a_rows, static_cast<int64_t>(p.a_pitch) * 2, TN);
  const bool persist = wq_persist<F, TN, SC>() && p.tile_counter != nullptr;
  kern<<<raster_grid(raster_tiles(p.max_blocks, (p.np + 127) / 128), persist), 384, C::SMEM, s>>>(mx, p);
  QMOE_CUDA_LAUNCH_OK();
}
template <class Op, WFmt F, int SC>
void launch_wq(const Sm90Gemm& p, cudaStream_t s) {
  if constexpr (F == WFmt::kU4 && SC != kScFold) {
    if (p.q8) {
      QMOE_CHECK(sm90_wq_q8_supports(p.block, SC == kScChannel), kInternal, "sm90 wq GEMM: Q8 with M-blocks of ",
                 p.block, " rows", SC == kScChannel ? " and channel scales" : "");
      if constexpr (SC == kScChannel) launch_wq_tn<Op, F, SC, kBM, true>(p, s);
      else p.block == 64 ? launch_wq_tn<Op, F, SC, 64, true>(p, s) : launch_wq_tn<Op, F, SC, kBM, true>(p, s);
      return;
    }
  }
  QMOE_CHECK(!p.q8, kInternal, "sm90 wq GEMM: Q8 is for int4 atoms with group or channel scales");
  const auto wide = [&](auto tn) {  // 128- / 256-row tiles: the LIVE kernel where p.live_cols
    constexpr int TN = decltype(tn)::value;
    if (p.live_cols) launch_wq_tn<Op, F, SC, TN, false, true>(p, s);
    else launch_wq_tn<Op, F, SC, TN>(p, s);
  };
  if (p.block == 256) {
    if constexpr (wq_tn256<F, SC>()) wide(std::integral_constant<int, 256>{});
    else
      QMOE_CHECK(false, kInternal,
                 "sm90 wq GEMM: 256-row M-blocks are for fp4, int4 with channel or folded scales, or int8 / fp8 with channel scales");
    return;
  }
  if (p.block == 32) launch_wq_tn<Op, F, SC, 32>(p, s);
  else if (p.block == 64) launch_wq_tn<Op, F, SC, 64>(p, s);
  else wide(std::integral_constant<int, kBM>{});
}

bool env_off() {
  return !env_on("QMOE_CUDA_WGMMA");
}

}  // namespace

bool sm90_kernel_runs(const void* kernel) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return fa.binaryVersion >= 90;
}

bool sm90_available() {
  static const bool ok = !env_off() && sm90_kernel_runs(reinterpret_cast<const void*>(sm90_moe_gemm_kernel<BF16, false>)) &&
                         encode_fn() != nullptr;
  return ok;
}

bool sm90_wq_q8_supports(int block, bool channel) {
  // the interleaved one-CTA loop (wq_ctas): 128-row token tiles, and 64-row ones with group scales
  return block == kBM || (block == 64 && !channel);
}

bool sm90_supports(WFmt fmt, int mode, int chunk) {
  if (fmt == WFmt::k16) return mode == 0;
  if (fmt == WFmt::kFP8) return mode == 3 || (mode == 1 && chunk % 128 == 0);
  // WNA16: groups that are multiples of 128 k-columns (a 128-k stage never straddles two) or
  // channel scales; smaller groups and g_idx stay on mma.sync
  if (fmt == WFmt::kU4 || fmt == WFmt::kU8) return mode == 1 && chunk % 128 == 0;
  return false;
}

void launch_sm90_wq_gemm(bool f16, WFmt fmt, const Sm90Gemm& p, cudaStream_t s) {
  QMOE_CHECK(fmt == WFmt::kU4 || fmt == WFmt::kU8 || fmt == WFmt::kNV4 || fmt == WFmt::kMX4 || fmt == WFmt::kFP8,
             kInternal, "sm90 wq GEMM: format ", static_cast<int>(fmt));
  QMOE_CHECK(p.block == 256 || p.block == kBM || p.block == 64 || p.block == 32, kInternal, "sm90 wq GEMM: M-blocks of ",
             p.block, " rows (256, 128, 64 or 32)");
  const bool ch = p.chunk >= p.kp;  // channel scales (or one group covering all of K)
  QMOE_CHECK(!p.fold || (fmt == WFmt::kU4 && p.row_scale == nullptr), kInternal,
             "sm90 wq GEMM: folded scales are for int4 WNA16 only");
  if (fmt == WFmt::kNV4) {  // block scales in the operands: always the channel loop
    if (f16) launch_wq<F16, WFmt::kNV4, kScChannel>(p, s);
    else launch_wq<BF16, WFmt::kNV4, kScChannel>(p, s);
  } else if (fmt == WFmt::kMX4) {
    if (f16) launch_wq<F16, WFmt::kMX4, kScChannel>(p, s);
    else launch_wq<BF16, WFmt::kMX4, kScChannel>(p, s);
  } else if (fmt == WFmt::kU4) {
    if (ch) f16 ? launch_wq<F16, WFmt::kU4, kScChannel>(p, s) : launch_wq<BF16, WFmt::kU4, kScChannel>(p, s);
    else if (p.fold) f16 ? launch_wq<F16, WFmt::kU4, kScFold>(p, s) : launch_wq<BF16, WFmt::kU4, kScFold>(p, s);
    else f16 ? launch_wq<F16, WFmt::kU4, kScGroup>(p, s) : launch_wq<BF16, WFmt::kU4, kScGroup>(p, s);
  } else if (fmt == WFmt::kFP8) {  // FP8 weight-only (moe_forward.cu sm90_eligible): tensor / channel scales
    QMOE_CHECK(ch && p.row_scale == nullptr, kInternal, "sm90 wq GEMM: fp8 weights need one scale per row for K");
    if (f16) launch_wq<F16, WFmt::kFP8, kScChannel>(p, s);
    else launch_wq<BF16, WFmt::kFP8, kScChannel>(p, s);
  } else {
    if (ch) f16 ? launch_wq<F16, WFmt::kU8, kScChannel>(p, s) : launch_wq<BF16, WFmt::kU8, kScChannel>(p, s);
    else f16 ? launch_wq<F16, WFmt::kU8, kScGroup>(p, s) : launch_wq<BF16, WFmt::kU8, kScGroup>(p, s);
  }
}

void launch_sm90_gemm(bool f16, int kind, const Sm90Gemm& p, cudaStream_t s) {
  QMOE_CHECK(p.block == kBM || p.block == 64, kInternal, "sm90 GEMM: M-blocks of ", p.block, " rows for kind ", kind);
  const bool b64 = p.block == 64;
  if (kind == 2) {
    if (f16) b64 ? launch_gemm<F16, true, true, 64>(p, s) : launch_gemm<F16, true, true>(p, s);
    else b64 ? launch_gemm<BF16, true, true, 64>(p, s) : launch_gemm<BF16, true, true>(p, s);
  } else if (kind == 1) {
    // Sm90Gemm::fp8_wide: n256 tiles (the plan sets it only where one scale pair covers all of K)
    if (p.fp8_wide) {
      QMOE_CHECK(!p.cluster2 && p.kchunk == 0 && p.rs_groups <= 1, kInternal,
                 "sm90 GEMM: fp8 n256 tiles with CTA pairs or scales that change along K");
      if (f16) b64 ? launch_gemm<F16, true, false, 64, true>(p, s) : launch_gemm<F16, true, false, kBM, true>(p, s);
      else b64 ? launch_gemm<BF16, true, false, 64, true>(p, s) : launch_gemm<BF16, true, false, kBM, true>(p, s);
      return;
    }
    if (f16) b64 ? launch_gemm<F16, true, false, 64>(p, s) : launch_gemm<F16, true>(p, s);
    else b64 ? launch_gemm<BF16, true, false, 64>(p, s) : launch_gemm<BF16, true>(p, s);
  } else {
    if (f16) b64 ? launch_gemm<F16, false, false, 64>(p, s) : launch_gemm<F16, false>(p, s);
    else b64 ? launch_gemm<BF16, false, false, 64>(p, s) : launch_gemm<BF16, false>(p, s);
  }
}

void launch_sm90_stream(bool f16, int kind, const Sm90Gemm& p, cudaStream_t s) {
  QMOE_CHECK(kind >= 0 && kind <= 2 && (p.block == 16 || p.block == 64), kInternal, "sm90 stream GEMM: kind ",
             kind, ", M-blocks of ", p.block, " rows");
  QMOE_CHECK(kind == 0 || (p.kchunk == 0 && p.rs_groups == 1), kInternal,
             "sm90 stream GEMM: fp8 / int8 scales that change along K");
  const bool fp8 = kind == 1, b16 = p.block == 16;
  if (kind == 2) {
    if (f16) b16 ? launch_stream<F16, true, 16, true>(p, s) : launch_stream<F16, true, 64, true>(p, s);
    else b16 ? launch_stream<BF16, true, 16, true>(p, s) : launch_stream<BF16, true, 64, true>(p, s);
  } else if (fp8) {
    if (f16) b16 ? launch_stream<F16, true, 16>(p, s) : launch_stream<F16, true, 64>(p, s);
    else b16 ? launch_stream<BF16, true, 16>(p, s) : launch_stream<BF16, true, 64>(p, s);
  } else {
    if (f16) b16 ? launch_stream<F16, false, 16>(p, s) : launch_stream<F16, false, 64>(p, s);
    else b16 ? launch_stream<BF16, false, 16>(p, s) : launch_stream<BF16, false, 64>(p, s);
  }
}

bool sm90_gather_warp_ok(const Sm90Gather& p) {
  return p.quant <= 4 && p.cols % 8 == 0 && p.ldx % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.out_pitch % 8 == 0;
}

void launch_sm90_gather(bool f16, const Sm90Gather& p, cudaStream_t s) {
  if (p.rows == 0) return;
  if (p.codes != nullptr) {
    QMOE_CHECK(p.cols % 8 == 0 && p.codes_pitch % 16 == 0 && p.out_pitch % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.codes) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
                   p.sorted_ids != nullptr && p.num_post != nullptr,
               kInternal, "sm90_gather: code rows of ", p.cols, " bytes (pitch ", p.codes_pitch, " -> ", p.out_pitch,
               ") are not 16-byte aligned");
    sm90_gather_codes_kernel<<<static_cast<unsigned>((p.rows + 3) / 4), 128, 0, s>>>(p);
    QMOE_CUDA_LAUNCH_OK();
    return;
  }
  QMOE_CHECK(p.sorted_ids != nullptr || sm90_gather_warp_ok(p), kInternal,
             "sm90_gather: positions without sorted ids need 16-byte aligned rows");
  // one warp per position (quant 0..4, 16-byte aligned rows and output pitch)
  QMOE_CHECK(!p.kperm || ((p.quant == 1 || p.quant == 3) && !p.out16 && p.out_pitch >= sm90_kperm_cols(p.cols)),
             kInternal, "sm90_gather: permuted rows are e4m3 codes per token or static, rows of ", p.out_pitch,
             " bytes for ", p.cols, " columns");
  if (sm90_gather_warp_ok(p)) {
    auto go = [&](auto kern, int wpr) { kern<<<static_cast<unsigned>((p.rows * wpr + 3) / 4), 128, 0, s>>>(p); };
    if (p.kperm) {
      if (row_warps(p.cols / 8) == 4) f16 ? go(sm90_gather_warp_kernel<F16, 4, true>, 4) : go(sm90_gather_warp_kernel<BF16, 4, true>, 4);
      else f16 ? go(sm90_gather_warp_kernel<F16, 1, true>, 1) : go(sm90_gather_warp_kernel<BF16, 1, true>, 1);
    } else if (row_warps(p.cols / 8) == 4) {
      if (f16) go(sm90_gather_warp_kernel<F16, 4>, 4);
      else go(sm90_gather_warp_kernel<BF16, 4>, 4);
    } else {
      if (f16) go(sm90_gather_warp_kernel<F16, 1>, 1);
      else go(sm90_gather_warp_kernel<BF16, 1>, 1);
    }
    QMOE_CUDA_LAUNCH_OK();
    return;
  }
  if (f16) sm90_gather_kernel<F16><<<static_cast<unsigned>(p.rows), 128, 0, s>>>(p);
  else sm90_gather_kernel<BF16><<<static_cast<unsigned>(p.rows), 128, 0, s>>>(p);
  QMOE_CUDA_LAUNCH_OK();
}

void launch_make_plain(const void* src, int bits, int E, int N, int K, int np, int kp, bool interleaved, int half,
                       void* dst, cudaStream_t s, int xor_mask) {
  const int esz = bits / 8;
  const int nt = sm90_plain_nt(np), kt = sm90_plain_kt(kp, bits);
  const int64_t vecs = static_cast<int64_t>(E) * nt * kt * 256 * 8;
  const int blocks = static_cast<int>(std::min<int64_t>((vecs + 255) / 256, 65535 * 8));
  make_plain_kernel<<<blocks, 256, 0, s>>>(static_cast<const uint8_t*>(src), esz, E, N, K, nt, kt, interleaved ? 1 : 0,
                                          half, static_cast<uint8_t*>(dst), static_cast<uint32_t>(xor_mask));
  QMOE_CUDA_LAUNCH_OK();
}

}  // namespace qmoe::cuda
