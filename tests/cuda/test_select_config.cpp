// select_config (src/cuda/config.h) is a pure function: these tests run everywhere, GPU or not.
// They pin the regime choice (16-row tiles for decode, 128-row tiles once experts hold ~100 rows)
// and the split-K rule (enough blocks to keep every SM streaming, never splits shorter than
// 8 k-tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/config.h"
#include "cuda/sm90_moe.cuh"

namespace qmoe::cuda {
namespace {

GemmProblem prob(int64_t m, int topk, int E, int n, int k, WFmt f = WFmt::k16) {
  GemmProblem p;
  p.m = m; p.top_k = topk; p.num_experts = E; p.n = n; p.k = k; p.wfmt = f; p.num_sms = 132;
  return p;
}

TEST(SelectConfig, DecodeUsesSmallTiles) {
  // qwen3-30b-a3b at M = 1: 8 slots on 8 experts
  GemmConfig c = select_config(prob(1, 8, 128, 1536, 2048));
  EXPECT_EQ(c.tile, Tile::kSmall);
  // 8 experts x 24 n-tiles = 192 blocks < 264 -> split K in two (32 k-tiles allow it)
  EXPECT_EQ(c.splits, 2);
}

TEST(SelectConfig, PrefillUsesLargeTiles) {
  // deepseek-v3 at M = 4096: 32768 slots over 256 experts -> 128 rows per expert
  GemmConfig c = select_config(prob(4096, 8, 256, 4096, 7168));
  EXPECT_EQ(c.tile, Tile::kLarge);
  EXPECT_EQ(c.splits, 1);
  // mixtral at M = 64: 128 slots over 8 experts -> 16 rows each: still small
  EXPECT_EQ(select_config(prob(64, 2, 8, 28672, 4096)).tile, Tile::kSmall);
  // mixtral at M = 256: 64 rows per expert -> 64-row tiles (one pass over the weights)
  EXPECT_EQ(select_config(prob(256, 2, 8, 28672, 4096)).tile, Tile::kMedium);
  // qwen3 at M = 1024: 64 rows per expert -> medium; 65 rows -> large
  EXPECT_EQ(select_config(prob(1024, 8, 128, 1536, 2048)).tile, Tile::kMedium);
  EXPECT_EQ(select_config(prob(1040, 8, 128, 1536, 2048)).tile, Tile::kLarge);
  // mixtral at M = 1024: 256 rows per expert -> large
  EXPECT_EQ(select_config(prob(1024, 2, 8, 28672, 4096)).tile, Tile::kLarge);
}

TEST(SelectConfig, SplitsKeepEnoughKTiles) {
  for (int k : {64, 256, 512, 768, 2048, 2880, 8192, 14336}) {
    for (int n : {64, 512, 5120}) {
      GemmConfig c = select_config(prob(1, 1, 16, n, k, WFmt::kU4));
      int ktiles = (k + 63) / 64;
      ASSERT_GE(c.splits, 1);
      ASSERT_LE(c.splits, 16);
      if (c.splits > 1) {
        EXPECT_GE(ktiles / c.splits, 8) << "k " << k << " n " << n << " splits " << c.splits;
        // splitting only happens while the grid is below two blocks per SM
        const int bn = tile_bn(c.tile, WFmt::kU4);
        EXPECT_EQ(bn, 128);
        EXPECT_LT(static_cast<int64_t>((n + bn - 1) / bn) * (c.splits / 2), 2 * 132);
      }
    }
  }
}

TEST(SelectConfig, LlamaDecodeDownProjectionSplits) {
  // llama4-scout GEMM2 at M = 1: one expert, N = 5120 -> 80 blocks, K = 8192 -> split 4
  GemmConfig c = select_config(prob(1, 1, 16, 5120, 8192));
  EXPECT_EQ(c.tile, Tile::kSmall);
  EXPECT_EQ(c.splits, 4);
}

TEST(SelectConfig, NarrowWeightsWidenSmallTiles) {
  EXPECT_EQ(tile_bn(Tile::kSmall, WFmt::k16), 64);
  EXPECT_EQ(tile_bn(Tile::kSmall, WFmt::kFP8), 128);
  EXPECT_EQ(tile_bn(Tile::kSmall, WFmt::kU4), 128);
  // qwen3 int4 at M = 1, GEMM1: 8 experts x 12 column blocks = 96 blocks -> split K by 4
  EXPECT_EQ(select_config(prob(1, 8, 128, 1536, 2048, WFmt::kU4)).splits, 4);
}

TEST(SelectConfig, ZeroAndTinyProblems) {
  GemmConfig c = select_config(prob(0, 4, 8, 128, 128));
  EXPECT_EQ(c.tile, Tile::kSmall);
  EXPECT_GE(c.splits, 1);
  EXPECT_EQ(tile_bm(Tile::kSmall), 16);
  EXPECT_EQ(tile_bm(Tile::kMedium), 64);
  EXPECT_EQ(tile_bm(Tile::kLarge), 128);
}

// ---- decode (moe_decode.cu) ----
GemmProblem dprob(int64_t m, int topk, int E, int n, int k, WFmt f, int chunk) {
  GemmProblem p = prob(m, topk, E, n, k, f);
  p.chunk = chunk;
  return p;
}

TEST(SelectDecode, EightRowBlocksUpToFourRowsPerExpertSixteenUpToSixteen) {
  // qwen3 M = 1 (8 slots on 8 experts) and M = 16 (128 slots on 128 experts): 1 row each
  EXPECT_TRUE(select_decode(dprob(1, 8, 128, 1536, 2048, WFmt::kU4, 128), false).use);
  EXPECT_EQ(select_decode(dprob(1, 8, 128, 1536, 2048, WFmt::kU4, 128), false).rows, 8);
  EXPECT_TRUE(select_decode(dprob(16, 8, 128, 1536, 2048, WFmt::kU4, 128), false).use);
  // mixtral M = 16: 32 slots on 8 experts = 4 rows (8-row blocks); M = 17: 5 rows -> 16-row blocks
  EXPECT_TRUE(select_decode(dprob(16, 2, 8, 28672, 4096, WFmt::kFP8, 1 << 30), false).use);
  EXPECT_EQ(select_decode(dprob(16, 2, 8, 28672, 4096, WFmt::kFP8, 1 << 30), false).rows, 8);
  EXPECT_TRUE(select_decode(dprob(17, 2, 8, 28672, 4096, WFmt::kU4, 128), false).use);
  EXPECT_EQ(select_decode(dprob(17, 2, 8, 28672, 4096, WFmt::kU4, 128), false).rows, 16);
  // ... int4 only: other formats keep the 16-row mma.sync tile there (measured faster)
  EXPECT_FALSE(select_decode(dprob(17, 2, 8, 28672, 4096, WFmt::kFP8, 1 << 30), false).use);
  EXPECT_FALSE(select_decode(dprob(17, 2, 8, 28672, 4096, WFmt::kNV4, 16), false).use);
  // mixtral M = 64: 16 rows (16-row blocks); M = 65: 17 rows -> not decode
  EXPECT_EQ(select_decode(dprob(64, 2, 8, 28672, 4096, WFmt::kU4, 128), false).rows, 16);
  EXPECT_FALSE(select_decode(dprob(65, 2, 8, 28672, 4096, WFmt::kU4, 128), false).use);
  // deepseek-v3 M = 256: 2048 slots on 256 experts = 8 rows (16-row blocks: one per expert mostly)
  EXPECT_TRUE(select_decode(dprob(256, 8, 256, 4096, 7168, WFmt::kU4, 128), false).use);
  EXPECT_EQ(select_decode(dprob(256, 8, 256, 4096, 7168, WFmt::kU4, 128), false).rows, 16);
  // 16-bit weights up to 4 rows (the sm_90 bulk kernel only: forward() keeps the tile without it)
  EXPECT_TRUE(select_decode(dprob(1, 8, 128, 1536, 2048, WFmt::k16, 1 << 30), false).use);
  EXPECT_FALSE(select_decode(dprob(17, 2, 8, 28672, 4096, WFmt::k16, 1 << 30), false).use);
  EXPECT_EQ(kDecodeRows, 8);
}

TEST(SelectDecode, SlabsHoldWholeScaleChunks) {
  EXPECT_EQ(decode_slab_ktiles(128, 2048), 2);      // int4 g128: 2 k-tiles per warp piece
  EXPECT_EQ(decode_slab_ktiles(64, 2048), 1);
  EXPECT_EQ(decode_slab_ktiles(32, 2048), 1);       // chunks inside one k-tile
  EXPECT_EQ(decode_slab_ktiles(96, 2048), 1);       // not a multiple of 64: chunk cut at k-tiles
  EXPECT_EQ(decode_slab_ktiles(1 << 30, 2048), 1);  // whole K: scaled once after the reduction
  EXPECT_EQ(decode_slab_ktiles(2048, 2048), 1);     // one chunk covering K is whole K
  EXPECT_EQ(decode_slab_ktiles(256, 776), 4);       // kp = 832 > 256
}

TEST(SelectDecode, KRangePerBlockIsCappedAndSplitsTile) {
  for (int k : {64, 200, 776, 2048, 2880, 4096, 4104, 4360, 5120, 7168, 8192, 14336}) {
    for (int chunk : {32, 64, 128, 1 << 30}) {
      for (bool fill : {false, true}) {
        for (int64_t m : {1, 4}) {
          const DecodeConfig c = select_decode(dprob(m, 2, 8, 4096, k, WFmt::kU4, chunk), fill);
          const int ktiles = (k + 63) / 64;
          const std::string what = "k " + std::to_string(k) + " chunk " + std::to_string(chunk);
          ASSERT_GE(c.splits, 1) << what;
          EXPECT_EQ(c.slab_ktiles, decode_slab_ktiles(chunk, k)) << what;
          EXPECT_EQ(c.ktiles_per_split % c.slab_ktiles, 0) << what;
          EXPECT_LE(c.ktiles_per_split * 64, kDecodeMaxK) << what;
          // the splits cover K, and none is empty
          EXPECT_GE(static_cast<int64_t>(c.splits) * c.ktiles_per_split, ktiles) << what;
          EXPECT_LT(static_cast<int64_t>(c.splits - 1) * c.ktiles_per_split, ktiles) << what;
          if (!fill) {  // GEMM1: split only because of the K cap
            EXPECT_EQ(c.splits == 1, ktiles * 64 <= kDecodeMaxK) << what;
          }
        }
      }
    }
  }
}

TEST(SelectDecode, FillSplitsOnlyShortGrids) {
  // qwen3 GEMM2 at M = 1: 8 experts x 64 column blocks = 512 blocks: no split
  EXPECT_EQ(select_decode(dprob(1, 8, 128, 2048, 768, WFmt::kU4, 128), true).splits, 1);
  // llama4-scout GEMM2 at M = 1: 160 blocks, K = 8192 -> 2 for the K cap, then 320 blocks >= 264
  // (the doubling rule alone); the balanced rule takes 3 (2 items of 44 k-tiles per block, not 64)
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kU4, 128), true, kDecodeMaxK, false).splits, 2);
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kU4, 128), true).splits, 3);
  // llama4-scout GEMM1 at M = 1 (no fill splits): K = 5120 -> 2
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 16384, 5120, WFmt::kU4, 128), false).splits, 2);
  // mixtral GEMM2 at M = 1: 2 experts x 128 blocks, K = 14336 -> 4 for the cap; fill stops there
  const DecodeConfig mx = select_decode(dprob(1, 2, 8, 4096, 14336, WFmt::k16, 1 << 30), true);
  EXPECT_EQ(mx.splits, 4);
  EXPECT_EQ(mx.ktiles_per_split, 56);
  // a short grid with short K is not split below 8 k-tiles per split
  EXPECT_EQ(select_decode(dprob(1, 1, 4, 64, 768, WFmt::k16, 1 << 30), true).splits, 1);  // 12 k-tiles
  EXPECT_EQ(select_decode(dprob(1, 1, 4, 64, 1024, WFmt::k16, 1 << 30), true).splits, 2);  // 16 k-tiles
}

