// Scheme x backend -> method, with the error messages users see. See select.h.
#include "dispatch/select.h"

#include "dispatch/backends.h"

namespace qmoe {
namespace {

constexpr const char* kSupported =
    "supported MoE schemes: bf16/fp16; WNA16 int4/int8 group or channel (sym or asym, optional actorder); "
    "FP8 W8A8 tensor+static tensor, channel+dynamic token, block+dynamic group; FP8 weight-only; "
    "INT8 W8A8 channel+dynamic token; W4A8 int4 group with fp8 or int8 dynamic token; NVFP4 group 16 "
    "(W4A4 or A16); MXFP4 group 32 A16";

std::string check_args(const MoeScheme& s) {
  const QuantArgs& w = s.weights;
  const QuantArgs* a = s.input_activations ? &*s.input_activations : nullptr;
  Strategy ws = w.strat();
  switch (s.kind) {
    case SchemeKind::kUnquantized: return "";
    case SchemeKind::kWNA16:
      if (w.type != QuantType::kInt || (w.num_bits != 4 && w.num_bits != 8))
        return str("WNA16 needs int4 or int8 weights, got ", w.str());
      if (ws != Strategy::kGroup && ws != Strategy::kChannel) return str("WNA16 needs group or channel weights, got ", w.str());
      if (a) return str("WNA16 runs 16-bit activations, but input activations are quantized (", a->str(), ")");
      return "";
    case SchemeKind::kFP8W8A8:
    case SchemeKind::kFP8A16:
      if (w.type != QuantType::kFloat || w.num_bits != 8) return str("FP8 needs float8 weights, got ", w.str());
      if (s.kind == SchemeKind::kFP8A16) {
        if (a) return str("FP8 weight-only with quantized activations ", a->str());
        return "";
      }
      if (!a) return "FP8 W8A8 without input_activations";
      if (a->type != QuantType::kFloat || a->num_bits != 8) return str("FP8 W8A8 needs float8 activations, got ", a->str());
      if (ws == Strategy::kTensor && a->strat() == Strategy::kTensor && a->dynamic == Dynamic::kStatic) return "";
      if (ws == Strategy::kTensor && a->strat() == Strategy::kToken && a->dynamic == Dynamic::kDynamic) return "";
      if (ws == Strategy::kChannel && a->strat() == Strategy::kToken && a->dynamic == Dynamic::kDynamic) return "";
      if (ws == Strategy::kBlock && a->dynamic == Dynamic::kDynamic &&
          (a->strat() == Strategy::kGroup || a->strat() == Strategy::kToken))
        return "";
      if (ws == Strategy::kChannel && a->dynamic == Dynamic::kStatic)
        return str("FP8 MoE with static per-channel/tensor activations and channel weights (", w.str(), " / ", a->str(),
                   ") is not supported");
      return str("FP8 W8A8 combination ", w.str(), " / ", a->str(), " is not supported");
    case SchemeKind::kINT8W8A8:
      if (w.type != QuantType::kInt || w.num_bits != 8 || ws != Strategy::kChannel)
        return str("INT8 W8A8 needs int8 per-channel weights, got ", w.str());
      if (!a || a->strat() != Strategy::kToken || a->dynamic != Dynamic::kDynamic || a->num_bits != 8 ||
          a->type != QuantType::kInt)
        return str("INT8 W8A8 needs int8 dynamic per-token activations, got ", a ? a->str() : "none");
      return "";
    case SchemeKind::kW4A8FP8:
    case SchemeKind::kW4A8INT8:
      if (w.type != QuantType::kInt || w.num_bits != 4 || (ws != Strategy::kGroup && ws != Strategy::kChannel))
        return str("W4A8 needs int4 group/channel weights, got ", w.str());
      if (!a || a->dynamic != Dynamic::kDynamic) return str("W4A8 needs dynamic per-token activations, got ", a ? a->str() : "none");
      return "";
    case SchemeKind::kNVFP4:
    case SchemeKind::kNVFP4A16:
      if (w.type != QuantType::kFloat || w.num_bits != 4 || w.group_size.value_or(0) != 16)
        return str("NVFP4 needs float4 weights in groups of 16, got ", w.str());
      return "";
    case SchemeKind::kMXFP4A16:
      if (w.type != QuantType::kFloat || w.num_bits != 4 || w.group_size.value_or(0) != 32)
        return str("MXFP4 needs float4 weights in groups of 32, got ", w.str());
      if (a) return str("MXFP4 runs 16-bit activations, but input activations are quantized (", a->str(), ")");
      return "";
  }
  return "unknown scheme kind";
}

std::string backend_why(const detail::LayerArgs& a, Backend b) {
  switch (b) {
    case Backend::kReference: return detail::reference_can_implement(a);
    case Backend::kCpu: return detail::cpu_can_implement(a);
    case Backend::kCuda:
#if defined(QMOE_HAVE_CUDA)
      return detail::cuda_can_implement(a);
#else
      return "this build of qmoe has no CUDA backend (nvcc was not found at configure time)";
#endif
  }
  return "unknown backend";
}

}  // namespace

std::string scheme_supported(const MoeScheme& s) {
  std::string why = check_args(s);
  return why.empty() ? why : str(why, " (", kSupported, ")");
}

MethodChoice query_method(const ExpertWeights& w, Backend b, const MoeConfig& cfg, const ExpertWeights* shared,
                          const Tensor& router_bias) {
  MethodChoice c;
  c.backend = b;
  std::string why = scheme_supported(w.scheme);
  if (why.empty()) {
    detail::LayerArgs a{w, cfg, shared ? std::optional<ExpertWeights>(*shared) : std::nullopt, router_bias};
    why = backend_why(a, b);
  }
  if (why.empty()) {
    c.ok = true;
    c.method = str(backend_name(b), "/", w.scheme.key());
  } else {
    c.reason = why;
  }
  return c;
}

MethodChoice select_method(const ExpertWeights& w, Backend b, const MoeConfig& cfg, const std::string& layer,
                           const ExpertWeights* shared, const Tensor& router_bias) {
  MethodChoice c = query_method(w, b, cfg, shared, router_bias);
  if (!c.ok)
    unsupported(layer, ": backend '", backend_name(b), "' cannot run scheme ", w.scheme.key(), " (format ",
                w.scheme.format.empty() ? "?" : w.scheme.format, "): ", c.reason);
  return c;
}

MethodChoice select_method(const MoeScheme& s, Backend b, const MoeConfig& cfg, const std::string& layer) {
  ExpertWeights w;
  w.scheme = s;
  w.num_experts = cfg.num_experts;
  w.group_size = s.weights.group_size.value_or(0) > 0 ? *s.weights.group_size : 0;
  if (s.weights.block_structure) w.block = *s.weights.block_structure;
  return select_method(w, b, cfg, layer);
}

}  // namespace qmoe
