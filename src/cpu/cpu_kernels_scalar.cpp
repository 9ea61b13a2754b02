// The portable kernels (cpu_kernels_generic.inc) built for the scalar ISA (baseline x86-64).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/cpu_kernels.h"

namespace qmoe::cpu::scalar {
#include "cpu/cpu_kernels_generic.inc"

void gemm(const GemmJob& j) { generic::gemm(j); }
void quant_row(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) { generic::quant_row(x, n, q, a, i); }
}  // namespace qmoe::cpu::scalar