// The balanced fill rule (select_decode's last argument): never fewer splits than the doubling
// rule, a model walk (decode_walk) no longer than its, splits that cover K with whole slabs under the
// cap, each keeping >= 8 k-tiles where it added splits; and the rows it is for.
TEST(SelectDecode, BalancedFillShortensTheWalk) {
  // gpt-oss-120b GEMM2 at M = 1: 4 experts x 90 column tiles = 360 items, K = 2880 (45 k-tiles):
  // one split walks 2 items of 46 k-tiles, two walk 3 of 24: with the per-item cost no shorter
  EXPECT_EQ(select_decode(dprob(1, 4, 128, 2880, 2880, WFmt::kU4, 128), true, kDecodeMaxK, false).splits, 1);
  EXPECT_EQ(select_decode(dprob(1, 4, 128, 2880, 2880, WFmt::kU4, 128), true).splits, 1);
  // 4-bit weights only: llama4-scout's GEMM2 at M = 1 on MXFP4 / NVFP4 as int4, on fp8 / bf16 as before
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kMX4, 32), true).splits, 3);
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kNV4, 16), true).splits, 3);
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kFP8, 1 << 30), true).splits, 2);
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::k16, 1 << 30), true).splits, 2);
  // mixtral-8x7b GEMM2 at M = 1 (K = 14336, 4 splits for the cap): more splits walk no shorter
  EXPECT_EQ(select_decode(dprob(1, 2, 8, 4096, 14336, WFmt::kU4, 128), true).splits, 4);
  // deepseek-v3 / qwen3-30b-a3b GEMM2 at M = 1 and M = 16: long grids stay whole
  EXPECT_EQ(select_decode(dprob(1, 8, 256, 7168, 2048, WFmt::kU4, 128), true).splits, 1);
  EXPECT_EQ(select_decode(dprob(16, 8, 128, 2048, 768, WFmt::kU4, 128), true).splits, 1);
  for (int64_t m : {1, 2, 4, 16}) {
    for (int topk : {1, 2, 4, 8}) {
      for (int n : {64, 200, 2048, 2880, 5120, 7168}) {
        for (int k : {512, 776, 2048, 2880, 4104, 8192, 14336}) {
          for (int chunk : {32, 128, 1 << 30}) {
            const GemmProblem p = dprob(m, topk, 16, n, k, WFmt::kU4, chunk);
            const DecodeConfig a = select_decode(p, true, kDecodeMaxK, false);
            const DecodeConfig b = select_decode(p, true);
            const std::string what = "m " + std::to_string(m) + " topk " + std::to_string(topk) + " n " +
                                     std::to_string(n) + " k " + std::to_string(k) + " chunk " + std::to_string(chunk);
            const int ktiles = (k + 63) / 64;
            ASSERT_GE(b.splits, a.splits) << what;
            EXPECT_EQ(b.ktiles_per_split % b.slab_ktiles, 0) << what;
            EXPECT_LE(b.ktiles_per_split * 64, kDecodeMaxK) << what;
            EXPECT_GE(static_cast<int64_t>(b.splits) * b.ktiles_per_split, ktiles) << what;
            EXPECT_LT(static_cast<int64_t>(b.splits - 1) * b.ktiles_per_split, ktiles) << what;
            if (b.splits > a.splits) EXPECT_GE(ktiles / b.splits, 8) << what;
            const int64_t slots = m * topk, touched = std::min<int64_t>(slots, 16);
            const int64_t per_expert = (slots + touched - 1) / touched;
            const int64_t items = touched * ((per_expert + b.rows - 1) / b.rows) * ((n + 31) / 32);
            EXPECT_LE(decode_walk(items, b.ktiles_per_split, b.splits, 2 * 132),
                      decode_walk(items, a.ktiles_per_split, a.splits, 2 * 132)) << what;
          }
        }
      }
    }
  }
}

