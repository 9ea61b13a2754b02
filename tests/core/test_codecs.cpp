// Exhaustive tests of src/core/codecs.h for every format of 16 bits or fewer (bf16, fp16, e4m3fn,
// e5m2, e8m0, e2m1) against two independent oracles:
//  * a brute-force float64 model written here from the format definitions (value of every code by
//    formula; encode = nearest code by binary search, ties to the even code, overflow per format);
//  * CUDA's host-side conversions (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cuda_fp4.h), compiled by
//    the host compiler when CMake found the headers (QMOE_CUDA_FP_ORACLE); otherwise those tests
//    skip and say why;
//  * ml_dtypes (PyPI), through tests/core/codec_oracle_ml_dtypes.py, when python3 has it (else skip).
// Encode inputs: every f32 whose low 13 bits are one of 8 patterns around each rounding boundary of
// every format (all 2^19 high parts: all signs, exponents and the top 10 mantissa bits), so every
// tie, every tie +-1 ulp, subnormals, overflow thresholds, inf and NaN are covered.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/codecs.h"

#if defined(QMOE_CUDA_FP_ORACLE)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#if defined(QMOE_CUDA_FP4_ORACLE)
#include <cuda_fp4.h>
#endif
#endif

namespace {

using namespace qmoe::codec;

bool is_nan(double d) { return std::isnan(d); }
bool same_float(float a, float b) {  // bitwise, except any NaN equals any NaN
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return f32_bits(a) == f32_bits(b);
}

// ---- the float64 model of a small float format ------------------------------------------------
struct Format {
  const char* name;
  int ebits, mbits, bias;
  bool ieee_special;  // exponent all-ones = inf / NaN (fp16, bf16, e5m2)
  bool e4m3_nan;      // e4m3fn: only S.1111.111 is NaN, no inf
  bool no_special;    // e2m1: every code is finite
};
constexpr Format kBF16{"bf16", 8, 7, 127, true, false, false};
constexpr Format kF16{"fp16", 5, 10, 15, true, false, false};
constexpr Format kE4M3{"e4m3fn", 4, 3, 7, false, true, false};
constexpr Format kE5M2{"e5m2", 5, 2, 15, true, false, false};
constexpr Format kE2M1{"e2m1", 2, 1, 1, false, false, true};

int total_bits(const Format& f) { return 1 + f.ebits + f.mbits; }

// Value of a code by the textbook formula: (-1)^s * 2^(e - bias) * (1 + m / 2^mbits), subnormal
// 2^(1 - bias) * m / 2^mbits; specials per format.
double model_decode(const Format& f, uint32_t code) {
  uint32_t s = code >> (f.ebits + f.mbits);
  uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1), m = code & ((1u << f.mbits) - 1);
  uint32_t emax = (1u << f.ebits) - 1;
  double sign = s ? -1.0 : 1.0;
  if (f.ieee_special && e == emax) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (f.e4m3_nan && e == emax && m == (1u << f.mbits) - 1) return std::numeric_limits<double>::quiet_NaN();
  double frac = static_cast<double>(m) / static_cast<double>(1u << f.mbits);
  if (e == 0) return sign * std::ldexp(frac, 1 - f.bias);
  return sign * std::ldexp(1.0 + frac, static_cast<int>(e) - f.bias);
}

// Ascending non-negative finite magnitudes; the code of value i is i (codes are monotone).
struct Table {
  std::vector<double> mag;
};
Table positive_table(const Format& f) {
  Table t;
  for (uint32_t c = 0; c < (1u << (f.ebits + f.mbits)); ++c) {
    double v = model_decode(f, c);
    if (is_nan(v) || std::isinf(v)) break;
    t.mag.push_back(v);
  }
  return t;
}

enum class Overflow { kInf, kNaN, kSaturate };
// Expected result class of an encode: a code, or "some NaN".
struct Expect {
  bool nan;
  uint32_t code;
};

