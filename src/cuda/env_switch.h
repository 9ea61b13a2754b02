// Environment switches of the CUDA backend (QMOE_CUDA_*): overrides for measurements and tests,
// and diagnostics. Each reader documents its variable where it is used; these two functions give
// them one parsing rule.
#pragma once

#include <cstdlib>

namespace qmoe::cuda {

// The variable's integer value (std::atoi), `def` when it is unset or empty.
inline int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != 0 ? std::atoi(v) : def;
}

// Whether a switch is on: `def` when it is unset or empty, off when its value starts with '0'.
inline bool env_on(const char* name, bool def = true) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != 0 ? v[0] != '0' : def;
}

}  // namespace qmoe::cuda