// One staged row per M-block (one token, direct routing): with the K cap kDecodeMaxK1 (forward()
// uses it for GEMM1) K is not split for staging (llama4-scout K = 5120, deepseek-v3 K = 7168 at
// M = 1), only for grid fill where fill splits are asked for (llama4-scout 160 column blocks -> 2;
// mixtral-8x7b 256 -> 2).
TEST(SelectDecode, OneRowBlocksSplitOnlyForFill) {
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 16384, 5120, WFmt::kU4, 128), false, kDecodeMaxK1).splits, 1);
  EXPECT_EQ(select_decode(dprob(1, 8, 256, 4096, 7168, WFmt::kFP8, 1 << 30), false, kDecodeMaxK1).splits, 1);
  EXPECT_EQ(select_decode(dprob(1, 8, 256, 4096, 7168, WFmt::kFP8, 1 << 30), false).splits, 2);
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kU4, 128), true, kDecodeMaxK1, false).splits, 2);
  EXPECT_EQ(select_decode(dprob(1, 1, 16, 5120, 8192, WFmt::kU4, 128), true, kDecodeMaxK1).splits, 3);
  const DecodeConfig mx = select_decode(dprob(1, 2, 8, 4096, 14336, WFmt::k16, 1 << 30), true, kDecodeMaxK1);
  EXPECT_EQ(mx.splits, 2);
  EXPECT_EQ(mx.ktiles_per_split, 112);
  for (int k : {64, 4104, 7168, 14336, 32768, 32832}) {
    const DecodeConfig c = select_decode(dprob(1, 4, 64, 4096, k, WFmt::kU4, 128), false, kDecodeMaxK1);
    EXPECT_LE(c.ktiles_per_split * 64, kDecodeMaxK1) << k;
    EXPECT_EQ(c.splits == 1, k <= kDecodeMaxK1) << k;
  }
}

