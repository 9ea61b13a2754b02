// RowDiv (src/cuda/row_div.h), the Hopper gathers' division, against the IEEE division x / s bit
// for bit, on the CPU (no GPU needed): the quantizing gathers' scales (s = max(amax, 1e-10) / 448
// for amax over 1e-30 .. 1e30, 1x128 group scales alike) with bf16 inputs in [-amax, amax]; scales
// whose significand is all ones or a power of two (where RN(1/s) is least accurate relative to
// 1/s); quotients on and next to every e4m3 rounding midpoint (x = (m + 1/2) ulp_e4m3 * s); static
// scales over the whole range RowDiv accepts; inputs down to the smallest floats. Every pair must
// give the same e4m3 code, and the same bits where row_div.h promises them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "core/codecs.h"
#include "cpu/ref/act_quant.h"
#include "cuda/row_div.h"

namespace qmoe::cuda {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// x / s and RowDiv(s)(x): the same e4m3 code always, and the same bits where RowDiv promises them
// (2^-100 <= |x|, |x / s| <= 2^13).
::testing::AssertionResult same(float x, float s) {
  const float want = x / s;
  const float got = RowDiv(s)(x);
  const bool exact = std::fabs(x) >= 0x1p-100f && std::fabs(want) <= 8192.f;
  if (codec::f32_to_e4m3(got) == codec::f32_to_e4m3(want) && (!exact || bits(got) == bits(want)))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "x = " << x << " (0x" << std::hex << bits(x) << "), s = " << s << " (0x"
                                       << bits(s) << "): " << got << " vs " << want;
}

TEST(RowDiv, MatchesTheIeeeDivisionOnGatherScales) {
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> lg(-30, 30), u(-1, 1);
  int64_t n = 0;
  for (int row = 0; row < 20000; ++row) {
    const float amax = codec::round_bf16(static_cast<float>(std::pow(10.0, lg(rng))));
    const float s = std::fmax(amax, 1e-10f) / 448.f;
    ASSERT_TRUE(RowDiv::safe(s));
    ASSERT_TRUE(same(amax, s));
    ASSERT_TRUE(same(-amax, s));
    for (int k = 0; k < 500; ++k, ++n) ASSERT_TRUE(same(codec::round_bf16(static_cast<float>(amax * u(rng))), s));
  }
  EXPECT_GT(n, 9000000);
}

TEST(RowDiv, MatchesAtHardScalesAndAtE4m3Midpoints) {
  std::mt19937_64 rng(7);
  // scales: all-ones significands, powers of two and their neighbours, over the accepted range
  std::vector<float> scales;
  for (int e = -80; e <= 99; ++e) {
    const float p = std::ldexp(1.f, e);
    scales.push_back(p);
    scales.push_back(from_bits(bits(p) | 0x7FFFFFu));  // 2^e * (2 - 2^-23)
    scales.push_back(from_bits(bits(p) + 1));
    scales.push_back(from_bits(bits(p) - 1));
  }
  for (int i = 0; i < 2000; ++i) scales.push_back(std::ldexp(1.f + static_cast<float>(rng() % (1u << 23)) / (1u << 23), static_cast<int>(rng() % 180) - 80));
  int64_t n = 0;
  for (float s : scales) {
    if (!RowDiv::safe(s)) continue;
    // quotients at e4m3 rounding midpoints and one float ulp either side: the cases where a wrong
    // last bit of x / s would change the code
    for (int e = -9; e <= 8; ++e)
      for (int m = 0; m < 8; ++m) {
        const float q = std::ldexp(8.f + m + 0.5f, e - 3);  // midpoint between (8+m) and (9+m) steps
        const float x = q * s;
        if (!std::isfinite(x) || x == 0.f) continue;
        for (uint32_t d : {0u, 1u, 2u}) {
          ASSERT_TRUE(same(from_bits(bits(x) + d), s));
          ASSERT_TRUE(same(from_bits(bits(x) - d), s));
          ASSERT_TRUE(same(-from_bits(bits(x) + d), s));
          n += 3;
        }
      }
    // random significands at every magnitude the quotient can take, and inputs down to the
    // smallest floats (where the residual underflows: codes only)
    for (int k = 0; k < 2000; ++k, ++n) {
      const float x = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), static_cast<int>(rng() % 40) - 30) * s;
      if (std::isfinite(x)) ASSERT_TRUE(same(x, s));
      const float t = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), -static_cast<int>(rng() % 50) - 100);
      ASSERT_TRUE(same(t, s));
      ASSERT_TRUE(same(-t, s));
    }
  }
  EXPECT_GT(n, 1000000);
  // zeros keep their sign
  EXPECT_EQ(bits(RowDiv(0.5f)(-0.f)), bits(-0.f));
  EXPECT_EQ(bits(RowDiv(0.5f)(0.f)), bits(0.f));
}

