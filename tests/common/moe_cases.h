// Header-only helpers shared by the MoE layer tests (tests/ref, tests/cuda): a MoeConfig, random
// expert weights of a scheme, the named scheme case, and random routing with its special modes.
#pragma once
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/ref/quantize.h"
#include "qmoe/moe.h"
#include "qmoe/tensor.h"

namespace qmoe::test {

struct Routing {
  Tensor w, ids;
};
// Uniform random distinct ids per token; mode 1: every token on experts 5, 6, ...; mode 2:
// expert 3 never chosen. Random positive weights.
inline Routing random_routing(int64_t m, int k, int E, uint64_t seed, int mode = 0) {
  Routing r{Tensor(DType::kF32, {m, k}), Tensor(DType::kI32, {m, k})};
  std::mt19937_64 rng(seed);
  std::vector<int> perm(E);
  for (int64_t t = 0; t < m; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      int id = perm[j];
      if (mode == 1) id = (5 + j) % E;
      if (mode == 2 && id == 3) id = perm[k];
      r.ids.data_mut<int32_t>()[t * k + j] = id;
      r.w.data_mut<float>()[t * k + j] = std::uniform_real_distribution<float>(0.05f, 1.f)(rng);
    }
  }
  return r;
}

// k distinct experts per token (a fresh permutation each token), weights in (0.1, 1); the routing
// of the reference and CPU layer tests.
inline void random_routing(int64_t M, int k, int E, uint64_t seed, Tensor& w, Tensor& ids) {
  w = Tensor(DType::kF32, {M, k});
  ids = Tensor(DType::kI32, {M, k});
  std::mt19937_64 rng(seed);
  for (int64_t t = 0; t < M; ++t) {
    std::vector<int> perm(E);
    for (int i = 0; i < E; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      ids.data_mut<int32_t>()[t * k + j] = perm[j];
      w.data_mut<float>()[t * k + j] = 0.1f + 0.9f * std::uniform_real_distribution<float>(0, 1)(rng);
    }
  }
}

struct Case {
  std::string name;
  ref::SchemeSpec spec;
};

inline ExpertWeights make_weights(const ref::SchemeSpec& spec, int E, int H, int I, uint64_t seed) {
  ref::RandomWeightsSpec r;
  r.scheme = spec;
  r.num_experts = E;
  r.hidden = H;
  r.intermediate = I;
  r.seed = seed;
  return ref::make_random_expert_weights(r);
}

inline MoeConfig config(int E, int k, Activation act = Activation::kSiluMul, bool on_input = false) {
  MoeConfig c;
  c.num_experts = E;
  c.router.top_k = k;
  c.router.apply_router_weight_on_input = on_input;
  c.activation = act;
  return c;
}

}  // namespace qmoe::test