// The bulk decode kernel's warp slabs (dec90_balance): the slowest warp's atoms per item over the
// blocks an SM holds. qwen3-30b-a3b fp8 GEMM2 (K = 768: 24 atoms of 32 columns) takes 3-atom slabs
// (one stage, every warp busy) where 3 blocks still fit; GEMM1 (K = 2048: 64 atoms) keeps 2-atom
// slabs and gives up the second reduction buffer where that lets a third block in.
TEST(SelectDecode, BulkSlabsBalanceTheWarps) {
  EXPECT_EQ(dec90_path(24, 2), 4);
  EXPECT_EQ(dec90_path(24, 3), 3);
  EXPECT_EQ(dec90_path(64, 2), 8);
  EXPECT_EQ(dec90_path(90, 2), 12);  // ceil(90 / 8): already the least
  EXPECT_EQ(dec90_path(1, 2), 2);
  const auto three = [](int, int) { return 3; };
  Dec90Shape d = dec90_balance(24, 2, 1, three);
  EXPECT_EQ(d.slab, 3);
  EXPECT_EQ(d.red_bufs, 2);
  EXPECT_EQ(d.blocks, 3);
  EXPECT_EQ(dec90_balance(64, 2, 1, three).slab, 2);  // balanced already: the smaller slab
  EXPECT_EQ(dec90_balance(90, 2, 1, three).slab, 2);
  // the second buffer costs the third block: one buffer
  d = dec90_balance(64, 2, 1, [](int slab, int rb) { return slab <= 2 ? (rb == 2 ? 2 : 3) : 2; });
  EXPECT_EQ(d.slab, 2);
  EXPECT_EQ(d.red_bufs, 1);
  EXPECT_EQ(d.blocks, 3);
  // a longer slab that loses a block: 3 blocks / 4 steps beat 2 blocks / 3 steps
  EXPECT_EQ(dec90_balance(24, 2, 1, [](int slab, int) { return slab <= 2 ? 3 : 2; }).slab, 2);
  // whole scale chunks of 2 atoms (int4 g128, K = 768: 12 atoms): slabs of 2 or 4 only
  EXPECT_EQ(dec90_balance(12, 2, 2, three).slab, 2);
  EXPECT_EQ(dec90_balance(40, 2, 2, three).slab, 2);  // even slabs: none is shorter than 2-atom ones
  // nothing fits
  EXPECT_EQ(dec90_balance(24, 2, 1, [](int, int) { return 0; }).blocks, 0);
  // against every candidate: no slab or buffer count gives more items per SM
  const auto model = [](int slab, int rb) {
    const int kb = 3 * slab * 8 + 40 + 8 * rb;  // a made-up shared-memory size in KiB
    return kb > 227 ? 0 : std::min(3, 228 / (kb + 1));
  };
  for (int natoms = 1; natoms <= 300; ++natoms) {
    for (int unit : {1, 2}) {
      const Dec90Shape b = dec90_balance(natoms, 2, unit, model);
      ASSERT_GT(b.blocks, 0) << natoms;
      EXPECT_EQ(b.blocks, model(b.slab, b.red_bufs)) << natoms;
      for (int s = 2; s <= 64; s += unit)
        for (int rb = 1; rb <= 2; ++rb) {
          const int m = model(s, rb);
          EXPECT_LE(static_cast<int64_t>(m) * dec90_path(natoms, b.slab),
                    static_cast<int64_t>(b.blocks) * dec90_path(natoms, s))
              << natoms << " slab " << s << " rb " << rb << " chosen " << b.slab;
        }
    }
  }
}