// Nearest-even encode of x in float64. Beyond the largest finite value `max`, the format's next
// step max + ulp(max) (the code max+1, odd) competes like any neighbour: a value rounding to it
// overflows (inf / NaN / clamp), so the midpoint itself ties to max (its code is even).
Expect model_encode(const Format& f, const Table& t, double x, Overflow ovf, bool* tie = nullptr) {
  if (tie) *tie = false;
  uint32_t sign_bit = 1u << (f.ebits + f.mbits);
  if (is_nan(x)) return {true, 0};
  uint32_t sign = std::signbit(x) ? sign_bit : 0;
  double a = std::fabs(x);
  size_t n = t.mag.size();
  uint32_t max_code = static_cast<uint32_t>(n - 1);
  auto overflow = [&]() -> Expect {
    if (ovf == Overflow::kSaturate) return {false, sign | max_code};
    if (ovf == Overflow::kNaN) return {true, 0};
    return {false, sign | (max_code + 1)};  // the inf code follows the largest finite one
  };
  if (std::isinf(a)) return overflow();
  auto it = std::upper_bound(t.mag.begin(), t.mag.end(), a);  // first magnitude > a
  size_t lo = static_cast<size_t>(it - t.mag.begin()) - 1;     // mag[lo] <= a (mag[0] = 0)
  double vlo = t.mag[lo];
  double vhi = lo + 1 < n ? t.mag[lo + 1] : t.mag[n - 1] + (t.mag[n - 1] - t.mag[n - 2]);
  if (a == vlo) return {false, sign | static_cast<uint32_t>(lo)};
  double dlo = a - vlo, dhi = vhi - a;  // exact: all values have <= 24 significant bits
  if (tie) *tie = dlo == dhi;
  size_t pick = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  if (pick >= n) return overflow();
  return {false, sign | static_cast<uint32_t>(pick)};
}

// f32 inputs covering every rounding boundary of every format of <= 16 bits (see file header).
const std::vector<uint32_t>& encode_inputs() {
  static const std::vector<uint32_t> v = [] {
    const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0a5b, 0x1c3d};
    std::vector<uint32_t> r;
    r.reserve((1u << 19) * 8);
    for (uint32_t hi = 0; hi < (1u << 19); ++hi)
      for (uint32_t lo : lows) r.push_back((hi << 13) | lo);
    return r;
  }();
  return v;
}

std::string hex(uint32_t u) {
  char b[16];
  snprintf(b, sizeof b, "0x%08x", u);
  return b;
}

// Checks `enc` over every input against the float64 model; reports the first few mismatches.
void check_encode_vs_model(const Format& f, Overflow ovf, const std::function<uint32_t(float)>& enc,
                           const std::function<bool(uint32_t)>& code_is_nan) {
  Table t = positive_table(f);
  int64_t bad = 0, checked = 0, ties = 0;
  for (uint32_t u : encode_inputs()) {
    float x = bits_f32(u);
    bool tie;
    Expect e = model_encode(f, t, static_cast<double>(x), ovf, &tie);
    ties += tie;
    uint32_t got = enc(x);
    bool ok = e.nan ? code_is_nan(got) : got == e.code;
    ++checked;
    if (!ok && ++bad <= 8)
      ADD_FAILURE() << f.name << " encode of " << x << " (" << hex(u) << "): got " << hex(got)
                    << ", model " << (e.nan ? std::string("NaN") : hex(e.code));
  }
  EXPECT_EQ(bad, 0) << "of " << checked;
  // every midpoint between two adjacent codes of either sign is an input (subnormal ones included)
  EXPECT_GE(ties, 2 * static_cast<int64_t>(t.mag.size() - 1)) << f.name << ": too few exact ties in the inputs";
}

