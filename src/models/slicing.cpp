// TP / EP slicing of canonical expert weights; see slicing.h for the rules.
#include "models/slicing.h"

#include <cstring>
#include <numeric>

namespace qmoe::models {

Tensor slice_dim(const Tensor& t, int dim, int64_t begin, int64_t end) {
  QMOE_CHECK(dim >= 0 && dim < t.dim() && begin >= 0 && begin <= end && end <= t.size(dim), kInternal,
             "slice_dim ", dim, " [", begin, ", ", end, ") out of range for ", shape_str(t.shape()));
  Shape s = t.shape();
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(t.dtype()));
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= s[d];
  int64_t n = s[dim];
  s[dim] = end - begin;
  Tensor r(t.dtype(), s);
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(r.raw_mut());
  const size_t chunk = static_cast<size_t>((end - begin) * inner);
  for (int64_t o = 0; o < outer; ++o)
    if (chunk) memcpy(dst + o * chunk, src + (o * n + begin) * inner, chunk);
  return r;
}

Tensor concat_dim(const std::vector<Tensor>& ts, int dim) {
  QMOE_CHECK(!ts.empty(), kInternal, "concat_dim of nothing");
  Shape s = ts[0].shape();
  QMOE_CHECK(dim >= 0 && dim < static_cast<int>(s.size()), kInternal, "concat_dim: bad dim ", dim);
  int64_t total = 0;
  for (const Tensor& t : ts) {
    Shape o = t.shape();
    QMOE_CHECK(t.dtype() == ts[0].dtype() && o.size() == s.size(), kInternal, "concat_dim: mismatched tensors ",
               shape_str(o), " vs ", shape_str(s));
    o[dim] = s[dim];
    QMOE_CHECK(o == s, kInternal, "concat_dim: mismatched shapes ", shape_str(t.shape()), " vs ", shape_str(ts[0].shape()));
    total += t.size(dim);
  }
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(ts[0].dtype()));
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  s[dim] = total;
  Tensor r(ts[0].dtype(), s);
  auto* dst = static_cast<uint8_t*>(r.raw_mut());
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& t : ts) {
      size_t chunk = static_cast<size_t>(t.size(dim) * inner);
      if (chunk) memcpy(dst, static_cast<const uint8_t*>(t.raw()) + o * chunk, chunk);
      dst += chunk;
    }
  return r;
}

namespace {

bool packed4(const ProjWeights& p, int64_t k) { return p.weight.defined() && p.weight.dim() == 3 && p.weight.size(2) * 2 == k && k > 1; }

// Rows [r*Is, (r+1)*Is) of the gate half and the same of the up half of a [E, 2I, ...] tensor.
Tensor cut_w13_rows(const Tensor& t, int64_t I, int64_t Is, int r, int64_t unit = 1) {
  if (!t.defined()) return t;
  Tensor g = slice_dim(t, 1, r * Is / unit, (r + 1) * Is / unit);
  Tensor u = slice_dim(t, 1, (I + r * Is) / unit, (I + (r + 1) * Is) / unit);
  return concat_dim({g, u}, 1);
}

}  // namespace

TpConstraint tp_constraint(const ExpertWeights& w) {
  TpConstraint c;
  auto need = [&](int m, const std::string& why) {
    if (m <= 1) return;
    int l = std::lcm(c.multiple, m);
    if (l != c.multiple) {
      c.multiple = l;
      c.why = why;
    }
  };
  const char* what = "";
  switch (w.scheme.kind) {
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: what = "nvfp4"; break;
    case SchemeKind::kMXFP4A16: what = "mxfp4"; break;
    case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: what = "fp8"; break;
    default: what = "int"; break;
  }
  const bool four = w.w2.weight.defined() ? packed4(w.w2, w.intermediate)
                                          : w.scheme.kind != SchemeKind::kUnquantized && w.scheme.weights.num_bits == 4;
  if (four) need(2, "4-bit weights packed two per byte");
  if (w.block[0] > 0) {
    need(w.block[0], str("fp8 block ", w.block[0], "x", w.block[1]));
    need(w.block[1], str("fp8 block ", w.block[0], "x", w.block[1]));
  }
  bool actorder_w2 = w.w2.g_idx.defined() || w.scheme.weights.actorder == ActOrder::kGroup;
  if (w.group_size > 0 && !actorder_w2) need(w.group_size, str(what, " group ", w.group_size));
  return c;
}

std::vector<int> valid_tp_sizes(int intermediate, const TpConstraint& c) {
  std::vector<int> r;
  for (int t = 1; t <= intermediate; ++t)
    if (intermediate % t == 0 && (intermediate / t) % c.multiple == 0) r.push_back(t);
  return r;
}

