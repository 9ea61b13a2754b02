// Launch-configuration choice for the CUDA fused MoE: a pure function of the problem, so it is
// unit-tested on machines without a GPU (tests/cuda/test_select_config.cpp). Two regimes:
// small M (decode, memory-bound: 16-row tiles, narrow N tiles, K split across the grid so that
// every SM streams weights) and large M (prefill, tensor-core bound: 128x128 tiles).
// C++17-clean: included by .cu files.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>

namespace qmoe::cuda {

// Weight element formats of the prepared (repacked) weights; the MMA operand type is the
// activation dtype (bf16 or fp16) in every case.
enum class WFmt : int {
  k16 = 0, kU4 = 1, kU8 = 2, kFP8 = 3,
  kNV4 = 4, kMX4 = 5,  // backend II (moe_gemm_fp4.cu): e2m1 x e4m3/16 (NVFP4), e2m1 x e8m0/32 (MXFP4)
};

inline int wfmt_bits(WFmt f) {
  return f == WFmt::k16 ? 16 : (f == WFmt::kU4 || f == WFmt::kNV4 || f == WFmt::kMX4) ? 4 : 8;
}

// Tile families compiled in moe_gemm.cu (kept small: each is instantiated per format).
enum class Tile : int {
  kSmall = 0,   // BM 16, BN 64, 4 warps (each one n16 column strip), 6-stage cp.async pipeline
  kMedium = 1,  // BM 64, BN 128, 4 warps (2 x 2, warp tile 32 x 64), 4 stages
  kLarge = 2,   // BM 128, BN 128, 8 warps (2 x 4, warp tile 64 x 32), 3 stages; 16-bit weights:
                // BN 256 (warp tile 64 x 64)
};
inline int tile_bm(Tile t) { return t == Tile::kSmall ? 16 : t == Tile::kMedium ? 64 : 128; }
// N extent of a block (for the split rule). Small tiles are 128 wide for 8-bit and 4-bit
// weights (a warp covers n32), 64 for 16-bit.
inline int tile_bn(Tile t, WFmt f = WFmt::k16) {
  if (t != Tile::kSmall) return 128;
  return f == WFmt::k16 ? 64 : 128;
}

struct GemmProblem {
  int64_t m = 1;       // tokens
  int top_k = 1;
  int num_experts = 1; // local experts
  int n = 0;           // output columns of this GEMM (2*I for GEMM1, H for GEMM2)
  int k = 0;           // reduction length (H for GEMM1, I for GEMM2)
  WFmt wfmt = WFmt::k16;
  int num_sms = 132;
  int chunk = 1 << 30; // accumulation chunk along K (k-columns per weight / activation scale; decode)
};

struct GemmConfig {
  Tile tile = Tile::kSmall;
  int splits = 1;      // K split across gridDim.z (partial sums combined with fp32 atomics)
};

// Expected rows per touched expert decides the regime; splits make the small regime put at
// least ~2 blocks of weight streaming on every SM.
inline GemmConfig select_config(const GemmProblem& p) {
  GemmConfig c;
  const int64_t slots = p.m * p.top_k;
  const int64_t touched = slots < p.num_experts ? slots : p.num_experts;
  const int64_t rows_per_expert = (slots + touched - 1) / (touched > 0 ? touched : 1);
  // Each M-block streams the whole expert slice it multiplies, so an expert's weights are read
  // ceil(rows / BM) times: 16-row tiles up to 16 rows, 64-row tiles up to 64, then 128-row tiles
  // (tensor-core bound from there on).
  c.tile = rows_per_expert <= 16 ? Tile::kSmall : rows_per_expert <= 64 ? Tile::kMedium : Tile::kLarge;
  if (c.tile == Tile::kLarge) return c;
  const int64_t bn = tile_bn(c.tile, p.wfmt), bm = tile_bm(c.tile);
  const int64_t mblocks = touched * ((rows_per_expert + bm - 1) / bm);
  const int64_t blocks = mblocks * ((p.n + bn - 1) / bn);
  const int64_t want = 2LL * p.num_sms;
  const int64_t k_tiles = (p.k + 63) / 64;
  int s = 1;
  // Each split keeps at least 8 k-tiles of 64: shorter blocks spend their time filling the
  // pipeline (measured on the H200: a 6-k-tile GEMM2 split ran at 1.6 TB/s).
  while (blocks * s < want && s < 16 && k_tiles / (2 * s) >= 8) s *= 2;
  c.splits = s;
  return c;
}

// ---- decode (moe_decode.cu): few rows per expert ------------------------------------------------
// The decode kernel streams each expert's weight atoms straight from global memory into registers
// (no shared-memory staging of B), M-blocks of 8 rows (align block 8: the token side of a swapped
// m16n8k16, weights as the 16-row A operand), K split over the warps of a block and reduced in
// shared memory. Its A rows (the block's tokens over the block's K range) sit in shared memory, so
// one block's K range is capped; longer K is split over the grid (fp32 atomics, as the small tile).
constexpr int kDecodeRows = 8;        // rows per M-block (align block size)
constexpr int kDecodeMaxRows = 4;     // expected rows per touched expert up to which 8-row M-blocks run
constexpr int kDecodeMaxRows16 = 16;  // ... and up to which 16-row M-blocks run (sm_90 bulk kernel only)
constexpr int kDecodeTileN = 32;      // output columns per block (2 n16 atom columns)
constexpr int kDecodeWarps = 8;       // warps per block (K split over them)
constexpr int kDecodeMaxK = 4096;     // k-columns of A one block stages (8 rows x 4096 x 2 B = 64 KiB)
// ... where each M-block holds one row (one token without align: moe_forward.cu's direct routing,
// GEMM1): the same bytes of staged rows hold 8x the K, so no K split is needed for staging up to 32768
constexpr int kDecodeMaxK1 = kDecodeMaxK * 8;

struct DecodeConfig {
  bool use = false;
  int rows = kDecodeRows;    // M-block rows: 8, or 16 (5-16 expected rows per expert; the sm_90 bulk
                             // kernel only: the caller falls back to the 16-row mma.sync tile without it)
  int splits = 1;            // K split over gridDim.z (fp32 atomics; GEMM1: partial sums + act_finish)
  int slab_ktiles = 1;       // k-tiles (64 columns) of one warp's contiguous K piece (whole chunks)
  int ktiles_per_split = 0;  // multiple of slab_ktiles
};

// Whole scale chunks per warp piece where a chunk is a multiple of 64 columns (the per-chunk
// product order of numerics.md is then kept inside one warp); else one k-tile.
inline int decode_slab_ktiles(int chunk, int k) {
  const int kp = (k + 63) / 64 * 64;
  if (chunk >= kp || chunk % 64 != 0) return 1;
  return chunk / 64;
}

// Per-item cost of the bulk decode kernel beyond its K range, in k-tiles (the K-group reduction over
// the warps, the epilogue, the scale wait; a fit of the thirtieth session's trace, docs/perf.md: an
// item of qwen3-30b-a3b took ~0.66 us + 0.058 us per k-tile, i.e. ~11 k-tiles). 16: with 8, the rule
// also split gpt-oss-120b's GEMM2 at one token in two (3 items of 24 k-tiles per block against 2 of
// 46), measured 0.95x on int4 (thirty-third session, r3).
constexpr int kDecodeItemCostKt = 16;
// The longest walk of one block over a K-split grid, in k-tiles: `items` (M-block, column tile) items
// per split of `kt` k-tiles each, `splits` splits sharing `resident` blocks (the bulk kernel's grid:
// one wave per split, an equal share of the items per block).
inline int64_t decode_walk(int64_t items, int kt, int splits, int64_t resident) {
  const int64_t per_split = std::max<int64_t>(1, resident / splits);
  return (items + per_split - 1) / per_split * (kt + kDecodeItemCostKt);
}

// Decode runs when the expected rows per touched expert are <= kDecodeMaxRows. K splits over the
// grid only when one block's K range would exceed max_k (kDecodeMaxK; kDecodeMaxK1 where every
// M-block holds one row), or when the grid would put less than ~2 blocks on each SM and every
// split keeps >= 8 k-tiles (GEMM2-like shapes; GEMM1 pays an extra memset + act_finish launch
// for a split, so splitting for fill is left to `fill_splits`).
// balanced: after the fill rule, 4-bit weights take more splits where they shorten the longest walk
// by >= 5% (decode_walk, two resident blocks per SM): e.g. llama4-scout's GEMM2 at one token, 160
// column tiles of 128 k-tiles: 2 splits walk 2 items of 64 each, 3 splits 2 items of 44. Measured on
// the H200 (docs/perf.md, thirty-third session, r3): llama4-scout M = 1 int4 / int4-g32 / MXFP4 /
// NVFP4A16 / W4A8-fp8 1.06-1.08x; its bf16 / fp8 rows 0.97 / 0.96x (their items stream at the
// bandwidth already; the third split's partial sums cost more than the walk saves): 16- and 8-bit
// weights keep the fill rule.
inline DecodeConfig select_decode(const GemmProblem& p, bool fill_splits, int max_k = kDecodeMaxK,
                                  bool balanced = true) {
  DecodeConfig c;
  const int64_t slots = p.m * p.top_k;
  const int64_t touched = slots < p.num_experts ? slots : p.num_experts;
  const int64_t rows_per_expert = (slots + touched - 1) / (touched > 0 ? touched : 1);
  // Measured on the H200 (docs/perf.md): against the 16-row mma.sync tile, 8-row decode blocks
  // gain 7-38% on int4 / fp8 at 1 row per expert, break even at 2-4 and lose 30-37% at 8
  // (deepseek-v3 / gpt-oss-120b M = 256, two blocks per expert): up to 4 rows.
  // int4 at 5-16 rows: 16-row M-blocks (two n8 token operands per dequantized weight fragment).
  // Measured on the H200 against the 16-row mma.sync tile (docs/perf.md, sixth session): int4 /
  // W4A8 1.2x at mixtral-8x7b M = 64 and deepseek-v3 M = 256, even elsewhere; fp8, NVFP4, MXFP4 and
  // INT8 W8A8 0.7-0.95x (the tile's operand path is cheaper for them): those keep the tile.
  // 16-bit weights: up to 4 rows, on the sm_90 bulk kernel only (the caller keeps the 16-row tile
  // without it: the register-ring kernel measured 3-10% slower than the tile on 16-bit weights).
  c.use = rows_per_expert <= kDecodeMaxRows || (p.wfmt == WFmt::kU4 && rows_per_expert <= kDecodeMaxRows16);
  c.rows = rows_per_expert <= kDecodeMaxRows ? kDecodeRows : 16;
  c.slab_ktiles = decode_slab_ktiles(p.chunk, p.k);
  const int ktiles = (p.k + 63) / 64;
  const int slabs = (ktiles + c.slab_ktiles - 1) / c.slab_ktiles;
  auto kps = [&](int s) { return (slabs + s - 1) / s * c.slab_ktiles; };  // k-tiles per split
  int s = 1;
  while (kps(s) * 64 > max_k && s < slabs) ++s;
  if (fill_splits) {
    const int64_t mblocks = touched * ((rows_per_expert + c.rows - 1) / c.rows);
    const int64_t blocks = mblocks * ((p.n + kDecodeTileN - 1) / kDecodeTileN);
    while (blocks * s < 2LL * p.num_sms && s < 16 && ktiles / (2 * s) >= 8) s *= 2;
    if (balanced && wfmt_bits(p.wfmt) == 4) {
      const int64_t resident = 2LL * p.num_sms;
      auto walk = [&](int t) { return decode_walk(blocks, kps(t), (ktiles + kps(t) - 1) / kps(t), resident); };
      int best = s;
      for (int t = s + 1; t <= 16 && ktiles / t >= 8; ++t)
        if (walk(t) * 20 <= walk(best) * 19) best = t;
      s = best;
    }
  }
  c.ktiles_per_split = kps(s);
  c.splits = (ktiles + c.ktiles_per_split - 1) / c.ktiles_per_split;  // no empty split
  return c;
}

// ---- sm_90 bulk decode kernel (moe_decode.cu): warp slabs and reduction buffers ---------------------
// Each stage of the kernel's ring holds one slab of `slab` atoms per consumer warp and column; an
// item's K range of `natoms` atoms per column thus costs its slowest warp
// slab * ceil(natoms / (kDecodeWarps * slab)) atom steps, while the other warps wait for it at the
// item's reduction. With 2-atom slabs, qwen3-30b-a3b's fp8 GEMM2 (K = 768: 24 atoms of 32 columns)
// ran a full stage (16 atoms) and a half one: 4 steps for 3 atoms' worth of work per warp.
inline int dec90_path(int natoms, int slab) {
  const int per_stage = kDecodeWarps * slab;
  return slab * ((natoms + per_stage - 1) / per_stage);
}
struct Dec90Shape {
  int slab = 0, red_bufs = 0, blocks = 0;  // blocks: resident blocks per SM (0: nothing fits)
};
// The slab (min_slab, min_slab + unit, ...: whole scale chunks) and number of reduction buffers
// (2, else 1) with the most item throughput per SM, blocks_of(slab, red_bufs) / dec90_path(natoms,
// slab), where blocks_of gives the blocks per SM that the shared memory and registers allow (0 where
// the configuration does not fit). Ties keep the smaller slab, then two buffers. Slabs past
// ceil(natoms / kDecodeWarps) atoms shorten nothing and are not tried; unit 0 tries min_slab only.
template <class BlocksOf>
Dec90Shape dec90_balance(int natoms, int min_slab, int unit, BlocksOf blocks_of) {
  Dec90Shape best;
  int best_path = 1;
  const int enough = (natoms + kDecodeWarps - 1) / kDecodeWarps;
  for (int s = min_slab;; s += unit) {
    const int path = dec90_path(natoms, s);
    for (int rb = 2; rb >= 1; --rb) {
      const int b = blocks_of(s, rb);
      const bool more = static_cast<int64_t>(b) * best_path > static_cast<int64_t>(best.blocks) * path;
      if (b > 0 && (best.blocks == 0 || more)) {
        best = Dec90Shape{s, rb, b};
        best_path = path;
      }
    }
    if (s >= enough || unit <= 0) break;
  }
  return best;
}

// ---- Hopper (sm_90a) path: whether the wgmma kernels run a set of experts, and their M-block ------
// (moe_forward.cu; the kernels in sm90_moe_gemm.cu). rows = expected rows per touched expert.
enum class Sm90Kind : int {
  kPlain = 0,  // 16-bit or fp8 weights (HGMMA / QGMMA on the plain copy)
  kInt8 = 1,   // INT8 W8A8 (IGMMA on the plain copy: M-blocks and stream rule as kPlain)
  kWq = 2,     // int4 / int8 atoms and W4A8 (weights as the register operand; 128-row M-blocks)
  kFp4 = 3,    // NVFP4 / MXFP4 units on the wq kernel
};
struct Sm90Choice {
  bool wgmma = false;
  int bm = 128;
  bool stream = false;  // the streaming kernel (weights as wgmma's A), M-blocks of bm = 16 or 64 rows
};
// Whether the Hopper path's streaming kernel (sm90_moe_gemm.cu sm90_stream_kernel) runs a set of
// experts with 16-bit or fp8 weights (eligible: the Hopper path can run them and fp8 has one scale
// pair for all of K), in place of select_sm90's choice c. rows = expected rows per touched expert,
// touched = experts expected to hold rows, boxes = 256-row weight boxes of GEMM1 (the items per
// M-block), sms = the device's SMs. stream_mode: -1 the rule, 0 never, 1 always (QMOE_CUDA_STREAM,
// measurements); nt = 16 / 64 forces the M-block (QMOE_CUDA_STREAM_NT), else 16 up to 16 rows.
// Measured on the H200 (tenth session, settled bench, against the kernels select_sm90 /
// select_decode pick): llama4-scout M = 16 / 64 (1 / 4 rows, 16 experts) bf16 1.01 / 1.09x, fp8
// 1.03 / 1.11x; mixtral-8x7b M = 16 (4 rows, 8 experts) 1.03x; deepseek-v3 / gpt-oss-120b M = 256
// fp8 (8 rows: the 16-row mma.sync tile's fp8 path at 74-78% of floor) 1.13 / 1.05x; even
// (0.96-1.01) for deepseek-v3 / gpt-oss-120b at 1-4 rows; slower where an item share is short
// (M = 1: 1-2 items per CTA, 0.80-0.91x), where experts overflow their 16-row M-block (16+ rows:
// each extra block streams the expert's weights again, 0.74-0.94x), and on qwen3-30b-a3b (K = 2048
// / 768: 0.85-0.95x). Hence: up to 8 rows, at least 4 items per SM, and either few experts (large
// per-expert weights) or fp8 at 5-8 rows.
// INT8 W8A8 (int8: IGMMA, per-channel x per-token scales; fp8 = byte weights) wherever the first two
// conditions hold: its decode kernel is slower than fp8's, and the streaming kernel measured (H200,
// eighteenth session, r5, against decode at 1 row per expert) deepseek-v3 / gpt-oss-120b /
// qwen3-30b-a3b M = 16 1.21 / 1.16 / 1.15x; at M = 1 (items short of 4 per SM) 0.77-0.99x except
// mixtral-8x7b 1.06x; at 2-4 rows (r3) 1.22-1.24x, within 2% of the 64-row tile.
// Many experts with many items per SM (twenty-third session, r1, against the kernels chosen without
// it, persistent tile kernel, two runs each): fp8 at 1-2 rows with >= 10 items per SM, deepseek-v3
// M = 16 / 64 1.02 / 1.06x, gpt-oss-120b M = 16 / 64 1.02 / 1.01x (qwen3-30b-a3b, 6 items per SM:
// 0.95 / 0.97x); 16-bit weights at 8 rows with >= 24 items per SM, deepseek-v3 M = 256 1.04x
// (gpt-oss-120b, 22 items per SM: 0.995x; at 1-4 rows 0.97-1.01x: not taken).
inline void select_sm90_stream(Sm90Choice& c, int64_t rows, int num_experts, int64_t touched, int boxes, bool fp8,
                               int sms, bool eligible, int stream_mode = -1, int nt = 0, bool int8 = false) {
  const int64_t items = touched * boxes;
  bool on = rows <= 8 && items >= int64_t{4} * sms &&
            (num_experts <= 16 || int8 || (fp8 && (rows > 4 || items >= int64_t{10} * sms)) ||
             (rows > 4 && items >= int64_t{24} * sms));
  if (stream_mode == 1) on = true;
  else if (stream_mode == 0) on = false;
  if (!eligible || !on) return;
  c.wgmma = true;
  c.stream = true;
  c.bm = nt == 16 || nt == 64 ? nt : rows <= 16 ? 16 : 64;
}
// Whether the tile kernel copies 16-bit A rows straight from x (Sm90Gemm::a_src) instead of a
// gather into sorted rows loaded by TMA. Measured on the H200 (twenty-third
// session, bf16, two runs each): r3, a row per producer thread (form 1) against the gather,
// 1.01-1.05x up to 64 rows per expert (qwen3-30b-a3b M = 256 / 1024 1.05 / 1.04x, deepseek-v3 M =
// 1024 1.02x, mixtral-8x7b M = 256 1.02x: the gather's launch and its rows' write and read are
// gone), but 0.86-0.99x from 128 rows (mixtral-8x7b M = 1024 / 4096 0.88 / 0.86x; ncu
// qwen3-30b-a3b M = 4096 GEMM1 380 -> 492 us: the compute-bound mainloop waits on the producer's
// copies); r4, 8 threads per row (form 2, whole sectors) against form 1: 1.00-1.02x up to 64 rows,
// 1.01-1.09x from 128 (deepseek-v3 M = 4096 1.09x), still 0.83-0.97x against the gather there
// (mixtral-8x7b M = 4096 0.83x). Hence form 2 (the kernel's only form since) up to 64 rows: against
// the gather qwen3-30b-a3b M = 256 / 1024 1.05 / 1.03x, deepseek-v3 M = 1024 1.03x, mixtral-8x7b
// M = 256 1.04x. (A TMA box per row instead of the cp.async, twenty-fourth session r5: 0.36-1.00x
// of the gather, mixtral-8x7b M = 256 0.36x: the TMA unit's rate for 128-byte boxes, not the
// bytes, set the pace.) env: -1 the rule, 0 never, 1 at every size (QMOE_CUDA_A_DIRECT).
inline bool select_a_direct(int64_t rows, int env = -1) {
  if (env >= 0) return env == 1;
  return rows <= 64;
}
// Whether the tile kernel's 128-row M-blocks run as CTA pairs on adjacent N tiles sharing A by TMA
// multicast (Sm90Gemm::cluster2). Measured on the H200 (twenty-fourth session, r3 / r4, two runs
// each, M = 256-4096): 16-bit weights 1.00-1.04x (deepseek-v3 M = 4096 1.04x, llama4-scout M = 1024
// 1.03x); fp8 per channel 0.98-1.04x, fp8 128 x 128 blocks 0.96-1.00x (geomean 0.997 over 30 fp8
// rows): ncu, mixtral-8x7b fp8 M = 4096, the L2 bytes fell 20% at the same 53-55% tensor activity,
// so L2 is not what limits that tile. Hence 16-bit only. env: -1 the rule, 0 never, 1 always
// (QMOE_CUDA_PAIRS).
inline bool select_pairs(bool fp8, int env = -1) {
  if (env >= 0) return env == 1;
  return !fp8;
}
// Whether the streaming kernel bulk-copies its weight boxes with an L2 evict-first policy: where the
// layer's token rows (the M-blocks' B operands, re-read for every weight box) would not stay in L2
// beside the weight stream, i.e. more than 8 MB of them. Measured on the H200 (tenth session, the
// policy always on against off): deepseek-v3 / gpt-oss-120b M = 256 fp8 (42 / 8.5 MB of token rows)
// 1.04 / 1.05x, llama4-scout / mixtral-8x7b M = 16 (1-3 MB) 0.98-0.99x. hint: -1 the rule, 0 never,
// 1 always (QMOE_CUDA_STREAM_HINT).
inline bool stream_evict_first(size_t token_row_bytes, int hint = -1) {
  return hint >= 0 ? hint == 1 : token_row_bytes > (size_t{8} << 20);
}
// Whether fp8 GEMM2 on the bulk decode kernel quantizes h as it stages it (GemmParams::q_rows, with
// GEMM1's per-row maxima) instead of an act_prep launch between the GEMMs: where the layer has at
// most two slots per local expert on average (numel <= 2 E) and I <= 2048. Each block that stages an
// M-block quantizes its rows' K range again (IEEE divisions, as act_prep), so the cost grows with the
// rows per M-block; GEMM1's epilogue takes one atomic maximum per warp (8 columns) per slot, I / 8 on
// one address, while the launch saved is fixed. Measured on the H200 (twenty-eighth session, r3 and
// r4, two runs each, fp8): qwen3-30b-a3b (I = 768) M = 1 1.05 / 1.07x (31.4 -> 29.8 us), M = 16 (1.6
// slots per expert) 1.01 / 1.00x, M = 32 (2) 0.98x, M = 64 (4) 0.97x; deepseek-v3 (I = 2048) M = 1
// 1.01 / 1.02x, gpt-oss-120b (2880) 1.00x, llama4-scout (8192) and mixtral-8x7b (14336) M = 1 0.99 /
// 0.98x. The rule with I <= 4096 (twenty-ninth session, r1, two runs each against 0): qwen3-30b-a3b
// M = 1 1.05x, deepseek-v3 M = 1 1.02x, gpt-oss-120b M = 1 0.97x (50.3 / 50.6 -> 51.8 / 52.1 us: 360
// maxima per slot) -- hence I <= 2048. env: -1 the rule, 0 never, 1 always (QMOE_CUDA_H_QUANT_IN_GEMM2).
inline bool select_h_quant_in_gemm2(int64_t numel, int num_experts, int intermediate, int env = -1) {
  if (env >= 0) return env == 1;
  return numel <= 2 * static_cast<int64_t>(num_experts) && intermediate <= 2048;
}
// Whether the streaming kernel loads its token tiles (re-read for every weight box of their M-block)
// with an L2 evict-last policy: always. Measured on the H200 (twenty-eighth session, r2, two runs,
// 24 streaming rows of llama4-scout / mixtral-8x7b / deepseek-v3 / gpt-oss-120b, fp8 and bf16, M = 16 /
// 64 / 256): geomean 1.003, gpt-oss-120b fp8 M = 64 1.04x (ncu: GEMM1 2.03 -> 1.93 GB read from DRAM,
// 477 -> 465 us; GEMM2 1.01 -> 0.97 GB, 255 -> 244 us: without it the token tiles came from DRAM
// again for each box), every other row 0.99-1.01x. hint: -1 the rule, 0 never, 1 always
// (QMOE_CUDA_STREAM_XHINT).
inline bool stream_x_evict_last(int hint = -1) { return hint >= 0 ? hint == 1 : true; }
// min_rows / rows64_max > 0 / >= 0: the QMOE_CUDA_WGMMA_MIN_ROWS / QMOE_CUDA_WG64_MAX_ROWS overrides.
// Measured on the H200 (docs/perf.md):
//  * 16-bit / fp8 weights from 16 rows per expert (17 and up: where the 16-row mma.sync tile stops;
//    mixtral-8x7b M = 256, 64 rows: bf16 1494 -> 893 us, fp8 1561 -> 695 us; 16: ninth session:
//    16 rows, 64-row M-blocks, against the 16-row tile: mixtral-8x7b M = 64 bf16 1.15x, fp8 1.19x;
//    llama4-scout M = 256 bf16 1.01x, fp8 1.23x; with 128 experts, qwen3-30b-a3b M = 256, then
//    0.95-0.97x, but with the persistent tile kernel 1.17 / 1.16x, twenty-third session r1; at 4 rows,
//    qwen3-30b-a3b M = 64, 0.95 / 0.93x and 8 rows, gpt-oss-120b M = 256, 0.95x / 0.99x: those stay);
//    int4 / int8 atoms and W4A8 from 8 (eleventh
//    session, the wq kernel with a 32-row token tile against the 16-row decode kernel, whose extra
//    M-blocks stream an expert's weights again: 16 rows 1.33-1.66x on llama4-scout M = 256,
//    mixtral-8x7b M = 64, qwen3-30b-a3b M = 256; 8 rows, deepseek-v3 / gpt-oss-120b M = 256, with
//    the half tile and the deeper ring 1.01-1.10x, with two CTAs per SM 1.45x more); fp4 units
//    from 12 (with 128-row tiles the wq kernel measured 2-6% slower than the mma.sync fp4 kernel at
//    32 rows and 1.4-1.6x faster at 64; with 64-row tiles at 32 rows 1.18-1.32x, two CTAs per SM
//    1.21-1.30x more, deepseek-v3 / gpt-oss-120b M = 1024; with 32-row tiles at two CTAs per SM
//    at 16 rows 1.15-1.38x, llama4-scout / qwen3-30b-a3b M = 256, mixtral-8x7b M = 64, at 8 rows
//    0.89-0.97x);
//  * 64-row M-blocks for 16-bit and fp8 weights up to 40 rows per expert, and up to 64 with >= 64
//    experts (eighth session: 32 rows 1.13-1.30x against 128-row blocks; 64 rows 1.09-1.11x with 128
//    experts but 0.91-0.94x with 8 / 16); 128 rows otherwise.
//  * the quantized-weight kernel's token tile (wgmma's N: the M-block's rows) for int4 / int8 / fp4
//    weights: 32 rows up to 24 expected rows per expert, 64 up to 48, else 128 (a tile holds an
//    expert's rows with room for the spread of its count; a 128-row tile at 16-32 rows was mostly
//    padding: its tensor work and token bytes scale with the tile; eleventh session, M = 1024: 64
//    against 128 rows at 32 rows per expert 1.28x (deepseek-v3, gpt-oss-120b int4 / W4A8), at 64
//    rows 0.85-0.94x), and up to 64 rows with >= 64 experts, as the 16-bit rule (thirty-sixth
//    session, H100, each tile forced against this rule: at 64 rows per expert qwen3-30b-a3b (128
//    experts) M = 1024 ran 1.07x (int4 g128, 393 -> 367 us) / 1.08x (MXFP4, 438 -> 405 us) on 64-row
//    tiles, llama4-scout M = 1024 (16 experts) 0.96 / 0.99x and mixtral-8x7b M = 256 (8) 0.96 /
//    1.01x; 32-row tiles at 32 rows 0.79-0.85x, 128-row ones at 32 rows 0.69-0.74x; thirty-seventh
//    session, H100, the rule against 128-row tiles, two alternations, qwen3-30b-a3b M = 1024: INT8
//    weights 1.12x, NVFP4A16 / NVFP4 / MXFP4 1.07-1.08x, but W4A8 0.92x (int8 activations, 424 ->
//    461 us) / 0.94x (fp8, 389 -> 415 us): W4A8 (w4a8 = true) keeps 128-row tiles there).
//    256-row token tiles where the layer's int4 weights accumulate straight into acc in both GEMMs
//    (`direct`: channel or folded group scales), and for fp4 units (NVFP4 A16 / W4A4, MXFP4; they
//    always accumulate straight into acc), from kWq256Rows = 128 rows per expert: each dequantized
//    A fragment then feeds 256 token columns, half the conversion per multiply-add, and an expert
//    with a few rows more than 128 runs one tile instead of two. Measured, forced 256 against 128,
//    best of two alternations: int4 g128 folded at >= 256 rows per expert 1.06-1.26x (thirty-eighth
//    session, H100: mixtral-8x7b M = 4096, 1024 rows: 6160 -> 4896 us; M = 1024, 256 rows: 1835 ->
//    1650; llama4-scout / qwen3-30b-a3b M = 4096, 256 rows: 1.11 / 1.06x), int4 channel scales alike
//    (0.95-1.20x); int4 at 128 rows on the H100 0.97-1.04x (s38) and 0.98-1.07x (s39), on the H200
//    1.05 / 1.03x (deepseek-v3 / gpt-oss-120b M = 4096: 8497 -> 8108 us, 2521 -> 2449; forty-first
//    session), at 32-64 rows 0.43-0.87x; fp4 units on the H200 (thirty-ninth session) at 128 rows
//    1.04-1.10x, at 256 rows 1.10-1.17x, at 1024 rows (mixtral-8x7b M = 4096) 1.23-1.28x, at 32-64
//    rows 0.76-0.87x.
//    int8 / fp8 atoms (WNA16 int8 and FP8 weight-only with channel / tensor scales, both straight
//    into acc) from kWq256Rows8 = 1024 rows: their 256-row tiles hold two 80 KiB stages, not three,
//    and measured against 128 (forty-seventh session, H100, three alternations, fp8-a16 / int8)
//    1.08 / 1.11x at 1024 rows (mixtral-8x7b M = 4096), but 0.91-0.95x at 256 rows (llama4-scout /
//    qwen3-30b-a3b M = 4096, mixtral-8x7b M = 1024) and 0.84-0.89x at 128 (deepseek-v3 / gpt-oss-120b
//    M = 4096).
//    wq_tn = 32 / 64 / 128 / 256 forces it (QMOE_CUDA_WQ_TN, measurements; 256 only where wide_rows > 0 or on fp4 units).
//  * INT8 W8A8 (IGMMA on the plain copy; eighteenth session, r3, against the decode / 16-row
//    mma.sync kernels, whose int8 path is slower than fp8's): from 2 rows per expert, M-blocks as
//    16-bit / fp8 (deepseek-v3 / gpt-oss-120b M = 64, 2 rows: 1.21 / 1.17x; qwen3-30b-a3b M = 64,
//    4 rows: 1.19x; M = 256, 16 rows: 1.74x).
constexpr int64_t kWq256Rows = 128, kWq256Rows8 = 1024;
// wide_rows (kWq): the rows per expert from which the layer's wq kernel takes 256-row token tiles
// (kWq256Rows for int4 straight into acc, kWq256Rows8 for int8 / fp8 atoms), 0 where it cannot
inline Sm90Choice select_sm90(int64_t rows, int num_experts, Sm90Kind kind, int min_rows = 0, int rows64_max = -1,
                              int wq_tn = 0, bool w4a8 = false, int64_t wide_rows = 0) {
  Sm90Choice c;
  int need = 16;  // kPlain
  if (min_rows > 0) need = min_rows;
  else if (kind == Sm90Kind::kInt8) need = 2;
  else if (kind == Sm90Kind::kWq) need = 8;
  else if (kind == Sm90Kind::kFp4) need = 12;
  c.wgmma = rows >= need;
  // up to 64 rows per expert, many experts: 64-row M-blocks / token tiles in both rules below
  const bool many_experts64 = rows <= 64 && num_experts >= 64;
  if (kind == Sm90Kind::kPlain || kind == Sm90Kind::kInt8) {
    const bool b64 = rows64_max >= 0 ? rows <= rows64_max : (rows <= 40 || many_experts64);
    c.bm = b64 ? 64 : 128;
  } else if (kind == Sm90Kind::kWq || kind == Sm90Kind::kFp4) {
    const int64_t from256 = kind == Sm90Kind::kFp4 ? kWq256Rows : wide_rows;
    c.bm = wq_tn == 256 ? (from256 > 0 ? 256 : 128)
           : wq_tn == 32 || wq_tn == 64 || wq_tn == 128 ? wq_tn
           : rows <= 24                                    ? 32
           : rows <= 48 || (many_experts64 && !w4a8)       ? 64
           : from256 > 0 && rows >= from256                ? 256
                                                           : 128;
  }
  return c;
}

}  // namespace qmoe::cuda
