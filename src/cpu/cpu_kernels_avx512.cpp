// AVX-512 kernels (F/BW/VL/DQ + VNNI + BF16 + VBMI; CMake adds the flags for *_avx512.cpp).
// Two hand-written families, everything else falls back to the portable kernels built here:
//  * bf16 dot (vdpbf16ps): bf16 activations (raw bf16, or quantized fp8 / nvfp4 values, all exact
//    in bf16) x weights decoded to exact bf16 values (bf16 as is; int u - z; e4m3; e2m1). Products
//    are exact in fp32 and accumulate in fp32 (vdpbf16ps rounds RNE per step, treats denormal
//    inputs as zero, which no decoded weight or bf16 activation of a real layer is); group scales
//    multiply each group's partial sum, as numerics.md orders them.
//  * int8 dot (vpdpbusd): int8 activations x unsigned weight codes u; the zero point is removed
//    once per group with the activation's group sum: sum qa (u - z) = sum qa u - z sum qa (exact).
// A job covers 32 rows (two 16-row panels) of one expert for its T activation rows:
//  * fused (run_fused): T <= kFewRows, or 4-bit codes in blocks of kFewRows tokens. The packed
//    weights stream once; every 64-byte load is decoded in registers and feeds T dot products.
//  * tile (run_bf16 / run_s8): per K chunk of 256 the codes are decoded once into an L1-resident
//    bf16 / u8 tile, then a microkernel runs 12 (or 6) tokens at a time over it (one broadcast
//    activation pair/quad feeds two dot instructions).
#include <immintrin.h>

// GCC 12 reports the _mm*_undefined pass-through operands inside the conversion intrinsics
// (vpmovzx*, masked moves) as maybe-uninitialized at -O3: a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/cpu_kernels.h"
#include "cpu/ref/reference.h"

namespace qmoe::cpu::avx512 {
#include "cpu/cpu_kernels_generic.inc"

namespace {

constexpr int kChunk = 256;  // K per decoded tile (16 KB of bf16 for two panels)
constexpr int kTB = 12;      // tokens per microkernel call
constexpr int kTBGroups = 6; // ... when a chunk holds several scale groups (sums stay in registers)
constexpr int kPrefetch = 1024;  // bytes ahead in a weight stream (software prefetch, L1)
// bf16 weights read in place by the tile microkernel (T > 12): each line feeds 12 tokens x 16 rows
// of dot products (12 cycles of work per line), so 1 KiB ahead is ~200 cycles, less than a DRAM
// latency; 8 KiB ahead into L2: qwen3 M = 512 one thread 233-236 -> 224 ms (same as the fused path).
constexpr int kStreamPrefetch = 8192;

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }
// acc += dot(w's bf16 pairs, the pair at *a in every lane): vdpbf16ps with an embedded {1to16}
// memory broadcast, which GCC does not fold from _mm512_set1_epi32 of a load (it emits a separate
// vpbroadcastd per product)
inline __m512 dp_bcst(__m512 acc, __m512i w, const int32_t* a) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
  return acc;
}

// acc += w x a[0] in every lane (vfmadd231ps with an embedded {1to16} broadcast; the fp32-activation
// paths for bf16 weights, Kernels::f32_acts)
inline __m512 fma_bcst(__m512 acc, __m512 w, const float* a) {
  asm("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
  return acc;
}
// A kpair vector of bf16 weights (word 2 r + (k & 1) of row r) as fp32: *e the k values (shifted into
// the high half), *o the k + 1 values (masked).
inline void widen_bf16(__m512i v, __m512* e, __m512* o) {
  *e = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  *o = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xFFFF0000u))));
}
// bf16 bits of the value (i - 16), i = 0..31: the lookup table of integer codes after the
// per-lane offset 16 - z has been added (vpermw uses the low 5 bits of each index).
inline __m512i int_table() {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) {
    float f = float(i - 16);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    t[i] = uint16_t(u >> 16);  // small integers are exact in bf16
  }
  return _mm512_load_si512(t);
}
// e4m3 subnormal magnitudes m * 2^-9 (m = 0..7) as bf16, indexed by the 7-bit magnitude (< 8).
inline __m512i e4m3_sub_table() {
  alignas(64) uint16_t t[32] = {};
  for (int m = 0; m < 8; ++m) {
    float f = float(m) * 0.001953125f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    t[m] = uint16_t(u >> 16);
  }
  return _mm512_load_si512(t);
}

// Per-lane word offsets 16 - z for a pair-layout vector (word j belongs to row j / 2).
inline __m512i zp_offsets_words(const uint8_t* z16) {
  const __m512i dup = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4,
                                       4, 3, 3, 2, 2, 1, 1, 0, 0);
  __m512i z = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z16))));
  z = _mm512_permutexvar_epi16(dup, z);
  return _mm512_sub_epi16(_mm512_set1_epi16(16), z);
}
// Per-lane dword zero points for int8 pair layout: rows 0..7 (lo) or 8..15 (hi), dword j -> row j / 2.
inline void zp_dwords(const uint8_t* z16, __m512i* lo, __m512i* hi) {
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  __m512i z = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z16)));  // rows 0..15
  *lo = _mm512_permutexvar_epi32(dup, z);
  *hi = _mm512_permutexvar_epi32(_mm512_add_epi32(dup, _mm512_set1_epi32(8)), z);
}

// 4-bit codes (kWord4 layout): one 64-byte block = 16 rows x 4 kpairs. Shifting each 16-bit word
// right by 4q puts kpair q's nibble in its low bits; vpermw looks the word up in a 32-entry table
// by the word's low 5 bits. Symmetric int4 and e2m1 use a table whose halves repeat the 16 values
// (the bit above the nibble is then irrelevant: no mask); asymmetric int4 masks the nibble and
// adds the per-lane offset 16 - z into int_table().
inline __m512i rep16_table(bool is_int, int z) {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) {
    const float f = is_int ? float((i & 15) - z) : generic::codec::e2m1_to_f32(uint8_t(i & 15));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    t[i] = uint16_t(u >> 16);  // exact: |f| <= 15
  }
  return _mm512_load_si512(t);
}
template <bool kAsym>
inline void dec4(const uint8_t* blk, __m512i tbl, __m512i off, __m512i out[4]) {
  const __m512i b = _mm512_load_si512(blk);
  const __m512i m = _mm512_set1_epi16(15);
  if (kAsym) {
    out[0] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(b, m), off), tbl);
    out[1] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(_mm512_srli_epi16(b, 4), m), off), tbl);
    out[2] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(_mm512_srli_epi16(b, 8), m), off), tbl);
    out[3] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_srli_epi16(b, 12), off), tbl);
  } else {
    out[0] = _mm512_permutexvar_epi16(b, tbl);
    out[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), tbl);
    out[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 8), tbl);
    out[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 12), tbl);
  }
}
// One kpair of 8-bit integer codes (32 bytes, pair layout) as bf16 values u - z (exact: |u - z| <= 255).
// kSigned: the bytes already hold u - zsym (PackedProj::s8), sign extension replaces the subtraction.
template <bool kSigned>
inline __m512i dec8_int(const uint8_t* s, __m512i zlo, __m512i zhi) {
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
  const __m512i d0 = kSigned ? _mm512_cvtepi8_epi32(b0) : _mm512_sub_epi32(_mm512_cvtepu8_epi32(b0), zlo);
  const __m512i d1 = kSigned ? _mm512_cvtepi8_epi32(b1) : _mm512_sub_epi32(_mm512_cvtepu8_epi32(b1), zhi);
  // cvtne2ps(hi, lo) puts lo in words 0..15: rows 0..7 then rows 8..15, the pair layout
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtepi32_ps(d1), _mm512_cvtepi32_ps(d0));
}
// Two kpairs of e4m3 codes (64 bytes) as exact bf16 values. nan (PackedProj::fp8_nan: the weights
// hold e4m3 NaN codes, magnitude 0x7f): those become bf16 NaNs, so that they reach the outputs as
// the reference's NaN x anything does (the rebased exponent alone would make them 480).
inline void dec_fp8(const uint8_t* s, __m512i sub, __m512i out[2], bool nan) {
  for (int h = 0; h < 2; ++h) {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32 * h)));
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
    // normal e4m3 (exponent field >= 1): bf16 = mag << 4 with the exponent rebased by 127 - 7
    __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
    const __mmask32 is_sub = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8));
    v = _mm512_mask_permutexvar_epi16(v, is_sub, mag, sub);  // subnormals and zero from the table
    if (nan)
      v = _mm512_mask_mov_epi16(v, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7fc0));
    out[h] = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8));
  }
}

// Decodes kpairs [kp0, kp0 + nkp) of one panel into bf16 values, out[kp][32] (pair layout).
void decode_bf16_tile(const PackedProj& w, const uint8_t* pc, const uint8_t* zp, int kp0, int nkp, uint16_t* out) {
  switch (w.code) {
    case CodeKind::kInt4: case CodeKind::kFp4: {
      const bool is_int = w.code == CodeKind::kInt4, asym = is_int && w.has_zp;
      const __m512i tbl = asym ? int_table() : rep16_table(is_int, w.zsym);
      __m512i off = _mm512_setzero_si512();
      int zg_cur = -1;
      for (int q = 0; q < nkp / 4; ++q) {  // one 64-byte block = four kpairs
        const int kb = kp0 / 4 + q;
        if (asym) {
          const int zg = (kb * 8) / w.zp_group;
          if (zg != zg_cur) off = zp_offsets_words(zp + size_t(zg) * kPanelRows), zg_cur = zg;
        }
        const uint8_t* blk = pc + size_t(kb) * 64;
        _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch), _MM_HINT_T0);
        __m512i v[4];
        if (asym) dec4<true>(blk, tbl, off, v);
        else dec4<false>(blk, tbl, off, v);
        for (int i = 0; i < 4; ++i) _mm512_store_si512(out + size_t(4 * q + i) * 32, v[i]);
      }
      break;
    }
    case CodeKind::kInt8: {
      __m512i zlo = _mm512_set1_epi32(w.zsym), zhi = zlo;
      int zg_cur = -1;
      for (int i = 0; i < nkp; ++i) {
        const int kp = kp0 + i;
        if (w.has_zp) {
          const int zg = (kp * 2) / w.zp_group;
          if (zg != zg_cur) zp_dwords(zp + size_t(zg) * kPanelRows, &zlo, &zhi), zg_cur = zg;
        }
        const uint8_t* s = pc + size_t(kp) * 32;
        _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetch), _MM_HINT_T0);
        _mm512_store_si512(out + size_t(i) * 32, w.s8 ? dec8_int<true>(s, zlo, zhi) : dec8_int<false>(s, zlo, zhi));
      }
      break;
    }
    case CodeKind::kFp8: {
      const __m512i sub = e4m3_sub_table();
      for (int i = 0; i < nkp; i += 2) {
        const uint8_t* s = pc + size_t(kp0 + i) * 32;
        _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetch), _MM_HINT_T0);
        __m512i v[2];
        dec_fp8(s, sub, v, w.fp8_nan);
        _mm512_store_si512(out + size_t(i) * 32, v[0]);
        _mm512_store_si512(out + size_t(i + 1) * 32, v[1]);
      }
      break;
    }
    default: break;
  }
}