// INT8 W8A8's per-token codes (the gathers' quant 4): RowDiv::small and int8_code_bits against the
// reference's quantize_int8_token (cpu/ref/act_quant.cpp: clamp(nearbyint(x / s), -128, 127)) for s = max(amax, 1e-10) /
// 127, amax over 1e-30 .. 1e30, bf16 x in [-amax, amax], x on and next to every half-integer
// quotient (ties to even), and inputs down to the smallest floats; RowDiv::small gives the bits of
// x / s wherever RowDiv does (zeros: either sign).
TEST(RowDiv, Int8CodesMatchTheReference) {
  // the reference's code of x in the token row {amax, x} (|x| <= max(amax, 1e-10)), scale s
  auto check = [&](float x, float amax) -> ::testing::AssertionResult {
    const float row[2] = {amax, x};
    int8_t rq[2];
    const float s = ref::quantize_int8_token(row, 2, rq);
    if (s != std::fmax(amax, 1e-10f) / 127.f) return ::testing::AssertionFailure() << "x = " << x << " exceeds " << amax;
    const float q = RowDiv(s).small(x), want = x / s;
    const int8_t got = static_cast<int8_t>(int8_code_bits(q) & 0xFFu), ref = rq[1];
    const bool exact = std::fabs(x) >= 0x1p-100f;
    if (got == ref && (!exact || bits(q) == bits(want) || (q == 0.f && want == 0.f)))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "x = " << x << ", s = " << s << ": code " << int(got) << " vs "
                                         << int(ref) << ", quotient " << q << " vs " << want;
  };
  std::mt19937_64 rng(127);
  std::uniform_real_distribution<double> lg(-30, 30), u(-1, 1);
  int64_t n = 0;
  for (int row = 0; row < 20000; ++row) {
    const float amax = codec::round_bf16(static_cast<float>(std::pow(10.0, lg(rng))));
    const float s = std::fmax(amax, 1e-10f) / 127.f;
    ASSERT_TRUE(RowDiv::safe(s));
    ASSERT_TRUE(check(amax, amax));
    ASSERT_TRUE(check(-amax, amax));
    for (int k = 0; k < 200; ++k, ++n) ASSERT_TRUE(check(codec::round_bf16(static_cast<float>(amax * u(rng))), amax));
    for (int h = -127; h <= 126; ++h) {  // quotients h + 1/2 and their float neighbours
      const float x = (h + 0.5f) * s;
      if (!std::isfinite(x) || x == 0.f) continue;
      for (uint32_t d : {0u, 1u}) {
        ASSERT_TRUE(check(from_bits(bits(x) + d), amax));
        ASSERT_TRUE(check(from_bits(bits(x) - d), amax));
        n += 2;
      }
    }
    const float t = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), -static_cast<int>(rng() % 50) - 100);
    ASSERT_TRUE(check(t, amax));
    ASSERT_TRUE(check(-t, amax));
  }
  EXPECT_GT(n, 4000000);
  // the edges: -128 .. 127 and ties to even as nearbyint + clamp; NaN gives -128 (the clamp; the
  // reference casts a NaN quotient, which has no defined code)
  for (float q : {-129.f, -128.5f, -127.5f, -0.5f, -0.f, 0.f, 0.5f, 1.5f, 2.5f, 126.5f, 127.f, 127.5f, 1e30f})
    EXPECT_EQ(static_cast<int8_t>(int8_code_bits(q) & 0xFFu),
              static_cast<int8_t>(std::fmin(std::fmax(std::nearbyint(q), -128.f), 127.f)))
        << q;
  EXPECT_EQ(static_cast<int8_t>(int8_code_bits(NAN) & 0xFFu), -128);
}

}  // namespace
}  // namespace qmoe::cuda
