// Tests of src/routing: route() for every RouterKind against a float64 brute-force model (scores in
// double, selection by sorting all experts by (score desc, index asc)), on random logits drawn from
// a grid of multiples of 1/8 so that exact ties are frequent and distinct scores stay far apart in
// f32; hand-worked rows; BF16/F16 logits; errors. align_block_size against a brute-force
// construction and two hand-worked examples (every output element checked), with expert_map.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "common/error_check.h"
#include "core/codecs.h"
#include "qmoe/error.h"
#include "qmoe/routing.h"

namespace {

using namespace qmoe;

Tensor f32_tensor(Shape s, const std::vector<float>& v) {
  Tensor t(DType::kF32, std::move(s));
  std::copy(v.begin(), v.end(), t.data_mut<float>());
  return t;
}

// Logits on a grid of 1/8 in [-4, 4]: ties are common, distinct values differ by >= 1/8.
std::vector<float> grid_logits(int64_t n, uint32_t seed, int levels = 65) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(static_cast<int>(rng() % levels) - levels / 2) / 8.f;
  return v;
}

struct Expected {
  std::vector<int> ids;
  std::vector<double> w;
};

// Indices of the k best of v, by (value desc, index asc), via a full sort.
std::vector<int> brute_top(const std::vector<double>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });  // stable: ties keep index order
  idx.resize(k);
  return idx;
}

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }
std::vector<double> softmax64(const std::vector<double>& x) {
  double m = *std::max_element(x.begin(), x.end()), s = 0;
  std::vector<double> p(x.size());
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp(x[i] - m);
  for (auto& v : p) v /= s;
  return p;
}

Expected model_row(const std::vector<double>& x, const RouterConfig& c, const std::vector<double>& bias) {
  const int E = static_cast<int>(x.size()), k = c.top_k;
  Expected r;
  auto renorm = [&] {
    double s = std::accumulate(r.w.begin(), r.w.end(), 0.0);
    for (auto& v : r.w) v /= s;
  };
  switch (c.kind) {
    case RouterKind::kSoftmaxTopK:
    case RouterKind::kSigmoidTopK: {
      std::vector<double> s = x;
      if (c.kind == RouterKind::kSoftmaxTopK) s = softmax64(x);
      else for (auto& v : s) v = sig(v);
      r.ids = brute_top(s, k);
      for (int id : r.ids) r.w.push_back(s[id]);
      if (c.renormalize) renorm();
      break;
    }
    case RouterKind::kTopKSoftmax: {
      r.ids = brute_top(x, k);
      std::vector<double> chosen;
      for (int id : r.ids) chosen.push_back(x[id]);
      r.w = softmax64(chosen);
      break;
    }
    case RouterKind::kLlama4:
      r.ids = brute_top(x, k);
      for (int id : r.ids) r.w.push_back(sig(x[id]));
      break;
    case RouterKind::kGrouped: {
      std::vector<double> s = x;
      if (c.grouped_sigmoid) for (auto& v : s) v = sig(v);
      else s = softmax64(x);
      std::vector<double> sel = s;
      if (!bias.empty()) for (int e = 0; e < E; ++e) sel[e] += bias[e];
      const int G = c.num_groups, gs = E / G;
      std::vector<double> gscore(G);
      for (int g = 0; g < G; ++g) {
        std::vector<double> grp(sel.begin() + g * gs, sel.begin() + (g + 1) * gs);
        std::sort(grp.rbegin(), grp.rend());
        gscore[g] = bias.empty() ? grp[0] : grp[0] + (gs > 1 ? grp[1] : 0.0);
      }
      std::vector<int> kept = brute_top(gscore, c.topk_group);
      std::vector<double> masked(E, -INFINITY);
      for (int g : kept)
        for (int e = g * gs; e < (g + 1) * gs; ++e) masked[e] = sel[e];
      r.ids = brute_top(masked, k);
      for (int id : r.ids) r.w.push_back(s[id]);
      if (c.renormalize) renorm();
      for (auto& v : r.w) v *= c.routed_scaling_factor;
      break;
    }
  }
  return r;
}

