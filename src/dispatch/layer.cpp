// MoeLayer::create: validate, ask the backend whether it can run this scheme / routing, build it.
#include "dispatch/backends.h"

namespace qmoe {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kReference: return "reference";
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "?";
}

std::unique_ptr<MoeLayer> MoeLayer::create(ExpertWeights weights, MoeConfig cfg, Backend backend,
                                           std::optional<ExpertWeights> shared_expert, Tensor router_bias) {
  weights.validate("MoE layer");
  if (shared_expert) shared_expert->validate("shared expert");
  detail::LayerArgs a{std::move(weights), std::move(cfg), std::move(shared_expert), std::move(router_bias)};
  std::string why;
  switch (backend) {
    case Backend::kReference:
      why = detail::reference_can_implement(a);
      if (why.empty()) return detail::make_reference_layer(std::move(a));
      break;
    case Backend::kCpu:
      why = detail::cpu_can_implement(a);
      if (why.empty()) return detail::make_cpu_layer(std::move(a));
      break;
    case Backend::kCuda:
#if defined(QMOE_HAVE_CUDA)
      why = detail::cuda_can_implement(a);
      if (why.empty()) return detail::make_cuda_layer(std::move(a));
#else
      why = "this build of qmoe has no CUDA backend (nvcc was not found at configure time)";
#endif
      break;
  }
  unsupported("backend '", backend_name(backend), "' cannot run scheme ", a.weights.scheme.key(), ": ", why);
}

}  // namespace qmoe
