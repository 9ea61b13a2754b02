// QuantArgs validation (compressed-tensors' QuantizationArgs.validate_model_after, formats.md §2a)
// and the names / keys used in logs, errors and bench rows: strategy, scheme kind, activation
// quantization, MoE scheme key ("wna16/int4/g128/sym", "fp8/channel/token", "nvfp4/w4a4"),
// router kind and activation function.
#include <string>

#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "qmoe/quant.h"
#include "qmoe/routing.h"

namespace qmoe {

namespace {

bool is_group_like(Strategy s) { return s == Strategy::kGroup || s == Strategy::kTensorGroup; }

// The dtype compressed-tensors writes back as zp_dtype when none is given (pytorch_dtype(), and
// float8_e4m3fn for 4-bit floats).
DType default_zp_dtype(const QuantArgs& a) {
  if (a.type == QuantType::kFloat) return DType::kF8E4M3;
  if (a.num_bits <= 8) return DType::kI8;
  if (a.num_bits <= 16) return DType::kI16;
  return DType::kI32;
}

// "g128", "channel", "block128x128", ... : the weight-granularity piece of a scheme key.
std::string granularity(const QuantArgs& a) {
  switch (a.strat()) {
    case Strategy::kGroup:
    case Strategy::kTensorGroup:
      return str("g", a.group_size.value_or(0));
    case Strategy::kBlock:
      return a.block_structure ? str("block", (*a.block_structure)[0], "x", (*a.block_structure)[1]) : "block";
    default:
      return strategy_name(a.strat());
  }
}

}  // namespace

void QuantArgs::validate(const std::string& where) {
  // Range checks compressed-tensors leaves to torch (pytorch_dtype() raises for float widths
  // other than 4 and 8); qmoe states them up front.
  if (type == QuantType::kFloat && num_bits != 4 && num_bits != 8)
    bad_input(where, ": float quantization supports num_bits 4 or 8, got ", num_bits);
  if (type == QuantType::kInt && (num_bits < 1 || num_bits > 32))
    bad_input(where, ": int quantization needs num_bits in [1, 32], got ", num_bits);
  if (group_size && *group_size < -1)
    bad_input(where, ": invalid group_size ", *group_size,
              "; use group_size > 0 for strategy 'group' and group_size = -1 for 'channel'");
  if (block_structure && ((*block_structure)[0] <= 0 || (*block_structure)[1] <= 0))
    bad_input(where, ": block_structure must be two positive ints [rows, cols], got [", (*block_structure)[0], ", ",
              (*block_structure)[1], "]");

  // infer the strategy from group_size: null -> tensor, > 0 -> group, -1 -> channel
  if (!strategy) {
    if (!group_size) strategy = Strategy::kTensor;
    else if (*group_size > 0) strategy = Strategy::kGroup;
    else if (*group_size == -1) strategy = Strategy::kChannel;
    else
      bad_input(where, ": invalid group_size ", *group_size,
                "; use group_size > 0 for strategy 'group' and group_size = -1 for 'channel'");
  }
  const Strategy s = *strategy;
  if (s == Strategy::kToken && dynamic == Dynamic::kStatic)
    bad_input(where, ": strategy 'token' cannot be static; it needs dynamic: true");
  if (is_group_like(s) && (!group_size || *group_size <= 0))
    bad_input(where, ": strategy '", strategy_name(s), "' needs a positive group_size, got ",
              group_size ? std::to_string(*group_size) : std::string("null"));
  if (group_size && *group_size > 0 && !is_group_like(s))
    bad_input(where, ": group_size ", *group_size, " needs strategy 'group' or 'tensor_group', got '",
              strategy_name(s), "'");
  if (s == Strategy::kBlock && !block_structure) bad_input(where, ": strategy 'block' needs block_structure");
  if (s != Strategy::kBlock && block_structure)
    bad_input(where, ": block_structure needs strategy 'block', got '", strategy_name(s), "'");
  if (actorder == ActOrder::kGroup && !is_group_like(s))
    bad_input(where, ": actorder 'group' needs strategy 'group' or 'tensor_group', got '", strategy_name(s), "'");
  if (dynamic != Dynamic::kStatic) {
    if (s != Strategy::kToken && s != Strategy::kTensor && s != Strategy::kTensorGroup && s != Strategy::kGroup)
      bad_input(where, ": dynamic quantization needs strategy token, tensor, tensor_group or group, got '",
                strategy_name(s), "'");
    if (dynamic == Dynamic::kLocal && s != Strategy::kTensorGroup)
      bad_input(where, ": dynamic 'local' needs strategy 'tensor_group', got '", strategy_name(s), "'");
  }
  if (!zp_dtype) zp_dtype = default_zp_dtype(*this);
}

// "int4 sym group128", "int8 asym channel", "float8 channel", "float8 token dynamic",
// "float8 block128x128", "float4 tensor_group16 local", "int4 sym group128 actorder=group".
// Floats are always symmetric in practice, so only an asymmetric float says so.
std::string QuantArgs::str() const {
  std::string r = qmoe::str(type == QuantType::kInt ? "int" : "float", num_bits);
  if (type == QuantType::kInt) r += symmetric ? " sym" : " asym";
  else if (!symmetric) r += " asym";
  const Strategy s = strat();
  if (s == Strategy::kGroup || s == Strategy::kTensorGroup) r += qmoe::str(" ", strategy_name(s), group_size.value_or(0));
  else if (s == Strategy::kBlock && block_structure) r += qmoe::str(" block", (*block_structure)[0], "x", (*block_structure)[1]);
  else r += qmoe::str(" ", strategy_name(s));
  if (dynamic == Dynamic::kDynamic) r += " dynamic";
  if (dynamic == Dynamic::kLocal) r += " local";
  if (actorder == ActOrder::kGroup) r += " actorder=group";
  if (actorder == ActOrder::kWeight) r += " actorder=weight";
  return r;
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kTensor: return "tensor";
    case Strategy::kChannel: return "channel";
    case Strategy::kGroup: return "group";
    case Strategy::kBlock: return "block";
    case Strategy::kToken: return "token";
    case Strategy::kTensorGroup: return "tensor_group";
    case Strategy::kAttnHead: return "attn_head";
  }
  return "?";
}

