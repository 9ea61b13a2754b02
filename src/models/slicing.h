// Tensor and expert parallelism at load, on canonical ExpertWeights (qmoe/moe.h):
//  * TP rank r of n splits I: w13 keeps gate rows [r*I/n, (r+1)*I/n) and the same up rows, w2 the
//    same input columns; scales, zero points, g_idx and biases follow their weights, except that an
//    actorder w2 (g_idx) keeps its scale / zero point whole (vLLM load_full_w2): a rank's columns
//    keep g_idx values indexing all ceil(I/G) groups of the row. w2's bias is kept on rank 0 only,
//    so the sum over ranks adds it once.
//  * EP rank r of n keeps experts [r*E/n, (r+1)*E/n) and an expert_map global -> local or -1; the
//    loader decodes only those experts (ep_range), other ranks' tensors are never read.
// Divisibility is checked before anything is cut; the error names the TP sizes that would work.
#pragma once
#include <string>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe::models {

// The multiple I/tp must be of for these weights (packing, group, fp8 block), and why.
struct TpConstraint {
  int multiple = 1;
  std::string why;  // "int4 group 128", "fp8 block 128x128", ...
};
TpConstraint tp_constraint(const ExpertWeights& w);

// TP sizes t (divisors of I) for which I/t is a multiple of c.multiple.
std::vector<int> valid_tp_sizes(int intermediate, const TpConstraint& c);

// Throws kBadInput naming `where` when tp_size does not split w.intermediate validly. Returns a
// warning line (empty if none), e.g. for fp4 shards that are not 32-aligned.
std::string check_tp(const ExpertWeights& w, int tp_size, const std::string& where);

// Applies TP slicing in place (check_tp first). tp_size 1 is a no-op.
void slice_tp(ExpertWeights& w, int tp_rank, int tp_size, const std::string& where);

// EP rank r of n of E experts: [first, first + count). Throws kBadInput naming `where` (and the EP
// sizes that work) when n does not divide E or r is out of range.
struct EpRange {
  int first = 0, count = 0;
};
EpRange ep_range(int num_experts, int ep_rank, int ep_size, const std::string& where);
// cfg.expert_map for a rank holding `r` of `num_experts`: global -> local or -1 (empty when r is all).
void set_expert_map(MoeConfig& cfg, int num_experts, const EpRange& r);

// Applies EP slicing in place to already decoded weights and fills cfg.expert_map. ep_size 1 is a
// no-op. (load_model decodes only the rank's experts instead: ep_range + set_expert_map.)
void slice_ep(ExpertWeights& w, MoeConfig& cfg, int ep_rank, int ep_size, const std::string& where);

// Copies [begin, end) of dimension `dim` (any dimension) into a new tensor.
Tensor slice_dim(const Tensor& t, int dim, int64_t begin, int64_t end);
// Concatenates tensors along dimension `dim` (all other dimensions equal, same dtype).
Tensor concat_dim(const std::vector<Tensor>& ts, int dim);

}  // namespace qmoe::models