// 16 group scales of a panel as fp32.
inline __m512 load_scales16(ScaleKind k, const uint8_t* p) {
  switch (k) {
    case ScaleKind::kF32: return _mm512_loadu_ps(p);
    case ScaleKind::kBF16:
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    case ScaleKind::kF16: return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    case ScaleKind::kE8M0: {  // 2^(e - 127): the exponent field; e = 0 is the subnormal 2^-127
      const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m512i f = _mm512_mask_mov_epi32(_mm512_slli_epi32(e, 23), _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                              _mm512_set1_epi32(0x00400000));
      return _mm512_castsi512_ps(f);
    }
    case ScaleKind::kE4M3: {  // e4m3 bits moved into an fp16 (exponent bias 15 vs 7: value * 2^-8), exact
      const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7),
                                        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
      return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.f));
    }
    default: {
      alignas(64) float f[16];
      for (int r = 0; r < 16; ++r) f[r] = generic::gscale(k, p + r);
      return _mm512_load_ps(f);
    }
  }
}

// C[t][0..31] += (sum over nkp kpairs of a[t] . w) * scale, per segment of seg_kp kpairs. The
// running sums c stay in registers for the whole chunk (loaded and stored once): with TB <= 6
// that is 2 x 6 sums + 2 x 6 segment accumulators, so short scale groups (16 / 32 k) cost one
// FMA per accumulator each, no memory traffic; larger TB spill c (used when groups are long).
template <int TB, bool kStream>
void ukr_bf16(const uint16_t* w0, const uint16_t* w1, int nkp, int seg_kp, const uint16_t* a, size_t lda, float* C,
              const float* sc, const float* tg, size_t tg_ld) {
  __m512 c0[TB], c1[TB];
  for (int t = 0; t < TB; ++t) c0[t] = _mm512_load_ps(C + t * 32), c1[t] = _mm512_load_ps(C + t * 32 + 16);
  for (int s0 = 0, seg = 0; s0 < nkp; s0 += seg_kp, ++seg) {
    const int s1 = std::min(nkp, s0 + seg_kp);
    __m512 acc0[TB], acc1[TB];
    for (int t = 0; t < TB; ++t) acc0[t] = _mm512_setzero_ps(), acc1[t] = _mm512_setzero_ps();
    for (int kp = s0; kp < s1; ++kp) {
      if (kStream) {  // weights straight from memory (bf16 checkpoints): keep loads in flight
        _mm_prefetch(reinterpret_cast<const char*>(w0 + size_t(kp) * 32) + kStreamPrefetch, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(w1 + size_t(kp) * 32) + kStreamPrefetch, _MM_HINT_T1);
      }
      const __m512i W0 = _mm512_load_si512(w0 + size_t(kp) * 32), W1 = _mm512_load_si512(w1 + size_t(kp) * 32);
      for (int t = 0; t < TB; ++t) {
        int32_t pair;
        std::memcpy(&pair, a + t * lda + 2 * kp, 4);
        const __m512i A = _mm512_set1_epi32(pair);  // one (a[k], a[k+1]) pair to every lane
        acc0[t] = _mm512_dpbf16_ps(acc0[t], as_bh(A), as_bh(W0));
        acc1[t] = _mm512_dpbf16_ps(acc1[t], as_bh(A), as_bh(W1));
      }
    }
    const __m512 m0 = _mm512_load_ps(sc + seg * 32), m1 = _mm512_load_ps(sc + seg * 32 + 16);
    for (int t = 0; t < TB; ++t) {
      if (tg) {
        const __m512 g = _mm512_set1_ps(tg[t * tg_ld + seg]);
        c0[t] = _mm512_fmadd_ps(acc0[t], _mm512_mul_ps(m0, g), c0[t]);
        c1[t] = _mm512_fmadd_ps(acc1[t], _mm512_mul_ps(m1, g), c1[t]);
      } else {
        c0[t] = _mm512_fmadd_ps(acc0[t], m0, c0[t]);
        c1[t] = _mm512_fmadd_ps(acc1[t], m1, c1[t]);
      }
    }
  }
  for (int t = 0; t < TB; ++t) _mm512_store_ps(C + t * 32, c0[t]), _mm512_store_ps(C + t * 32 + 16, c1[t]);
}

// Same for bf16 weights read in place and fp32 activations (ActFmt::kF32, Kernels::f32_acts): each
// kpair vector of 16 rows x (k, k + 1) bf16 words becomes two fp32 vectors (the k words shifted into
// the high half, the k + 1 words masked), and each token's a[k], a[k + 1] multiply them by two FMAs
// with embedded broadcasts. The products of bf16 values are exact in fp32 (as in vdpbf16ps); the
// sums round per FMA. On the s40 Intel Xeon vdpbf16ps issues at ~0.45 per cycle (173 GFLOP/s on
// two cores) and vfmadd231ps at 2: 32 multiply-adds per cycle against ~14.
template <int TB>
void ukr_f32(const uint16_t* w0, const uint16_t* w1, int nkp, const float* a, size_t lda, float* C) {
  __m512 acc0[TB], acc1[TB];
  for (int t = 0; t < TB; ++t) acc0[t] = _mm512_load_ps(C + t * 32), acc1[t] = _mm512_load_ps(C + t * 32 + 16);
  for (int kp = 0; kp < nkp; ++kp) {
    _mm_prefetch(reinterpret_cast<const char*>(w0 + size_t(kp) * 32) + kStreamPrefetch, _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(w1 + size_t(kp) * 32) + kStreamPrefetch, _MM_HINT_T1);
    const __m512i W0 = _mm512_load_si512(w0 + size_t(kp) * 32), W1 = _mm512_load_si512(w1 + size_t(kp) * 32);
    __m512 w0e, w0o, w1e, w1o;
    widen_bf16(W0, &w0e, &w0o);
    widen_bf16(W1, &w1e, &w1o);
    for (int t = 0; t < TB; ++t) {
      const float* x = a + t * lda + 2 * kp;
      acc0[t] = fma_bcst(fma_bcst(acc0[t], w0e, x), w0o, x + 1);
      acc1[t] = fma_bcst(fma_bcst(acc1[t], w1e, x), w1o, x + 1);
    }
  }
  for (int t = 0; t < TB; ++t) _mm512_store_ps(C + t * 32, acc0[t]), _mm512_store_ps(C + t * 32 + 16, acc1[t]);
}

// Same for int8: acc = sum qa * u over a segment; flush (acc - z * sum qa) * scale.
template <int TB>
void ukr_s8(const uint8_t* w0, const uint8_t* w1, int nkq, int seg_kq, const int8_t* a, size_t lda, float* C,
            const float* sc, const int32_t* gsum, size_t gsum_ld, int zsym) {
  for (int s0 = 0, seg = 0; s0 < nkq; s0 += seg_kq, ++seg) {
    const int s1 = std::min(nkq, s0 + seg_kq);
    __m512i acc0[TB], acc1[TB];
    for (int t = 0; t < TB; ++t) acc0[t] = _mm512_setzero_si512(), acc1[t] = _mm512_setzero_si512();
    for (int kq = s0; kq < s1; ++kq) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + size_t(kq) * 64) + kPrefetch, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + size_t(kq) * 64) + kPrefetch, _MM_HINT_T0);
      const __m512i W0 = _mm512_load_si512(w0 + size_t(kq) * 64), W1 = _mm512_load_si512(w1 + size_t(kq) * 64);
      for (int t = 0; t < TB; ++t) {
        int32_t quad;
        std::memcpy(&quad, a + t * lda + 4 * kq, 4);
        const __m512i A = _mm512_set1_epi32(quad);
        acc0[t] = _mm512_dpbusd_epi32(acc0[t], W0, A);  // unsigned codes x signed activations
        acc1[t] = _mm512_dpbusd_epi32(acc1[t], W1, A);
      }
    }
    const __m512 c0 = _mm512_load_ps(sc + seg * 32), c1 = _mm512_load_ps(sc + seg * 32 + 16);
    for (int t = 0; t < TB; ++t) {
      const __m512i corr = _mm512_set1_epi32(zsym * gsum[t * gsum_ld + seg]);
      float* c = C + t * 32;
      _mm512_store_ps(c, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc0[t], corr)), c0, _mm512_load_ps(c)));
      _mm512_store_ps(c + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc1[t], corr)), c1, _mm512_load_ps(c + 16)));
    }
  }
}

void epilogue(const GemmJob& j, const float* C) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  const size_t rb = size_t(j.e) * w.rows_pad + size_t(j.pair) * kJobRows;
  for (int t = 0; t < j.nrows; ++t) {
    const float ts = (a.row_scale.empty() ? 1.f : a.row_scale[size_t(j.row0 + t)]) * j.extra;
    const __m512 tsv = _mm512_set1_ps(ts);
    for (int h = 0; h < 2; ++h) {
      __m512 v = _mm512_load_ps(C + t * 32 + h * 16);
      if (!w.rowscale.empty()) v = _mm512_mul_ps(v, _mm512_loadu_ps(w.rowscale.data() + rb + h * 16));
      v = _mm512_mul_ps(v, tsv);
      if (!w.bias.empty()) v = _mm512_add_ps(v, _mm512_loadu_ps(w.bias.data() + rb + h * 16));
      _mm512_storeu_ps(j.out + size_t(t) * j.ldo + h * 16, v);
    }
  }
}

// Segment (flush interval) along K and chunk length, or 0 when the fast kernels cannot run.
struct Plan {
  int seg = 0, chunk = 0;
};
Plan plan_of(const PackedProj& w, const ActBuf& a, bool int8) {
  Plan p;
  const int Kp = w.k_pad;
  const bool act_groups = !a.group_scale.empty();
  if (w.group > 0 && act_groups && w.group != a.group) return p;
  p.seg = w.group > 0 ? w.group : act_groups ? a.group : (int8 ? Kp : kChunk);
  if (p.seg % 8 != 0 && p.seg != Kp) return Plan{};
  if (p.seg <= kChunk && kChunk % p.seg == 0) p.chunk = kChunk;
  else if (p.seg >= Kp) p.seg = p.chunk = Kp;
  else return Plan{};
  return p;
}

