// PLACEHOLDER owned by the CUDA work (issue 4): replaced by the CUDA backend.
#include "dispatch/backends.h"

namespace qmoe::detail {
std::string cuda_can_implement(const LayerArgs&) { return "the CUDA backend is not built in this revision"; }
std::unique_ptr<MoeLayer> make_cuda_layer(LayerArgs) { unsupported("CUDA backend missing"); }
}  // namespace qmoe::detail
