// The seam between the layer API and the backends. Each backend provides a can_implement check
// (empty string = yes, otherwise the reason, used in the user-facing error) and a factory.
// Weights arrive validated (ExpertWeights::validate) and in the canonical layout of qmoe/moe.h;
// prepare() (repacking for the kernels) happens inside the factory.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "qmoe/moe.h"

namespace qmoe::detail {

struct LayerArgs {
  ExpertWeights weights;
  MoeConfig cfg;
  std::optional<ExpertWeights> shared;
  Tensor router_bias;
};

std::string reference_can_implement(const LayerArgs& a);
std::unique_ptr<MoeLayer> make_reference_layer(LayerArgs a);

std::string cpu_can_implement(const LayerArgs& a);
std::unique_ptr<MoeLayer> make_cpu_layer(LayerArgs a);

#if defined(QMOE_HAVE_CUDA)
std::string cuda_can_implement(const LayerArgs& a);
std::unique_ptr<MoeLayer> make_cuda_layer(LayerArgs a);
#endif

}  // namespace qmoe::detail