// The Hopper path's choice (select_sm90): 16-bit / fp8 weights from 16 rows per expert, INT8 W8A8 from 2, int / W4A8 atoms from 8, fp4 units from 12; 64-row
// M-blocks for 16-bit / fp8 / INT8 W8A8 up to 40 rows (64 with >= 64 experts); the quantized-weight
// kernel's token tile 32 / 64 / 128; the overrides replace the rules.
TEST(SelectSm90, RowsPerExpertThresholds) {
  // mixtral-8x7b M = 64 (16 rows, 8 experts) and llama4-scout M = 256 (16 rows, 16 experts)
  EXPECT_TRUE(select_sm90(16, 8, Sm90Kind::kPlain).wgmma);
  EXPECT_TRUE(select_sm90(16, 16, Sm90Kind::kPlain).wgmma);
  EXPECT_EQ(select_sm90(16, 16, Sm90Kind::kPlain).bm, 64);
  EXPECT_FALSE(select_sm90(15, 8, Sm90Kind::kPlain).wgmma);
  // qwen3-30b-a3b M = 256 (16 rows, 128 experts): the tile kernel on 64-row M-blocks; M = 64 (4 rows)
  // and deepseek-v3 / gpt-oss-120b M = 256 (8 rows): not
  EXPECT_TRUE(select_sm90(16, 128, Sm90Kind::kPlain).wgmma);
  EXPECT_EQ(select_sm90(16, 128, Sm90Kind::kPlain).bm, 64);
  EXPECT_FALSE(select_sm90(15, 128, Sm90Kind::kPlain).wgmma);
  EXPECT_FALSE(select_sm90(4, 128, Sm90Kind::kPlain).wgmma);
  EXPECT_FALSE(select_sm90(8, 256, Sm90Kind::kPlain).wgmma);
  // quantized-weight kernels: int atoms / W4A8 from 8 (32-row token tiles), fp4 units from 12
  EXPECT_FALSE(select_sm90(7, 8, Sm90Kind::kWq).wgmma);
  EXPECT_TRUE(select_sm90(8, 256, Sm90Kind::kWq).wgmma);  // deepseek-v3 / gpt-oss-120b M = 256
  EXPECT_TRUE(select_sm90(16, 8, Sm90Kind::kWq).wgmma);
  // INT8 W8A8 (IGMMA on the plain copy) from 2 rows per expert
  EXPECT_FALSE(select_sm90(1, 128, Sm90Kind::kInt8).wgmma);
  EXPECT_TRUE(select_sm90(2, 256, Sm90Kind::kInt8).wgmma);   // deepseek-v3 M = 64
  EXPECT_TRUE(select_sm90(16, 128, Sm90Kind::kInt8).wgmma);  // qwen3-30b-a3b M = 256
  EXPECT_EQ(select_sm90(2, 256, Sm90Kind::kInt8).bm, 64);
  EXPECT_FALSE(select_sm90(11, 8, Sm90Kind::kFp4).wgmma);
  EXPECT_TRUE(select_sm90(12, 8, Sm90Kind::kFp4).wgmma);
  EXPECT_TRUE(select_sm90(16, 16, Sm90Kind::kFp4).wgmma);  // llama4-scout M = 256
  // M-blocks: 64 rows for plain weights up to 40 rows, up to 64 with >= 64 experts; else 128
  EXPECT_EQ(select_sm90(40, 8, Sm90Kind::kPlain).bm, 64);
  EXPECT_EQ(select_sm90(41, 8, Sm90Kind::kPlain).bm, 128);
  EXPECT_EQ(select_sm90(64, 64, Sm90Kind::kPlain).bm, 64);
  EXPECT_EQ(select_sm90(64, 63, Sm90Kind::kPlain).bm, 128);
  EXPECT_EQ(select_sm90(65, 256, Sm90Kind::kPlain).bm, 128);
  EXPECT_EQ(select_sm90(32, 256, Sm90Kind::kInt8).bm, 64);   // deepseek-v3 M = 1024
  EXPECT_EQ(select_sm90(64, 16, Sm90Kind::kInt8).bm, 128);   // llama4-scout M = 1024
  // the quantized-weight kernel's token tile: 32 up to 24 rows, 64 up to 48 (64 with >= 64 experts), else 128
  EXPECT_EQ(select_sm90(17, 8, Sm90Kind::kWq).bm, 32);
  EXPECT_EQ(select_sm90(24, 8, Sm90Kind::kWq).bm, 32);
  EXPECT_EQ(select_sm90(25, 256, Sm90Kind::kWq).bm, 64);
  EXPECT_EQ(select_sm90(48, 256, Sm90Kind::kWq).bm, 64);
  EXPECT_EQ(select_sm90(49, 8, Sm90Kind::kWq).bm, 128);
  EXPECT_EQ(select_sm90(33, 8, Sm90Kind::kFp4).bm, 64);
  EXPECT_EQ(select_sm90(64, 8, Sm90Kind::kFp4).bm, 128);
  // up to 64 rows with >= 64 experts (qwen3-30b-a3b M = 1024: 64 rows of 128 experts), else 128
  EXPECT_EQ(select_sm90(64, 128, Sm90Kind::kWq).bm, 64);
  EXPECT_EQ(select_sm90(64, 64, Sm90Kind::kFp4).bm, 64);
  EXPECT_EQ(select_sm90(64, 63, Sm90Kind::kWq).bm, 128);
  EXPECT_EQ(select_sm90(65, 128, Sm90Kind::kWq).bm, 128);
  EXPECT_EQ(select_sm90(64, 16, Sm90Kind::kFp4).bm, 128);  // llama4-scout M = 1024
  // ... but not for W4A8 (measured slower on 64-row tiles there); at <= 48 rows it takes them too
  EXPECT_EQ(select_sm90(64, 128, Sm90Kind::kWq, 0, -1, 0, true).bm, 128);
  EXPECT_EQ(select_sm90(48, 128, Sm90Kind::kWq, 0, -1, 0, true).bm, 64);
  EXPECT_EQ(select_sm90(24, 128, Sm90Kind::kWq, 0, -1, 0, true).bm, 32);
  EXPECT_EQ(select_sm90(64, 128, Sm90Kind::kWq, 0, -1, 64, true).bm, 64);  // forced
  // 256-row token tiles: int4 accumulating straight into acc in both GEMMs (direct) and fp4 units, with
  // >= kWq256Rows rows per expert; never for the promoting kernels or W4A8, even when forced
  auto wq = [](int64_t rows, int E, Sm90Kind k, bool direct, int tn = 0) {
    return select_sm90(rows, E, k, 0, -1, tn, false, direct ? kWq256Rows : 0).bm;
  };
  // int8 / fp8 atoms (two 80 KiB stages): from kWq256Rows8 = 1024 rows (mixtral-8x7b M = 4096)
  auto wq8 = [](int64_t rows, int tn = 0) {
    return select_sm90(rows, 8, Sm90Kind::kWq, 0, -1, tn, false, kWq256Rows8).bm;
  };
  EXPECT_EQ(kWq256Rows8, 1024);
  EXPECT_EQ(wq8(1024), 256);
  EXPECT_EQ(wq8(1023), 128);
  EXPECT_EQ(wq8(256), 128);   // llama4-scout / qwen3-30b-a3b M = 4096: 0.91-0.95x on 256-row tiles
  EXPECT_EQ(wq8(128, 256), 256);  // forced
  EXPECT_EQ(wq8(2048, 128), 128);
  EXPECT_EQ(wq(kWq256Rows, 8, Sm90Kind::kWq, true), 256);
  EXPECT_EQ(wq(kWq256Rows - 1, 8, Sm90Kind::kWq, true), 128);
  EXPECT_EQ(wq(1024, 8, Sm90Kind::kWq, false), 128);
  EXPECT_EQ(wq(1024, 8, Sm90Kind::kFp4, true), 256);
  EXPECT_EQ(kWq256Rows, 128);
  EXPECT_EQ(wq(kWq256Rows, 256, Sm90Kind::kFp4, false), 256);  // deepseek-v3 M = 4096
  EXPECT_EQ(wq(kWq256Rows, 256, Sm90Kind::kWq, true), 256);
  EXPECT_EQ(wq(kWq256Rows - 1, 8, Sm90Kind::kFp4, false), 128);
  EXPECT_EQ(wq(kWq256Rows, 8, Sm90Kind::kWq, false), 128);  // promoting int4 (not direct)
  EXPECT_EQ(wq(1024, 8, Sm90Kind::kFp4, false, 128), 128);     // forced
  EXPECT_EQ(wq(1024, 8, Sm90Kind::kPlain, true), 128);
  EXPECT_EQ(wq(64, 8, Sm90Kind::kWq, true, 256), 256);   // forced
  EXPECT_EQ(wq(64, 8, Sm90Kind::kWq, false, 256), 128);  // forced where it does not apply
  EXPECT_EQ(wq(64, 8, Sm90Kind::kFp4, false, 256), 256);
  EXPECT_EQ(wq(1024, 8, Sm90Kind::kWq, true, 128), 128);
}