const char* scheme_kind_name(SchemeKind k) {
  switch (k) {
    case SchemeKind::kUnquantized: return "unquantized";
    case SchemeKind::kWNA16: return "wna16";
    case SchemeKind::kFP8W8A8: return "fp8_w8a8";
    case SchemeKind::kFP8A16: return "fp8_a16";
    case SchemeKind::kINT8W8A8: return "int8_w8a8";
    case SchemeKind::kW4A8FP8: return "w4a8_fp8";
    case SchemeKind::kW4A8INT8: return "w4a8_int8";
    case SchemeKind::kNVFP4: return "nvfp4";
    case SchemeKind::kNVFP4A16: return "nvfp4_a16";
    case SchemeKind::kMXFP4A16: return "mxfp4_a16";
  }
  return "?";
}

const char* act_quant_name(ActQuant a) {
  switch (a) {
    case ActQuant::kNone: return "none";
    case ActQuant::kFP8Tensor: return "fp8_tensor";
    case ActQuant::kFP8Token: return "fp8_token";
    case ActQuant::kFP8Group128: return "fp8_group128";
    case ActQuant::kINT8Token: return "int8_token";
    case ActQuant::kNVFP4: return "nvfp4";
  }
  return "?";
}

std::string MoeScheme::key() const {
  const char* sym = weights.symmetric ? "sym" : "asym";
  // activation piece of fp8 keys: how the activation scale is obtained
  auto act_piece = [this]() -> std::string {
    switch (act) {
      case ActQuant::kFP8Tensor: return "tensor";
      case ActQuant::kFP8Token: case ActQuant::kINT8Token: return "token";
      case ActQuant::kFP8Group128: return "group128";
      case ActQuant::kNVFP4: return "nvfp4";
      case ActQuant::kNone: return "a16";
    }
    return "?";
  };
  std::string ord = weights.actorder == ActOrder::kGroup ? "/actorder" : "";
  switch (kind) {
    case SchemeKind::kUnquantized: return "unquantized";
    case SchemeKind::kWNA16:
      return str("wna16/int", weights.num_bits, "/", granularity(weights), "/", sym, ord);
    case SchemeKind::kFP8W8A8: return str("fp8/", granularity(weights), "/", act_piece());
    case SchemeKind::kFP8A16: return str("fp8/", granularity(weights), "/a16");
    case SchemeKind::kINT8W8A8: return str("int8/", granularity(weights), "/", act_piece());
    case SchemeKind::kW4A8FP8: return str("w4a8/fp8/", granularity(weights), "/", sym, ord);
    case SchemeKind::kW4A8INT8: return str("w4a8/int8/", granularity(weights), "/", sym, ord);
    case SchemeKind::kNVFP4: return "nvfp4/w4a4";
    case SchemeKind::kNVFP4A16: return "nvfp4/w4a16";
    case SchemeKind::kMXFP4A16: return "mxfp4/w4a16";
  }
  return "?";
}

const char* router_kind_name(RouterKind k) {
  switch (k) {
    case RouterKind::kSoftmaxTopK: return "softmax_topk";
    case RouterKind::kSigmoidTopK: return "sigmoid_topk";
    case RouterKind::kTopKSoftmax: return "topk_softmax";
    case RouterKind::kLlama4: return "llama4";
    case RouterKind::kGrouped: return "grouped_topk";
  }
  return "?";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kSiluMul: return "silu_mul";
    case Activation::kGeluMul: return "gelu_mul";
    case Activation::kSwigluOai: return "swigluoai";
  }
  return "?";
}

}  // namespace qmoe
