// Helpers shared by the qmoe subcommands that load checkpoints: a load progress bar on stderr
// (drawn only when stderr is a terminal, so logs stay clean) and one-line tensor descriptions.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include <unistd.h>

#include "qmoe/model.h"

namespace qmoe::cli {

// LoadOptions::progress callback: "loading DIR [#########.........] 3/8 MoE layers".
inline std::function<void(size_t, size_t)> progress_bar(const std::string& what) {
  if (!isatty(STDERR_FILENO)) return {};
  return [what](size_t done, size_t total) {
    const int width = 30;
    int fill = total ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\rloading %s [%s%s] %zu/%zu MoE layers", what.c_str(), std::string(fill, '#').c_str(),
                 std::string(width - fill, '.').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

inline std::string tensor_desc(const Tensor& t) {
  return t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : std::string("-");
}

inline size_t proj_bytes(const ProjWeights& p) {
  size_t n = 0;
  for (const Tensor* t : {&p.weight, &p.scale, &p.zero_point, &p.g_idx, &p.global_scale, &p.input_scale, &p.bias})
    if (t->defined()) n += t->nbytes();
  return n;
}

}  // namespace qmoe::cli