// ---- decode of every code vs the model ----------------------------------------------------------
TEST(Codecs, DecodeEveryCodeMatchesFormula) {
  struct Case {
    Format f;
    std::function<float(uint32_t)> dec;
  };
  const Case cases[] = {
      {kBF16, [](uint32_t c) { return bf16_to_f32(static_cast<uint16_t>(c)); }},
      {kF16, [](uint32_t c) { return f16_to_f32(static_cast<uint16_t>(c)); }},
      {kE4M3, [](uint32_t c) { return e4m3_to_f32(static_cast<uint8_t>(c)); }},
      {kE5M2, [](uint32_t c) { return e5m2_to_f32(static_cast<uint8_t>(c)); }},
      {kE2M1, [](uint32_t c) { return e2m1_to_f32(static_cast<uint8_t>(c)); }},
  };
  for (const Case& k : cases) {
    int bad = 0;
    for (uint32_t c = 0; c < (1u << total_bits(k.f)); ++c) {
      double want = model_decode(k.f, c);
      float got = k.dec(c);
      // every finite value of these formats is exact in f32
      bool ok = is_nan(want) ? std::isnan(got) : (static_cast<double>(got) == want &&
                                                   std::signbit(got) == std::signbit(want));
      if (!ok && ++bad <= 8) ADD_FAILURE() << k.f.name << " code " << hex(c) << ": got " << got << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << k.f.name;
  }
}

TEST(Codecs, DecodeSpotValues) {
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e4m3_to_f32(0x78), 256.f);  // S.1111.000 is finite in e4m3fn
  EXPECT_EQ(e5m2_to_f32(0x7b), 57344.f);
  EXPECT_TRUE(std::isinf(e5m2_to_f32(0x7c)));
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.f, -16));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.f);
  EXPECT_EQ(e2m1_to_f32(0x7), 6.f);
  EXPECT_EQ(e2m1_to_f32(0xd), -3.f);
  EXPECT_EQ(e8m0_to_f32(127), 1.f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.f, -127));
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.f, 127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(Codecs, E8M0DecodeEveryCode) {
  for (uint32_t c = 0; c < 255; ++c)
    EXPECT_EQ(static_cast<double>(e8m0_to_f32(static_cast<uint8_t>(c))), std::ldexp(1.0, static_cast<int>(c) - 127)) << c;
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

// ---- round trips: encode(decode(c)) == c for every non-NaN code ------------------------------------
TEST(Codecs, RoundTripEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    float b = bf16_to_f32(static_cast<uint16_t>(c));
    if (std::isnan(b)) EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(b)))) << hex(c);
    else EXPECT_EQ(f32_to_bf16(b), c) << hex(c);
    float h = f16_to_f32(static_cast<uint16_t>(c));
    if (std::isnan(h)) EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(h)))) << hex(c);
    else EXPECT_EQ(f32_to_f16(h), c) << hex(c);
  }
  for (uint32_t c = 0; c < 256; ++c) {
    uint8_t b = static_cast<uint8_t>(c);
    float v = e4m3_to_f32(b);
    if (std::isnan(v)) {
      EXPECT_EQ(f32_to_e4m3(v, true), 0x7f);
      EXPECT_EQ(f32_to_e4m3(v, false), 0x7f);
    } else {
      EXPECT_EQ(f32_to_e4m3(v, true), c) << hex(c);
      EXPECT_EQ(f32_to_e4m3(v, false), c) << hex(c);
    }
    v = e5m2_to_f32(b);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(v, false))));
    } else if (std::isinf(v)) {
      EXPECT_EQ(f32_to_e5m2(v, false), c) << hex(c);
      EXPECT_EQ(f32_to_e5m2(v, true), (c & 0x80u) | 0x7bu) << hex(c);  // satfinite clamps inf
    } else {
      EXPECT_EQ(f32_to_e5m2(v, true), c) << hex(c);
      EXPECT_EQ(f32_to_e5m2(v, false), c) << hex(c);
    }
    if (c < 255) {
      EXPECT_EQ(f32_to_e8m0(e8m0_to_f32(b), false), c);
      EXPECT_EQ(f32_to_e8m0(e8m0_to_f32(b), true), c);
    }
    if (c < 16) EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(b)), c);
  }
}

