// Header-only helpers shared by every test directory (ref, cpu, cuda, ...): deterministic random
// tensors that are never zero, output poisoning, element values as double, and an all-elements
// comparison against a float64 expectation with a per-element tolerance that reports the worst
// element, the number of failures and the NMSE.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/codecs.h"
#include "qmoe/tensor.h"

namespace qmoe::test {

// Element i of a float-like tensor (F64 / F32 / BF16 / F16 / F8E4M3) as double.
inline double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF64: return t.data<double>()[i];
    case DType::kF32: return t.data<float>()[i];
    case DType::kBF16: return codec::bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF16: return codec::f16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF8E4M3: return codec::e4m3_to_f32(t.data<uint8_t>()[i]);
    case DType::kI32: return t.data<int32_t>()[i];
    case DType::kI8: return t.data<int8_t>()[i];
    case DType::kU8: return t.data<uint8_t>()[i];
    default: throw Error(ErrorKind::kInternal, "value_at: unsupported dtype");
  }
}
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = value_at(t, i);
  return v;
}

// Stores v rounded (RNE) to the tensor's float dtype.
inline void set_value(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF64: t.data_mut<double>()[i] = v; break;
    case DType::kF32: t.data_mut<float>()[i] = static_cast<float>(v); break;
    case DType::kBF16: t.data_mut<uint16_t>()[i] = codec::f32_to_bf16(static_cast<float>(v)); break;
    case DType::kF16: t.data_mut<uint16_t>()[i] = codec::f32_to_f16(static_cast<float>(v)); break;
    default: throw Error(ErrorKind::kInternal, "set_value: unsupported dtype");
  }
}

// Uniform random values in +-[lo_mag, hi_mag] with random sign: never zero, never tiny, so a
// wrong index or a skipped term cannot hide behind a zero.
inline Tensor random_tensor(DType dt, Shape shape, uint64_t seed, double lo_mag = 0.05, double hi_mag = 1.0) {
  Tensor t(dt, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(lo_mag, hi_mag);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = mag(rng);
    set_value(t, i, (rng() & 1) ? v : -v);
  }
  return t;
}

// Fills a tensor's bytes with a NaN pattern (0xff bytes are NaN in f32/bf16/f16/e4m3), so an
// output element a kernel forgets to write fails every comparison.
inline void poison(Tensor& t) { std::memset(t.raw_mut(), 0xff, t.nbytes()); }

struct CompareResult {
  bool ok = true;
  int64_t count = 0, failures = 0, worst = -1;
  double max_abs = 0, max_excess = 0;  // max |got - want|; max |got - want| / tol
  double nmse = 0;                     // sum (got - want)^2 / sum want^2
  double got_worst = 0, want_worst = 0, tol_worst = 0;
  std::string report(const std::string& what) const {
    std::string r = what + ": " + std::to_string(failures) + " of " + std::to_string(count) +
                    " elements outside tolerance; max |err| " + std::to_string(max_abs) + ", NMSE " +
                    std::to_string(nmse);
    if (worst >= 0)
      r += "; worst at flat " + std::to_string(worst) + ": got " + std::to_string(got_worst) + " want " +
           std::to_string(want_worst) + " tol " + std::to_string(tol_worst);
    return r;
  }
};

// Checks every element: |got[i] - want[i]| <= tol[i] (NaN in got always fails).
inline CompareResult compare(const Tensor& got, const std::vector<double>& want, const std::vector<double>& tol) {
  CompareResult r;
  r.count = got.numel();
  if (static_cast<int64_t>(want.size()) != r.count || tol.size() != want.size()) {
    r.ok = false;
    r.failures = r.count;
    return r;
  }
  double se = 0, sw = 0;
  for (int64_t i = 0; i < r.count; ++i) {
    const double g = value_at(got, i), w = want[i], err = std::fabs(g - w);
    se += std::isfinite(err) ? err * err : 0;
    sw += w * w;
    const double excess = std::isfinite(err) ? err / std::max(tol[i], 1e-300) : std::numeric_limits<double>::infinity();
    if (!(err <= tol[i])) ++r.failures;
    if (std::isfinite(err)) r.max_abs = std::max(r.max_abs, err);
    if (r.worst < 0 || excess > r.max_excess) {
      r.max_excess = excess;
      r.worst = i;
      r.got_worst = g;
      r.want_worst = w;
      r.tol_worst = tol[i];
    }
  }
  r.nmse = sw > 0 ? se / sw : se;
  r.ok = r.failures == 0;
  return r;
}

// Same tolerance everywhere: atol + rtol * |want|.
inline CompareResult compare(const Tensor& got, const std::vector<double>& want, double atol, double rtol) {
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) tol[i] = atol + rtol * std::fabs(want[i]);
  return compare(got, want, tol);
}

// Half a unit in the last place of the float dtype, relative (the final rounding of an output).
inline double half_ulp_rel(DType dt) {
  switch (dt) {
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kF32: return std::ldexp(1.0, -24);
    default: return 0;
  }
}

}  // namespace qmoe::test