bool run_bf16(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  if (a.fmt != ActFmt::kBF16 || !w.gidx.empty()) return false;
  if (w.code != CodeKind::kBF16 && w.code != CodeKind::kInt4 && w.code != CodeKind::kInt8 && w.code != CodeKind::kFp8 &&
      w.code != CodeKind::kFp4)
    return false;
  const Plan pl = plan_of(w, a, false);
  if (pl.chunk == 0) return false;
  const int T = j.nrows, Kp = w.k_pad;
  float* C = j.scratch;
  uint16_t* tile = reinterpret_cast<uint16_t*>(C + size_t(T) * kJobRows);  // [2][chunk/2][32]
  float* sc = C + size_t(T) * kJobRows + size_t(pl.chunk) * 32;           // [chunk/seg][32]
  std::memset(C, 0, size_t(T) * kJobRows * 4);
  const int p0 = 2 * j.pair;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  const bool tg = !a.group_scale.empty();
  for (int k0 = 0; k0 < Kp; k0 += pl.chunk) {
    const int kc = std::min(pl.chunk, Kp - k0), nkp = kc / 2;
    const uint16_t* wp[2];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* pc = w.panel(j.e, p0 + h);
      if (w.code == CodeKind::kBF16) {
        wp[h] = reinterpret_cast<const uint16_t*>(pc) + size_t(k0 / 2) * 32;
      } else {
        uint16_t* dst = tile + size_t(h) * (pl.chunk / 2) * 32;
        decode_bf16_tile(w, pc, w.has_zp ? w.zp_panel(j.e, p0 + h) : nullptr, k0 / 2, nkp, dst);
        wp[h] = dst;
        // the next chunk's codes into L2 while this chunk's token blocks run: the decode streams a
        // chunk in a burst and its 1 KiB L1 prefetch ran far less than a DRAM latency ahead (perf,
        // qwen3-30b-a3b int8 M = 512, one thread: 64% of the decode's samples on the first load of
        // each line). (The same for the int8-activation kernels' codes, read in place, measured
        // neutral: not there.)
        if (k0 + pl.chunk < Kp) {
          const size_t bpk = w.code == CodeKind::kInt4 || w.code == CodeKind::kFp4 ? 16 : 32;  // bytes per kpair
          const char* next = reinterpret_cast<const char*>(pc) + size_t(k0 / 2 + nkp) * bpk;
          const size_t n = size_t(std::min(pl.chunk, Kp - k0 - pl.chunk) / 2) * bpk;
          for (size_t o = 0; o < n; o += 64) _mm_prefetch(next + o, _MM_HINT_T1);
        }
      }
    }
    const int nseg = (kc + pl.seg - 1) / pl.seg, g0 = k0 / pl.seg;
    for (int s = 0; s < nseg; ++s)
      for (int h = 0; h < 2; ++h) {
        __m512 v = w.group > 0 ? load_scales16(w.gscale_kind, w.gscale_panel(j.e, p0 + h) + (size_t(g0 + s) * kPanelRows) * sb)
                               : _mm512_set1_ps(1.f);
        _mm512_store_ps(sc + s * 32 + h * 16, v);
      }
    const uint16_t* abase = a.row<uint16_t>(j.row0) + k0;
    auto block = [&](int t0, auto tb) {
      const float* tgp = tg ? a.group_scale.data() + size_t(j.row0 + t0) * a.num_groups + g0 : nullptr;
      auto ukr = w.code == CodeKind::kBF16 ? ukr_bf16<decltype(tb)::value, true> : ukr_bf16<decltype(tb)::value, false>;
      ukr(wp[0], wp[1], nkp, pl.seg / 2, abase + size_t(t0) * a.ld, size_t(a.ld),
                                    C + size_t(t0) * kJobRows, sc, tgp, size_t(a.num_groups));
    };
    // several scale groups per chunk: 6-token blocks keep the running sums in registers
    if (pl.seg < kc) generic::for_token_blocks<kTBGroups>(T, block);
    else generic::for_token_blocks<kTB>(T, block);
  }
  epilogue(j, C);
  return true;
}

// bf16 weights x fp32 activations (Kernels::f32_acts), every T: per chunk of kChunk columns (both
// panels' 16 KB, read in place, stay in L1 across the token blocks) blocks of kF32TB tokens.
constexpr int kF32TB = 6;  // 2 x 6 sums in registers, 12 independent FMA chains
bool run_f32(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  if (a.fmt != ActFmt::kF32 || w.code != CodeKind::kBF16 || !w.gidx.empty() || w.group > 0) return false;
  const int T = j.nrows, Kp = w.k_pad;
  float* C = j.scratch;
  std::memset(C, 0, size_t(T) * kJobRows * 4);
  const uint16_t* p0 = reinterpret_cast<const uint16_t*>(w.panel(j.e, 2 * j.pair));
  const uint16_t* p1 = reinterpret_cast<const uint16_t*>(w.panel(j.e, 2 * j.pair + 1));
  for (int k0 = 0; k0 < Kp; k0 += kChunk) {
    const int nkp = std::min(kChunk, Kp - k0) / 2;
    const float* a0 = a.row<float>(j.row0) + k0;
    generic::for_token_blocks<kF32TB>(T, [&](int t0, auto tb) {
      ukr_f32<decltype(tb)::value>(p0 + size_t(k0 / 2) * 32, p1 + size_t(k0 / 2) * 32, nkp, a0 + size_t(t0) * a.ld,
                                   size_t(a.ld), C + size_t(t0) * kJobRows);
    });
  }
  epilogue(j, C);
  return true;
}

bool run_s8(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  if (a.fmt != ActFmt::kS8 || w.has_zp || !w.gidx.empty()) return false;
  if (w.code != CodeKind::kVnni8 && w.code != CodeKind::kVnni4) return false;
  const Plan pl = plan_of(w, a, true);
  if (pl.chunk == 0 || a.group != (w.group > 0 ? w.group : a.ld) || pl.seg != (w.group > 0 ? w.group : w.k_pad))
    return false;
  const int T = j.nrows, Kp = w.k_pad;
  float* C = j.scratch;
  uint8_t* tile = reinterpret_cast<uint8_t*>(C + size_t(T) * kJobRows);  // [2][chunk/4][64]
  float* sc = C + size_t(T) * kJobRows + size_t(pl.chunk) * 32;
  std::memset(C, 0, size_t(T) * kJobRows * 4);
  const int p0 = 2 * j.pair;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  for (int k0 = 0; k0 < Kp; k0 += pl.chunk) {
    const int kc = std::min(pl.chunk, Kp - k0), nkq = kc / 4;
    const uint8_t* wp[2];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* pc = w.panel(j.e, p0 + h);
      if (w.code == CodeKind::kVnni8) {
        wp[h] = pc + size_t(k0 / 4) * 64;
      } else {  // 64 bytes hold two quads: low nibbles quad 2o, high nibbles quad 2o + 1
        uint8_t* dst = tile + size_t(h) * (pl.chunk / 4) * 64;
        const uint8_t* src = pc + size_t(k0 / 8) * 64;
        for (int o = 0; o < nkq / 2; ++o) {
          _mm_prefetch(reinterpret_cast<const char*>(src + size_t(o) * 64) + kPrefetch, _MM_HINT_T0);
          const __m512i b = _mm512_loadu_si512(src + size_t(o) * 64);
          _mm512_store_si512(dst + size_t(2 * o) * 64, _mm512_and_si512(b, _mm512_set1_epi8(15)));
          _mm512_store_si512(dst + size_t(2 * o + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(b, 4), _mm512_set1_epi8(15)));
        }
        wp[h] = dst;
      }
    }
    const int nseg = (kc + pl.seg - 1) / pl.seg, g0 = k0 / pl.seg;
    for (int s = 0; s < nseg; ++s)
      for (int h = 0; h < 2; ++h) {
        __m512 v = w.group > 0 ? load_scales16(w.gscale_kind, w.gscale_panel(j.e, p0 + h) + (size_t(g0 + s) * kPanelRows) * sb)
                               : _mm512_set1_ps(1.f);
        _mm512_store_ps(sc + s * 32 + h * 16, v);
      }
    const int8_t* abase = a.row<int8_t>(j.row0) + k0;
    generic::for_token_blocks<kTB>(T, [&](int t0, auto tb) {
      const int32_t* gs = a.group_sum.data() + size_t(j.row0 + t0) * a.num_groups + g0;
      ukr_s8<decltype(tb)::value>(wp[0], wp[1], nkq, pl.seg / 4, abase + size_t(t0) * a.ld, size_t(a.ld),
                                  C + size_t(t0) * kJobRows, sc, gs, size_t(a.num_groups), w.zsym);
    });
  }
  epilogue(j, C);
  return true;
}

// ---- fused decode-and-dot for few tokens per expert ------------------------------------------
// With T <= kFusedMaxT activation rows the job is a stream over the pair's weights: every 64-byte
// load is decoded in registers (dec4x / dec8_int / dec_fp8, or used as is for bf16) and feeds
// T x NP panels of vdpbf16ps straight away; nothing is stored. T <= 4 streams both panels of the
// pair at once (NP = 2: more independent chains); 5 <= T <= 12 streams one panel, then the other
// (NP = 1: the T running sums and T group accumulators stay in registers). Per scale group the
// products of each (panel, token) collect in kNp independent partial accumulators (enough chains
// to hide the vdpbf16ps latency), summed at the group's end and multiplied by the group's 16
// scales into the running sums: the same per-group factoring as the batched kernel, only the
// fp32 summation order inside a group differs. The bf16-pair products are exact (both operands
// exact bf16 values, 8 x 8 significant bits), so the pairing itself rounds nothing.
constexpr int kFusedMaxT = kFewRows;
// Software prefetch in each panel's stream (prefetcht1): bf16 panels 2 KiB ahead at T <= 2 and
// 8 KiB ahead at T >= 3; 8- and 4-bit codes 4 KiB ahead. Measured on the 2-core Zen 4 VM (and
// bench/cpu_stream_micro.cpp): at T <= 2 a bf16 stream runs at the memory's pace, 30-31 GB/s per
// core at 2 KiB (8 KiB: 24-27, none: 28; qwen3 M = 1), and the decoding kernels are 10-25% faster
// at 3-4 KiB than at 2 or 8 KiB: far-ahead software prefetches hold L1 miss buffers for a whole
// DRAM latency and cap the lines in flight below what the L2 stream prefetcher sustains alone.
// At T >= 3 a bf16 line feeds 4T dot products, so 2 KiB are only 100-250 cycles of work, less than
// a DRAM latency: every line arrived late (perf: ~40% of the T = 8 kernel's samples on the first
// use of each weight line). 8 KiB ahead: qwen3 M = 128 one thread 94 -> 58 ms, two threads 53 ->
// 41 ms; mixtral M = 32 108 -> 58 ms (4 KiB: 69 ms one thread, 16-24 KiB: same as 8).
// 4-bit streams add a prefetcht0 512 bytes ahead (one line per 64-byte block, from L2 into L1):
// 3-10% at T = 1..2 (qwen3 M = 8 / 32, llama4 M = 8).
template <int kBpk, int T>
constexpr int fused_pf() { return kBpk == 64 ? (T <= 2 ? 2048 : 8192) : 4096; }
constexpr int kNearPf4 = 512;
constexpr size_t kShortJob = 131072;

