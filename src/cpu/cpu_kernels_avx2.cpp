// The portable kernels (cpu_kernels_generic.inc) built for the avx2 ISA (AVX2 + FMA + F16C flags from
// CMake), with the panel decode of the common code kinds written with AVX2 instructions: the portable
// element-by-element decode (a switch and the layout's index arithmetic per weight) ran the avx2 path
// at ~1% of the read bandwidth on the development machine (qwen3-30b-a3b int4-g32 M = 1: 90 ms
// against 0.8 ms on the AVX-512 kernels; docs/perf.md, fourteenth session).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/cpu_kernels.h"

namespace qmoe::cpu::avx2 {
namespace {

// Zero points of rows 8h .. 8h + 7 for K group zg as fp32 (symmetric: zsym).
inline __m256 zero8(const PackedProj& w, const uint8_t* zp, int zg, int h) {
  if (!w.has_zp) return _mm256_set1_ps(float(w.zsym));
  const __m128i z = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(zp + size_t(zg) * kPanelRows + 8 * h));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(z));
}

// One panel's codes (cpu_pack.h layouts) as fp32 values wv[k][16] (u - z for integer codes, before
// any group scale), exactly as generic::element_value computes them, for k < k_pad; false for the
// kinds left to the element-by-element decode (f16 / f32 / fp8 values, the VNNI layouts, zero-point
// groups that end inside a kpair / 8-column block).
bool fast_decode_panel(const PackedProj& w, const uint8_t* pc, const uint8_t* zp, float* wv) {
  const int Kp = w.k_pad;
  switch (w.code) {
    case CodeKind::kBF16: {
      // kPair: kpair q holds (row r, k % 2) at bf16 index q * 32 + 2 r + k % 2: read as dwords, row r's
      // even-k value is the low half, its odd-k value the high half (bf16 -> fp32: the bits << 16)
      const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
      for (int q = 0; q < Kp / 2; ++q)
        for (int h = 0; h < 2; ++h) {
          const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + (size_t(q) * 32 + 16 * h) * 2));
          _mm256_storeu_ps(wv + size_t(2 * q) * kPanelRows + 8 * h, _mm256_castsi256_ps(_mm256_slli_epi32(d, 16)));
          _mm256_storeu_ps(wv + size_t(2 * q + 1) * kPanelRows + 8 * h, _mm256_castsi256_ps(_mm256_and_si256(d, hi)));
        }
      return true;
    }
    case CodeKind::kInt8: {
      if (w.has_zp && (w.zp_group <= 0 || w.zp_group % 2 != 0)) return false;  // a zero-point group ends inside a kpair
      // kPair bytes: rows 8h .. 8h + 7 of kpair q are 16 bytes; widened to 16-bit words, dword r holds
      // row r's even-k code in its low word and its odd-k code in its high word. s8: stored u - zsym
      // (sign-extend, no zero point); else u, minus the row's zero point.
      const int zgk = w.has_zp ? w.zp_group : Kp;
      __m256 z[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int q = 0; q < Kp / 2; ++q) {
        const int k = 2 * q;
        if (!w.s8 && k % zgk == 0) z[0] = zero8(w, zp, k / zgk, 0), z[1] = zero8(w, zp, k / zgk, 1);
        for (int h = 0; h < 2; ++h) {
          const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + size_t(q) * 32 + 16 * h));
          __m256i ev, od;
          if (w.s8) {
            const __m256i d = _mm256_cvtepi8_epi16(b);
            ev = _mm256_srai_epi32(_mm256_slli_epi32(d, 16), 16);
            od = _mm256_srai_epi32(d, 16);
          } else {
            const __m256i d = _mm256_cvtepu8_epi16(b);
            ev = _mm256_and_si256(d, _mm256_set1_epi32(0xFFFF));
            od = _mm256_srli_epi32(d, 16);
          }
          __m256 fe = _mm256_cvtepi32_ps(ev), fo = _mm256_cvtepi32_ps(od);
          if (!w.s8) fe = _mm256_sub_ps(fe, z[h]), fo = _mm256_sub_ps(fo, z[h]);
          _mm256_storeu_ps(wv + size_t(k) * kPanelRows + 8 * h, fe);
          _mm256_storeu_ps(wv + size_t(k + 1) * kPanelRows + 8 * h, fo);
        }
      }
      return true;
    }
    case CodeKind::kInt4:
    case CodeKind::kFp4: {
      // kWord4: block b (k / 8) is 64 bytes; read as dwords, dword r of half h is row 8h + r, its low
      // word for even k and high word for odd k, kpair q = (k / 2) % 4 in bits [4q, 4q + 4) of the word
      const bool fp4 = w.code == CodeKind::kFp4;
      if (!fp4 && w.has_zp && (w.zp_group <= 0 || w.zp_group % 8 != 0)) return false;  // ... inside a block
      const __m256 mag = _mm256_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f);  // e2m1 magnitudes
      const __m256i m4 = _mm256_set1_epi32(0xF), m3 = _mm256_set1_epi32(7), s8 = _mm256_set1_epi32(8);
      const int zgk = w.has_zp ? w.zp_group : Kp;
      __m256 z[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int b = 0; b < Kp / 8; ++b) {
        if (!fp4 && (b * 8) % zgk == 0) z[0] = zero8(w, zp, b * 8 / zgk, 0), z[1] = zero8(w, zp, b * 8 / zgk, 1);
        for (int h = 0; h < 2; ++h) {
          const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + size_t(b) * 64 + 32 * h));
          for (int q = 0; q < 4; ++q)
            for (int kk = 0; kk < 2; ++kk) {
              const __m256i u = _mm256_and_si256(_mm256_srlv_epi32(d, _mm256_set1_epi32(16 * kk + 4 * q)), m4);
              __m256 v;
              if (fp4) {  // e2m1: magnitude by table, bit 3 the sign
                const __m256 a = _mm256_permutevar8x32_ps(mag, _mm256_and_si256(u, m3));
                v = _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(u, s8), 28)));
              } else {
                v = _mm256_sub_ps(_mm256_cvtepi32_ps(u), z[h]);
              }
              _mm256_storeu_ps(wv + size_t(b * 8 + 2 * q + kk) * kPanelRows + 8 * h, v);
            }
        }
      }
      return true;
    }
    default: return false;
  }
}

}  // namespace

#define QMOE_CPU_FAST_DECODE 1
#include "cpu/cpu_kernels_generic.inc"

void gemm(const GemmJob& j) { generic::gemm(j); }
void quant_row(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) { generic::quant_row(x, n, q, a, i); }
}  // namespace qmoe::cpu::avx2
