// ExpertWeights::validate: every tensor of the canonical contract (include/qmoe/moe.h) for the
// scheme: presence / absence, dtype, shape; scales finite and > 0, zero points < 2^bits, g_idx in
// range. With g_idx, an int scale / zero point may hold more groups than ceil(K/G) (a TP rank's w2
// keeps all of the unsliced row's groups): their last dim must then cover every g_idx value.
// Each failure is one line: "<where>: w13.scale: expected ..., got ...".
#include <cmath>
#include <initializer_list>
#include <string>

#include "cpu/ref/proj_view.h"

namespace qmoe {

namespace {

using ref::detail::ProjView;
using ref::detail::WKind;

std::string dtypes_str(std::initializer_list<DType> ok) {
  std::string r;
  for (DType t : ok) {
    if (!r.empty()) r += '/';
    r += dtype_name(t);
  }
  return r;
}

struct Checker {
  const std::string& where;
  std::string proj;  // "w13" / "w2"

  void absent(const Tensor& t, const char* name, const char* why) const {
    if (t.defined())
      bad_input(where, ": ", proj, ".", name, " must be absent (", why, "), got ", dtype_name(t.dtype()), " ",
                shape_str(t.shape()));
  }
  void tensor(const Tensor& t, const char* name, std::initializer_list<DType> ok, const Shape& shape) const {
    if (!t.defined()) bad_input(where, ": ", proj, ".", name, " is missing: expected ", dtypes_str(ok), " ", shape_str(shape));
    bool dt_ok = false;
    for (DType d : ok) dt_ok |= t.dtype() == d;
    if (!dt_ok || t.shape() != shape)
      bad_input(where, ": ", proj, ".", name, ": expected ", dtypes_str(ok), " ", shape_str(shape), ", got ",
                dtype_name(t.dtype()), " ", shape_str(t.shape()));
  }
  // Every element finite and > 0; the leading dimension is the expert.
  void positive(const Tensor& t, const char* name, bool u8_is_e8m0 = false) const {
    const int64_t per_e = t.size(0) ? t.numel() / t.size(0) : 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = ref::detail::load_scalar(t, i, u8_is_e8m0);
      if (!(std::isfinite(v) && v > 0.f)) {
        const char* what = std::isnan(v) ? "NaN" : std::isinf(v) ? "Inf" : v == 0.f ? "zero" : "a negative value";
        bad_input(where, ": ", proj, ".", name, " of expert ", i / per_e, " holds ", what, " (", v,
                  ") at flat index ", i % per_e, "; scales must be finite and > 0");
      }
    }
  }
};

void check_proj(const ExpertWeights& w, const std::string& where, bool is_w13) {
  const ProjView v = ref::detail::make_view(w, is_w13);
  const ProjWeights& p = *v.p;
  Checker c{where, is_w13 ? "w13" : "w2"};
  const int64_t E = v.E, N = v.N, K = v.K, S = v.shards;
  const SchemeKind kind = w.scheme.kind;
  const ActQuant act = w.scheme.act;
  const bool static_act = act == ActQuant::kFP8Tensor || act == ActQuant::kNVFP4;

  if (v.kind != WKind::kInt) c.absent(p.zero_point, "zero_point", "only int weights have zero points");
  if (v.kind != WKind::kInt) c.absent(p.g_idx, "g_idx", "only int weights have g_idx");
  if (v.kind != WKind::kNVFP4) c.absent(p.global_scale, "global_scale", "only NVFP4 has a global scale");
  if (!static_act) c.absent(p.input_scale, "input_scale", "activations are not statically quantized");

  switch (v.kind) {
    case WKind::kDense:
      c.tensor(p.weight, "weight", {DType::kBF16, DType::kF16, DType::kF32}, {E, N, K});
      c.absent(p.scale, "scale", "unquantized weights");
      break;
    case WKind::kInt: {
      const int b = v.bits;
      if (b != 4 && b != 8) bad_input(where, ": int weights must have 4 or 8 bits, got ", b);
      if (kind == SchemeKind::kINT8W8A8 && (b != 8 || v.strat != Strategy::kChannel))
        bad_input(where, ": INT8 W8A8 weights must be int8 channel, got int", b, " ", w.scheme.weights.str());
      if ((kind == SchemeKind::kW4A8FP8 || kind == SchemeKind::kW4A8INT8) && b != 4)
        bad_input(where, ": W4A8 weights must be int4, got int", b);
      if (v.strat != Strategy::kGroup && v.strat != Strategy::kChannel)
        bad_input(where, ": int weights must be group or channel quantized, got ", w.scheme.weights.str());
      if (v.strat == Strategy::kGroup && w.group_size <= 0)
        bad_input(where, ": group-quantized int weights need group_size > 0, got ", w.group_size);
      if (b == 4 && K % 2 != 0)
        bad_input(where, ": ", c.proj, " has K = ", K, " input columns; int4 packs two per byte and needs K even");
      c.tensor(p.weight, "weight", {DType::kU8}, {E, N, b == 4 ? K / 2 : K});
      // v.n_groups: ceil(K/G), or with g_idx the scale's own last dim (checked against g_idx below)
      c.tensor(p.scale, "scale", {DType::kBF16, DType::kF16, DType::kF32}, {E, N, v.n_groups});
      c.positive(p.scale, "scale");
      if (v.symmetric) {
        c.absent(p.zero_point, "zero_point", "symmetric weights");
      } else {
        c.tensor(p.zero_point, "zero_point", {DType::kU8}, {E, N, v.n_groups});
        const uint8_t* z = p.zero_point.data<uint8_t>();
        for (int64_t i = 0; i < p.zero_point.numel(); ++i)
          if (z[i] >= (1 << b))
            bad_input(where, ": ", c.proj, ".zero_point of expert ", i / (N * v.n_groups), " is ", int(z[i]),
                      " at flat index ", i % (N * v.n_groups), ", outside [0, ", (1 << b), ") for int", b);
      }
      if (p.g_idx.defined()) {
        if (v.strat != Strategy::kGroup) bad_input(where, ": ", c.proj, ".g_idx needs group-quantized weights");
        c.tensor(p.g_idx, "g_idx", {DType::kI32}, {E, K});
        const int32_t* g = p.g_idx.data<int32_t>();
        for (int64_t i = 0; i < E * K; ++i)
          if (g[i] < 0 || g[i] >= v.n_groups)
            bad_input(where, ": ", c.proj, ".g_idx[", i / K, ", ", i % K, "] = ", g[i], " outside [0, ", v.n_groups, ")");
      }
      break;
    }
    case WKind::kFP8:
      c.tensor(p.weight, "weight", {DType::kF8E4M3}, {E, N, K});
      switch (v.strat) {
        case Strategy::kTensor: c.tensor(p.scale, "scale", {DType::kF32}, {E, S}); break;
        case Strategy::kChannel: c.tensor(p.scale, "scale", {DType::kF32, DType::kBF16, DType::kF16}, {E, N, 1}); break;
        case Strategy::kBlock:
          if (w.block[0] <= 0 || w.block[1] <= 0)
            bad_input(where, ": fp8 block weights need block > 0, got [", w.block[0], ", ", w.block[1], "]");
          if (is_w13 && w.intermediate % w.block[0] != 0)
            bad_input(where, ": fp8 block rows ", w.block[0], " must divide I = ", w.intermediate,
                      " so that no block spans gate and up rows");
          c.tensor(p.scale, "scale", {DType::kF32, DType::kBF16}, {E, (N + v.bn - 1) / v.bn, v.n_groups});
          break;
        default: bad_input(where, ": fp8 weights must be tensor, channel or block quantized, got ", w.scheme.weights.str());
      }
      c.positive(p.scale, "scale");
      break;
    case WKind::kNVFP4:
      if (w.group_size != 16) bad_input(where, ": NVFP4 needs group_size 16, got ", w.group_size);
      if (K % 2 != 0) bad_input(where, ": ", c.proj, " has K = ", K, "; fp4 packs two per byte and needs K even");
      c.tensor(p.weight, "weight", {DType::kU8}, {E, N, K / 2});
      c.tensor(p.scale, "scale", {DType::kF8E4M3}, {E, N, v.n_groups});
      c.positive(p.scale, "scale");
      c.tensor(p.global_scale, "global_scale", {DType::kF32}, {E, S});
      c.positive(p.global_scale, "global_scale");
      break;
    case WKind::kMXFP4:
      if (w.group_size != 32) bad_input(where, ": MXFP4 needs group_size 32, got ", w.group_size);
      if (K % 2 != 0) bad_input(where, ": ", c.proj, " has K = ", K, "; fp4 packs two per byte and needs K even");
      c.tensor(p.weight, "weight", {DType::kU8}, {E, N, K / 2});
      c.tensor(p.scale, "scale", {DType::kU8, DType::kE8M0}, {E, N, v.n_groups});
      c.positive(p.scale, "scale", true);  // e8m0 0xff is NaN
      break;
  }
  if (static_act) {
    c.tensor(p.input_scale, "input_scale", {DType::kF32}, {E, S});
    c.positive(p.input_scale, "input_scale");
  }
  if (p.bias.defined()) {
    c.tensor(p.bias, "bias", {DType::kF32, DType::kBF16, DType::kF16}, {E, N});
    for (int64_t i = 0; i < p.bias.numel(); ++i)
      if (!std::isfinite(ref::detail::load_scalar(p.bias, i)))
        bad_input(where, ": ", c.proj, ".bias of expert ", i / N, " is not finite at row ", i % N);
  }
}

}  // namespace