// ---- encode vs the float64 model ------------------------------------------------------------------
bool bf16_nan(uint32_t c) { return (c & 0x7fffu) > 0x7f80u; }
bool f16_nan(uint32_t c) { return (c & 0x7fffu) > 0x7c00u; }
bool e4m3_nan(uint32_t c) { return (c & 0x7fu) == 0x7fu; }
bool e5m2_nan(uint32_t c) { return (c & 0x7fu) > 0x7cu; }

TEST(Codecs, EncodeBF16VsModel) {
  check_encode_vs_model(kBF16, Overflow::kInf, [](float x) { return uint32_t{f32_to_bf16(x)}; }, bf16_nan);
}
TEST(Codecs, EncodeF16VsModel) {
  check_encode_vs_model(kF16, Overflow::kInf, [](float x) { return uint32_t{f32_to_f16(x)}; }, f16_nan);
}
TEST(Codecs, EncodeE4M3VsModel) {
  check_encode_vs_model(kE4M3, Overflow::kSaturate, [](float x) { return uint32_t{f32_to_e4m3(x, true)}; }, e4m3_nan);
  check_encode_vs_model(kE4M3, Overflow::kNaN, [](float x) { return uint32_t{f32_to_e4m3(x, false)}; }, e4m3_nan);
}
TEST(Codecs, EncodeE5M2VsModel) {
  check_encode_vs_model(kE5M2, Overflow::kSaturate, [](float x) { return uint32_t{f32_to_e5m2(x, true)}; }, e5m2_nan);
  check_encode_vs_model(kE5M2, Overflow::kInf, [](float x) { return uint32_t{f32_to_e5m2(x, false)}; }, e5m2_nan);
}
TEST(Codecs, EncodeE2M1VsModel) {
  // e2m1 has no NaN code: the model's "NaN" expectation is checked separately below.
  Table t = positive_table(kE2M1);
  int bad = 0;
  for (uint32_t u : encode_inputs()) {
    float x = bits_f32(u);
    uint32_t got = f32_to_e2m1(x);
    uint32_t want = std::isnan(x) ? 0x7u : model_encode(kE2M1, t, x, Overflow::kSaturate).code;
    if (got != want && ++bad <= 8) ADD_FAILURE() << "e2m1 encode of " << x << ": got " << got << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
}
// The thresholds formats.md quotes from vLLM's cast_to_fp4 (ties to the even mantissa).
TEST(Codecs, E2M1Ties) {
  const std::pair<float, uint8_t> ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4},
                                            {3.5f, 6},  {5.f, 6},   {6.f, 7},   {7.f, 7},   {1e30f, 7}};
  for (auto [x, c] : ties) {
    EXPECT_EQ(f32_to_e2m1(x), c) << x;
    EXPECT_EQ(f32_to_e2m1(-x), c | 8) << -x;
  }
  EXPECT_EQ(f32_to_e2m1(std::nextafter(0.25f, 1.f)), 1);
  EXPECT_EQ(f32_to_e2m1(-0.f), 8);
  EXPECT_EQ(f32_to_e2m1(INFINITY), 7);
  EXPECT_EQ(f32_to_e2m1(-INFINITY), 15);
  EXPECT_EQ(f32_to_e2m1(-NAN), 7);
}