// 4-bit block (kWord4) decoded from two loads: word j of the block at blk holds kpairs 0, 1 in
// its low byte; word j of the (line-splitting) load at blk + 1 is bytes (2j + 1, 2j + 2), whose
// low byte is word j's high byte, kpairs 2, 3. So kpairs 0 and 2 need no shift, 1 and 3 one
// (vpermw reads index bits 0..4; the symmetric / e2m1 tables repeat with period 16, so bit 4,
// from the neighbouring nibble or byte, is irrelevant; asymmetric codes are masked). One shift
// fewer than dec4: on Zen 4 the shifts, vpermw and vdpbf16ps compete for the same two pipes.
// The byte after the last block is the next panel's, or the 64-byte pad after the codes.
template <bool kAsym>
inline void dec4x(const uint8_t* blk, __m512i tbl, __m512i off, __m512i out[4]) {
  const __m512i b0 = _mm512_load_si512(blk), b1 = _mm512_loadu_si512(blk + 1);
  if (kAsym) {
    const __m512i m = _mm512_set1_epi16(15);
    out[0] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(b0, m), off), tbl);
    out[1] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(_mm512_srli_epi16(b0, 4), m), off), tbl);
    out[2] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(b1, m), off), tbl);
    out[3] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(_mm512_srli_epi16(b1, 4), m), off), tbl);
  } else {
    out[0] = _mm512_permutexvar_epi16(b0, tbl);
    out[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b0, 4), tbl);
    out[2] = _mm512_permutexvar_epi16(b1, tbl);
    out[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b1, 4), tbl);
  }
}

// Group scales as the stream reads them: kBF16 / kE8M0 / kE4M3 straight from the packed panels
// (converted in registers, one conversion per group and panel), kF32 from fp32 rows (packed f32
// scales, or fused_scales' conversion of the other kinds, or ones when the weights have no groups).
struct FusedScales {
  const uint8_t* p[2];  // per panel of the pair: group 0's 16 scales
  size_t stride;        // bytes from one group to the next
  const uint8_t* next[2] = {nullptr, nullptr};  // packed group scales: the next job's panels' (GemmJob::next_e)
};
// kE4M3 comes back as 2^-8 x the scale (kE4M3Shift): the fused kernel's e4m3 scales are validated
// finite and > 0 (ref::validate; padding rows hold 0), so the sign bit is clear and the code shifted
// into an fp16's exponent / mantissa is the value times 2^-8, exactly (subnormals too); fused_panels
// multiplies its outputs by 2^8 once. Scaling every term of a sum by the same power of two changes
// no rounding. Three operations per group and panel instead of eight.
constexpr float kE4M3Shift = 256.f;
inline __m512 e4m3_scales16_shifted(const uint8_t* p) {  // 16 e4m3 scales x 2^-8
  return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 7));
}
template <ScaleKind SK>
inline __m512 fused_scale(const FusedScales& s, int h, int g) {
  const uint8_t* p = s.p[h] + size_t(g) * s.stride;
  if constexpr (SK == ScaleKind::kE4M3) return e4m3_scales16_shifted(p);
  return load_scales16(SK, p);
}

// Scales for fused_panels<..., SK>: SK is the packed kind (kBF16 / kE8M0 / kE4M3) or kF32, then
// j.scratch holds fp32 [group][32] (both panels), converted here once per job.
template <ScaleKind SK>
FusedScales fused_scales(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const int p0 = 2 * j.pair;
  FusedScales s;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  if (SK != ScaleKind::kF32 || (w.group > 0 && w.gscale_kind == ScaleKind::kF32)) {
    for (int h = 0; h < 2; ++h) {
      s.p[h] = w.gscale_panel(j.e, p0 + h);
      if (w.group > 0) s.next[h] = j.next_e >= 0 ? w.gscale_panel(j.next_e, 2 * j.next_pair + h) : w.gscale_panel(j.e, p0 + 2 + h);
    }
    s.stride = kPanelRows * sb;
    return s;
  }
  float* dst = j.scratch;
  s.p[0] = reinterpret_cast<const uint8_t*>(dst);
  s.p[1] = reinterpret_cast<const uint8_t*>(dst + 16);
  s.stride = 32 * 4;
  if (w.group <= 0) {  // one group: the whole row, factor 1 (exact)
    _mm512_store_ps(dst, _mm512_set1_ps(1.f));
    _mm512_store_ps(dst + 16, _mm512_set1_ps(1.f));
    return s;
  }
  const int ng = (w.k_pad / 2 + w.group / 2 - 1) / (w.group / 2);  // at most k_pad / 8 groups x 32 <= gemm_scratch_floats
  for (int h = 0; h < 2; ++h) {
    const uint8_t* src = w.gscale_panel(j.e, p0 + h);
    for (int g = 0; g < ng; ++g) _mm512_store_ps(dst + g * 32 + h * 16, load_scales16(w.gscale_kind, src + g * 16 * sb));
  }
  return s;
}

// Streams panels h0 .. h0 + NP - 1 of the pair and writes their output columns.
template <int T, int NP, CodeKind C, bool kAsym, ScaleKind SK>
void fused_panels(const GemmJob& j, int h0, const FusedScales& sc) {
  // independent partial accumulators per (panel, token): T x NP x kNp vdpbf16ps chains. Decoded
  // codes at 5 <= T <= 8 (one panel) get two per token: qwen3-30b-a3b int4-g32 M = 128 (T ~ 8)
  // 70.6 -> 39.1 ms in the VM's ~60 GB/s mode, 30.2 -> 29.9 ms in its ~37 GB/s mode; bf16 measured
  // 1-2% slower with two and keeps one
  constexpr int kNp = (T <= 2 || (C != CodeKind::kBF16 && NP == 1 && T <= 8)) ? 2 : 1;
  // bytes of one panel per kpair: bf16 64, 8-bit 32, 4-bit 16; an iteration handles 4 kpairs
  constexpr int kBpk = C == CodeKind::kBF16 ? 64 : (C == CodeKind::kInt8 || C == CodeKind::kFp8) ? 32 : 16;
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  const int nkp = w.k_pad / 2;
  const int seg = w.group > 0 ? w.group / 2 : nkp;  // kpairs per scale group (a multiple of 4)
  const int p0 = 2 * j.pair + h0;
  const uint8_t* pc[NP];
  for (int h = 0; h < NP; ++h) pc[h] = w.panel(j.e, p0 + h);
  const int32_t* ar[T];  // activation rows as (a[2kp], a[2kp + 1]) pairs
  const float* af[T];    // or (bf16 weights, ActFmt::kF32: Kernels::f32_acts) as fp32 rows
  const bool f32 = a.fmt == ActFmt::kF32;
  for (int t = 0; t < T; ++t) {
    ar[t] = f32 ? nullptr : reinterpret_cast<const int32_t*>(a.row<uint16_t>(j.row0 + t));
    af[t] = f32 ? a.row<float>(j.row0 + t) : nullptr;
  }
  // 8- and 4-bit jobs whose NP panels hold <= kShortJob bytes prefetch one job ahead: pf bytes past
  // the current line is the same line of the next job's panel (a thread's jobs run in contiguous
  // runs), so a job's start no longer waits for DRAM. Measured (one process per variant,
  // interleaved, ~60 GB/s mode): qwen3-30b-a3b int4-g32 M = 1 / 8 / 32 660 / 4158 / 12070 -> 521 /
  // 3443 / 10797 us, int8 990 / 6318 / 15978 -> 951 / 5847 / 14756; mixtral-8x7b int4-g32 M = 1
  // ~4250 -> ~4000 us; llama4-scout 0-3% better. A fixed 32 KiB distance instead took llama4-scout
  // M = 1 from 1484 to 1746 us. bf16 (2 KiB at T <= 2) measured the same or slower: not used.
  // Since the thirty-fifth session "one job ahead" is the job the layer runs next (GemmJob::next_e):
  // where that is another expert's pair (a thread's run crossing an expert, 8 times per GEMM at
  // qwen3-30b-a3b M = 1), the panels that follow in memory were a wasted stream of one job's bytes
  // and the next job started cold. Its scales are prefetched the same way (below).
  const size_t job_bytes = size_t(NP) * size_t(nkp) * kBpk;
  const bool short_job = kBpk != 64 && job_bytes <= kShortJob;
  // The stream after panel h: NP = 2 the next job's panel h; NP = 1 (one panel, then the other) panel
  // 1 after panel 0, the next job's panel 0 after panel 1. snx: the same for the scales (none after
  // panel 0 at NP = 1: panel 1's scales follow panel 0's in memory, 16 groups ahead covers them).
  ptrdiff_t pf[NP], snx[NP];
  for (int h = 0; h < NP; ++h) {
    const int nh = NP == 2 ? h : 0;
    const bool own = NP == 1 && h0 == 0;
    pf[h] = !short_job ? ptrdiff_t(fused_pf<kBpk, T>())
            : own ? ptrdiff_t(job_bytes) : next_job_panel(w, j, nh) - pc[h];
    snx[h] = short_job && !own && sc.next[nh] ? sc.next[nh] - sc.p[h0 + h] : 0;
  }

  __m512i tbl = _mm512_setzero_si512(), off[NP], zlo[NP], zhi[NP];
  if (C == CodeKind::kInt4) tbl = kAsym ? int_table() : rep16_table(true, w.zsym);
  if (C == CodeKind::kFp4) tbl = rep16_table(false, 0);
  if (C == CodeKind::kFp8) tbl = e4m3_sub_table();
  for (int h = 0; h < NP; ++h) off[h] = _mm512_setzero_si512(), zlo[h] = zhi[h] = _mm512_set1_epi32(w.zsym);
  int zg_cur = -1;

  __m512 c[NP][T];
  for (int h = 0; h < NP; ++h)
    for (int t = 0; t < T; ++t) c[h][t] = _mm512_setzero_ps();
  for (int g0 = 0, g = 0; g0 < nkp; g0 += seg, ++g) {
    const int g1 = std::min(nkp, g0 + seg);
    if (kAsym) {
      const int zg = (g0 * 2) / w.zp_group;
      if (zg != zg_cur) {
        zg_cur = zg;
        for (int h = 0; h < NP; ++h) {
          const uint8_t* z = w.zp_panel(j.e, p0 + h) + size_t(zg) * kPanelRows;
          if (C == CodeKind::kInt4) off[h] = zp_offsets_words(z);
          else zp_dwords(z, &zlo[h], &zhi[h]);
        }
      }
    }
    __m512 p[NP][T][kNp];
    for (int h = 0; h < NP; ++h)
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < kNp; ++i) p[h][t][i] = _mm512_setzero_ps();
    for (int kp = g0; kp < g1; kp += 4) {
      __m512i v[NP][4];
      for (int h = 0; h < NP; ++h) {
        const uint8_t* src = pc[h] + size_t(kp) * kBpk;
        for (int l = 0; l < 4 * kBpk; l += 64) _mm_prefetch(reinterpret_cast<const char*>(src + l + pf[h]), _MM_HINT_T1);
        if constexpr (kBpk == 16) _mm_prefetch(reinterpret_cast<const char*>(src + kNearPf4), _MM_HINT_T0);
        if constexpr (C == CodeKind::kBF16) {
          for (int i = 0; i < 4; ++i) v[h][i] = _mm512_load_si512(src + 64 * i);
        } else if constexpr (C == CodeKind::kInt8) {
          // symmetric int8 is always stored signed (s8), asymmetric never
          for (int i = 0; i < 4; ++i) v[h][i] = dec8_int<!kAsym>(src + 32 * i, zlo[h], zhi[h]);
        } else if constexpr (C == CodeKind::kFp8) {
          dec_fp8(src, tbl, v[h], w.fp8_nan);
          dec_fp8(src + 64, tbl, v[h] + 2, w.fp8_nan);
        } else {
          dec4x<kAsym>(src, tbl, off[h], v[h]);
        }
      }
      if constexpr (C == CodeKind::kBF16)
        if (f32) {  // two fp32 FMAs per kpair on the widened weights (ukr_f32's arithmetic)
          for (int i = 0; i < 4; ++i) {
            __m512 ve[NP], vo[NP];
            for (int h = 0; h < NP; ++h) widen_bf16(v[h][i], &ve[h], &vo[h]);
            for (int t = 0; t < T; ++t) {
              const float* x = af[t] + 2 * (kp + i);
              for (int h = 0; h < NP; ++h) p[h][t][i % kNp] = fma_bcst(fma_bcst(p[h][t][i % kNp], ve[h], x), vo[h], x + 1);
            }
          }
          continue;
        }
      for (int i = 0; i < 4; ++i)
        for (int t = 0; t < T; ++t) {
          // one (a[k], a[k+1]) pair to every lane. Decoded codes take it as the product's embedded
          // memory broadcast: qwen3-30b-a3b int4-g32 M = 32 1-7% faster (four alternating pairs,
          // both VM modes), llama4-scout M = 32 / mixtral-8x7b M = 8 within noise; bf16 was not
          // measurably faster and keeps the broadcast register
          if constexpr (C == CodeKind::kBF16) {
            const __m512bh A = as_bh(_mm512_set1_epi32(ar[t][kp + i]));
            for (int h = 0; h < NP; ++h) p[h][t][i % kNp] = _mm512_dpbf16_ps(p[h][t][i % kNp], A, as_bh(v[h][i]));
          } else {
            for (int h = 0; h < NP; ++h) p[h][t][i % kNp] = dp_bcst(p[h][t][i % kNp], v[h][i], ar[t] + kp + i);
          }
        }
    }
    for (int h = 0; h < NP; ++h) {
      // the scales stream along with the codes: their lines 16 groups ahead into L1
      _mm_prefetch(reinterpret_cast<const char*>(sc.p[h0 + h] + size_t(g + 16) * sc.stride), _MM_HINT_T0);
      // and the next job's (short streams: its first groups are not 16 groups ahead of anything),
      // once per 64-byte line of scales
      if (snx[h] != 0 && ((size_t(g) * sc.stride) & 63) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(sc.p[h0 + h] + size_t(g) * sc.stride + snx[h]), _MM_HINT_T1);
      const __m512 scv = fused_scale<SK>(sc, h0 + h, g);
      for (int t = 0; t < T; ++t) {
        __m512 sum = p[h][t][0];
        if constexpr (kNp == 2) sum = _mm512_add_ps(p[h][t][0], p[h][t][1]);
        c[h][t] = _mm512_fmadd_ps(sum, scv, c[h][t]);
      }
    }
  }
  const size_t rb = size_t(j.e) * w.rows_pad + size_t(j.pair) * kJobRows;
  for (int t = 0; t < T; ++t) {
    const float shift = SK == ScaleKind::kE4M3 ? kE4M3Shift : 1.f;  // a power of two: the product is exact
    const __m512 ts = _mm512_set1_ps((a.row_scale.empty() ? 1.f : a.row_scale[size_t(j.row0 + t)]) * j.extra * shift);
    for (int h = 0; h < NP; ++h) {
      const int col = (h0 + h) * 16;
      __m512 v = c[h][t];
      if (!w.rowscale.empty()) v = _mm512_mul_ps(v, _mm512_loadu_ps(w.rowscale.data() + rb + col));
      v = _mm512_mul_ps(v, ts);
      if (!w.bias.empty()) v = _mm512_add_ps(v, _mm512_loadu_ps(w.bias.data() + rb + col));
      _mm512_storeu_ps(j.out + size_t(t) * j.ldo + col, v);
    }
  }
}