// The streaming kernel's rule (config.h select_sm90_stream) on the anchor shapes (132 SMs; boxes =
// GEMM1's 256-row weight boxes: llama4-scout 64, mixtral-8x7b 112, deepseek-v3 16, gpt-oss-120b 23,
// qwen3-30b-a3b 6).
TEST(SelectSm90, StreamKernelRule) {
  auto on = [](int64_t rows, int E, int64_t touched, int boxes, bool fp8, int mode = -1, int nt = 0,
                bool int8 = false) {
    Sm90Choice c;
    select_sm90_stream(c, rows, E, touched, boxes, fp8, 132, true, mode, nt, int8);
    EXPECT_TRUE(!c.stream || (c.wgmma && (c.bm == 16 || c.bm == 64)));
    return c.stream;
  };
  EXPECT_TRUE(on(1, 16, 16, 64, false));    // llama4-scout M = 16
  EXPECT_TRUE(on(4, 16, 16, 64, true));     // llama4-scout M = 64
  EXPECT_FALSE(on(1, 16, 1, 64, false));    // llama4-scout M = 1: 64 items
  EXPECT_FALSE(on(16, 16, 16, 64, false));  // llama4-scout M = 256
  EXPECT_TRUE(on(4, 8, 8, 112, false));     // mixtral-8x7b M = 16
  EXPECT_FALSE(on(1, 8, 2, 112, true));     // mixtral-8x7b M = 1: 224 items
  EXPECT_FALSE(on(16, 8, 8, 112, true));    // mixtral-8x7b M = 64
  EXPECT_TRUE(on(8, 256, 256, 16, true));   // deepseek-v3 M = 256 fp8
  EXPECT_TRUE(on(8, 256, 256, 16, false));  // ... bf16: 4096 items, >= 24 per SM
  EXPECT_TRUE(on(2, 256, 256, 16, true));   // deepseek-v3 M = 64 fp8: >= 10 items per SM
  EXPECT_FALSE(on(2, 256, 256, 16, false)); // ... bf16 (1-4 rows: not)
  EXPECT_TRUE(on(1, 256, 128, 16, true));   // deepseek-v3 M = 16 fp8: 2048 items
  EXPECT_FALSE(on(1, 256, 8, 16, true));    // deepseek-v3 M = 1: 128 items
  EXPECT_TRUE(on(8, 128, 128, 23, true));   // gpt-oss-120b M = 256 fp8
  EXPECT_FALSE(on(8, 128, 128, 23, false)); // ... bf16: 2944 items, < 24 per SM
  EXPECT_TRUE(on(2, 128, 128, 23, true));   // gpt-oss-120b M = 64 fp8
  EXPECT_TRUE(on(1, 128, 64, 23, true));    // gpt-oss-120b M = 16 fp8: 1472 items
  EXPECT_FALSE(on(1, 128, 64, 23, false));  // ... bf16
  EXPECT_FALSE(on(4, 128, 128, 6, true));   // qwen3-30b-a3b M = 64: 768 items
  EXPECT_FALSE(on(1, 128, 128, 6, true));   // qwen3-30b-a3b M = 16
  EXPECT_FALSE(on(16, 128, 128, 6, true));  // qwen3-30b-a3b M = 256
  // INT8 W8A8: wherever the rows and items allow, many experts included
  EXPECT_TRUE(on(1, 256, 128, 16, true, -1, 0, true));    // deepseek-v3 M = 16
  EXPECT_TRUE(on(1, 128, 64, 23, true, -1, 0, true));     // gpt-oss-120b M = 16
  EXPECT_TRUE(on(1, 128, 128, 6, true, -1, 0, true));     // qwen3-30b-a3b M = 16
  EXPECT_FALSE(on(1, 128, 8, 6, true, -1, 0, true));      // qwen3-30b-a3b M = 1: 48 items
  EXPECT_FALSE(on(1, 256, 8, 16, true, -1, 0, true));     // deepseek-v3 M = 1
  EXPECT_FALSE(on(16, 128, 128, 6, true, -1, 0, true));   // qwen3-30b-a3b M = 256: the tile
  // overrides, and the M-block
  EXPECT_TRUE(on(100, 128, 128, 6, false, 1));
  EXPECT_FALSE(on(4, 16, 16, 64, false, 0));
  Sm90Choice c;
  select_sm90_stream(c, 30, 8, 8, 112, false, 132, true, 1);
  EXPECT_EQ(c.bm, 64);
  select_sm90_stream(c, 30, 8, 8, 112, false, 132, true, 1, 16);
  EXPECT_EQ(c.bm, 16);
  Sm90Choice d;
  select_sm90_stream(d, 4, 16, 16, 64, false, 132, false);  // not eligible: the choice stands
  EXPECT_FALSE(d.stream);
  EXPECT_FALSE(d.wgmma);
}