// Runs route() and compares ids exactly and weights within f32 rounding of the formula: exp /
// sigmoid in f32 (<= 2 ulp) through one division and an optional renormalization: 1e-6 relative.
void check_route(const std::vector<float>& logits, int64_t M, int E, const RouterConfig& c,
                 const std::vector<float>& bias = {}) {
  Tensor L = f32_tensor({M, E}, logits);
  Tensor B = bias.empty() ? Tensor() : f32_tensor({E}, bias);
  RoutingResult r = route(L, c, B);
  ASSERT_EQ(r.topk_ids.shape(), (Shape{M, c.top_k}));
  ASSERT_EQ(r.topk_weights.shape(), (Shape{M, c.top_k}));
  ASSERT_EQ(r.topk_ids.dtype(), DType::kI32);
  ASSERT_EQ(r.topk_weights.dtype(), DType::kF32);
  std::vector<double> b64(bias.begin(), bias.end());
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> x(logits.begin() + m * E, logits.begin() + (m + 1) * E);
    Expected want = model_row(x, c, b64);
    for (int j = 0; j < c.top_k; ++j) {
      ASSERT_EQ(r.topk_ids.data<int32_t>()[m * c.top_k + j], want.ids[j])
          << router_kind_name(c.kind) << " row " << m << " slot " << j << " E=" << E << " k=" << c.top_k;
      const double got = r.topk_weights.data<float>()[m * c.top_k + j];
      ASSERT_NEAR(got, want.w[j], 1e-6 * std::fabs(want.w[j]) + 1e-12)
          << router_kind_name(c.kind) << " row " << m << " slot " << j;
    }
  }
}

struct Shape3 {
  int64_t M;
  int E, k;
};
const Shape3 kShapes[] = {{1, 3, 1}, {7, 8, 2}, {33, 17, 3}, {5, 60, 4}, {19, 128, 8}, {3, 256, 8}, {11, 5, 5}};

TEST(Route, SoftmaxAndSigmoidTopKVsModel) {
  uint32_t seed = 1;
  for (const auto& s : kShapes)
    for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kSigmoidTopK})
      for (bool renorm : {false, true}) {
        RouterConfig c;
        c.kind = kind, c.top_k = s.k, c.renormalize = renorm;
        check_route(grid_logits(s.M * s.E, seed++), s.M, s.E, c);
      }
}

TEST(Route, TopKSoftmaxAndLlama4VsModel) {
  uint32_t seed = 100;
  for (const auto& s : kShapes) {
    RouterConfig c;
    c.kind = RouterKind::kTopKSoftmax, c.top_k = s.k;
    check_route(grid_logits(s.M * s.E, seed++), s.M, s.E, c);
    c.kind = RouterKind::kLlama4, c.top_k = 1, c.apply_router_weight_on_input = true;
    check_route(grid_logits(s.M * s.E, seed++), s.M, s.E, c);
    c.top_k = s.k;  // route() also serves top-k > 1 with sigmoid weights
    check_route(grid_logits(s.M * s.E, seed++), s.M, s.E, c);
  }
}

TEST(Route, GroupedVsModel) {
  struct G {
    int64_t M;
    int E, k, n_group, topk_group;
  };
  const G cases[] = {{9, 256, 8, 8, 4}, {13, 60, 6, 6, 3}, {7, 16, 1, 4, 1}, {5, 15, 4, 5, 2},
                     {4, 12, 12, 3, 3}, {6, 9, 2, 9, 2},   {3, 8, 3, 1, 1}};
  uint32_t seed = 1000;
  for (const auto& g : cases)
    for (bool sigmoid : {true, false})
      for (bool with_bias : {true, false})
        for (bool renorm : {true, false}) {
          RouterConfig c;
          c.kind = RouterKind::kGrouped, c.top_k = g.k, c.renormalize = renorm, c.grouped_sigmoid = sigmoid;
          c.num_groups = g.n_group, c.topk_group = g.topk_group, c.routed_scaling_factor = 2.5f;
          std::vector<float> bias;
          if (with_bias) {  // grid of 1/16 in [-0.5, 0.5]
            std::mt19937 rng(seed * 7);
            for (int e = 0; e < g.E; ++e) bias.push_back(static_cast<float>(static_cast<int>(rng() % 17) - 8) / 16.f);
          }
          check_route(grid_logits(g.M * g.E, seed++), g.M, g.E, c, bias);
        }
}