template <int T, CodeKind C, bool kAsym, ScaleKind SK>
void fused_job(const GemmJob& j) {
  const FusedScales sc = fused_scales<SK>(j);
  if constexpr (T <= 4) {
    fused_panels<T, 2, C, kAsym, SK>(j, 0, sc);
  } else {
    fused_panels<T, 1, C, kAsym, SK>(j, 0, sc);
    fused_panels<T, 1, C, kAsym, SK>(j, 1, sc);
  }
}

// Scale kinds read in the stream (the common ones per code kind); every other kind, and weights
// without groups, through fp32 rows (kF32).
template <int T, CodeKind C, bool kAsym>
void fused_scaled(const GemmJob& j) {
  const ScaleKind k = j.w->group > 0 ? j.w->gscale_kind : ScaleKind::kNone;
  if constexpr (C == CodeKind::kInt4 || (C == CodeKind::kInt8 && !kAsym))
    if (k == ScaleKind::kBF16) return fused_job<T, C, kAsym, ScaleKind::kBF16>(j);
  if constexpr (C == CodeKind::kFp4) {
    if (k == ScaleKind::kE8M0) return fused_job<T, C, kAsym, ScaleKind::kE8M0>(j);
    if (k == ScaleKind::kE4M3) return fused_job<T, C, kAsym, ScaleKind::kE4M3>(j);
  }
  fused_job<T, C, kAsym, ScaleKind::kF32>(j);
}

template <int T>
bool fused_for_t(const GemmJob& j) {
  const bool asym = j.w->has_zp;
  switch (j.w->code) {
    case CodeKind::kBF16: fused_scaled<T, CodeKind::kBF16, false>(j); return true;
    case CodeKind::kFp8: fused_scaled<T, CodeKind::kFp8, false>(j); return true;
    case CodeKind::kFp4: fused_scaled<T, CodeKind::kFp4, false>(j); return true;
    case CodeKind::kInt8:
      asym ? fused_scaled<T, CodeKind::kInt8, true>(j) : fused_scaled<T, CodeKind::kInt8, false>(j);
      return true;
    case CodeKind::kInt4:
      asym ? fused_scaled<T, CodeKind::kInt4, true>(j) : fused_scaled<T, CodeKind::kInt4, false>(j);
      return true;
    default: return false;
  }
}

// The fused path runs bf16-format activations without per-token-group scales, no g_idx, and
// weight groups (if any) that are whole 64-byte blocks of every code kind (8 k).
bool run_fused(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  const bool f32 = a.fmt == ActFmt::kF32 && w.code == CodeKind::kBF16;  // Kernels::f32_acts, T <= kFusedMaxT
  if (j.nrows < 1 || (a.fmt != ActFmt::kBF16 && !f32) || !a.group_scale.empty() || !w.gidx.empty()) return false;
  if (f32 && j.nrows > kFusedMaxT) return false;
  if (w.group > 0 && w.group % 8 != 0) return false;
  if (w.has_zp && w.zp_group % 8 != 0) return false;
  if (j.nrows > kFusedMaxT) {
    // 4-bit codes decode in 7 instructions per 64 bytes: re-streaming the pair (from L2) for each
    // block of kFusedMaxT tokens beats decoding it once into the tile (measured 10% at T = 32);
    // wider codes amortize their costlier decode over all T in the tile path instead.
    if (w.code != CodeKind::kInt4 && w.code != CodeKind::kFp4) return false;
    for (int t0 = 0; t0 < j.nrows; t0 += kFusedMaxT) {
      GemmJob sub = j;
      sub.row0 = j.row0 + t0;
      sub.nrows = std::min(kFusedMaxT, j.nrows - t0);
      sub.out = j.out + size_t(t0) * j.ldo;
      run_fused(sub);
    }
    return true;
  }
  switch (j.nrows) {
    case 1: return fused_for_t<1>(j);
    case 2: return fused_for_t<2>(j);
    case 3: return fused_for_t<3>(j);
    case 4: return fused_for_t<4>(j);
    case 5: return fused_for_t<5>(j);
    case 6: return fused_for_t<6>(j);
    case 7: return fused_for_t<7>(j);
    case 8: return fused_for_t<8>(j);
    case 9: return fused_for_t<9>(j);
    case 10: return fused_for_t<10>(j);
    case 11: return fused_for_t<11>(j);
    default: return fused_for_t<12>(j);
  }
}

// ---- bf16 activations as 16-bit block fixed point (ActFmt::kS16, Kernels::act16) -------------------
// Where prefer_int16_dot() (Intel CPUs, or QMOE_CPU_ACT16=1) the layer quantizes an A16 projection's
// activations per block of B = a.group columns to int16 codes q with a power-of-two factor and the
// block's sum of q (RowQuant::kS16; NVFP4 W4A4 activations as the exact codes 2 e2m1, kNVFP4S16), and
// these kernels multiply them with the weight codes widened to 16-bit words: `vpdpwssd` adds the
// products of a word pair (row, k), (row, k + 1) with the token's (q_k, q_k+1) into one int32 lane per
// row, exactly. Per block the int32 sums lose the zero point (sum q (u - z) = sum q u - z sum q) or the
// e2m1 offset (codes enter as 2 e2m1 + 12), then float(part) x (weight scale x block factor) adds into
// the fp32 sums: the avx2 kernels' arithmetic (cpu_kernels_avx2.cpp fused_s16) in the same order, on
// 16 rows per vector, so both give the same bits. Per 64-byte int4 block and token: 7 decode
// operations (shared by the tokens) and 4 vpdpwssd, against 2 shifts, 4 vpermw and 4 vdpbf16ps on the
// bf16 path, whose vdpbf16ps the Intel Xeon of the thirty-ninth session issues at ~1/5 of vpdpbusd's
// rate. Numerics: the products are the bf16 values' exactly where a block's exponents span <= 7
// (docs/numerics.md "Products"; the tests' oracle bounds the rest).
inline __m512i dpw_bcst(__m512i acc, __m512i w, const int16_t* x) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// Weight group g's 16 scales of a panel (1 without group scales, 0 past the last group, where a
// segment holds only K padding); e4m3 as 2^-8 x the scale (fused_scale's form), the caller's factor
// holding the kE4M3Shift.
inline __m512 s16_scales(const PackedProj& w, const uint8_t* gs, size_t sb, int g) {
  if (!gs) return _mm512_set1_ps(1.f);
  if (g >= w.num_groups) return _mm512_setzero_ps();
  const uint8_t* p = gs + size_t(g) * kPanelRows * sb;
  if (w.gscale_kind == ScaleKind::kE4M3) return e4m3_scales16_shifted(p);
  return load_scales16(w.gscale_kind, p);
}

