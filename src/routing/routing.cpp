// Routing (include/qmoe/routing.h): router logits [M, E] (F32 / BF16 / F16, converted to f32) ->
// topk_weights F32 [M, k] and topk_ids I32 [M, k] for every RouterKind (formats.md §2c, §2e), and
// moe_align_block_size. Selection everywhere orders by (score descending, expert index ascending),
// so ties go to the lowest index. Scores are computed in f32 (exp/sigmoid in f32, sums in double);
// each row costs O(E log k), rows run in parallel (OpenMP).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/codecs.h"
#include "qmoe/error.h"
#include "qmoe/routing.h"

namespace qmoe {

namespace {

// Indices of the k largest values of v[0, n), ordered by (value desc, index asc). `idx` is scratch
// of size >= n and receives the result in its first k entries.
void top_k(const float* v, int n, int k, std::vector<int>& idx) {
  idx.resize(n);
  std::iota(idx.begin(), idx.begin() + n, 0);
  auto better = [v](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.begin() + n, better);
}

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// softmax of x[0, n) into out (f32 exp of x - max, sum in double)
void softmax(const float* x, int n, float* out) {
  float m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - m);
    s += out[i];
  }
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(out[i] / s);
}

void renormalize(float* w, int k) {
  double s = 0;
  for (int j = 0; j < k; ++j) s += w[j];
  for (int j = 0; j < k; ++j) w[j] = static_cast<float>(w[j] / s);
}

// Row `r` of a [M, E] F32 / BF16 / F16 tensor as f32.
void load_row(const Tensor& t, int64_t r, int64_t E, float* out) {
  const int64_t off = r * E;
  switch (t.dtype()) {
    case DType::kF32: std::copy_n(t.data<float>() + off, E, out); break;
    case DType::kBF16:
      for (int64_t i = 0; i < E; ++i) out[i] = codec::bf16_to_f32(t.data<uint16_t>()[off + i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < E; ++i) out[i] = codec::f16_to_f32(t.data<uint16_t>()[off + i]);
      break;
    default: break;  // rejected by check_inputs
  }
}

void check_inputs(const Tensor& logits, const RouterConfig& cfg, const Tensor& bias) {
  const char* kind = router_kind_name(cfg.kind);
  QMOE_CHECK(logits.defined() && logits.dim() == 2, kBadInput, "route (", kind, "): router logits must be [M, E], got ",
             logits.defined() ? shape_str(logits.shape()) : std::string("an absent tensor"));
  const DType dt = logits.dtype();
  QMOE_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16, kBadInput, "route (", kind,
             "): router logits must be F32, BF16 or F16, got ", dtype_name(dt));
  const int64_t E = logits.size(1);
  QMOE_CHECK(E >= 1 && E <= (int64_t{1} << 30), kBadInput, "route (", kind, "): router logits have E = ", E,
             " experts");
  QMOE_CHECK(cfg.top_k >= 1 && cfg.top_k <= E, kBadInput, "route (", kind, "): top_k ", cfg.top_k,
             " must be in [1, E = ", E, "]");
  if (cfg.kind == RouterKind::kLlama4)
    QMOE_CHECK(!cfg.renormalize, kBadInput, "route (llama4): Llama 4 routing weights are sigmoid(logit) and are "
               "never renormalized; set renormalize = false");
  if (cfg.kind == RouterKind::kGrouped) {
    const int g = cfg.num_groups;
    QMOE_CHECK(g >= 1 && E % g == 0, kBadInput, "route (grouped_topk): n_group ", g, " must divide E = ", E);
    QMOE_CHECK(cfg.topk_group >= 1 && cfg.topk_group <= g, kBadInput, "route (grouped_topk): topk_group ",
               cfg.topk_group, " must be in [1, n_group = ", g, "]");
    QMOE_CHECK(cfg.top_k <= int64_t{cfg.topk_group} * (E / g), kBadInput, "route (grouped_topk): top_k ", cfg.top_k,
               " exceeds the ", int64_t{cfg.topk_group} * (E / g), " experts of the ", cfg.topk_group,
               " kept groups");
    QMOE_CHECK(std::isfinite(cfg.routed_scaling_factor), kBadInput,
               "route (grouped_topk): routed_scaling_factor must be finite, got ", cfg.routed_scaling_factor);
    if (bias.defined()) {
      QMOE_CHECK(bias.dtype() == DType::kF32 && bias.dim() == 1 && bias.size(0) == E, kBadInput,
                 "route (grouped_topk): e_score_correction_bias must be F32 [", E, "], got ", dtype_name(bias.dtype()),
                 " ", shape_str(bias.shape()));
      for (int64_t i = 0; i < E; ++i)
        QMOE_CHECK(std::isfinite(bias.data<float>()[i]), kBadInput,
                   "route (grouped_topk): e_score_correction_bias[", i, "] is not finite");
    }
  } else {
    QMOE_CHECK(!bias.defined(), kBadInput, "route (", kind,
               "): a score-correction bias is only used by grouped (DeepSeek-V3) routing");
  }
}

}  // namespace