// e8m0 model: power-of-two floor / ceil of |x| in float64, clamped below at 2^-127 (code 0).
uint32_t model_e8m0(float x, bool up, bool sat) {
  if (std::isnan(x)) return 0xff;
  double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return sat ? 0xfe : 0xff;
  if (a == 0) return 0;
  int e;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
  int fl = e - 1;
  int lg = (up && m != 0.5) ? fl + 1 : fl;
  int code = std::max(lg + 127, 0);
  if (code > 254) return sat ? 0xfe : 0xff;
  return static_cast<uint32_t>(code);
}
TEST(Codecs, EncodeE8M0VsModel) {
  int bad = 0;
  for (uint32_t u : encode_inputs())
    for (int mode = 0; mode < 4; ++mode) {
      bool up = mode & 1, sat = mode & 2;
      float x = bits_f32(u);
      uint32_t got = f32_to_e8m0(x, up, sat), want = model_e8m0(x, up, sat);
      if (got != want && ++bad <= 8)
        ADD_FAILURE() << "e8m0 encode of " << x << " up=" << up << " sat=" << sat << ": got " << got << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

TEST(Codecs, EncodeSpotValues) {
  EXPECT_EQ(f32_to_e4m3(464.f, false), 0x7e);  // midpoint 448 | 480 ties to even (448)
  EXPECT_EQ(f32_to_e4m3(std::nextafter(464.f, 1e9f), false), 0x7f);
  EXPECT_EQ(f32_to_e4m3(std::nextafter(464.f, 1e9f), true), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-1e9f, true), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.f, -10), true), 0x00);   // half the smallest subnormal: even 0
  EXPECT_EQ(f32_to_e4m3(-std::ldexp(1.f, -10), true), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(3.f, -11), true), 0x01);   // 0.75 subnormal steps
  EXPECT_EQ(f32_to_e4m3(std::ldexp(3.f, -10), true), 0x02);   // 1.5 subnormal steps: tie to even 2
  EXPECT_EQ(f32_to_e4m3(std::ldexp(5.f, -10), true), 0x02);   // 2.5 subnormal steps: tie to even 2
  EXPECT_EQ(f32_to_e5m2(61440.f, false), 0x7c);               // midpoint 57344 | 65536 ties to inf
  EXPECT_EQ(f32_to_e5m2(std::nextafter(61440.f, 0.f), false), 0x7b);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.f, 0.f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.f, -25), 1.f)), 0x0001);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);      // tie, even stays
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);      // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);      // max f32 rounds to inf
  EXPECT_EQ(f32_to_e8m0(7.f, false), 129);
  EXPECT_EQ(f32_to_e8m0(7.f, true), 130);
  EXPECT_EQ(f32_to_e8m0(-0.25f, false), 125);
}

// ---- the CUDA oracle ---------------------------------------------------------------------------------
#if defined(QMOE_CUDA_FP_ORACLE)
#define QMOE_REQUIRE_CUDA_ORACLE() (void)0
#else
#define QMOE_REQUIRE_CUDA_ORACLE() \
  GTEST_SKIP() << "CUDA's cuda_fp8.h / cuda_fp16.h / cuda_bf16.h were not found at configure time; " \
                  "the CUDA-oracle comparison is skipped (the float64 model tests above still ran)"
#endif