// The codes 2 e2m1 + 12 by nibble (vpshufb's 16-entry lanes).
inline __m512i e2m1_s16_table() {
  alignas(64) static constexpr int8_t kTab[64] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                                  12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                                  12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                                  12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  return _mm512_load_si512(kTab);
}
// One 64-byte kWord4 block (16 rows x 8 columns; word 2 r + (k & 1) holds kpair qq in bits 4 qq ..)
// as four vectors of 16-bit codes, v[qq] = kpair qq's 32 words: int4 u, or 2 e2m1 + 12 (kFp4: both
// nibbles of each byte looked up, kpairs 0 / 2 and 1 / 3, then split).
template <bool kFp4>
inline void s16_widen4(__m512i d, __m512i tab, __m512i v[4]) {
  if constexpr (kFp4) {
    const __m512i m0f0f = _mm512_set1_epi16(0x0F0F), m00ff = _mm512_set1_epi16(0x00FF);
    const __m512i lo = _mm512_shuffle_epi8(tab, _mm512_and_si512(d, m0f0f));
    const __m512i hi = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(d, 4), m0f0f));
    v[0] = _mm512_and_si512(lo, m00ff);
    v[1] = _mm512_and_si512(hi, m00ff);
    v[2] = _mm512_srli_epi16(lo, 8);
    v[3] = _mm512_srli_epi16(hi, 8);
  } else {
    const __m512i m000f = _mm512_set1_epi16(0x000F);
    v[0] = _mm512_and_si512(d, m000f);
    v[1] = _mm512_and_si512(_mm512_srli_epi16(d, 4), m000f);
    v[2] = _mm512_and_si512(_mm512_srli_epi16(d, 8), m000f);
    v[3] = _mm512_srli_epi16(d, 12);
  }
}

// The same block of e2m1 codes as signed words 256 x 2 e2m1 (s16_panels' kSigned): the 64-entry
// signed table through `vpermb` (6 index bits; the table repeats every 16), each byte's value moved to
// or kept in its word's high byte: 7 operations against 9, and no offset, so the flush loses the
// offset term (a `vpmulld` and a subtraction per panel and token). Each chain's sum is 256 x an
// integer and is shifted back before the chains are added. Range: products <= 2^15 x 3072, 2 per
// `vpdpwssd`; two chains (T <= 4) take 2 B / 8 of them per block, < 2^31 for B <= 32 (act16_block's
// blocks), one chain (T 5-8) 4 B / 8, < 2^31 for B <= 16 only (s16_signed_ok).
inline __m512i e2m1_signed_table() {
  alignas(64) static constexpr int8_t kTab[64] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                                  0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                                  0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                                  0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return _mm512_load_si512(kTab);
}
constexpr bool s16_signed_ok(int T, int B) { return T <= 4 ? B <= 32 : B <= 16; }
inline void s16_widen4_fp4s(__m512i d, __m512i stab, __m512i v[4]) {
  const __m512i mff00 = _mm512_set1_epi16(int16_t(0xFF00));
  const __m512i lo = _mm512_permutexvar_epi8(d, stab);
  const __m512i hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(d, 4), stab);
  v[0] = _mm512_slli_epi16(lo, 8);
  v[1] = _mm512_slli_epi16(hi, 8);
  v[2] = _mm512_and_si512(lo, mff00);
  v[3] = _mm512_and_si512(hi, mff00);
}

// Panels h0 .. h0 + NP - 1 of job j for T <= 8 tokens into C[t][32]. NA int32 chains per (panel,
// token): at T <= 4 two (k-pairs 0 / 2 and 1 / 3 of a block: vpdpwssd's latency over one chain would
// cap it at a fraction of its rate at one token), at 5-8 one (the tokens' chains are enough).
template <CodeKind CK, int T, int NP, bool kSigned = false>
void s16_panels(const GemmJob& j, int h0, float* C) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  const int Kp = w.k_pad, B = a.group;
  const int seg = w.group > 0 ? w.group : Kp;  // a multiple of B (act16_block), or all of K
  const generic::S16Rows<T> rows(j);
  const auto& xq = rows.q;
  const auto& xs = rows.scale;
  const auto& xsum = rows.sum;
  constexpr bool kFp4 = CK == CodeKind::kFp4;
  const bool e4m3 = w.group > 0 && w.gscale_kind == ScaleKind::kE4M3;
  const float cf = (kFp4 ? 0.5f : 1.f) * (e4m3 ? kE4M3Shift : 1.f);  // e2m1 values doubled; e4m3 scales / 2^8
  static_assert(!kSigned || kFp4, "signed words are e2m1's (s16_widen4_fp4s; s16_job checks s16_signed_ok)");
  const __m512i tab = kSigned ? e2m1_signed_table() : e2m1_s16_table();
  const int zgk = w.has_zp ? w.zp_group : Kp;
  const bool row_z = !kFp4 && w.has_zp;
  const int zc = kSigned ? 0 : kFp4 ? 12 : (CK == CodeKind::kInt8 && w.s8) ? 0 : w.zsym;  // signed int8: the value itself
  // prefetch (prefetcht1): the same line of the job the layer runs next where a job holds <= 128 KiB,
  // else 4 KiB ahead; plus prefetcht0 kNearPf4 bytes ahead (L2 to L1), as the bf16 kernels' 4-bit
  // streams. On the s39 Intel VM against one prefetcht0 at the job distance (the avx2 kernels' form):
  // qwen3-30b-a3b M = 1 int4-g32 / int8 / MXFP4 1.07 / 1.09 / 1.03x, llama4-scout int4-g32 1.06x,
  // qwen3-30b-a3b int4-g32 M = 8 1.04x (three alternations, ab_prefetch_t0_vs_t1.txt)
  const bool short_job = 2 * w.panel_bytes <= kShortJob;
  const uint8_t *pc[NP], *zp[NP], *gs[NP];
  ptrdiff_t pf[NP];
  for (int h = 0; h < NP; ++h) {
    const int pn = 2 * j.pair + h0 + h;
    pc[h] = w.panel(j.e, pn);
    zp[h] = w.has_zp ? w.zp_panel(j.e, pn) : nullptr;
    gs[h] = w.group > 0 ? w.gscale_panel(j.e, pn) : nullptr;
    pf[h] = short_job ? next_job_panel(w, j, h0 + h) - pc[h] : 4096;
  }
  constexpr int NA = T <= 4 ? 2 : 1;
  __m512 out[NP][T];
  for (int h = 0; h < NP; ++h)
    for (int t = 0; t < T; ++t) out[h][t] = _mm512_setzero_ps();
  int blk = 0;  // kb / B, by counter
  for (int k0 = 0, g = 0; k0 < Kp; k0 += seg, ++g) {
    const int k1 = std::min(Kp, k0 + seg);
    __m512 ws[NP];
    for (int h = 0; h < NP; ++h) ws[h] = s16_scales(w, gs[h], sb, g);
    for (int kb = k0; kb < k1; kb += B, ++blk) {
      const int kb1 = std::min(k1, kb + B);
      __m512i acc[NP][T][NA];
      for (int h = 0; h < NP; ++h)
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < NA; ++i) acc[h][t][i] = _mm512_setzero_si512();
      if constexpr (CK == CodeKind::kInt8) {  // kPair: 32 bytes per kpair, word 2 r + (k & 1) of row r
        for (int q = kb / 2; q < kb1 / 2; q += 2) {  // blocks are multiples of 4 columns
          __m512i v[NP][2];
          for (int h = 0; h < NP; ++h) {
            _mm_prefetch(reinterpret_cast<const char*>(pc[h] + size_t(q) * 32 + pf[h]), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(pc[h] + size_t(q) * 32 + kNearPf4), _MM_HINT_T0);
            for (int i = 0; i < 2; ++i) {
              const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc[h] + size_t(q + i) * 32));
              v[h][i] = w.s8 ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
            }
          }
          for (int t = 0; t < T; ++t)
            for (int h = 0; h < NP; ++h)
              for (int i = 0; i < 2; ++i) acc[h][t][i % NA] = dpw_bcst(acc[h][t][i % NA], v[h][i], xq[t] + 2 * (q + i));
        }
      } else {  // kWord4
        for (int b = kb / 8; b < kb1 / 8; ++b) {
          __m512i v[NP][4];
          for (int h = 0; h < NP; ++h) {
            _mm_prefetch(reinterpret_cast<const char*>(pc[h] + size_t(b) * 64 + pf[h]), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(pc[h] + size_t(b) * 64 + kNearPf4), _MM_HINT_T0);
            if constexpr (kSigned)
              s16_widen4_fp4s(_mm512_loadu_si512(pc[h] + size_t(b) * 64), tab, v[h]);
            else
              s16_widen4<kFp4>(_mm512_loadu_si512(pc[h] + size_t(b) * 64), tab, v[h]);
          }
          for (int t = 0; t < T; ++t) {
            const int16_t* x = xq[t] + 8 * b;
            for (int h = 0; h < NP; ++h)
              for (int qq = 0; qq < 4; ++qq) acc[h][t][qq % NA] = dpw_bcst(acc[h][t][qq % NA], v[h][qq], x + 2 * qq);
          }
        }
      }
      for (int h = 0; h < NP; ++h) {
        const __m512i z = row_z ? _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zp[h] + size_t(kb / zgk) * kPanelRows)))
                                : _mm512_set1_epi32(zc);
        for (int t = 0; t < T; ++t) {
          const __m512 f = _mm512_set1_ps(xs[t][blk] * cf);
          __m512i part;
          if constexpr (kSigned) {
            part = _mm512_srai_epi32(acc[h][t][0], 8);
            if constexpr (NA == 2) part = _mm512_add_epi32(part, _mm512_srai_epi32(acc[h][t][1], 8));
          } else {
            const __m512i sum = NA == 2 ? _mm512_add_epi32(acc[h][t][0], acc[h][t][NA - 1]) : acc[h][t][0];
            part = _mm512_sub_epi32(sum, _mm512_mullo_epi32(z, _mm512_set1_epi32(xsum[t][blk])));
          }
          out[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(part), _mm512_mul_ps(ws[h], f), out[h][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NP; ++h) _mm512_storeu_ps(C + size_t(t) * kJobRows + (h0 + h) * kPanelRows, out[h][t]);
}

// T <= 2 streams both panels at once (more independent chains), 3-8 one panel after the other; e2m1
// codes as signed words where their chains hold the sums (s16_signed_ok).
template <CodeKind CK, int T, bool kSigned = false>
void s16_job_as(const GemmJob& j, float* C) {
  if constexpr (T <= 2) {
    s16_panels<CK, T, 2, kSigned>(j, 0, C);
  } else {
    s16_panels<CK, T, 1, kSigned>(j, 0, C);
    s16_panels<CK, T, 1, kSigned>(j, 1, C);
  }
}
template <CodeKind CK, int T>
void s16_job(const GemmJob& j, float* C) {
  if constexpr (CK == CodeKind::kFp4) {
    if (s16_signed_ok(T, j.a->group)) return s16_job_as<CK, T, true>(j, C);
  }
  s16_job_as<CK, T>(j, C);
}
template <CodeKind CK>
void s16_t(const GemmJob& j, float* C) {
  switch (j.nrows) {
    case 1: s16_job<CK, 1>(j, C); break;
    case 2: s16_job<CK, 2>(j, C); break;
    case 3: s16_job<CK, 3>(j, C); break;
    case 4: s16_job<CK, 4>(j, C); break;
    case 5: s16_job<CK, 5>(j, C); break;
    case 6: s16_job<CK, 6>(j, C); break;
    case 7: s16_job<CK, 7>(j, C); break;
    default: s16_job<CK, 8>(j, C); break;
  }
}

// ---- act16 tile: jobs of more than kS16Pass tokens ---------------------------------------------
// The fused kernels above decode every 64-byte block again for each pass of 8 tokens (7 operations
// per block on the vector ports beside its 32 vpdpwssd) and flush each activation block with ~8
// operations per token (broadcasts of the factor and of z x sum q, vpmulld, sub, cvt, mul, fma).
// Here, per K chunk of kChunk columns, both panels' codes are widened once into an L1 tile of signed
// 16-bit words u - z (tile[kp] = kpair kp's 32 words, word 2 r + (k & 1) of row r; e2m1 as 2 e2m1),
// so a block's int32 sum is the fused kernels' sum q u - z sum q itself (the same integer), and the
// weight scales are stored times cf (a power of two, so ws cf xs = ws (xs cf) exactly, one rounding
// of the same real product). A block of up to kS16TB tokens then runs over the tile: one tile load
// feeds TB vpdpwssd, and a flush is cvt, mul (the token's factor from memory) and fma, in the fused
// kernels' order: both give the same bits. qwen3-30b-a3b int4-g32 M = 512 (32 tokens per expert on
// average), two threads, three alternations: 133 -> 106 ms (39 -> 47% of the int16 dot peak); M = 128
// (~8): 35.2 against 33.6 ms with the fused passes alone, within this VM's noise.
constexpr int kS16Pass = 8;  // jobs of up to this many tokens take the fused passes
constexpr int kS16TB = 12;   // tokens per tile block: 12 chains + 12 sums + tile + scale registers

// Tile block: tokens t0 .. t0 + TB - 1 of one panel over the chunk's nkp kpairs in activation blocks
// of bkp kpairs (the last one shorter where K is not a multiple of the block). x: token t0's codes at
// the chunk's first column, xs its block factors from the chunk's first block (rows lda / ldg apart);
// ws: the panel's scales x cf per block; C: the tokens' sums (kJobRows apart). Measured on the s40
// Intel VM (one job, K = 2048, 48 tokens, warm, one core, alternating): this plain loop (kpair outer,
// token inner; GCC walks one pointer over the tokens) ran as fast as the forms without that walk
// (12 row pointers with displacements, 255-293 against 267-275 GOP/s) and faster than token-outer
// chains of 2-8 kpairs (215-227), which leave fewer independent chains in the window. TB 10 / 14 /
// 16: 262-271 / 240-258 / 204-219. pf (non-null): pfl lines from pf + 64 pfl bi prefetched into L2
// per block bi (the next chunk's codes, spread over this chunk's work).
template <int TB>
void s16_ukr(const __m512i* tile, int nkp, int bkp, const int16_t* x, size_t lda, const float* xs, size_t ldg,
             const __m512* ws, float* C, const char* pf, int pfl) {
  for (int bi = 0, kp0 = 0; kp0 < nkp; ++bi, kp0 += bkp) {
    if (pf)
      for (int i = 0; i < pfl; ++i) _mm_prefetch(pf + (size_t(bi) * pfl + i) * 64, _MM_HINT_T1);
    __m512i acc[TB];
    for (int t = 0; t < TB; ++t) acc[t] = _mm512_setzero_si512();
    const int kp1 = std::min(nkp, kp0 + bkp);
    for (int kp = kp0; kp < kp1; ++kp) {
      const __m512i w = _mm512_load_si512(tile + kp);
      for (int t = 0; t < TB; ++t) acc[t] = dpw_bcst(acc[t], w, x + t * lda + 2 * kp);
    }
    for (int t = 0; t < TB; ++t) {
      float* c = C + t * kJobRows;
      _mm512_store_ps(c, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(ws[bi], _mm512_set1_ps(xs[t * ldg + bi])),
                                         _mm512_load_ps(c)));
    }
  }
}