TEST(Route, HandWorkedRows) {
  // softmax top-2 of [1, 3, 2, 3]: experts 1 and 3 tie; both get e^3 / (e + 2e^3 + e^2)
  RouterConfig c;
  c.kind = RouterKind::kSoftmaxTopK, c.top_k = 2;
  RoutingResult r = route(f32_tensor({1, 4}, {1, 3, 2, 3}), c);
  const double S = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_EQ(r.topk_ids.data<int32_t>()[0], 1);
  EXPECT_EQ(r.topk_ids.data<int32_t>()[1], 3);
  EXPECT_NEAR(r.topk_weights.data<float>()[0], std::exp(3.0) / S, 1e-7);
  EXPECT_NEAR(r.topk_weights.data<float>()[1], std::exp(3.0) / S, 1e-7);
  c.renormalize = true;
  r = route(f32_tensor({1, 4}, {1, 3, 2, 3}), c);
  EXPECT_FLOAT_EQ(r.topk_weights.data<float>()[0], 0.5f);
  // gpt-oss: top-2 of [0, 2, -1, 1] = experts 1, 3; softmax over (2, 1)
  c = RouterConfig{};
  c.kind = RouterKind::kTopKSoftmax, c.top_k = 2;
  r = route(f32_tensor({1, 4}, {0, 2, -1, 1}), c);
  EXPECT_EQ(r.topk_ids.data<int32_t>()[0], 1);
  EXPECT_EQ(r.topk_ids.data<int32_t>()[1], 3);
  EXPECT_NEAR(r.topk_weights.data<float>()[0], 1 / (1 + std::exp(-1.0)), 1e-7);
  // Llama 4: top-1 of [-3, 0.5, 0.5] = expert 1 (tie -> lowest), weight sigmoid(0.5)
  c = RouterConfig{};
  c.kind = RouterKind::kLlama4;
  r = route(f32_tensor({1, 3}, {-3, 0.5f, 0.5f}), c);
  EXPECT_EQ(r.topk_ids.data<int32_t>()[0], 1);
  EXPECT_NEAR(r.topk_weights.data<float>()[0], sig(0.5), 1e-7);
  // DeepSeek grouped, E = 8, 4 groups of 2, keep 2 groups, top-2, sigmoid, bias. Logits 0 -> s = 0.5.
  // sel = 0.5 + bias; group sums of top-2: g0 (0.0, 0.1) = 1.1, g1 (0.3, -1) = 0.3, g2 (0.2, 0.2) = 1.4,
  // g3 (0.25, 0) = 1.25 -> keep g2, g3; top-2 of sel there: expert 6 (0.75), then 4 and 5 tie at 0.7 -> 4.
  // Weights: unbiased 0.5 each, renormalized to 0.5, times 2.5 = 1.25.
  c = RouterConfig{};
  c.kind = RouterKind::kGrouped, c.top_k = 2, c.num_groups = 4, c.topk_group = 2, c.renormalize = true;
  c.routed_scaling_factor = 2.5f;
  r = route(f32_tensor({1, 8}, std::vector<float>(8, 0.f)), c,
            f32_tensor({8}, {0.0f, 0.1f, 0.3f, -1.f, 0.2f, 0.2f, 0.25f, 0.0f}));
  EXPECT_EQ(r.topk_ids.data<int32_t>()[0], 6);
  EXPECT_EQ(r.topk_ids.data<int32_t>()[1], 4);
  EXPECT_FLOAT_EQ(r.topk_weights.data<float>()[0], 1.25f);
  EXPECT_FLOAT_EQ(r.topk_weights.data<float>()[1], 1.25f);
}