// Compares an encoder with the oracle over every encode input; NaN codes compare as a class when
// `nan_class` is given (bf16/fp16 NaN payloads differ between implementations and mean nothing).
void check_vs_oracle(const char* what, const std::function<uint32_t(float)>& ours,
                     const std::function<uint32_t(float)>& oracle,
                     const std::function<bool(uint32_t)>& nan_class = nullptr) {
  int64_t bad = 0;
  for (uint32_t u : encode_inputs()) {
    float x = bits_f32(u);
    uint32_t a = ours(x), b = oracle(x);
    bool ok = a == b || (nan_class && nan_class(a) && nan_class(b));
    if (!ok && ++bad <= 8)
      ADD_FAILURE() << what << " encode of " << x << " (" << hex(u) << "): qmoe " << hex(a) << ", cuda " << hex(b);
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(CodecsCudaOracle, Decode) {
  QMOE_REQUIRE_CUDA_ORACLE();
#if defined(QMOE_CUDA_FP_ORACLE)
  for (uint32_t c = 0; c < 65536; ++c) {
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(c);
    EXPECT_TRUE(same_float(bf16_to_f32(static_cast<uint16_t>(c)), __bfloat162float(__nv_bfloat16(br)))) << hex(c);
    __half_raw hr;
    hr.x = static_cast<unsigned short>(c);
    EXPECT_TRUE(same_float(f16_to_f32(static_cast<uint16_t>(c)), __half2float(__half(hr)))) << hex(c);
  }
  for (uint32_t c = 0; c < 256; ++c) {
    auto b = static_cast<__nv_fp8_storage_t>(c);
    __half_raw h4 = __nv_cvt_fp8_to_halfraw(b, __NV_E4M3), h5 = __nv_cvt_fp8_to_halfraw(b, __NV_E5M2);
    EXPECT_TRUE(same_float(e4m3_to_f32(static_cast<uint8_t>(c)), __half2float(__half(h4)))) << hex(c);
    EXPECT_TRUE(same_float(e5m2_to_f32(static_cast<uint8_t>(c)), __half2float(__half(h5)))) << hex(c);
    __nv_bfloat16_raw e8 = __nv_cvt_e8m0_to_bf16raw(b);
    EXPECT_TRUE(same_float(e8m0_to_f32(static_cast<uint8_t>(c)), __bfloat162float(__nv_bfloat16(e8)))) << hex(c);
  }
#if defined(QMOE_CUDA_FP4_ORACLE)
  for (uint32_t c = 0; c < 16; ++c) {
    __half_raw h = __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(c), __NV_E2M1);
    EXPECT_TRUE(same_float(e2m1_to_f32(static_cast<uint8_t>(c)), __half2float(__half(h)))) << hex(c);
  }
#endif
#endif
}

TEST(CodecsCudaOracle, Encode16Bit) {
  QMOE_REQUIRE_CUDA_ORACLE();
#if defined(QMOE_CUDA_FP_ORACLE)
  check_vs_oracle("bf16", [](float x) { return uint32_t{f32_to_bf16(x)}; },
                  [](float x) { return uint32_t{__nv_bfloat16_raw(__float2bfloat16_rn(x)).x}; }, bf16_nan);
  check_vs_oracle("fp16", [](float x) { return uint32_t{f32_to_f16(x)}; },
                  [](float x) { return uint32_t{__half_raw(__float2half_rn(x)).x}; }, f16_nan);
#endif
}

TEST(CodecsCudaOracle, EncodeFp8) {
  QMOE_REQUIRE_CUDA_ORACLE();
#if defined(QMOE_CUDA_FP_ORACLE)
  // fp8 NaN is compared bitwise: both give the canonical 0x7f for every NaN input.
  check_vs_oracle("e4m3 satfinite", [](float x) { return uint32_t{f32_to_e4m3(x, true)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)}; });
  check_vs_oracle("e4m3 nosat", [](float x) { return uint32_t{f32_to_e4m3(x, false)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3)}; });
  check_vs_oracle("e5m2 satfinite", [](float x) { return uint32_t{f32_to_e5m2(x, true)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)}; });
  check_vs_oracle("e5m2 nosat", [](float x) { return uint32_t{f32_to_e5m2(x, false)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2)}; });
#endif
}

TEST(CodecsCudaOracle, EncodeE8M0) {
  QMOE_REQUIRE_CUDA_ORACLE();
#if defined(QMOE_CUDA_FP_ORACLE)
  check_vs_oracle("e8m0 rz satfinite", [](float x) { return uint32_t{f32_to_e8m0(x, false, true)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero)}; });
  check_vs_oracle("e8m0 rz nosat", [](float x) { return uint32_t{f32_to_e8m0(x, false, false)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero)}; });
  check_vs_oracle("e8m0 rp satfinite", [](float x) { return uint32_t{f32_to_e8m0(x, true, true)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)}; });
  check_vs_oracle("e8m0 rp nosat", [](float x) { return uint32_t{f32_to_e8m0(x, true, false)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf)}; });
#endif
}

TEST(CodecsCudaOracle, EncodeE2M1) {
#if !defined(QMOE_CUDA_FP4_ORACLE)
  GTEST_SKIP() << "cuda_fp4.h was not found at configure time; e2m1 is checked against the float64 model only";
#else
  check_vs_oracle("e2m1", [](float x) { return uint32_t{f32_to_e2m1(x)}; },
                  [](float x) { return uint32_t{__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)}; });
#endif
}

// ---- the ml_dtypes oracle ------------------------------------------------------------------------------
template <class T>
std::vector<T> read_array(std::ifstream& f, size_t n) {
  std::vector<T> v(n);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
  return v;
}

