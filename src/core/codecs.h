// Scalar codecs for every element and scale format qmoe reads: bf16, fp16, fp8 e4m3fn / e5m2,
// e8m0, e2m1 (fp4). Header-only and __host__ __device__, so the CPU reference, the CPU kernels
// and CUDA kernels share one definition. These are the oracle the fast paths are tested against;
// they are themselves tested exhaustively against independent implementations (tests/core).
// Rounding is round-to-nearest-even everywhere; saturation / NaN rules are noted per format.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QMOE_HD __host__ __device__ __forceinline__
#else
#define QMOE_HD inline
#endif

namespace qmoe::codec {

QMOE_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
QMOE_HD float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
QMOE_HD bool is_nan_f32(float f) { return (f32_bits(f) & 0x7fffffffu) > 0x7f800000u; }

// ---- bf16: the top 16 bits of an f32 ----------------------------------------------------------
QMOE_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
QMOE_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // RNE on the 16 dropped bits; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}
QMOE_HD float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- fp16 (IEEE binary16) -----------------------------------------------------------------------
QMOE_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
  if (exp == 0) {
    // subnormal: man * 2^-24, exact in f32
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
QMOE_HD uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);  // NaN
  if (a >= 0x47800000u) {  // >= 65536 before rounding: inf (65520 rounds to inf too, below)
    return sign | 0x7c00u;
  }
  if (a < 0x38800000u) {  // below the smallest normal 2^-14: subnormal or zero
    if (a < 0x33000000u) return sign;  // < 2^-25: rounds to 0 (2^-25 exactly ties to even 0)
    uint32_t e = a >> 23;               // 102 .. 112
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;          // value = m * 2^(e-150); subnormal unit 2^-24
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // RNE on 13 dropped bits
  r -= 0x38000000u;                            // rebias 127 -> 15
  if (r >= 0x0f800000u) return sign | 0x7c00u;  // overflow after rounding
  return sign | static_cast<uint16_t>(r >> 13);
}
QMOE_HD float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

// ---- generic small float encoder ----------------------------------------------------------------
// Encodes |f| (finite, not NaN) into a float with `mbits` mantissa bits and exponent bias `bias`,
// subnormals included, RNE. Returns the magnitude code (exponent << mbits | mantissa) before any
// overflow check; the caller decides saturation. `max_code` bounds the result.
QMOE_HD uint32_t encode_small_float(float af, int mbits, int bias, uint32_t max_code, bool* overflow) {
  uint32_t a = f32_bits(af);
  int e = static_cast<int>(a >> 23) - 127;  // unbiased exponent of af (af normal in f32 or 0)
  *overflow = false;
  if (a == 0) return 0;
  int emin = 1 - bias;  // smallest normal exponent
  uint32_t m = (a & 0x7fffffu) | (((a >> 23) != 0) ? 0x800000u : 0u);
  if ((a >> 23) == 0) e = -126;  // f32 subnormal input (only tiny values; they round to 0 below)
  // target exponent field and shift of the 24-bit significand down to mbits fraction bits
  int shift;
  uint32_t expf;
  if (e < emin) {  // subnormal in the target format
    shift = 23 - mbits + (emin - e);
    expf = 0;
  } else {
    shift = 23 - mbits;
    expf = static_cast<uint32_t>(e - emin + 1);
  }
  uint32_t q;
  if (shift >= 32) {
    q = 0;
  } else {
    q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
  }
  // q holds the significand incl. the implicit bit for normals (bit mbits)
  uint32_t code;
  if (expf == 0) {
    code = q;  // a carry into bit mbits makes it the smallest normal, which is what the code means
  } else {
    code = ((expf - 1u) << mbits) + q;  // implicit bit adds one to the exponent field
  }
  if (code > max_code) {
    *overflow = true;
    return max_code;
  }
  return code;
}

// ---- fp8 e4m3fn: bias 7, 3 mantissa bits, no inf, NaN = 0x7f/0xff, max 448 (0x7e) -----------------
QMOE_HD float e4m3_to_f32(uint8_t v) {
  uint32_t s = v & 0x80u, e = (v >> 3) & 0xfu, m = v & 7u;
  if (e == 0xf && m == 7) return bits_f32(0x7fc00000u | (s << 24));
  float r = e == 0 ? static_cast<float>(m) * 0.001953125f  // m * 2^-9
                   : bits_f32(((e + 120u) << 23) | (m << 20));
  return s ? -r : r;
}
// saturate = true: finite values beyond 448 (and +-inf) clamp to +-448 (cuda __NV_SATFINITE).
// saturate = false: values that round beyond 448 and +-inf become NaN (torch's .to(float8_e4m3fn)
// and cuda __NV_NOSAT). 464 (the midpoint 448 | 480) ties to even, i.e. to 448. NaN of either sign
// maps to the canonical 0x7f, as cuda's conversions (host and cvt.rn) do.
QMOE_HD uint8_t f32_to_e4m3(float f, bool saturate = true) {
  uint32_t u = f32_bits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;
  if (a == 0x7f800000u) return saturate ? (sign | 0x7eu) : (sign | 0x7fu);
  bool ovf;
  uint32_t code = encode_small_float(bits_f32(a), 3, 7, 0x7eu, &ovf);
  if (ovf) return saturate ? (sign | 0x7eu) : (sign | 0x7fu);
  return sign | static_cast<uint8_t>(code);
}
QMOE_HD float round_e4m3(float f) { return e4m3_to_f32(f32_to_e4m3(f)); }

// ---- fp8 e5m2: bias 15, 2 mantissa bits, IEEE inf/NaN, max 57344 ----------------------------------
QMOE_HD float e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }
// saturate = true: overflow and +-inf clamp to +-57344 (cuda __NV_SATFINITE clamps inf too).
// saturate = false: values that round beyond 57344 (>= 61440) -> +-inf. NaN -> canonical 0x7f.
QMOE_HD uint8_t f32_to_e5m2(float f, bool saturate = true) {
  uint32_t u = f32_bits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;
  if (a == 0x7f800000u) return saturate ? (sign | 0x7bu) : (sign | 0x7cu);
  bool ovf;
  uint32_t code = encode_small_float(bits_f32(a), 2, 15, 0x7bu, &ovf);
  if (ovf) return saturate ? (sign | 0x7bu) : (sign | 0x7cu);
  return sign | static_cast<uint8_t>(code);
}

