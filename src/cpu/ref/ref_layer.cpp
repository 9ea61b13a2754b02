// PLACEHOLDER owned by the reference work (issue 2): replaced by the exact reference forward.
#include "dispatch/backends.h"

namespace qmoe::detail {
std::string reference_can_implement(const LayerArgs&) { return "reference not built yet"; }
std::unique_ptr<MoeLayer> make_reference_layer(LayerArgs) { unsupported("reference missing"); }
}  // namespace qmoe::detail
