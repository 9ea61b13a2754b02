// Round-to-nearest weight quantizers into qmoe's canonical encoding (include/qmoe/moe.h), and a
// generator of whole random ExpertWeights for every scheme. Used by tests, benches and `qmoe gen`.
// Input weights are float rows [E, N, K] ("out x in"); outputs are ProjWeights whose tensors follow
// the canonical shapes exactly. Every quantizer is deterministic and OpenMP-parallel over rows; the
// row source is called at most twice per row (tensor-wise scales need an amax pass first), so
// Mixtral-size layers never need a full fp32 copy.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe::ref {

// Fills row[0, K) with the float weights of expert e, output row n. Called concurrently from
// several threads; must be thread-safe and return the same values every time.
using RowSource = std::function<void(int64_t e, int64_t n, float* row)>;

// How one projection (w13 or w2) is encoded.
struct ProjFormat {
  enum class Kind { kDense, kInt, kFP8, kNVFP4, kMXFP4 };
  Kind kind = Kind::kDense;
  int shards = 1;                      // 2 for w13 (rows [0, N/2) gate, [N/2, N) up), 1 for w2
  // kDense: the weight dtype (BF16 / F16 / F32).
  DType dense_dtype = DType::kBF16;
  // kInt: b-bit integers (4 or 8), group_size > 0 or 0 = channel, sym (u = q + 2^(b-1)) or asym
  // (u = q, zero_point U8). g_idx: optional I32 [E, K] group of each column (actorder); group
  // statistics are taken over the columns of each group. Scale in scale_dtype (BF16/F16/F32).
  int bits = 4;
  int group_size = 128;
  bool symmetric = true;
  Tensor g_idx;
  DType scale_dtype = DType::kBF16;
  // kFP8: e4m3 weights, scale = amax / 448 per tensor-shard (F32 [E, S]), channel (scale_dtype
  // [E, N, 1]) or block (F32 [E, ceil(N/bn), ceil(K/bk)]).
  Strategy fp8_strategy = Strategy::kChannel;
  std::array<int, 2> block = {128, 128};
  // kNVFP4: group 16, ModelOpt recipe: global multiplier g = amax_shard / (6 * 448) (F32 [E, S]);
  // block scale = e4m3(max(block_amax / (6 g), 2^-9)); q = e2m1(w / (scale * g)).
  // kMXFP4: group 32, e8m0 scale = 127 + floor(log2(round_pow2(bf16(amax)))) - 2 (compressed-
  // tensors, formats.md §2a), clamped to [0, 254]; q = e2m1(w / 2^(scale - 127)). Scale dtype U8.
};

// Quantizes K-columns rows from `src` for E experts x N rows.
ProjWeights quantize_proj(const RowSource& src, int64_t E, int64_t N, int64_t K, const ProjFormat& fmt);
// The same from a dense tensor w [E, N, K] (F32 / BF16 / F16).
ProjWeights quantize_proj(const Tensor& w, const ProjFormat& fmt);

// Exact fp32 value of weight (e, n, k) of a canonical projection (the dequantization formulas of
// docs/numerics.md). Slow (one element); for tests and debugging.
float dequantize_weight(const ExpertWeights& w, bool is_w13, int64_t e, int64_t n, int64_t k);
// The whole projection dequantized to F32 [E, N, K] (OpenMP).
Tensor dequantize_proj(const ExpertWeights& w, bool is_w13);

// A scheme description compact enough for tests, benches and `qmoe gen`.
struct SchemeSpec {
  SchemeKind kind = SchemeKind::kUnquantized;
  ActQuant act = ActQuant::kNone;  // kFP8W8A8: kFP8Tensor / kFP8Token / kFP8Group128;
                                   // kW4A8*: token; kNVFP4: kNVFP4 (set automatically when kNone)
  DType act_dtype = DType::kBF16;  // x / y dtype (BF16 / F16 / F32)
  DType weight_dtype = DType::kBF16;  // kUnquantized only
  int bits = 4;                    // kWNA16: 4 or 8
  int group_size = 128;            // int schemes: > 0 or 0 = channel (INT8 W8A8 is always channel)
  bool symmetric = true;           // int schemes
  bool actorder = false;           // kWNA16 group: random per-expert column permutation -> g_idx
  Strategy fp8_strategy = Strategy::kChannel;  // kFP8*: kTensor / kChannel / kBlock
  std::array<int, 2> block = {128, 128};       // kFP8* block
  DType scale_dtype = DType::kBF16;            // int group/channel scales, fp8 channel scales
  bool bias = false;               // F32 biases on w13 and w2 (gpt-oss style)
};

// The MoeScheme (QuantArgs filled in, strategy explicit) that `spec` describes.
MoeScheme make_scheme(const SchemeSpec& spec);
// The ProjFormat of w13 (is_w13) or w2 for `spec`.
ProjFormat make_proj_format(const SchemeSpec& spec, bool is_w13);

struct RandomWeightsSpec {
  SchemeSpec scheme;
  int num_experts = 8;
  int hidden = 256;         // H
  int intermediate = 128;   // I
  uint64_t seed = 1;
  // Weights are bf16-rounded uniform values in +-row_scale / sqrt(K), row_scale random in [0.5, 2]
  // per row so scales vary. Static activation scales assume |activation| <= act_amax:
  // fp8 tensor input_scale = act_amax * u / 448, NVFP4 input multiplier = act_amax * u / (6 * 448),
  // u random in [0.75, 1.25] per expert, equal for the two w13 shards (they see the same input).
  float act_amax = 4.0f;
};

// Random weights quantized with quantize_proj; validated before return. Deterministic in `seed`
// (independent of the thread count).
ExpertWeights make_random_expert_weights(const RandomWeightsSpec& spec);

// Quantizes given float weights w13 [E, 2I, H], w2 [E, H, I] (F32 / BF16 / F16) for `scheme`.
// Static activation scales (fp8 tensor, NVFP4) are taken from act_amax as above (u = 1).
// `g_idx` (kWNA16 actorder): I32 [E, H] for w13 and [E, I] for w2, or absent.
ExpertWeights quantize_expert_weights(const Tensor& w13, const Tensor& w2, const SchemeSpec& scheme,
                                      float act_amax = 4.0f, const Tensor& w13_g_idx = Tensor(),
                                      const Tensor& w2_g_idx = Tensor());

// Deterministic uniform random numbers for tests: value i of stream `seed` in [lo, hi).
float random_uniform(uint64_t seed, uint64_t i, float lo, float hi);

}  // namespace qmoe::ref