TEST(Route, AllEqualLogitsPickLowestIndices) {
  for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kSigmoidTopK, RouterKind::kTopKSoftmax,
                          RouterKind::kLlama4, RouterKind::kGrouped}) {
    RouterConfig c;
    c.kind = kind, c.top_k = kind == RouterKind::kLlama4 ? 1 : 3;
    c.num_groups = 4, c.topk_group = 2;
    RoutingResult r = route(f32_tensor({2, 12}, std::vector<float>(24, 0.25f)), c);
    for (int m = 0; m < 2; ++m)
      for (int j = 0; j < c.top_k; ++j) EXPECT_EQ(r.topk_ids.data<int32_t>()[m * c.top_k + j], j) << router_kind_name(kind);
  }
}

TEST(Route, HalfPrecisionLogitsConvertFirst) {
  const int64_t M = 9;
  const int E = 20;
  std::vector<float> l = grid_logits(M * E, 77);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Tensor h(dt, {M, E});
    for (int64_t i = 0; i < M * E; ++i)  // grid values are exact in both formats
      h.data_mut<uint16_t>()[i] = dt == DType::kBF16 ? codec::f32_to_bf16(l[i]) : codec::f32_to_f16(l[i]);
    RouterConfig c;
    c.kind = RouterKind::kSoftmaxTopK, c.top_k = 4, c.renormalize = true;
    RoutingResult a = route(h, c), b = route(f32_tensor({M, E}, l), c);
    for (int64_t i = 0; i < M * 4; ++i) {
      EXPECT_EQ(a.topk_ids.data<int32_t>()[i], b.topk_ids.data<int32_t>()[i]);
      EXPECT_EQ(a.topk_weights.data<float>()[i], b.topk_weights.data<float>()[i]);
    }
  }
}

using qmoe::test::expect_bad_input;