// Per-row zero points (16 bytes, row r) as the words of a pair-layout vector (word j: row j / 2).
inline __m512i zp_words16(const uint8_t* z16) {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z16)));
  return _mm512_or_si512(d, _mm512_slli_epi32(d, 16));
}

template <CodeKind CK>
void s16_tile(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  const int T = j.nrows, Kp = w.k_pad, B = a.group;
  const int seg = w.group > 0 ? w.group : Kp;
  constexpr bool kFp4 = CK == CodeKind::kFp4;
  const bool e4m3 = w.group > 0 && w.gscale_kind == ScaleKind::kE4M3;
  const __m512 cf = _mm512_set1_ps((kFp4 ? 0.5f : 1.f) * (e4m3 ? kE4M3Shift : 1.f));
  const bool row_z = !kFp4 && w.has_zp;
  const int zc = kFp4 ? 12 : (CK == CodeKind::kInt8 && w.s8) ? 0 : w.zsym;
  const int zgk = w.has_zp ? w.zp_group : Kp;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  const int nbm = kChunk / B, bkp = B / 2;
  float* C = j.scratch;                                                   // [T][32]
  __m512i* tile = reinterpret_cast<__m512i*>(C + size_t(T) * kJobRows);  // [2][kChunk / 2]
  __m512* ws = reinterpret_cast<__m512*>(tile + kChunk);                  // [2][nbm]
  std::memset(C, 0, size_t(T) * kJobRows * 4);
  const __m512i tab = e2m1_s16_table(), zsym = _mm512_set1_epi16(int16_t(zc));
  const uint8_t *pc[2], *zp[2], *gs[2];
  for (int h = 0; h < 2; ++h) {
    const int pn = 2 * j.pair + h;
    pc[h] = w.panel(j.e, pn);
    zp[h] = w.has_zp ? w.zp_panel(j.e, pn) : nullptr;
    gs[h] = w.group > 0 ? w.gscale_panel(j.e, pn) : nullptr;
  }
  const size_t bpk = CK == CodeKind::kInt8 ? 32 : 16;  // code bytes per kpair and panel
  // Prefetch (measured, s40 perf of qwen3-30b-a3b M = 128): the next chunk's codes as one burst of
  // 32-64 prefetcht1 after the decode held 28% of the tile path's samples outside the microkernel
  // (the line fill buffers full), and the group scales, read in place, another 10% (never
  // prefetched). Now the codes' lines are spread over the first token block's activation blocks and
  // the next chunk's scales and zero points are asked for right after this chunk's. A/B against the
  // burst (qwen3-30b-a3b int4-g32, alternating; this VM's noise is ~10%): M = 512 0.87 / 1.03 /
  // 1.06x, M = 128 0.99 / 1.09x (the burst plus the scales' prefetch: 0.98-1.04x).
  const int nb = (std::min(kChunk, Kp) + B - 1) / B;
  const int lines = kChunk / 2 * int(bpk) / 64, pfl = (lines + nb - 1) / nb;
  const char* pfc[2];
  for (int k0 = 0; k0 < Kp; k0 += kChunk) {
    const int kc = std::min(kChunk, Kp - k0), k1 = k0 + kChunk;
    for (int h = 0; h < 2; ++h) {
      __m512i* dst = tile + h * (kChunk / 2);
      // zero points: per 8 columns (a 64-byte int4 block, 4 int8 kpairs); zp groups are multiples of 8
      for (int c = 0; c < kc; c += 8) {
        const __m512i z = row_z ? zp_words16(zp[h] + size_t((k0 + c) / zgk) * kPanelRows) : zsym;
        __m512i* v = dst + c / 2;
        if constexpr (CK == CodeKind::kInt8) {
          for (int i = 0; i < 4; ++i) {
            const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc[h] + (size_t(k0 + c) / 2 + i) * 32));
            v[i] = _mm512_sub_epi16(w.s8 ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b), z);
          }
        } else {
          s16_widen4<kFp4>(_mm512_loadu_si512(pc[h] + size_t(k0 + c) / 8 * 64), tab, v);
          for (int i = 0; i < 4; ++i) v[i] = _mm512_sub_epi16(v[i], z);
        }
      }
      for (int bi = 0; bi * B < kc; ++bi) ws[h * nbm + bi] = _mm512_mul_ps(s16_scales(w, gs[h], sb, (k0 + bi * B) / seg), cf);
      // the next chunk's codes, scales and zero points (or the next job's first) into L2
      const bool last = k1 >= Kp;
      const int ne = last && j.next_e >= 0 ? j.next_e : j.e;
      const int np = last ? (j.next_e >= 0 ? 2 * j.next_pair : 2 * j.pair + 2) + h : 2 * j.pair + h;
      const int kn = last ? 0 : k1;
      pfc[h] = reinterpret_cast<const char*>(w.panel(ne, np) + size_t(kn) / 2 * bpk);
      if (gs[h]) {
        const char* g = reinterpret_cast<const char*>(w.gscale_panel(ne, np) + size_t(kn / seg) * kPanelRows * sb);
        for (size_t o = 0; o < size_t(kChunk / seg + 1) * kPanelRows * sb; o += 64) _mm_prefetch(g + o, _MM_HINT_T1);
      }
      if (row_z) _mm_prefetch(reinterpret_cast<const char*>(w.zp_panel(ne, np) + size_t(kn / zgk) * kPanelRows), _MM_HINT_T1);
    }
    const int16_t* x0 = a.row<int16_t>(j.row0) + k0;
    const float* xs0 = a.group_scale.data() + size_t(j.row0) * a.num_groups + k0 / B;
    generic::for_token_blocks<kS16TB>(T, [&](int t0, auto tb) {
      for (int h = 0; h < 2; ++h)
        s16_ukr<decltype(tb)::value>(tile + h * (kChunk / 2), kc / 2, bkp, x0 + size_t(t0) * a.ld, size_t(a.ld),
                                     xs0 + size_t(t0) * a.num_groups, size_t(a.num_groups), ws + h * nbm,
                                     C + size_t(t0) * kJobRows + h * kPanelRows, t0 == 0 ? pfc[h] : nullptr, pfl);
    });
  }
  generic::finish(j, C);
}