// Evict-first weight loads where the token rows exceed 8 MB (align capacity x padded K x bytes).
TEST(SelectSm90, StreamEvictFirstThreshold) {
  EXPECT_TRUE(stream_evict_first(size_t{5888} * 7168));       // deepseek-v3 M = 256 fp8 GEMM1
  EXPECT_TRUE(stream_evict_first(size_t{2944} * 2880));       // gpt-oss-120b M = 256 fp8
  EXPECT_FALSE(stream_evict_first(size_t{256} * 5120 * 2));   // llama4-scout M = 16 bf16
  // fp8 GEMM2 quantizing h itself up to two slots per expert (twenty-eighth session), the overrides
  EXPECT_TRUE(select_h_quant_in_gemm2(8, 128, 768));      // qwen3-30b-a3b M = 1
  EXPECT_TRUE(select_h_quant_in_gemm2(128, 128, 768));    // M = 16
  EXPECT_TRUE(select_h_quant_in_gemm2(256, 128, 768));    // M = 32: two per expert
  EXPECT_FALSE(select_h_quant_in_gemm2(512, 128, 768));   // M = 64
  EXPECT_TRUE(select_h_quant_in_gemm2(8, 256, 2048));     // deepseek-v3 M = 1
  EXPECT_FALSE(select_h_quant_in_gemm2(4, 128, 2880));    // gpt-oss-120b M = 1: 0.97x (360 maxima per slot)
  EXPECT_FALSE(select_h_quant_in_gemm2(2, 8, 14336));     // mixtral-8x7b M = 1: I / 8 atomics per slot
  EXPECT_FALSE(select_h_quant_in_gemm2(1, 16, 8192));     // llama4-scout M = 1
  EXPECT_FALSE(select_h_quant_in_gemm2(512, 128, 768, 0));
  EXPECT_TRUE(select_h_quant_in_gemm2(512, 128, 768, 1));
  EXPECT_FALSE(select_h_quant_in_gemm2(2, 8, 14336, 0));
  EXPECT_TRUE(select_h_quant_in_gemm2(2, 8, 14336, 1));
  // the token tiles evict-last always (twenty-eighth session), the overrides
  EXPECT_TRUE(stream_x_evict_last());
  EXPECT_FALSE(stream_x_evict_last(0));
  EXPECT_TRUE(stream_x_evict_last(1));
  EXPECT_FALSE(stream_evict_first(size_t{152} * 4096 * 2));   // mixtral-8x7b M = 16 bf16
  EXPECT_FALSE(stream_evict_first(size_t{8} << 20));          // the threshold itself: off
  EXPECT_TRUE(stream_evict_first(0, 1));
  EXPECT_FALSE(stream_evict_first(size_t{1} << 30, 0));
}

