// Method selection: (MoE scheme, backend, routing config) -> the method that runs it, or a loud
// kUnsupported error naming the layer, the scheme and what is supported. First the scheme must be
// one qmoe runs at all (the rules of vLLM's CompressedTensorsMoEMethod.get_moe_method, formats.md
// §2a), then the backend must implement it, including routing features such as applying the
// router weight on the input (each backend's detail::*_can_implement says why not).
#pragma once
#include <string>

#include "qmoe/moe.h"

namespace qmoe {

struct MethodChoice {
  Backend backend = Backend::kReference;
  bool ok = false;
  std::string method;  // "<backend>/<scheme key>" when ok
  std::string reason;  // why not, when !ok
};

// Empty when qmoe runs this scheme on some backend, else why not and what is supported.
std::string scheme_supported(const MoeScheme& s);

// Throws kUnsupported ("<layer>: scheme <key> ... : <why>; supported: ...") when refused.
MethodChoice select_method(const MoeScheme& s, Backend b, const MoeConfig& cfg,
                           const std::string& layer = "MoE layer");
// The same with the actual weights (group size, shapes and shared expert reach can_implement).
MethodChoice select_method(const ExpertWeights& w, Backend b, const MoeConfig& cfg, const std::string& layer,
                           const ExpertWeights* shared = nullptr, const Tensor& router_bias = Tensor());
// Non-throwing: ok = false and reason filled instead of an exception.
MethodChoice query_method(const ExpertWeights& w, Backend b, const MoeConfig& cfg,
                          const ExpertWeights* shared = nullptr, const Tensor& router_bias = Tensor());

}  // namespace qmoe