bool run_s16(const GemmJob& j) {
  const ActBuf& a = *j.a;
  if (a.fmt != ActFmt::kS16 || j.nrows < 1 || a.group <= 0 || act16_block(*j.w) != a.group) return false;
  if (j.nrows > kS16Pass && kChunk % a.group == 0) {
    switch (j.w->code) {
      case CodeKind::kInt4: s16_tile<CodeKind::kInt4>(j); break;
      case CodeKind::kFp4: s16_tile<CodeKind::kFp4>(j); break;
      default: s16_tile<CodeKind::kInt8>(j); break;
    }
    return true;
  }
  generic::in_passes<kS16Pass>(j, [&](const GemmJob& s) {
    switch (j.w->code) {
      case CodeKind::kInt4: s16_t<CodeKind::kInt4>(s, j.scratch); break;
      case CodeKind::kFp4: s16_t<CodeKind::kFp4>(s, j.scratch); break;
      default: s16_t<CodeKind::kInt8>(s, j.scratch); break;
    }
  });
  return true;
}

}  // namespace

int act16(const PackedProj& w) { return prefer_int16_dot() ? act16_block(w) : 0; }
bool f32_acts(const PackedProj& w) { return prefer_int16_dot() && w.code == CodeKind::kBF16 && w.gidx.empty() && w.group == 0; }

void gemm(const GemmJob& j) {
  if (run_s16(j) || run_fused(j) || run_f32(j) || run_bf16(j) || run_s8(j)) return;
  generic::gemm(j);
}
namespace {
// NVFP4 activation quantization of one row (docs/numerics.md), 16 elements per vector: the block
// scale is computed in scalar code exactly as generic::quant_row does; x * r, the clamp and the
// e2m1 round-to-nearest-even (the same comparison ladder as codec::e2m1_round) run on 16 lanes,
// and e2m1 * s (exact in bf16) is stored as its top 16 bits.
// One block of <= 16 values (lanes past len zero): its e4m3 scale *sc and the signed e2m1 values.
inline __m512 nvfp4_block(const float* x, int len, float G, float inv_g, float* sc) {
  const __mmask16 m = __mmask16((1u << len) - 1);
  const __m512 v = _mm512_maskz_loadu_ps(m, x);
  const float vmax = _mm512_reduce_max_ps(_mm512_abs_ps(v));  // masked-off lanes are 0
  *sc = generic::e4m3_round_sat(G * (vmax * (1 / 6.f)));
  const float r = *sc == 0.f ? 0.f : 1.f / (*sc * inv_g);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, _mm512_set1_ps(r)), _mm512_set1_ps(-6.f)), _mm512_set1_ps(6.f));
  const __m512 ab = _mm512_abs_ps(c);
  __m512 e = _mm512_setzero_ps();  // ties go to the even code, as codec::e2m1_round
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(0.25f), _CMP_GT_OQ), _mm512_set1_ps(0.5f));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(0.75f), _CMP_GE_OQ), _mm512_set1_ps(1.f));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(1.25f), _CMP_GT_OQ), _mm512_set1_ps(1.5f));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(1.75f), _CMP_GE_OQ), _mm512_set1_ps(2.f));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(2.5f), _CMP_GT_OQ), _mm512_set1_ps(3.f));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(3.5f), _CMP_GE_OQ), _mm512_set1_ps(4.f));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(ab, _mm512_set1_ps(5.f), _CMP_GT_OQ), _mm512_set1_ps(6.f));
  // the sign of c (std::signbit)
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(e), _mm512_and_si512(_mm512_castps_si512(c),
                                                                                       _mm512_set1_epi32(int(0x80000000u)))));
}
// kNVFP4: e2m1 x s (<= 5 significant bits, exact in bf16) stored as bf16.
void quant_row_nvfp4(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) {
  const float G = q.static_scale, inv_g = 1.f / G;
  uint16_t* d = a.row<uint16_t>(i);
  for (int k0 = 0; k0 < n; k0 += 16) {
    const int len = std::min(16, n - k0);
    float sc;
    const __m512 e = nvfp4_block(x + k0, len, G, inv_g, &sc);
    const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(_mm512_mul_ps(e, _mm512_set1_ps(sc))), 16);
    _mm256_mask_storeu_epi16(d + k0, __mmask16((1u << len) - 1), _mm512_cvtepi32_epi16(bits));
  }
  for (int k = n; k < a.ld; ++k) d[k] = 0;
}
// kNVFP4S16: the same blocks as the integers 2 e2m1 (exact), factor s / 2 and the block's sum (the
// portable quantizer's kNVFP4S16; s40: in generic code it took ~14% of a qwen3-30b-a3b M = 512 W4A4
// layer, as much as its GEMMs' microkernels).
void quant_row_nvfp4_s16(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) {
  const float G = q.static_scale, inv_g = 1.f / G;
  int16_t* d = a.row<int16_t>(i);
  float* gs = a.group_scale.data() + size_t(i) * a.num_groups;
  int32_t* sum = a.group_sum.data() + size_t(i) * a.num_groups;
  for (int g = 0; g < a.num_groups; ++g) {
    const int k0 = g * 16;
    if (k0 >= n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k0), _mm256_setzero_si256());
      gs[g] = 0.f, sum[g] = 0;
      continue;
    }
    float sc;
    const __m512 e = nvfp4_block(x + k0, std::min(16, n - k0), G, inv_g, &sc);
    const __m512i c = _mm512_cvtps_epi32(_mm512_add_ps(e, e));  // 2 e2m1: integers, exact
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k0), _mm512_cvtepi32_epi16(c));
    gs[g] = 0.5f * sc;  // q x s / 2 = e2m1 x s, exact
    sum[g] = _mm512_reduce_add_epi32(c);
  }
}
}  // namespace

// kS16 (16-bit block fixed point, the portable quantizer's definition, blocks of a multiple of 16
// columns): per block the finite check (fpclass), amax, E = max(floor(log2 amax), -112) from the
// exponent bits, q = rint(x 2^(14 - E)) (vcvtps2dq under the default round-to-nearest-even), the
// sum of q; a non-finite value: codes 0, sum 0, factor NaN.
void quant_row_s16(const float* x, int n, ActBuf& a, int i) {
  constexpr int kMaxPieces = 8;  // blocks of up to 128 columns
  const int B = a.group, np = B / 16;
  int16_t* d = a.row<int16_t>(i);
  float* gs = a.group_scale.data() + size_t(i) * a.num_groups;
  int32_t* sum = a.group_sum.data() + size_t(i) * a.num_groups;
  for (int g = 0; g < a.num_groups; ++g) {
    const int k0 = g * B;
    __m512 v[kMaxPieces];
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int p = 0; p < np; ++p) {
      const int len = std::clamp(n - (k0 + 16 * p), 0, 16);
      v[p] = _mm512_maskz_loadu_ps(__mmask16((1u << len) - 1), x + k0 + 16 * p);
      bad |= _mm512_fpclass_ps_mask(v[p], 0x99);  // NaN, +-Inf
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v[p]));
    }
    const uint32_t am = generic::bits_of(_mm512_reduce_max_ps(amax));
    const int E = std::max(int(am >> 23) - 127, -112);
    const __m512 mul = _mm512_set1_ps(generic::f32_of(uint32_t(14 - E + 127) << 23));
    __m512i tot = _mm512_setzero_si512();
    for (int p = 0; p < np; ++p) {
      const __m512i c = bad ? _mm512_setzero_si512() : _mm512_cvtps_epi32(_mm512_mul_ps(v[p], mul));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k0 + 16 * p), _mm512_cvtepi32_epi16(c));
      tot = _mm512_add_epi32(tot, c);
    }
    gs[g] = bad ? std::nanf("") : generic::f32_of(uint32_t(E - 14 + 127) << 23);
    sum[g] = _mm512_reduce_add_epi32(tot);
  }
}

void quant_row(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) {
  if (q.q == RowQuant::kNVFP4) return quant_row_nvfp4(x, n, q, a, i);
  if (q.q == RowQuant::kNVFP4S16) return quant_row_nvfp4_s16(x, n, q, a, i);
  if (q.q == RowQuant::kS16 && a.group % 16 == 0 && a.group <= 128) return quant_row_s16(x, n, a, i);
  generic::quant_row(x, n, q, a, i);
}

namespace {
// exp on 16 lanes: k = rint(x log2 e), r = x - k ln 2 in two parts (Cody-Waite; |r| <= ln 2 / 2),
// exp(r) by its Taylor series to r^7 (the first term left out, r^8 / 8! < 5e-9, is below half an
// ulp), Horner with FMAs, then vscalefps (p * 2^k, overflow to inf and gradual underflow as IEEE).
// Lanes past the fp32 range are set afterwards: x > 88.73 -> inf (also x = inf, where r is NaN),
// x < -104 -> 0; NaN stays NaN. Error: a few ulps (CpuKernels.ActRowMatchesTheReference measures).
inline __m512 exp16(__m512 x) {
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kExpLn2Hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
  __m512 e = _mm512_scalef_ps(p, k);
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.73f), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.f), _CMP_LT_OQ), _mm512_setzero_ps());
  return e;
}
}  // namespace

void act_row(Activation act, const float* g, const float* u, int n, float* h) {
  if (act != Activation::kSiluMul && act != Activation::kSwigluOai) {
    for (int c = 0; c < n; ++c) h[c] = ref::apply_activation(act, g[c], u[c]);
    return;
  }
  const __m512 one = _mm512_set1_ps(1.f);
  for (int c0 = 0; c0 < n; c0 += 16) {
    const __mmask16 m = n - c0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - c0)) - 1);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + c0), uv = _mm512_maskz_loadu_ps(m, u + c0);
    __m512 v;
    if (act == Activation::kSiluMul) {  // (g / (1 + exp(-g))) * u
      const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
      v = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv);
    } else {  // gc = min(g, 7), uc = clamp(u, -7, 7): (uc + 1) * (gc * (1 / (1 + exp(-(gc * 1.702)))))
      // (min / max return their second operand when either is NaN: NaN stays NaN as in std::min)
      const __m512 gc = _mm512_min_ps(_mm512_set1_ps(7.f), gv);
      const __m512 uc = _mm512_max_ps(_mm512_set1_ps(-7.f), _mm512_min_ps(_mm512_set1_ps(7.f), uv));
      const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(gc, _mm512_set1_ps(1.702f))));
      const __m512 glu = _mm512_mul_ps(gc, _mm512_div_ps(one, _mm512_add_ps(one, e)));
      v = _mm512_mul_ps(_mm512_add_ps(uc, one), glu);
    }
    _mm512_mask_storeu_ps(h + c0, m, v);
  }
}

}  // namespace qmoe::cpu::avx512
