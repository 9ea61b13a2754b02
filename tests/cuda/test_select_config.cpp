// select_config (src/cuda/config.h) is a pure function: these tests run everywhere, GPU or not.
// They pin the regime choice (16-row tiles for decode, 128-row tiles once experts hold ~100 rows)
// and the split-K rule (enough blocks to keep every SM streaming, never splits shorter than
// 8 k-tiles).
#include <gtest/gtest.h>

#include "cuda/config.h"

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

}  // namespace
}  // namespace qmoe::cuda