TEST(Route, Errors) {
  RouterConfig c;
  c.top_k = 2;
  Tensor L = f32_tensor({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_bad_input([&] { route(Tensor(), c); });
  expect_bad_input([&] { route(L.reshape({8}), c); });
  expect_bad_input([&] { route(Tensor(DType::kI32, {2, 4}), c); });
  RouterConfig k5 = c;
  k5.top_k = 5;
  expect_bad_input([&] { route(L, k5); });
  expect_bad_input([&] { route(f32_tensor({1, 4}, {0, NAN, 1, 2}), c); });
  expect_bad_input([&] { route(f32_tensor({1, 4}, {0, INFINITY, 1, 2}), c); });
  expect_bad_input([&] { route(L, c, f32_tensor({4}, {0, 0, 0, 0})); });  // bias outside grouped routing
  RouterConfig g = c;
  g.kind = RouterKind::kGrouped, g.num_groups = 3;  // does not divide 4
  expect_bad_input([&] { route(L, g); });
  g.num_groups = 2, g.topk_group = 3;
  expect_bad_input([&] { route(L, g); });
  g.topk_group = 1, g.top_k = 3;  // one kept group of 2 experts cannot give 3
  expect_bad_input([&] { route(L, g); });
  g.top_k = 2;
  expect_bad_input([&] { route(L, g, f32_tensor({3}, {0, 0, 0})); });
  RouterConfig l4;
  l4.kind = RouterKind::kLlama4, l4.renormalize = true;
  expect_bad_input([&] { route(L, l4); });
}

// route() is O(M * E log k) per row and parallel: DeepSeek-V3 sizes must take well under a second.
TEST(Route, DeepSeekSizeIsFast) {
  const int64_t M = 4096;
  const int E = 256;
  std::vector<float> l = grid_logits(M * E, 5);
  RouterConfig c;
  c.kind = RouterKind::kGrouped, c.top_k = 8, c.num_groups = 8, c.topk_group = 4, c.renormalize = true;
  c.routed_scaling_factor = 2.5f;
  std::vector<float> bias(E);
  for (int e = 0; e < E; ++e) bias[e] = static_cast<float>(e % 7) / 64.f;
  auto t0 = std::chrono::steady_clock::now();
  RoutingResult r = route(f32_tensor({M, E}, l), c, f32_tensor({E}, bias));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0) << "route at M=4096, E=256 took " << s << " s";
  // spot-check a few rows against the model
  for (int64_t m : {int64_t{0}, int64_t{1777}, M - 1}) {
    std::vector<double> x(l.begin() + m * E, l.begin() + (m + 1) * E);
    Expected want = model_row(x, c, std::vector<double>(bias.begin(), bias.end()));
    for (int j = 0; j < 8; ++j) EXPECT_EQ(r.topk_ids.data<int32_t>()[m * 8 + j], want.ids[j]);
  }
}

// ---- align_block_size ------------------------------------------------------------------------------
void expect_vec(const std::vector<int32_t>& got, const std::vector<int32_t>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
}

TEST(Align, HandWorkedExample) {
  // T = 4 tokens, top_k = 2, E = 4, B = 4: flat ids (token t slot j at 2t + j)
  const std::vector<int32_t> ids = {2, 0, 1, 2, 2, 3, 0, 2};
  // counts: e0 {1, 6}, e1 {2}, e2 {0, 3, 4, 7}, e3 {5}; each padded to 4 -> 16 rows used.
  // capacity = 8 + 4 * (4 - 1) = 20 (already a multiple of 4); sentinel = numel = 8.
  AlignResult a = align_block_size(ids.data(), 8, 4, 4);
  expect_vec(a.sorted_token_ids, {1, 6, 8, 8, 2, 8, 8, 8, 0, 3, 4, 7, 5, 8, 8, 8, 8, 8, 8, 8}, "sorted_token_ids");
  expect_vec(a.expert_ids, {0, 1, 2, 3, -1}, "expert_ids");
  EXPECT_EQ(a.num_tokens_post_padded, 16);
  // EP: this rank holds experts 1 and 3 as local 0 and 1; rows are unchanged, blocks relabelled
  AlignResult b = align_block_size(ids.data(), 8, 4, 4, {-1, 0, -1, 1});
  expect_vec(b.sorted_token_ids, a.sorted_token_ids, "sorted_token_ids (EP)");
  expect_vec(b.expert_ids, {-1, 0, -1, 1, -1}, "expert_ids (EP)");
  EXPECT_EQ(b.num_tokens_post_padded, 16);
}

TEST(Align, HandWorkedZeroTokenExpertsAndRoundedCapacity) {
  // T = 7, top_k = 1, E = 5, B = 3. e0 {5}, e1 {2}, e2 {}, e3 {}, e4 {0, 1, 3, 4, 6}.
  // padded: 3, 3, 0, 0, 6 -> 12 rows. capacity = 7 + 5 * 2 = 17 -> rounded up to 18 (6 blocks).
  const std::vector<int32_t> ids = {4, 4, 1, 4, 4, 0, 4};
  AlignResult a = align_block_size(ids.data(), 7, 5, 3);
  expect_vec(a.sorted_token_ids, {5, 7, 7, 2, 7, 7, 0, 1, 3, 4, 6, 7, 7, 7, 7, 7, 7, 7}, "sorted_token_ids");
  expect_vec(a.expert_ids, {0, 1, 4, 4, -1, -1}, "expert_ids");
  EXPECT_EQ(a.num_tokens_post_padded, 12);
  AlignResult b = align_block_size(ids.data(), 7, 5, 3, {2, -1, 0, 1, -1});
  expect_vec(b.expert_ids, {2, -1, -1, -1, -1, -1}, "expert_ids (EP)");
}

// Brute force: for each expert in order, every flat index with that id, ascending, then sentinel
// padding to a multiple of B; the expert id (mapped) for each of its blocks.
void check_align_vs_brute(const std::vector<int32_t>& ids, int E, int B, const std::vector<int32_t>& map) {
  const int64_t numel = static_cast<int64_t>(ids.size());
  AlignResult a = align_block_size(ids.data(), numel, E, B, map);
  const int64_t cap = ((numel + int64_t{E} * (B - 1)) + B - 1) / B * B;
  std::vector<int32_t> sorted, blocks;
  for (int e = 0; e < E; ++e) {
    int64_t n = 0;
    for (int64_t i = 0; i < numel; ++i)
      if (ids[i] == e) sorted.push_back(static_cast<int32_t>(i)), ++n;
    while (n % B) sorted.push_back(static_cast<int32_t>(numel)), ++n;
    for (int64_t j = 0; j < n / B; ++j) blocks.push_back(map.empty() ? e : map[e]);
  }
  const int32_t used = static_cast<int32_t>(sorted.size());
  sorted.resize(cap, static_cast<int32_t>(numel));
  blocks.resize(cap / B, -1);
  EXPECT_EQ(a.num_tokens_post_padded, used);
  EXPECT_EQ(a.num_tokens_post_padded % B, 0);
  expect_vec(a.sorted_token_ids, sorted, "sorted_token_ids");
  expect_vec(a.expert_ids, blocks, "expert_ids");
}

TEST(Align, RandomVsBruteForce) {
  std::mt19937 rng(9);
  struct C {
    int64_t T;
    int k, E, B;
  };
  const C cases[] = {{1, 1, 1, 1},   {1, 1, 8, 16},   {13, 2, 8, 16},  {37, 6, 60, 64},  {129, 8, 256, 64},
                     {5, 3, 7, 4},   {64, 1, 7, 128}, {33, 4, 17, 1},  {200, 2, 3, 32},  {0, 2, 8, 16}};
  for (const C& c : cases)
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<int32_t> ids(c.T * c.k);
      for (int64_t t = 0; t < c.T; ++t) {  // distinct experts per token, as top-k gives
        std::vector<int32_t> perm(c.E);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < c.k; ++j) ids[t * c.k + j] = variant == 1 ? (c.E - 1 + j) % c.E : perm[j];
      }
      if (variant == 1 && c.k == 1) std::fill(ids.begin(), ids.end(), c.E - 1);  // all tokens on one expert
      std::vector<int32_t> map;
      if (variant == 2) {  // EP: every third expert is remote, the rest numbered in order
        int32_t next = 0;
        for (int e = 0; e < c.E; ++e) map.push_back(e % 3 == 1 ? -1 : next++);
      }
      check_align_vs_brute(ids, c.E, c.B, map);
    }
}

TEST(Align, Errors) {
  const std::vector<int32_t> ids = {0, 3, 1};
  expect_bad_input([&] { align_block_size(ids.data(), 3, 3, 4); });           // id 3 >= E
  expect_bad_input([&] { align_block_size(ids.data(), 3, 4, 0); });           // block size 0
  expect_bad_input([&] { align_block_size(ids.data(), 3, 4, 4, {0, 1}); });   // map size
  expect_bad_input([&] { align_block_size(ids.data(), 3, 4, 4, {0, 1, -2, 3}); });
  expect_bad_input([&] { align_block_size(nullptr, 3, 4, 4); });
  AlignResult a = align_block_size(nullptr, 0, 4, 4);  // no tokens: all padding, no used blocks
  EXPECT_EQ(a.num_tokens_post_padded, 0);
  expect_vec(a.sorted_token_ids, std::vector<int32_t>(12, 0), "empty sorted_token_ids");
  expect_vec(a.expert_ids, std::vector<int32_t>(3, -1), "empty expert_ids");
}

}  // namespace