RoutingResult route(const Tensor& logits, const RouterConfig& cfg, const Tensor& bias) {
  check_inputs(logits, cfg, bias);
  const int64_t M = logits.size(0);
  const int E = static_cast<int>(logits.size(1)), k = cfg.top_k;
  RoutingResult r{Tensor(DType::kF32, {M, k}), Tensor(DType::kI32, {M, k})};
  float* W = r.topk_weights.data_mut<float>();
  int32_t* I = r.topk_ids.data_mut<int32_t>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  int64_t bad_row = -1;  // first row with a non-finite logit (reported after the loop)

#pragma omp parallel if (M * E >= 16384)
  {
    std::vector<float> x(E), s(E), sel(E), gscore(cfg.num_groups);
    std::vector<int> idx, gidx;
    std::vector<char> keep(cfg.num_groups);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < M; ++row) {
      load_row(logits, row, E, x.data());
      bool finite = true;
      for (int e = 0; e < E; ++e) finite &= std::isfinite(x[e]);
      if (!finite) {
#pragma omp critical
        if (bad_row < 0 || row < bad_row) bad_row = row;
        continue;
      }
      float* w = W + row * k;
      int32_t* id = I + row * k;
      switch (cfg.kind) {
        case RouterKind::kSoftmaxTopK:
        case RouterKind::kSigmoidTopK: {
          if (cfg.kind == RouterKind::kSoftmaxTopK) softmax(x.data(), E, s.data());
          else for (int e = 0; e < E; ++e) s[e] = sigmoid(x[e]);
          top_k(s.data(), E, k, idx);
          for (int j = 0; j < k; ++j) id[j] = idx[j], w[j] = s[idx[j]];
          if (cfg.renormalize) renormalize(w, k);
          break;
        }
        case RouterKind::kTopKSoftmax: {  // gpt-oss: softmax over the k chosen logits
          top_k(x.data(), E, k, idx);
          for (int j = 0; j < k; ++j) id[j] = idx[j], s[j] = x[idx[j]];
          softmax(s.data(), k, w);
          break;
        }
        case RouterKind::kLlama4: {  // top-k on raw logits, weight = sigmoid(chosen logit)
          top_k(x.data(), E, k, idx);
          for (int j = 0; j < k; ++j) id[j] = idx[j], w[j] = sigmoid(x[idx[j]]);
          break;
        }
        case RouterKind::kGrouped: {
          if (cfg.grouped_sigmoid) for (int e = 0; e < E; ++e) s[e] = sigmoid(x[e]);
          else softmax(x.data(), E, s.data());
          for (int e = 0; e < E; ++e) sel[e] = b ? s[e] + b[e] : s[e];
          const int G = cfg.num_groups, gs = E / G;
          for (int g = 0; g < G; ++g) {
            const float* v = sel.data() + g * gs;
            if (b) {  // sum of the two largest biased scores (the one score of a 1-expert group)
              top_k(v, gs, std::min(gs, 2), idx);
              gscore[g] = gs >= 2 ? v[idx[0]] + v[idx[1]] : v[idx[0]];
            } else {
              gscore[g] = *std::max_element(v, v + gs);
            }
          }
          top_k(gscore.data(), G, cfg.topk_group, gidx);
          // experts of dropped groups can never be chosen: give them -inf (all kept scores are finite)
          std::fill(keep.begin(), keep.end(), 0);
          for (int j = 0; j < cfg.topk_group; ++j) keep[gidx[j]] = 1;
          for (int e = 0; e < E; ++e)
            if (!keep[e / gs]) sel[e] = -INFINITY;
          top_k(sel.data(), E, k, idx);
          for (int j = 0; j < k; ++j) id[j] = idx[j], w[j] = s[idx[j]];
          if (cfg.renormalize) renormalize(w, k);
          for (int j = 0; j < k; ++j) w[j] *= cfg.routed_scaling_factor;
          break;
        }
      }
    }
  }
  if (bad_row >= 0) bad_input("route (", router_kind_name(cfg.kind), "): router logits row ", bad_row,
                              " contains NaN or Inf");
  return r;
}