TEST(SelectSm90, OverridesReplaceTheRules) {
  EXPECT_TRUE(select_sm90(1, 128, Sm90Kind::kPlain, 1).wgmma);
  EXPECT_FALSE(select_sm90(20, 8, Sm90Kind::kPlain, 21).wgmma);
  EXPECT_TRUE(select_sm90(20, 8, Sm90Kind::kFp4, 5).wgmma);  // the override also moves fp4's 12
  EXPECT_EQ(select_sm90(20, 8, Sm90Kind::kWq, 0, -1, 128).bm, 128);  // the token tile forced
  EXPECT_EQ(select_sm90(100, 8, Sm90Kind::kFp4, 0, -1, 32).bm, 32);
  EXPECT_EQ(select_sm90(100, 8, Sm90Kind::kPlain, 0, -1, 32).bm, 128);  // plain weights: no token tile
  EXPECT_EQ(select_sm90(32, 8, Sm90Kind::kPlain, 0, 0).bm, 128);  // 64-row blocks off
  EXPECT_EQ(select_sm90(100, 8, Sm90Kind::kPlain, 0, 128).bm, 64);
}

// W4A8 on QGMMA (Sm90Gather::kperm): within each 16 columns, wgmma's k32 A-fragment position
// 4q + j of lane q (j = 0..3) must hold the column the int4 atom's word gives lane q there: its
// pairs (2q, 2q + 1) and (2q + 8, 2q + 9) of one k16 step (the mma.sync fragment order). The map is
// a permutation of each 16 columns (no column lost or doubled) and leaves the 16-column blocks in place.
TEST(Sm90KPerm, PutsEachColumnWhereTheInt4AtomWordHasIt) {
  for (int i = 0; i < 64; ++i) {
    const int base = i / 16 * 16, pos = sm90_kperm_pos(i) - base;
    ASSERT_GE(pos, 0) << i;
    ASSERT_LT(pos, 16) << i;
    const int q = pos / 4, j = pos % 4;
    const int col = 2 * q + (j & 1) + (j >> 1) * 8;
    EXPECT_EQ(base + col, i) << "position " << pos << " of block " << base / 16;
  }
  std::vector<int> seen(64, 0);
  for (int i = 0; i < 64; ++i) ++seen[sm90_kperm_pos(i)];
  for (int p = 0; p < 64; ++p) EXPECT_EQ(seen[p], 1) << "position " << p;
}

// The tile kernel's A rows from x (select_a_direct): up to 64 rows per expert, the gather from 65;
// the override replaces the rule.
TEST(SelectSm90, DirectARowsRule) {
  EXPECT_TRUE(select_a_direct(16));    // qwen3-30b-a3b M = 256
  EXPECT_TRUE(select_a_direct(64));    // qwen3-30b-a3b M = 1024, mixtral-8x7b M = 256
  EXPECT_FALSE(select_a_direct(65));
  EXPECT_FALSE(select_a_direct(128));  // deepseek-v3 / gpt-oss-120b M = 4096
  EXPECT_FALSE(select_a_direct(16, 0));
  EXPECT_TRUE(select_a_direct(1024, 1));
  EXPECT_FALSE(select_a_direct(16, 3));
}

// The tile kernel's CTA pairs (select_pairs): 16-bit weights, not fp8; the override replaces the rule.
TEST(SelectSm90, CtaPairsRule) {
  EXPECT_TRUE(select_pairs(false));
  EXPECT_FALSE(select_pairs(true));
  EXPECT_TRUE(select_pairs(true, 1));
  EXPECT_FALSE(select_pairs(false, 0));
}

}  // namespace
}  // namespace qmoe::cuda
