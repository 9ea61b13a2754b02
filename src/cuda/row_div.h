// RowDiv: x / s correctly rounded without a division per element (the Hopper gathers' fp8
// activation quantization, device_common.cuh). Host and device code alike, so that a CPU test
// (tests/cuda/test_row_div.cpp) checks it against the IEEE division on many millions of pairs.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/codecs.h"  // QMOE_HD

namespace qmoe::cuda {

// x / s rounded to nearest as the reference's division, without the division's per-element slow
// path (which kept the quantizing gathers from overlapping elements: ~70-80 us per gather at
// qwen3-30b-a3b M = 4096): y = RN(1 / s) once per row, q0 = RN(x y), r = x - q0 s exactly (fma), q =
// RN(q0 + r y) is the correctly rounded quotient when y = RN(1 / s) and nothing over- or underflows
// (Markstein; Muller et al., Handbook of Floating-Point Arithmetic, the division theorems).
// Guarantees (tests/cuda/test_row_div.cpp): for s in [2^-80, 2^100] (`safe`; callers divide
// otherwise) and 2^-100 <= |x|, |x / s| <= 2^13, the bits of x / s; a larger quotient is returned
// as q0 (it saturates e4m3 / int8 as x / s does); for |x| < 2^-100 the residual underflows and q
// may be one float ulp off, but |x / s| < 2^-20 there, whose e4m3 code is a zero of x's sign
// either way. Every e4m3 code is therefore the reference's.
struct RowDiv {
  float s, y;
  QMOE_HD explicit RowDiv(float s_) : s(s_), y(1.f / s_) {}  // IEEE: RN(1 / s)
  QMOE_HD static bool safe(float s_) { return s_ >= 0x1p-80f && s_ <= 0x1p100f; }
  QMOE_HD float operator()(float x) const {
    const float q0 = x * y;
    const float q = std::fma(std::fma(-q0, s, x), y, q0);  // x = -0: +0 here, hence the sign of q0
    return std::fabs(q0) > 8192.f ? q0 : std::copysign(q, q0);
  }
  // The same quotient where |x / s| <= 2^13 is known and the sign of a zero quotient does not
  // matter (int8 codes: rint(+-0) = 0).
  QMOE_HD float small(float x) const {
    const float q0 = x * y;
    return std::fma(std::fma(-q0, s, x), y, q0);
  }
};

// The int8 code of a quotient q as the reference's clamp(rint(q), -128, 127) (ties to even; NaN
// gives -128), in the low byte of the result: clamping first gives the same integer, and the
// clamped q plus 1.5 * 2^23 lies in [2^23, 2^24), where the addition rounds it to an integer (ties
// to even) held in the significand's low bits as the two's complement of the code.
QMOE_HD uint32_t int8_code_bits(float q) {
  const float r = std::fmin(std::fmax(q, -128.f), 127.f) + 12582912.f;
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return u;
}
}  // namespace qmoe::cuda