AlignResult align_block_size(const int32_t* topk_ids, int64_t numel, int num_experts, int block_size,
                             const std::vector<int32_t>& expert_map) {
  QMOE_CHECK(numel >= 0 && numel < (int64_t{1} << 31), kBadInput, "align_block_size: numel ", numel,
             " must be in [0, 2^31)");
  QMOE_CHECK(numel == 0 || topk_ids, kBadInput, "align_block_size: topk_ids is null");
  QMOE_CHECK(num_experts >= 1, kBadInput, "align_block_size: num_experts ", num_experts, " must be >= 1");
  QMOE_CHECK(block_size >= 1, kBadInput, "align_block_size: block_size ", block_size, " must be >= 1");
  QMOE_CHECK(expert_map.empty() || expert_map.size() == static_cast<size_t>(num_experts), kBadInput,
             "align_block_size: expert_map has ", expert_map.size(), " entries, expected num_experts = ",
             num_experts);
  for (size_t e = 0; e < expert_map.size(); ++e)
    QMOE_CHECK(expert_map[e] >= -1, kBadInput, "align_block_size: expert_map[", e, "] = ", expert_map[e],
               " (must be a local id >= 0 or -1)");
  const int64_t B = block_size;
  std::vector<int64_t> count(num_experts, 0);
  for (int64_t i = 0; i < numel; ++i) {
    const int32_t e = topk_ids[i];
    QMOE_CHECK(e >= 0 && e < num_experts, kBadInput, "align_block_size: topk_ids[", i, "] = ", e,
               " is outside [0, ", num_experts, ")");
    ++count[e];
  }
  // capacity numel + E*(B-1) rounded up to B: the worst case of every expert padding B-1 rows
  const int64_t capacity = (numel + int64_t{num_experts} * (B - 1) + B - 1) / B * B;
  QMOE_CHECK(capacity < (int64_t{1} << 31), kBadInput, "align_block_size: ", capacity,
             " padded rows overflow int32");
  AlignResult r;
  r.sorted_token_ids.assign(capacity, static_cast<int32_t>(numel));
  r.expert_ids.assign(capacity / B, -1);  // blocks past num_tokens_post_padded stay -1
  std::vector<int64_t> start(num_experts);
  int64_t off = 0;
  for (int e = 0; e < num_experts; ++e) {
    start[e] = off;
    const int64_t padded = (count[e] + B - 1) / B * B;
    const int32_t local = expert_map.empty() ? e : expert_map[e];
    for (int64_t blk = off / B; blk < (off + padded) / B; ++blk) r.expert_ids[blk] = local;
    off += padded;
  }
  r.num_tokens_post_padded = static_cast<int32_t>(off);
  for (int64_t i = 0; i < numel; ++i) r.sorted_token_ids[start[topk_ids[i]]++] = static_cast<int32_t>(i);
  return r;
}

}  // namespace qmoe
