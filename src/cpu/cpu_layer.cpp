// PLACEHOLDER owned by the CPU-kernels work (issue 6): replaced by the SIMD backend.
#include "dispatch/backends.h"

namespace qmoe::detail {
std::string cpu_can_implement(const LayerArgs&) { return "the CPU SIMD backend is not built in this revision"; }
std::unique_ptr<MoeLayer> make_cpu_layer(LayerArgs) { unsupported("CPU SIMD backend missing"); }
}  // namespace qmoe::detail
