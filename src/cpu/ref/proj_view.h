// Internal to src/cpu/ref: a decoded description of one canonical projection (w13 or w2) and the
// row decoders the reference forward, dequantize_proj and validate share. A row is one output
// channel n of expert e: K input columns. Shapes and encodings are those of include/qmoe/moe.h.
#pragma once
#include <cstdint>
#include <string>

#include "core/codecs.h"
#include "qmoe/moe.h"

namespace qmoe::ref::detail {

enum class WKind { kDense, kInt, kFP8, kNVFP4, kMXFP4 };

struct ProjView {
  const ProjWeights* p = nullptr;
  WKind kind = WKind::kDense;
  int64_t E = 0, N = 0, K = 0;
  int shards = 1;          // 2 for w13
  int bits = 16;           // int: 4 or 8
  bool symmetric = true;   // int
  Strategy strat = Strategy::kTensor;
  int64_t group = 0;       // int / nvfp4 / mxfp4 group along K (0 = channel for int)
  int64_t n_groups = 1;    // scale columns per row (int, nvfp4, mxfp4); 1 for channel; int with g_idx: scale's last dim
  int64_t bn = 0, bk = 0;  // fp8 block
  int64_t shard_rows() const { return N / shards; }
  int shard_of(int64_t n) const { return static_cast<int>(n / shard_rows()); }
};

WKind weight_kind(SchemeKind k);
// The view of w13 (is_w13) or w2 of `w`; only reads metadata (no validation of tensors).
ProjView make_view(const ExpertWeights& w, bool is_w13);

// Any float-like scalar tensor element (F32 / BF16 / F16 / F8E4M3 / E8M0 / U8 read as e8m0 when
// `u8_is_e8m0`) as fp32.
float load_scalar(const Tensor& t, int64_t i, bool u8_is_e8m0 = false);
// Stores v, rounded RNE (fp8 saturating), into a F32 / BF16 / F16 / F8E4M3 element.
void store_scalar(Tensor& t, int64_t i, float v);
// v rounded to the dtype (what store_scalar then load_scalar gives).
float round_to(DType t, float v);

// Raw codes of row (e, n) without scales: dense value, int (u - z), e4m3 value, e2m1 value.
void decode_row_codes(const ProjView& v, int64_t e, int64_t n, float* out);
// Scale of group g (int / nvfp4 block / mxfp4 block / fp8 channel or tensor: g ignored;
// fp8 block: g = k block) of row (e, n), as fp32. NVFP4: the e4m3 block scale only.
float row_scale(const ProjView& v, int64_t e, int64_t n, int64_t g);
// Exactly dequantized row (e, n) in fp32 (docs/numerics.md "Weight dequantization").
void dequant_row(const ProjView& v, int64_t e, int64_t n, float* out);

// The group of column k of row e (int schemes with g_idx, else k / group).
inline int64_t group_of(const ProjView& v, int64_t e, int64_t k) {
  if (v.p->g_idx.defined()) return v.p->g_idx.data<int32_t>()[e * v.K + k];
  return v.group > 0 ? k / v.group : 0;
}

}  // namespace qmoe::ref::detail