std::string check_tp(const ExpertWeights& w, int tp_size, const std::string& where) {
  if (tp_size < 1) bad_input(where, ": TP size ", tp_size, " must be >= 1");
  TpConstraint c = tp_constraint(w);
  const int I = w.intermediate;
  if (I % tp_size != 0 || (I / tp_size) % c.multiple != 0) {
    std::vector<int> ok = valid_tp_sizes(I, c);
    std::string list;
    for (size_t i = 0; i < ok.size(); ++i) list += (i ? ", " : "") + std::to_string(ok[i]);
    if (I % tp_size != 0)
      bad_input(where, ": TP size ", tp_size, " does not divide the expert intermediate size I=", I,
                "; TP sizes that work: ", list);
    bad_input(where, ": TP size ", tp_size, " gives I/tp=", I / tp_size, ", not a multiple of ", c.multiple, " (",
              c.why, "); TP sizes that work: ", list);
  }
  bool fp4 = w.scheme.kind == SchemeKind::kNVFP4 || w.scheme.kind == SchemeKind::kNVFP4A16;
  if (fp4 && tp_size > 1 && (I / tp_size) % 32 != 0)
    return str(where, ": I/tp=", I / tp_size, " is not a multiple of 32; some NVFP4 kernels need 32-aligned K "
               "(vLLM issue 48898)");
  return "";
}

void slice_tp(ExpertWeights& w, int tp_rank, int tp_size, const std::string& where) {
  check_tp(w, tp_size, where);
  if (tp_rank < 0 || tp_rank >= tp_size) bad_input(where, ": TP rank ", tp_rank, " outside [0, ", tp_size, ")");
  if (tp_size == 1) return;
  const int64_t I = w.intermediate, Is = I / tp_size;
  const int r = tp_rank;
  // ---- w13: rows ----
  ProjWeights& a = w.w13;
  a.weight = cut_w13_rows(a.weight, I, Is, r);
  a.bias = cut_w13_rows(a.bias, I, Is, r);
  a.zero_point = cut_w13_rows(a.zero_point, I, Is, r);
  if (a.scale.defined() && a.scale.dim() == 3) {
    if (w.block[0] > 0) a.scale = cut_w13_rows(a.scale, I, Is, r, w.block[0]);  // I, Is multiples of bn (checked)
    else a.scale = cut_w13_rows(a.scale, I, Is, r);                               // group / channel: per row
  }
  // tensor scales [E, 2], global / input scales [E, S] and g_idx over H are not split.
  // ---- w2: columns (K = I) ----
  ProjWeights& b = w.w2;
  const int64_t kb = packed4(b, I) ? 2 : 1;  // elements per stored column
  b.weight = slice_dim(b.weight, 2, r * Is / kb, (r + 1) * Is / kb);
  if (b.g_idx.defined()) {
    // Actorder (vLLM load_full_w2): a rank's columns may name any group of the row, so they keep
    // their g_idx values and the scale / zero point keep every group [E, H, ceil(I/G)].
    b.g_idx = slice_dim(b.g_idx, 1, r * Is, (r + 1) * Is);
  } else {
    if (b.scale.defined() && b.scale.dim() == 3) {
      if (w.block[0] > 0) b.scale = slice_dim(b.scale, 2, r * Is / w.block[1], (r + 1) * Is / w.block[1]);
      else if (w.group_size > 0) b.scale = slice_dim(b.scale, 2, r * Is / w.group_size, (r + 1) * Is / w.group_size);
    }
    if (b.zero_point.defined() && w.group_size > 0)
      b.zero_point = slice_dim(b.zero_point, 2, r * Is / w.group_size, (r + 1) * Is / w.group_size);
  }
  if (b.bias.defined() && r != 0) {
    Tensor z(b.bias.dtype(), b.bias.shape());  // zero: the bias is added once, by rank 0
    b.bias = z;
  }
  w.intermediate = static_cast<int>(Is);
}

EpRange ep_range(int E, int ep_rank, int ep_size, const std::string& where) {
  if (ep_size < 1) bad_input(where, ": EP size ", ep_size, " must be >= 1");
  if (ep_rank < 0 || ep_rank >= ep_size) bad_input(where, ": EP rank ", ep_rank, " outside [0, ", ep_size, ")");
  if (E % ep_size != 0) {
    std::string list;
    for (int t = 1; t <= E; ++t)
      if (E % t == 0) list += (list.empty() ? "" : ", ") + std::to_string(t);
    bad_input(where, ": EP size ", ep_size, " does not divide the ", E, " experts; EP sizes that work: ", list);
  }
  const int El = E / ep_size;
  return {ep_rank * El, El};
}

void set_expert_map(MoeConfig& cfg, int E, const EpRange& r) {
  cfg.expert_map.clear();
  if (r.first == 0 && r.count == E) return;
  cfg.expert_map.assign(E, -1);
  for (int e = 0; e < r.count; ++e) cfg.expert_map[r.first + e] = e;
}

void slice_ep(ExpertWeights& w, MoeConfig& cfg, int ep_rank, int ep_size, const std::string& where) {
  const EpRange r = ep_range(w.num_experts, ep_rank, ep_size, where);
  if (ep_size == 1) return;
  auto cut = [&](Tensor& t) {
    if (t.defined()) t = t.slice0(r.first, r.first + r.count).clone();  // a copy: the rest can be freed
  };
  for (ProjWeights* p : {&w.w13, &w.w2}) {
    cut(p->weight), cut(p->scale), cut(p->zero_point), cut(p->g_idx);
    cut(p->global_scale), cut(p->input_scale), cut(p->bias);
  }
  set_expert_map(cfg, w.num_experts, r);
  w.num_experts = r.count;
}

}  // namespace qmoe::models