void ExpertWeights::validate(const std::string& where) const {
  if (num_experts <= 0 || hidden <= 0 || intermediate <= 0)
    bad_input(where, ": expert weights need E, H, I > 0, got E = ", num_experts, ", H = ", hidden, ", I = ", intermediate);
  if (act_dtype != DType::kBF16 && act_dtype != DType::kF16 && act_dtype != DType::kF32)
    bad_input(where, ": activation dtype must be BF16/F16/F32, got ", dtype_name(act_dtype));
  const ActQuant a = scheme.act;
  bool act_ok = false;
  switch (scheme.kind) {
    case SchemeKind::kUnquantized: case SchemeKind::kWNA16: case SchemeKind::kFP8A16:
    case SchemeKind::kNVFP4A16: case SchemeKind::kMXFP4A16: act_ok = a == ActQuant::kNone; break;
    case SchemeKind::kFP8W8A8:
      act_ok = a == ActQuant::kFP8Tensor || a == ActQuant::kFP8Token || a == ActQuant::kFP8Group128;
      break;
    case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8INT8: act_ok = a == ActQuant::kINT8Token; break;
    case SchemeKind::kW4A8FP8: act_ok = a == ActQuant::kFP8Token; break;
    case SchemeKind::kNVFP4: act_ok = a == ActQuant::kNVFP4; break;
  }
  if (!act_ok)
    bad_input(where, ": scheme ", scheme.key(), " cannot quantize activations as ", act_quant_name(a));
  check_proj(*this, where, true);
  check_proj(*this, where, false);
}

}  // namespace qmoe
