// Benchmark problems for `qmoe bench`: the anchor shapes, the bench scheme names, and random
// canonical expert weights generated straight in the stored encoding (random codes, positive
// scales in the checkpoint dtypes, never NaN, never zero scales), fast enough for multi-GB layers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cpu/ref/quantize.h"
#include "qmoe/moe.h"

namespace qmoe::cli {

struct BenchShape {
  std::string name;
  int num_experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  Activation activation = Activation::kSiluMul;
  bool weight_on_input = false;
};
// Anchor shape by name, or "E,topk,H,I".
std::optional<BenchShape> bench_shape(const std::string& s);
const std::vector<BenchShape>& anchor_shapes();

struct BenchScheme {
  std::string name;      // bf16, int4, int4-g32, int8, fp8, fp8-block, fp8-a16, w8a8-int8, w4a8-int8, w4a8-fp8,
                         // nvfp4, nvfp4a16, mxfp4
  ref::SchemeSpec spec;
  bool int8_acts = false;  // floor uses the int8 dot peak
  bool fp8 = false;        // GPU floor uses the fp8 matrix rate
};
std::optional<BenchScheme> bench_scheme(const std::string& name);
std::string bench_scheme_names();

// Random canonical weights of `E` experts (validated by MoeLayer::create later).
ExpertWeights bench_weights(const BenchScheme& s, int E, int H, int I, uint64_t seed);
// Canonical bytes of one expert (weights + scales + zero points + global scales, both projections).
double bench_expert_bytes(const BenchScheme& s, int H, int I);

}  // namespace qmoe::cli