// ---- e8m0 (OCP MX scale): 2^(e-127), 0xff = NaN ------------------------------------------------------
QMOE_HD float e8m0_to_f32(uint8_t e) {
  if (e == 0xff) return bits_f32(0x7fc00000u);
  if (e == 0) return bits_f32(0x00400000u);  // 2^-127 is an f32 subnormal
  return bits_f32(static_cast<uint32_t>(e) << 23);
}
// Encodes |f| as a power of two (the sign is dropped, as cuda's cvt.*.ue8m0 does).
// round_up = false: 2^floor(log2|f|) (cuda cudaRoundZero); round_up = true: 2^ceil(log2|f|)
// (cudaRoundPosInf). Values below 2^-127 (zero and f32 subnormals) give code 0 = 2^-127 in both
// modes, except that round_up lifts (2^-127, 2^-126) to 2^-126. Overflow (inf, or round_up of a
// value above 2^127) is code 0xff (NaN) unless `saturate`, which clamps it to 0xfe = 2^127.
QMOE_HD uint8_t f32_to_e8m0(float f, bool round_up = false, bool saturate = true) {
  uint32_t a = f32_bits(f) & 0x7fffffffu;
  if (a > 0x7f800000u) return 0xffu;
  uint32_t e = a >> 23;  // the biased f32 exponent is already the e8m0 code of 2^floor(log2|f|)
  // Any fraction bit means |f| is not a power of two; f32 subnormals only above 2^-127 (0x00400000).
  if (round_up && (a & 0x7fffffu) != 0 && a > 0x00400000u && a < 0x7f800000u) e++;
  if (saturate && e == 0xffu) e = 0xfeu;
  return static_cast<uint8_t>(e);
}

// ---- e2m1 (fp4): sign bit 3, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; no inf / NaN ------------------
QMOE_HD float e2m1_to_f32(uint8_t v) {
  constexpr float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  float m = kMag[v & 7u];
  return (v & 8u) ? -m : m;
}
// RNE with saturation to +-6 (ties to even mantissa: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
// 3.5->4, 5->4); +-inf -> +-6. e2m1 has no NaN: NaN of either sign -> +6 (0x7), which is what
// PTX cvt.rn.satfinite.e2m1x2.f32 and cuda's host __nv_cvt_float_to_fp4 produce.
QMOE_HD uint8_t f32_to_e2m1(float f) {
  uint32_t u = f32_bits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 28) & 8u);
  float a = bits_f32(u & 0x7fffffffu);
  if (is_nan_f32(a)) return 7;
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  return sign | c;
}

// ---- packing helpers ------------------------------------------------------------------------------
// Two 4-bit codes per byte, low nibble = even index (NVFP4, MXFP4, qmoe's canonical int4).
QMOE_HD uint8_t nibble_at(const uint8_t* packed, int64_t i) {
  uint8_t b = packed[i >> 1];
  return (i & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xf);
}

}  // namespace qmoe::codec