TEST(CodecsMlDtypesOracle, DecodeAndEncode) {
  const std::string out = std::string(QMOE_BINARY_DIR) + "/codec_oracle_ml_dtypes." + std::to_string(::getpid()) + ".bin";
  const std::string cmd = std::string("python3 ") + QMOE_SOURCE_DIR + "/tests/core/codec_oracle_ml_dtypes.py " + out;
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::remove(out.c_str());
    GTEST_SKIP() << "'" << cmd << "' exited with " << rc << " (python3 with numpy and ml_dtypes is needed; "
                 << "scripts/deps.sh installs them); the float64 model tests still ran";
  }
  std::ifstream f(out, std::ios::binary);
  ASSERT_TRUE(f.good()) << out;
  const size_t n = encode_inputs().size();
  auto dbf16 = read_array<float>(f, 65536), df16 = read_array<float>(f, 65536), de4m3 = read_array<float>(f, 256),
       de5m2 = read_array<float>(f, 256), de2m1 = read_array<float>(f, 16), de8m0 = read_array<float>(f, 256);
  auto ebf16 = read_array<uint16_t>(f, n), ef16 = read_array<uint16_t>(f, n);
  auto ee4m3 = read_array<uint8_t>(f, n), ee5m2 = read_array<uint8_t>(f, n), ee2m1 = read_array<uint8_t>(f, n);
  ASSERT_TRUE(f.good()) << out << " is shorter than expected";
  f.close();
  std::remove(out.c_str());

  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_TRUE(same_float(bf16_to_f32(static_cast<uint16_t>(c)), dbf16[c])) << "bf16 " << hex(c);
    ASSERT_TRUE(same_float(f16_to_f32(static_cast<uint16_t>(c)), df16[c])) << "fp16 " << hex(c);
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<uint8_t>(c);
    ASSERT_TRUE(same_float(e4m3_to_f32(b), de4m3[c])) << "e4m3 " << hex(c);
    ASSERT_TRUE(same_float(e5m2_to_f32(b), de5m2[c])) << "e5m2 " << hex(c);
    ASSERT_TRUE(same_float(e8m0_to_f32(b), de8m0[c])) << "e8m0 " << hex(c);
    if (c < 16) ASSERT_TRUE(same_float(e2m1_to_f32(b), de2m1[c])) << "e2m1 " << hex(c);
  }
  // ml_dtypes does not saturate (compare with saturate = false) and keeps the sign of NaN: NaN
  // codes compare as a class. Its fp4 NaN handling differs from cuda's (which qmoe follows), so
  // NaN inputs are left out for e2m1; infinities clamp to +-6 in both.
  int64_t bad = 0;
  const auto& in = encode_inputs();
  for (size_t i = 0; i < n; ++i) {
    const float x = bits_f32(in[i]);
    const uint32_t got[] = {f32_to_bf16(x), f32_to_f16(x), f32_to_e4m3(x, false), f32_to_e5m2(x, false), f32_to_e2m1(x)};
    const uint32_t want[] = {ebf16[i], ef16[i], ee4m3[i], ee5m2[i], ee2m1[i]};
    const bool ok[] = {got[0] == want[0] || (bf16_nan(got[0]) && bf16_nan(want[0])),
                       got[1] == want[1] || (f16_nan(got[1]) && f16_nan(want[1])),
                       got[2] == want[2] || (e4m3_nan(got[2]) && e4m3_nan(want[2])),
                       got[3] == want[3] || (e5m2_nan(got[3]) && e5m2_nan(want[3])),
                       got[4] == want[4] || std::isnan(x)};
    const char* names[] = {"bf16", "fp16", "e4m3 nosat", "e5m2 nosat", "e2m1"};
    for (int k = 0; k < 5; ++k)
      if (!ok[k] && ++bad <= 8)
        ADD_FAILURE() << names[k] << " encode of " << x << " (" << hex(in[i]) << "): qmoe " << hex(got[k]) << ", ml_dtypes "
                      << hex(want[k]);
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
