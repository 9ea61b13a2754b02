// The avx2 ISA build (AVX2 + FMA + F16C flags from CMake): fused decode-and-dot kernels, four
// activation rows per pass (bf16 / int8 / fp8 / int4 / e2m1 codes with 16-bit or fp32 activations;
// kVnni8 / kVnni4 codes with int8 activations); the portable kernels (cpu_kernels_generic.inc) for
// the rest (g_idx, f16 / f32 codes, groups that end inside a decode unit). The portable kernels alone,
// decoding element by element, ran the avx2 path at 0-6% of the read bandwidth on the development
// machine (qwen3-30b-a3b int4-g32 M = 1: 62 ms against 0.9 ms on the AVX-512 kernels; docs/perf.md,
// fourteenth session). The fused kernels keep their own copies of the panel walk: helpers shared
// between them measured 1.1-1.5x slower (int4 M = 1, same session).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu/cpu_kernels.h"
#include "cpu/ref/reference.h"

namespace qmoe::cpu::avx2 {
namespace {

// Zero points of rows 8h .. 8h + 7 for K group zg as fp32 (symmetric: zsym).
inline __m256 zero8(const PackedProj& w, const uint8_t* zp, int zg, int h) {
  if (!w.has_zp) return _mm256_set1_ps(float(w.zsym));
  const __m128i z = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(zp + size_t(zg) * kPanelRows + 8 * h));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(z));
}

// e4m3 codes (one per dword, 0..255) as fp32, the values codec::e4m3_to_f32 gives: normal
// (a << 20) + (120 << 23) for the 7 magnitude bits a, subnormal m x 2^-9, S.1111.111 NaN, sign on top.
inline __m256 e4m3x8(__m256i b) {
  const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7F));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(a, 20), _mm256_set1_epi32(0x3C000000));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(a, _mm256_set1_epi32(7))), _mm256_set1_ps(0.001953125f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), a);  // exponent 0
  __m256i r = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), is_sub);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(a, _mm256_set1_epi32(0x7F)));
  return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
}

}  // namespace

#include "cpu/cpu_kernels_generic.inc"

namespace {

// Group scales of rows 8h .. 8h + 7 (sp: the group's 16 scales in the checkpoint's dtype) as fp32,
// the values generic::gscale gives.
inline __m256 scales8(ScaleKind k, const uint8_t* sp, int h) {
  switch (k) {
    case ScaleKind::kF32: return _mm256_loadu_ps(reinterpret_cast<const float*>(sp) + 8 * h);
    case ScaleKind::kBF16: {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sp + 16 * h));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    }
    case ScaleKind::kF16: return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp + 16 * h)));
    case ScaleKind::kE4M3:
      return e4m3x8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp + 8 * h))));
    case ScaleKind::kE8M0: {  // 2^(e - 127); e = 0 is 2^-127 (0x00400000)
      const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp + 8 * h)));
      const __m256i bits = _mm256_slli_epi32(e, 23);
      const __m256i zero = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
      return _mm256_castsi256_ps(_mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), zero));
    }
    default: {
      alignas(32) float f[8];
      for (int r = 0; r < 8; ++r) f[r] = generic::gscale(k, sp + size_t(8 * h + r) * scale_kind_bytes(k));
      return _mm256_load_ps(f);
    }
  }
}

// Software prefetch distance of the fused kernels for half `half` of job j, bytes past the line being
// read: where a job holds <= 128 KiB, the same line of that half's panel in the job the layer runs
// next (GemmJob::next_e / next_pair; without one, the panels that follow in memory: a thread's jobs
// run in contiguous runs), else 4 KiB ahead (the AVX-512 kernels' rule, cpu_kernels_avx512.cpp).
inline ptrdiff_t prefetch_ahead(const PackedProj& w, const GemmJob& j, int half, const uint8_t* pc) {
  const size_t job_bytes = 2 * w.panel_bytes;
  if (job_bytes > 131072) return 4096;
  return next_job_panel(w, j, half) - pc;
}

// One panel of a job (half 0 / 1 of its 32 rows): codes, zero points and group scales.
struct PanelPtrs {
  const uint8_t *pc, *zp, *gs;
};
inline PanelPtrs panel_ptrs(const PackedProj& w, const GemmJob& j, int half) {
  const int pn = 2 * j.pair + half;
  return {w.panel(j.e, pn), w.has_zp ? w.zp_panel(j.e, pn) : nullptr, w.group > 0 ? w.gscale_panel(j.e, pn) : nullptr};
}

// The HP panels a pass walks from panel half0 on, and their prefetch distances.
template <int HP>
inline void pass_panels(const PackedProj& w, const GemmJob& j, int half0, PanelPtrs (&pp)[HP], ptrdiff_t (&pf)[HP]) {
  for (int hp = 0; hp < HP; ++hp) {
    pp[hp] = panel_ptrs(w, j, half0 + hp);
    pf[hp] = prefetch_ahead(w, j, half0 + hp, pp[hp].pc);
  }
}

// Weight group g's scales of a panel's rows 0-7 / 8-15 (1 without group scales; 0 past the last
// group, where a segment holds only K padding, zero weights). e4m3_fp16: e4m3 scales (validated
// finite and > 0) as the fp16 value 2^-8 x theirs, the code in a word's high byte shifted down one.
// sb: scale_kind_bytes(w.gscale_kind), hoisted by the caller (an out-of-line call here, once per group,
// made the compiler save every live vector register around it). SK: the scale kind where the caller
// fixes it at compile time (scales8's switch then folds away), kAnyScale: w.gscale_kind's, a switch per
// group and half.
constexpr ScaleKind kAnyScale = static_cast<ScaleKind>(0xFF);
template <ScaleKind SK>
constexpr ScaleKind scale_kind(const PackedProj& w) { return SK == kAnyScale ? w.gscale_kind : SK; }
template <ScaleKind SK>
inline void segment_scales(const PackedProj& w, const uint8_t* gs, size_t sb, int g, bool e4m3_fp16, __m256 (&ws)[2]) {
  ws[0] = ws[1] = _mm256_set1_ps(1.f);
  if (!gs) return;
  if (g >= w.num_groups) {
    ws[0] = ws[1] = _mm256_setzero_ps();
  } else if (e4m3_fp16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gs + size_t(g) * kPanelRows));
    ws[0] = _mm256_cvtph_ps(_mm_srli_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), b), 1));
    ws[1] = _mm256_cvtph_ps(_mm_srli_epi16(_mm_unpackhi_epi8(_mm_setzero_si128(), b), 1));
  } else {
    const uint8_t* sp = gs + size_t(g) * kPanelRows * sb;
    for (int h = 0; h < 2; ++h) ws[h] = scales8(scale_kind<SK>(w), sp, h);
  }
}

// Fused decode-and-dot, T <= 4 activation rows per pass (as the AVX-512 kernels do for few rows):
// each kpair (2 k x 16 rows) is decoded into four registers and multiplied into every row's sums
// right away, instead of a whole fp32 panel written to the scratch and read back per row. Per segment (weight group, activation group or all of K) the
// sums are scaled once, as in the portable kernel; the summation order within a segment differs
// (numerics.md: fp32 order only). CK: the code kind; T: the activation rows.
// OFF (int4 codes whose zero point is constant over a segment): each code u enters as the fp32 value
// 128 + u, built by two bit operations (nibble into bits 16..19 of 0x43000000) instead of four
// (mask, convert, subtract z); the segment's sum loses (128 + z) x the token's sum over the segment:
// sum x (u - z) = sum x (128 + u) - (128 + z) sum x. Each product is exact (8-bit x 8-bit
// mantissas); the subtraction costs ~4 bits of the fp32 partial's 24 (128 + u against u - z), far
// below the bf16 output's rounding.
// OFF with fp8 codes (weights without NaN codes, PackedProj::fp8_nan): each e4m3 code becomes the fp16
// value 2^-8 x its own (sign kept, the 7 magnitude bits moved down one: exponent and mantissa line up
// with fp16's, subnormals included) and vcvtph2ps widens it, a kpair's 8 rows x 2 k at once; the
// lanes hold (row, k parity) pairs, the token's (x_k, x_k+1) broadcast as one 64-bit pair, and the
// segment's sums meet by hadd; 2^8 comes back with the scales (exact). 9 operations per 16 codes
// instead of 2 x e4m3x8's ~20.
template <CodeKind CK, int T, bool OFF, ScaleKind SK>
void fused(const GemmJob& j, int seg, float* C) {
  const PackedProj& w = *j.w;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  const ActBuf& a = *j.a;
  const int Kp = w.k_pad;
  constexpr int NC = T <= 2 ? 2 : 1;  // independent FMA chains per token and half (even / odd k)
  // the tokens' rows as fp32 (a broadcast then loads straight from memory)
  float* af = C + size_t(T) * kJobRows;
  for (int t = 0; t < T; ++t) {
    float* d = af + size_t(t) * Kp;
    if (a.fmt == ActFmt::kBF16) {
      const uint16_t* ap = a.row<uint16_t>(j.row0 + t);
      for (int k = 0; k < Kp; ++k) d[k] = generic::codec::bf16_to_f32(ap[k]);
    } else {
      std::memcpy(d, a.row<float>(j.row0 + t), sizeof(float) * size_t(Kp));
    }
  }
  // OFF: each token's sum over each segment (8 lanes, then across them: a fixed order), after the
  // rows. (A sequential scalar sum, one dependent add per column, measured slower than it saves.)
  constexpr bool kOffInt = OFF && CK == CodeKind::kInt4;
  const int nseg = (Kp + seg - 1) / seg;
  float* sx = af + size_t(T) * Kp;
  if constexpr (kOffInt) {
    for (int t = 0; t < T; ++t)
      for (int g = 0; g < nseg; ++g) {
        const float* d = af + size_t(t) * Kp;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        const int ke = std::min(Kp, (g + 1) * seg);  // segments and k_pad are multiples of 8
        int k = g * seg;
        for (; k + 16 <= ke; k += 16) {
          s0 = _mm256_add_ps(s0, _mm256_loadu_ps(d + k));
          s1 = _mm256_add_ps(s1, _mm256_loadu_ps(d + k + 8));
        }
        if (k < ke) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(d + k));
        s0 = _mm256_add_ps(s0, s1);
        const __m128 q = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
        const __m128 p2 = _mm_add_ps(q, _mm_movehl_ps(q, q));
        sx[t * nseg + g] = _mm_cvtss_f32(_mm_add_ss(p2, _mm_shuffle_ps(p2, p2, 1)));
      }
  }
  const __m256 mag = _mm256_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f);
  const __m256i m4 = _mm256_set1_epi32(0xF), s8 = _mm256_set1_epi32(8);
  const __m256i hi16 = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)), lo16 = _mm256_set1_epi32(0xFFFF);
  const __m256i m16 = _mm256_set1_epi32(0x000F0000), c43 = _mm256_set1_epi32(0x43000000);
  const int zgk = w.has_zp ? w.zp_group : Kp;
  for (int half = 0; half < 2; ++half) {
    const auto [pc, zp, gs] = panel_ptrs(w, j, half);
    const ptrdiff_t pf = prefetch_ahead(w, j, half, pc);  // one line per 64 bytes of codes
    __m256 out[T][2];
    for (int t = 0; t < T; ++t) out[t][0] = out[t][1] = _mm256_setzero_ps();
    __m256 z[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k0 = 0; k0 < Kp; k0 += seg) {
      const int k1 = std::min(Kp, k0 + seg);
      __m256 acc[T][2][NC];
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < 2; ++h)
          for (int c = 0; c < NC; ++c) acc[t][h][c] = _mm256_setzero_ps();
      // kpair k / 2 decoded into v[k % 2][half of the rows]: multiply into every token's sums
      const auto dot = [&](int k, const __m256 (&v)[2][2]) {
        for (int t = 0; t < T; ++t) {
          const __m256 b0 = _mm256_broadcast_ss(af + size_t(t) * Kp + k);
          const __m256 b1 = _mm256_broadcast_ss(af + size_t(t) * Kp + k + 1);
          for (int h = 0; h < 2; ++h) {
            acc[t][h][0] = _mm256_fmadd_ps(b0, v[0][h], acc[t][h][0]);
            acc[t][h][NC - 1] = _mm256_fmadd_ps(b1, v[1][h], acc[t][h][NC - 1]);
          }
        }
      };
      if constexpr (CK == CodeKind::kInt4 || CK == CodeKind::kFp4) {
        // kWord4: block b (8 k) as dwords, row 8h + r in dword r of half h: kpair qq's nibble in bits
        // [4 qq, + 4) of the low word (even k) and of the high word (odd k); immediate shifts
        if constexpr (kOffInt)  // the segment's zero points (constant over it)
          z[0] = zero8(w, zp, k0 / zgk, 0), z[1] = zero8(w, zp, k0 / zgk, 1);
        for (int b = k0 / 8; b < k1 / 8; ++b) {
          if (CK == CodeKind::kInt4 && !OFF && (8 * b) % zgk == 0)
            z[0] = zero8(w, zp, 8 * b / zgk, 0), z[1] = zero8(w, zp, 8 * b / zgk, 1);
          __m256i d[2];
          _mm_prefetch(reinterpret_cast<const char*>(pc + size_t(b) * 64 + pf), _MM_HINT_T0);
          for (int h = 0; h < 2; ++h) d[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + size_t(b) * 64 + 32 * h));
          // OFF: the nibble already at bits 16..19 (kpair qq's even-k nibble shifted left by
          // 16 - 4 qq, its odd-k nibble right by 4 qq): 128 + u
          const auto value_off = [&](__m256i u) {
            return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(u, m16), c43));
          };
          const auto value = [&](__m256i u, int h) {
            if constexpr (CK == CodeKind::kFp4) {
              // vpermps reads index bits 0..2 only, and the sign is bit 3 alone: no nibble masks
              const __m256 m = _mm256_permutevar8x32_ps(mag, u);
              return _mm256_xor_ps(m, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(u, s8), 28)));
            } else {
              return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(u, m4)), z[h]);
            }
          };
          const auto kpair = [&](auto qq_tag) {
            constexpr int qq = decltype(qq_tag)::value;
            __m256 v[2][2];
            for (int h = 0; h < 2; ++h) {
              if constexpr (kOffInt) {
                v[0][h] = value_off(_mm256_slli_epi32(d[h], 16 - 4 * qq));
                v[1][h] = value_off(qq == 0 ? d[h] : _mm256_srli_epi32(d[h], 4 * qq));
              } else {
                v[0][h] = value(_mm256_srli_epi32(d[h], 4 * qq), h);
                v[1][h] = value(_mm256_srli_epi32(d[h], 16 + 4 * qq), h);
              }
            }
            dot(8 * b + 2 * qq, v);
          };
          kpair(std::integral_constant<int, 0>{});
          kpair(std::integral_constant<int, 1>{});
          kpair(std::integral_constant<int, 2>{});
          kpair(std::integral_constant<int, 3>{});
        }
      } else if constexpr (CK == CodeKind::kFp8 && OFF) {
        // f[t][h][lh][c]: rows 8h + 4 lh .. + 3 of the half, two lanes per row (k parity); with NC == 2
        // even / odd kpairs on two chains
        __m256 f[T][2][2][NC];
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < 2; ++h)
            for (int lh = 0; lh < 2; ++lh)
              for (int c = 0; c < NC; ++c) f[t][h][lh][c] = _mm256_setzero_ps();
        const __m128i clr14 = _mm_set1_epi16(static_cast<short>(0xBFFF));
        const auto step = [&](int q, auto c_tag) {
          constexpr int c = decltype(c_tag)::value;
          if ((q & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(pc + size_t(q) * 32 + pf), _MM_HINT_T0);
          __m256 hv[2][2];  // [half][rows 0-3 / 4-7 of the half]
          for (int h = 0; h < 2; ++h) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + size_t(q) * 32 + 16 * h));
            // code in the high byte, then one arithmetic shift: sign at 15, magnitude at 7..14 with
            // bit 14 a copy of the sign (cleared): the fp16 bits of 2^-8 x the e4m3 value
            const __m128i lo = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), b), 1), clr14);
            const __m128i hi = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(_mm_setzero_si128(), b), 1), clr14);
            hv[h][0] = _mm256_cvtph_ps(lo);
            hv[h][1] = _mm256_cvtph_ps(hi);
          }
          for (int t = 0; t < T; ++t) {
            const __m256 xv = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(af + size_t(t) * Kp + 2 * q)));
            for (int h = 0; h < 2; ++h)
              for (int lh = 0; lh < 2; ++lh) f[t][h][lh][c] = _mm256_fmadd_ps(xv, hv[h][lh], f[t][h][lh][c]);
          }
        };
        int q = k0 / 2;
        if constexpr (NC == 2)  // even / odd kpairs on two chains (constant indices: registers)
          for (; q + 1 < k1 / 2; q += 2) {
            step(q, std::integral_constant<int, 0>{});
            step(q + 1, std::integral_constant<int, NC - 1>{});
          }
        for (; q < k1 / 2; ++q) step(q, std::integral_constant<int, 0>{});
        // (row, parity) lanes -> rows: hadd within 128-bit lanes gives rows 0 1 4 5 | 2 3 6 7
        const __m256i rows = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
        const __m256 two8 = _mm256_set1_ps(256.f);
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < 2; ++h) {
            __m256 lo = f[t][h][0][0], hi = f[t][h][1][0];
            if constexpr (NC == 2) lo = _mm256_add_ps(lo, f[t][h][0][1]), hi = _mm256_add_ps(hi, f[t][h][1][1]);
            acc[t][h][0] = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_hadd_ps(lo, hi), rows), two8);
          }
      } else {
        for (int q = k0 / 2; q < k1 / 2; ++q) {
          const int k = 2 * q;
          // 64 bytes per kpair (bf16) or per two (8-bit codes)
          if (CK == CodeKind::kBF16 || (q & 1) == 0)
            _mm_prefetch(reinterpret_cast<const char*>(pc + size_t(q) * (CK == CodeKind::kBF16 ? 64 : 32) + pf), _MM_HINT_T0);
          __m256 v[2][2];  // [k % 2][half of the rows]
          if constexpr (CK == CodeKind::kBF16) {
            for (int h = 0; h < 2; ++h) {
              const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + (size_t(q) * 32 + 16 * h) * 2));
              v[0][h] = _mm256_castsi256_ps(_mm256_slli_epi32(d, 16));
              v[1][h] = _mm256_castsi256_ps(_mm256_and_si256(d, hi16));
            }
          } else if constexpr (CK == CodeKind::kFp8) {
            for (int h = 0; h < 2; ++h) {
              const __m256i d = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + size_t(q) * 32 + 16 * h)));
              v[0][h] = e4m3x8(_mm256_and_si256(d, lo16));
              v[1][h] = e4m3x8(_mm256_srli_epi32(d, 16));
            }
          } else {  // kInt8
            if (!w.s8 && k % zgk == 0) z[0] = zero8(w, zp, k / zgk, 0), z[1] = zero8(w, zp, k / zgk, 1);
            for (int h = 0; h < 2; ++h) {
              const __m128i bb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + size_t(q) * 32 + 16 * h));
              if (w.s8) {
                const __m256i d = _mm256_cvtepi8_epi16(bb);
                v[0][h] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 16), 16));
                v[1][h] = _mm256_cvtepi32_ps(_mm256_srai_epi32(d, 16));
              } else {
                const __m256i d = _mm256_cvtepu8_epi16(bb);
                v[0][h] = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(d, lo16)), z[h]);
                v[1][h] = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d, 16)), z[h]);
              }
            }
          }
          dot(k, v);
        }
      }
      // the segment's scales: weight group (a segment past the last group holds only K padding,
      // zero weights: no scale to read) x the token's activation group scale
      const int g = k0 / seg;
      __m256 ws[2];
      segment_scales<SK>(w, gs, sb, g, false, ws);
      for (int t = 0; t < T; ++t) {
        const float tg = a.group_scale.empty() ? 1.f : a.group_scale[size_t(j.row0 + t) * a.num_groups + g];
        for (int h = 0; h < 2; ++h) {
          __m256 sum = acc[t][h][0];
          if constexpr (NC == 2) sum = _mm256_add_ps(sum, acc[t][h][1]);
          if constexpr (kOffInt)  // - (128 + z) x the token's sum over the segment
            sum = _mm256_fnmadd_ps(_mm256_add_ps(z[h], _mm256_set1_ps(128.f)), _mm256_set1_ps(sx[t * nseg + g]), sum);
          out[t][h] = _mm256_fmadd_ps(sum, _mm256_mul_ps(ws[h], _mm256_set1_ps(tg)), out[t][h]);
        }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(C + size_t(t) * kJobRows + half * kPanelRows + 8 * h, out[t][h]);
  }
}

// The same for int8 activations (INT8 W8A8, W4A8-int8: kVnni8 / kVnni4 codes): per 4 k the codes u
// of four rows (16 bytes) widened to 16 bits and multiplied with the token's four int8 values by
// `vpmaddwd` (pairs summed exactly in int32), summed in int32 over the segment; the zero point comes
// off per segment through the token's sum over it, sum a (u - z) = sum a u - z sum a, all exact in
// int32 as the contract's "part" (numerics.md "Products"), then float(part) x the segment's scales.
// One token (T = 1) takes both panels in one pass, as fused_s16 does.
template <CodeKind CK, int T, ScaleKind SK>
void fused_s8(const GemmJob& j, int seg, float* C) {
  constexpr int HP = T == 1 ? 2 : 1;  // panels per pass
  const PackedProj& w = *j.w;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  const ActBuf& a = *j.a;
  const int Kp = w.k_pad;
  const __m256i perm = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  const int8_t* ap[T];
  for (int t = 0; t < T; ++t) ap[t] = a.row<int8_t>(j.row0 + t);
  // four int8 activations a[k .. k + 3] as 16-bit words, repeated in every 64-bit lane
  const auto act4 = [](const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_broadcastq_epi64(_mm_cvtepi8_epi16(_mm_cvtsi32_si128(v)));
  };
  // the token's sum over [k0, k1): 16 columns per vpmaddwd against ones (a scalar add per column
  // was ~1 of every 3.5 operations of a one-token W8A8 pass), the rest (multiples of 4) one by one
  const auto act_sum = [](const int8_t* p, int k0, int k1) {
    __m256i s = _mm256_setzero_si256();
    int k = k0;
    for (; k + 16 <= k1; k += 16)
      s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k))), _mm256_set1_epi16(1)));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    int32_t sum = _mm_cvtsi128_si32(s4);
    for (; k < k1; ++k) sum += p[k];
    return sum;
  };
  // software prefetch as in fused(), kVnni8 codes only: qwen3-30b-a3b / llama4-scout W8A8 M = 1 / 8
  // 1.12-1.18x, W4A8 (kVnni4) 0.84-0.97x (AVX2 EPYC, fifteenth session)
  for (int half0 = 0; half0 < 2; half0 += HP) {
    PanelPtrs pp[HP];
    ptrdiff_t pf[HP];  // one line per 64 bytes of codes
    pass_panels(w, j, half0, pp, pf);
    __m256 out[T][2 * HP];
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 2 * HP; ++h) out[t][h] = _mm256_setzero_ps();
    for (int k0 = 0; k0 < Kp; k0 += seg) {
      const int k1 = std::min(Kp, k0 + seg);
      __m256i acc[T][4 * HP];  // rows 4i .. 4i + 3 of panel i / 4, two partial dwords per row
      int32_t asum[T];
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < 4 * HP; ++i) acc[t][i] = _mm256_setzero_si256();
        asum[t] = act_sum(ap[t], k0, k1);
      }
      if constexpr (CK == CodeKind::kVnni8) {  // byte (k / 4) * 64 + 4 r + k % 4
        for (int k = k0; k < k1; k += 4) {
          __m256i av[T];
          for (int t = 0; t < T; ++t) av[t] = act4(ap[t] + k);
          for (int hp = 0; hp < HP; ++hp) {
            const uint8_t* pc = pp[hp].pc + size_t(k / 4) * 64;
            _mm_prefetch(reinterpret_cast<const char*>(pc + pf[hp]), _MM_HINT_T0);
            __m256i wq[4];
            for (int i = 0; i < 4; ++i) wq[i] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + 16 * i)));
            for (int t = 0; t < T; ++t)
              for (int i = 0; i < 4; ++i) acc[t][4 * hp + i] = _mm256_add_epi32(acc[t][4 * hp + i], _mm256_madd_epi16(wq[i], av[t]));
          }
        }
      } else {  // kVnni4: byte (k / 8) * 64 + 4 r + k % 4, k % 8 < 4 in the low nibble
        for (int k = k0; k < k1; k += 8) {
          __m256i al[T], ah[T];
          for (int t = 0; t < T; ++t) al[t] = act4(ap[t] + k), ah[t] = act4(ap[t] + k + 4);
          for (int hp = 0; hp < HP; ++hp) {
            const uint8_t* pc = pp[hp].pc + size_t(k / 8) * 64;  // (a prefetch here as in kVnni8 measured 0.84-0.97x)
            __m256i wl[4], wh[4];
            for (int i = 0; i < 4; ++i) {
              const __m256i b16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + 16 * i)));
              wl[i] = _mm256_and_si256(b16, _mm256_set1_epi16(0x0F));
              wh[i] = _mm256_srli_epi16(b16, 4);
            }
            for (int t = 0; t < T; ++t)
              for (int i = 0; i < 4; ++i)
                acc[t][4 * hp + i] = _mm256_add_epi32(acc[t][4 * hp + i], _mm256_add_epi32(_mm256_madd_epi16(wl[i], al[t]), _mm256_madd_epi16(wh[i], ah[t])));
          }
        }
      }
      const int g = k0 / seg;
      for (int hp = 0; hp < HP; ++hp) {
        __m256 ws[2];
        segment_scales<SK>(w, pp[hp].gs, sb, g, false, ws);
        __m256i z[2];
        for (int h = 0; h < 2; ++h) {
          if (w.has_zp) {
            const __m128i zb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pp[hp].zp + size_t(k0 / w.zp_group) * kPanelRows + 8 * h));
            z[h] = _mm256_cvtepu8_epi32(zb);
          } else {
            z[h] = _mm256_set1_epi32(w.zsym);
          }
        }
        for (int t = 0; t < T; ++t) {
          const __m256i as = _mm256_set1_epi32(asum[t]);
          for (int h = 0; h < 2; ++h) {
            __m256i part = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(acc[t][4 * hp + 2 * h], acc[t][4 * hp + 2 * h + 1]), perm);
            part = _mm256_sub_epi32(part, _mm256_mullo_epi32(z[h], as));
            out[t][2 * hp + h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part), ws[h], out[t][2 * hp + h]);
          }
        }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 2 * HP; ++h) _mm256_storeu_ps(C + size_t(t) * kJobRows + (half0 + h / 2) * kPanelRows + 8 * (h % 2), out[t][h]);
  }
}

// 32 bytes of kWord4 codes (8 rows x 8 columns; word r * 2 + k % 2 holds kpair qq in bits 4 qq ..)
// as 16-bit words: v[qq], kpair qq's 8 rows x (k, k + 1); int4 u, e2m1 2 e2m1 + 12 (one vpshufb).
template <bool kFp4>
inline void word4_words(const uint8_t* c, __m256i (&v)[4]) {
  const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
  if constexpr (kFp4) {  // bytes hold kpairs (0, 1) and (2, 3): look both nibbles up, then split
    const __m256i tab = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                         12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m256i m0f0f = _mm256_set1_epi16(0x0F0F), m00ff = _mm256_set1_epi16(0x00FF);
    const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(d, m0f0f));
    const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(d, 4), m0f0f));
    v[0] = _mm256_and_si256(lo, m00ff);
    v[1] = _mm256_and_si256(hi, m00ff);
    v[2] = _mm256_srli_epi16(lo, 8);
    v[3] = _mm256_srli_epi16(hi, 8);
  } else {
    const __m256i m000f = _mm256_set1_epi16(0x000F);
    v[0] = _mm256_and_si256(d, m000f);
    v[1] = _mm256_and_si256(_mm256_srli_epi16(d, 4), m000f);
    v[2] = _mm256_and_si256(_mm256_srli_epi16(d, 8), m000f);
    v[3] = _mm256_srli_epi16(d, 12);
  }
}

// The same for bf16 activations taken as 16-bit block fixed point (ActFmt::kS16, RowQuant::kS16:
// int16 codes q, a power-of-two factor per block of B = a.group columns, the block's sum of q) with
// int4 / e2m1 (kWord4) and int8 (kPair) codes: the codes are widened to 16-bit words in registers
// and `vpmaddwd` multiplies a word pair (row, k), (row, k + 1) with the token's (q_k, q_k+1) into
// one int32 lane per row, exactly; per block the int32 sums lose the zero point (int codes u:
// sum q (u - z) = sum q u - z sum q) or the e2m1 offset (codes enter as 2 e2m1 + 12, one
// `vpshufb` from the nibble: sum q 2 e2m1 = sum q v - 12 sum q), and float(part) x (weight scale x
// block factor) adds into the fp32 sums. Per 16 int4 codes and one token: 1.5 decode operations, a
// multiply-add and an add (the fp32 kernel above: 6 operations and 2 FMAs); e2m1 2.25 + 2 (10 + 2).
// Where the block's exponents span <= 7 the codes are the bf16 values exactly (docs/numerics.md
// "Products"). e4m3 block scales (NVFP4, validated finite and > 0) as the fp16 value 2^-8 x theirs.
// One token (T = 1) takes both 16-row panels of the job in one pass over K: the token's four
// activation pairs per 8 columns are broadcast once for 32 rows, and the per-block bookkeeping runs
// once per 32 rows (four int32 sums in registers; with more tokens the sums fill them, one panel per
// pass).
template <CodeKind CK, int T, ScaleKind SK>
void fused_s16(const GemmJob& j, float* C) {
  constexpr int HP = T == 1 ? 2 : 1;  // panels per pass
  constexpr int NH = 2 * HP;          // 8-row vectors per pass
  const PackedProj& w = *j.w;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  const ActBuf& a = *j.a;
  const int Kp = w.k_pad, B = a.group;
  const int seg = w.group > 0 ? w.group : Kp;  // multiple of B (act16), or all of K
  const generic::S16Rows<T> rows(j);
  const auto& xq = rows.q;
  const auto& xs = rows.scale;
  const auto& xsum = rows.sum;
  // the token's (q_k, q_k+1) in every dword
  const auto pair = [](const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  };
  constexpr bool kFp4 = CK == CodeKind::kFp4;
  const bool e4m3_fp16 = scale_kind<SK>(w) == ScaleKind::kE4M3;
  // e2m1 values doubled (v = 2 e2m1 + 12 holds 2 e2m1); e4m3 scales as 2^-8 x theirs
  const float cf = (kFp4 ? 0.5f : 1.f) * (e4m3_fp16 ? 256.f : 1.f);
  const int zgk = w.has_zp ? w.zp_group : Kp;
  const bool row_z = !kFp4 && w.has_zp;
  const int zc = kFp4 ? 12 : (CK == CodeKind::kInt8 && w.s8) ? 0 : w.zsym;  // signed int8: the value itself
  for (int half0 = 0; half0 < 2; half0 += HP) {
    PanelPtrs pp[HP];
    ptrdiff_t pf[HP];  // one line per 64 bytes of codes
    pass_panels(w, j, half0, pp, pf);
    __m256 out[T][NH];
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) out[t][h] = _mm256_setzero_ps();
    int blk = 0;  // kb / B (divisions by run-time values cost ~10-40 cycles each: counters)
    for (int k0 = 0, g = 0; k0 < Kp; k0 += seg, ++g) {
      const int k1 = std::min(Kp, k0 + seg);
      __m256 ws[NH];
      for (int hp = 0; hp < HP; ++hp) {
        __m256 w2[2];
        segment_scales<SK>(w, pp[hp].gs, sb, g, e4m3_fp16, w2);
        ws[2 * hp] = w2[0], ws[2 * hp + 1] = w2[1];
      }
      for (int kb = k0; kb < k1; kb += B, ++blk) {
        const int kb1 = std::min(k1, kb + B);
        __m256i acc[T][NH];
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < NH; ++h) acc[t][h] = _mm256_setzero_si256();
        const auto madd4 = [](const __m256i (&v)[4], const __m256i (&x)[4], __m256i& acc) {
          const __m256i s01 = _mm256_add_epi32(_mm256_madd_epi16(v[0], x[0]), _mm256_madd_epi16(v[1], x[1]));
          const __m256i s23 = _mm256_add_epi32(_mm256_madd_epi16(v[2], x[2]), _mm256_madd_epi16(v[3], x[3]));
          acc = _mm256_add_epi32(acc, _mm256_add_epi32(s01, s23));
        };
        if constexpr (CK == CodeKind::kInt8) {  // kPair: kpair q of rows 8h .. 8h + 7 in bytes 32 q + 16 h
          // four kpairs (8 columns, 128 bytes) per step: blocks and K's last one are multiples of 8
          // columns (two kpairs per step: int8 warm one-token 0.94x, forty-third session)
          const auto codes = [&](const uint8_t* c, __m256i (&v)[4]) {  // 4 kpairs of 8 rows as words
            for (int i = 0; i < 4; ++i) {
              const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 32 * i));
              v[i] = w.s8 ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
            }
          };
          for (int q = kb / 2; q < kb1 / 2; q += 4) {
            if constexpr (HP == 2) {  // one token: its pairs once for both panels
              const int16_t* xt = xq[0] + 2 * q;
              const __m256i x[4] = {pair(xt), pair(xt + 2), pair(xt + 4), pair(xt + 6)};
              for (int hp = 0; hp < HP; ++hp) {
                const uint8_t* pc = pp[hp].pc + size_t(q) * 32;
                for (int l = 0; l < 2; ++l) _mm_prefetch(reinterpret_cast<const char*>(pc + 64 * l + pf[hp]), _MM_HINT_T0);
                for (int h = 0; h < 2; ++h) {
                  __m256i v[4];
                  codes(pc + 16 * h, v);
                  madd4(v, x, acc[0][2 * hp + h]);
                }
              }
            } else {  // both 8-row vectors' codes, then each token's pairs (all tokens' pairs at once spilled: 0.86x at four)
              const uint8_t* pc = pp[0].pc + size_t(q) * 32;
              for (int l = 0; l < 2; ++l) _mm_prefetch(reinterpret_cast<const char*>(pc + 64 * l + pf[0]), _MM_HINT_T0);
              __m256i v[2][4];
              for (int h = 0; h < 2; ++h) codes(pc + 16 * h, v[h]);
              for (int t = 0; t < T; ++t) {
                const int16_t* xt = xq[t] + 2 * q;
                const __m256i x[4] = {pair(xt), pair(xt + 2), pair(xt + 4), pair(xt + 6)};
                for (int h = 0; h < 2; ++h) madd4(v[h], x, acc[t][h]);
              }
            }
          }
        } else {  // kWord4: 8 columns per 64 bytes; word r * 2 + k % 2 of a half holds kpair qq in bits 4 qq ..
          for (int b = kb / 8; b < kb1 / 8; ++b) {
            if constexpr (HP == 2) {  // one token: its pairs once, each 8-row vector decoded and used in turn
              const __m256i x[4] = {pair(xq[0] + 8 * b), pair(xq[0] + 8 * b + 2), pair(xq[0] + 8 * b + 4), pair(xq[0] + 8 * b + 6)};
              for (int hp = 0; hp < HP; ++hp) {
                const uint8_t* pc = pp[hp].pc + size_t(b) * 64;
                _mm_prefetch(reinterpret_cast<const char*>(pc + pf[hp]), _MM_HINT_T0);
                for (int h = 0; h < 2; ++h) {
                  __m256i v[4];
                  word4_words<kFp4>(pc + 32 * h, v);
                  madd4(v, x, acc[0][2 * hp + h]);
                }
              }
            } else {  // both 8-row vectors decoded, then each token's pairs (4 registers at a time)
              const uint8_t* pc = pp[0].pc + size_t(b) * 64;
              _mm_prefetch(reinterpret_cast<const char*>(pc + pf[0]), _MM_HINT_T0);
              __m256i v[2][4];
              for (int h = 0; h < 2; ++h) word4_words<kFp4>(pc + 32 * h, v[h]);
              for (int t = 0; t < T; ++t) {
                const int16_t* xt = xq[t] + 8 * b;
                const __m256i x[4] = {pair(xt), pair(xt + 2), pair(xt + 4), pair(xt + 6)};
                for (int h = 0; h < 2; ++h) madd4(v[h], x, acc[t][h]);
              }
            }
          }
        }
        // the block's zero point (constant over it: act16) or e2m1 offset, times the token's sum of q
        __m256i z[NH];
        if (row_z)
          for (int h = 0; h < NH; ++h)
            z[h] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pp[h / 2].zp + size_t(kb / zgk) * kPanelRows + 8 * (h % 2))));
        for (int t = 0; t < T; ++t) {
          const int32_t sq = xsum[t][blk];
          const __m256 f = _mm256_set1_ps(xs[t][blk] * cf);
          for (int h = 0; h < NH; ++h) {
            const __m256i part = row_z ? _mm256_sub_epi32(acc[t][h], _mm256_mullo_epi32(z[h], _mm256_set1_epi32(sq)))
                                       : _mm256_sub_epi32(acc[t][h], _mm256_set1_epi32(zc * sq));
            out[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part), _mm256_mul_ps(ws[h], f), out[t][h]);
          }
        }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) _mm256_storeu_ps(C + size_t(t) * kJobRows + (half0 + h / 2) * kPanelRows + 8 * (h % 2), out[t][h]);
  }
}

// f.template operator()<SK>() with the weights' group scale kind as SK where it is one of the kinds
// code kind CK's checkpoints use (int codes: bf16 / fp16 / fp32; fp8: fp32 blocks; e2m1: e4m3 / e8m0),
// else (and without group scales) kAnyScale: the kernels' segment_scales<SK> then have no switch per
// group, which cost int4-g32 at one token 1.27x and e2m1 1.22-1.29x (warm, one thread, Zen 3;
// docs/perf.md, forty-second session).
template <ScaleKind... Ks, class F>
void with_scale_kind_in(ScaleKind k, F& f) {
  if (!((k == Ks && (f.template operator()<Ks>(), true)) || ...)) f.template operator()<kAnyScale>();
}
template <CodeKind CK, class F>
void with_scale_kind(const PackedProj& w, F&& f) {
  const ScaleKind k = w.group > 0 ? w.gscale_kind : kAnyScale;
  if constexpr (CK == CodeKind::kFp4) with_scale_kind_in<ScaleKind::kE4M3, ScaleKind::kE8M0>(k, f);
  else if constexpr (CK == CodeKind::kFp8) with_scale_kind_in<ScaleKind::kF32>(k, f);
  else if constexpr (CK == CodeKind::kBF16) f.template operator()<kAnyScale>();
  else with_scale_kind_in<ScaleKind::kBF16, ScaleKind::kF16, ScaleKind::kF32>(k, f);
}

template <CodeKind CK>
void fused_s16_t(const GemmJob& j, float* C) {
  with_scale_kind<CK>(*j.w, [&]<ScaleKind SK>() {
    switch (j.nrows) {
      case 1: fused_s16<CK, 1, SK>(j, C); break;
      case 2: fused_s16<CK, 2, SK>(j, C); break;
      case 3: fused_s16<CK, 3, SK>(j, C); break;
      default: fused_s16<CK, 4, SK>(j, C); break;
    }
  });
}

template <CodeKind CK>
void fused_s8_t(const GemmJob& j, int seg, float* C) {
  with_scale_kind<CK>(*j.w, [&]<ScaleKind SK>() {
    switch (j.nrows) {
      case 1: fused_s8<CK, 1, SK>(j, seg, C); break;
      case 2: fused_s8<CK, 2, SK>(j, seg, C); break;
      case 3: fused_s8<CK, 3, SK>(j, seg, C); break;
      default: fused_s8<CK, 4, SK>(j, seg, C); break;
    }
  });
}

template <CodeKind CK, bool OFF = false>
void fused_t(const GemmJob& j, int seg, float* C) {
  with_scale_kind<CK>(*j.w, [&]<ScaleKind SK>() {
    switch (j.nrows) {
      case 1: fused<CK, 1, OFF, SK>(j, seg, C); break;
      case 2: fused<CK, 2, OFF, SK>(j, seg, C); break;
      case 3: fused<CK, 3, OFF, SK>(j, seg, C); break;
      default: fused<CK, 4, OFF, SK>(j, seg, C); break;
    }
  });
}

// ---- act16 tile: jobs of more than kS16Pass (int8: kS16Pass8) tokens (the AVX-512 s16_tile's plan) --
// The fused passes above decode every 64-byte block again per pass of four tokens, and at four tokens
// their sums, decoded codes and pairs overflow the 16 registers (e2m1 / int4 at M = 64, warm: ~180
// stack accesses in the kernel, ~60% of the vpmaddwd rate). Here, per K chunk of kChunk columns, both
// panels' codes are widened once into an L1 tile of signed words u - z (the zero point or the e2m1
// offset 12 subtracted at the decode, so a block's int32 sum is the fused kernels' sum q u - z sum q,
// the same integer), tile[2 kp + hh] = kpair kp's rows 8 hh .. 8 hh + 7; the weight scales are stored
// times cf (a power of two: ws cf xs = ws (xs cf), one rounding of the same real product), and blocks
// of up to kS16TB tokens run over the tile: two tile loads feed 2 TB vpmaddwd, the flush is cvt, mul
// and fma in the fused kernels' order, so both give the same bits.
constexpr int kS16Pass = 4;  // jobs of up to this many tokens take the fused passes (4-bit codes)
// int8 codes (kPair) take passes of four up to kFewRows tokens: their decode is one widening per
// vector, so decoding a block again per pass costs less than the tile's stores, reloads and
// short token blocks. Warm, one thread, 8 experts top-8 (T = M), H = 512, I = 1024, three
// alternations: T = 5 / 6 / 8 / 12 1.25 / 1.21 / 1.23 / 1.10x against the tile; T = 16 about even,
// T = 24 the tile 1.04x (fiftieth session, docs/cpu_logs/2026-12-07_s50).
constexpr int kS16Pass8 = kFewRows;
constexpr int kS16TB = 5;    // tokens per tile block (s16_block)
constexpr int kChunk = 256;  // K per decoded tile (16 KB for two panels)

// One activation block of the tile microkernel: TB tokens' int32 sums of one panel (acc[t][hh]: rows
// 8 hh .. 8 hh + 7) over tile kpairs [kp0, kp1), kp1 > kp0; x: token 0's codes at kpair 0, rows lda
// apart. Written as inline asm: GCC 12.2 compiled the intrinsics loop by loading every token's
// pair first and then spilling half the sums to the stack each kpair (TB = 6: 97 stack accesses, the
// tile path 1.2-1.4x slower than the fused passes), and a compiler barrier per token kept them in
// memory. Per kpair: two tile loads, then per token a pair broadcast, two vpmaddwd and two vpaddd:
// 2 TB sums in registers GCC picks, the tile vectors, pair and product in ymm12-15 (an asm statement
// takes <= 30 operands, a sum in and out counts twice: TB <= 5).
#define QMOE_S16_TOK(i, addr)                                                                          \
  "vpbroadcastd " addr ", %%ymm14\n\t"                                                                  \
  "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"                                                              \
  "vpaddd %%ymm15, %[a" #i "0], %[a" #i "0]\n\t"                                                        \
  "vpmaddwd %%ymm13, %%ymm14, %%ymm14\n\t"                                                              \
  "vpaddd %%ymm14, %[a" #i "1], %[a" #i "1]\n\t"
#define QMOE_S16_ACC(i) [a##i##0] "+x"(acc[i][0]), [a##i##1] "+x"(acc[i][1])
#define QMOE_S16_LOOP(toks, ...)                                                                        \
  asm("1:\n\t"                                                                                          \
      "vmovdqa (%[w]), %%ymm12\n\t"                                                                     \
      "vmovdqa 32(%[w]), %%ymm13\n\t" toks                                                              \
      "add $64, %[w]\n\t"                                                                               \
      "add $4, %[x0]\n\t"                                                                               \
      "cmp %[we], %[w]\n\t"                                                                             \
      "jb 1b\n\t"                                                                                       \
      : __VA_ARGS__, [w] "+r"(wp), [x0] "+r"(x0)                                                        \
      : [ld] "r"(ld), [ld3] "r"(3 * ld), [we] "r"(we)                                                   \
      : "cc", "memory", "xmm12", "xmm13", "xmm14", "xmm15")
#define QMOE_T0 QMOE_S16_TOK(0, "(%[x0])")
#define QMOE_T1 QMOE_S16_TOK(1, "(%[x0],%[ld])")
#define QMOE_T2 QMOE_S16_TOK(2, "(%[x0],%[ld],2)")
#define QMOE_T3 QMOE_S16_TOK(3, "(%[x0],%[ld3])")
#define QMOE_T4 QMOE_S16_TOK(4, "(%[x0],%[ld],4)")
template <int TB>
inline void s16_block(const __m256i* tile, int kp0, int kp1, const int16_t* x, size_t lda, __m256i (&acc)[TB][2]) {
  static_assert(TB >= 1 && TB <= 5);
  const __m256i* wp = tile + 2 * kp0;
  const __m256i* we = tile + 2 * kp1;
  const int16_t* x0 = x + 2 * kp0;
  const size_t ld = lda * sizeof(int16_t);
  if constexpr (TB == 1) QMOE_S16_LOOP(QMOE_T0, QMOE_S16_ACC(0));
  if constexpr (TB == 2) QMOE_S16_LOOP(QMOE_T0 QMOE_T1, QMOE_S16_ACC(0), QMOE_S16_ACC(1));
  if constexpr (TB == 3) QMOE_S16_LOOP(QMOE_T0 QMOE_T1 QMOE_T2, QMOE_S16_ACC(0), QMOE_S16_ACC(1), QMOE_S16_ACC(2));
  if constexpr (TB == 4)
    QMOE_S16_LOOP(QMOE_T0 QMOE_T1 QMOE_T2 QMOE_T3, QMOE_S16_ACC(0), QMOE_S16_ACC(1), QMOE_S16_ACC(2), QMOE_S16_ACC(3));
  if constexpr (TB == 5)
    QMOE_S16_LOOP(QMOE_T0 QMOE_T1 QMOE_T2 QMOE_T3 QMOE_T4, QMOE_S16_ACC(0), QMOE_S16_ACC(1), QMOE_S16_ACC(2),
                  QMOE_S16_ACC(3), QMOE_S16_ACC(4));
}
#undef QMOE_T0
#undef QMOE_T1
#undef QMOE_T2
#undef QMOE_T3
#undef QMOE_T4
#undef QMOE_S16_LOOP
#undef QMOE_S16_ACC
#undef QMOE_S16_TOK

// Tile block: tokens t0 .. t0 + TB - 1 of one panel over the chunk's nkp kpairs in activation blocks
// of bkp kpairs (the last one shorter where K is not a multiple of the block). x: token t0's codes at
// the chunk's first column, xs its block factors from the chunk's first block (rows lda / ldg apart);
// ws: the panel's scales x cf, two vectors per block; C: the tokens' sums (kJobRows apart). pf
// (non-null): pfl lines from pf + 64 pfl bi prefetched into L2 per block bi (the next chunk's codes).
template <int TB>
void s16_ukr(const __m256i* tile, int nkp, int bkp, const int16_t* x, size_t lda, const float* xs, size_t ldg,
             const __m256* ws, float* C, const char* pf, int pfl) {
  for (int bi = 0, kp0 = 0; kp0 < nkp; ++bi, kp0 += bkp) {
    if (pf)
      for (int i = 0; i < pfl; ++i) _mm_prefetch(pf + (size_t(bi) * pfl + i) * 64, _MM_HINT_T1);
    __m256i acc[TB][2];
    for (int t = 0; t < TB; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
    s16_block<TB>(tile, kp0, std::min(nkp, kp0 + bkp), x, lda, acc);
    for (int t = 0; t < TB; ++t) {
      float* c = C + t * kJobRows;
      const __m256 f = _mm256_set1_ps(xs[t * ldg + bi]);
      for (int hh = 0; hh < 2; ++hh)
        _mm256_store_ps(c + 8 * hh, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t][hh]), _mm256_mul_ps(ws[2 * bi + hh], f),
                                                    _mm256_load_ps(c + 8 * hh)));
    }
  }
}

template <CodeKind CK, ScaleKind SK>
void s16_tile(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  const int T = j.nrows, Kp = w.k_pad, B = a.group;
  const int seg = w.group > 0 ? w.group : Kp;
  const size_t sb = scale_kind_bytes(w.gscale_kind);
  constexpr bool kFp4 = CK == CodeKind::kFp4;
  const bool e4m3_fp16 = scale_kind<SK>(w) == ScaleKind::kE4M3;
  const __m256 cf = _mm256_set1_ps((kFp4 ? 0.5f : 1.f) * (e4m3_fp16 ? 256.f : 1.f));
  const bool row_z = !kFp4 && w.has_zp;
  const int zc = kFp4 ? 12 : (CK == CodeKind::kInt8 && w.s8) ? 0 : w.zsym;
  const int zgk = w.has_zp ? w.zp_group : Kp;
  const int nbm = kChunk / B, bkp = B / 2;
  float* C = j.scratch;                                                   // [T][32]
  __m256i* tile = reinterpret_cast<__m256i*>(C + size_t(T) * kJobRows);  // [2][kChunk / 2][2]
  __m256* ws = reinterpret_cast<__m256*>(tile + 2 * kChunk);              // [2][nbm][2]
  std::memset(C, 0, size_t(T) * kJobRows * 4);
  PanelPtrs pp[2];
  for (int h = 0; h < 2; ++h) pp[h] = panel_ptrs(w, j, h);
  const size_t bpk = CK == CodeKind::kInt8 ? 32 : 16;  // code bytes per kpair and panel
  // the next chunk's code lines spread over the first token block's activation blocks, its scales and
  // zero points asked for right after this chunk's (the AVX-512 tile path's prefetch, measured there)
  const int nb = (std::min(kChunk, Kp) + B - 1) / B;
  const int lines = kChunk / 2 * int(bpk) / 64, pfl = (lines + nb - 1) / nb;
  const char* pfc[2];
  for (int k0 = 0; k0 < Kp; k0 += kChunk) {
    const int kc = std::min(kChunk, Kp - k0), k1 = k0 + kChunk;
    for (int h = 0; h < 2; ++h) {
      __m256i* dst = tile + h * kChunk;
      for (int c = 0; c < kc; c += 8) {  // zero points per 8 columns: zp groups are multiples of 8
        __m256i zw[2];  // the rows' zero points as words, both words of a row's pair
        for (int hh = 0; hh < 2; ++hh) {
          if (row_z) {
            const __m256i d = _mm256_cvtepu8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pp[h].zp + size_t((k0 + c) / zgk) * kPanelRows + 8 * hh)));
            zw[hh] = _mm256_or_si256(d, _mm256_slli_epi32(d, 16));
          } else {
            zw[hh] = _mm256_set1_epi16(int16_t(zc));
          }
        }
        __m256i* v = dst + c;  // kpairs (k0 + c) / 2 .. + 3, two vectors each
        if constexpr (CK == CodeKind::kInt8) {
          for (int i = 0; i < 4; ++i)
            for (int hh = 0; hh < 2; ++hh) {
              const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pp[h].pc + (size_t(k0 + c) / 2 + i) * 32 + 16 * hh));
              v[2 * i + hh] = _mm256_sub_epi16(w.s8 ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b), zw[hh]);
            }
        } else {
          for (int hh = 0; hh < 2; ++hh) {
            __m256i u[4];
            word4_words<kFp4>(pp[h].pc + size_t(k0 + c) / 8 * 64 + 32 * hh, u);
            for (int i = 0; i < 4; ++i) v[2 * i + hh] = _mm256_sub_epi16(u[i], zw[hh]);
          }
        }
      }
      for (int bi = 0; bi * B < kc; ++bi) {
        __m256 w2[2];
        segment_scales<SK>(w, pp[h].gs, sb, (k0 + bi * B) / seg, e4m3_fp16, w2);
        for (int hh = 0; hh < 2; ++hh) ws[(h * nbm + bi) * 2 + hh] = _mm256_mul_ps(w2[hh], cf);
      }
      // the next chunk's codes, scales and zero points (or the next job's first) into L2
      const bool last = k1 >= Kp;
      const int ne = last && j.next_e >= 0 ? j.next_e : j.e;
      const int np = last ? (j.next_e >= 0 ? 2 * j.next_pair : 2 * j.pair + 2) + h : 2 * j.pair + h;
      const int kn = last ? 0 : k1;
      pfc[h] = reinterpret_cast<const char*>(w.panel(ne, np) + size_t(kn) / 2 * bpk);
      if (pp[h].gs) {
        const char* g = reinterpret_cast<const char*>(w.gscale_panel(ne, np) + size_t(kn / seg) * kPanelRows * sb);
        for (size_t o = 0; o < size_t(kChunk / seg + 1) * kPanelRows * sb; o += 64) _mm_prefetch(g + o, _MM_HINT_T1);
      }
      if (row_z) _mm_prefetch(reinterpret_cast<const char*>(w.zp_panel(ne, np) + size_t(kn / zgk) * kPanelRows), _MM_HINT_T1);
    }
    const int16_t* x0 = a.row<int16_t>(j.row0) + k0;
    const float* xs0 = a.group_scale.data() + size_t(j.row0) * a.num_groups + k0 / B;
    generic::for_token_blocks<kS16TB>(T, [&](int t0, auto tb) {
      for (int h = 0; h < 2; ++h)
        s16_ukr<decltype(tb)::value>(tile + h * kChunk, kc / 2, bkp, x0 + size_t(t0) * a.ld, size_t(a.ld),
                                     xs0 + size_t(t0) * a.num_groups, size_t(a.num_groups), ws + h * nbm * 2,
                                     C + size_t(t0) * kJobRows + h * kPanelRows, t0 == 0 ? pfc[h] : nullptr, pfl);
    });
  }
  generic::finish(j, C);
}

// The fused kernel where it applies (bf16 / int8 / fp8 / int4 / e2m1 codes, no g_idx, 16-bit / fp32
// activations, segments and zero-point groups in whole kpairs / 8-column blocks).
bool fused_s8_gemm(const GemmJob& j);
bool fused_s16_gemm(const GemmJob& j);

bool fused_gemm(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  if (a.fmt == ActFmt::kS8) return fused_s8_gemm(j);
  if (a.fmt == ActFmt::kS16) return fused_s16_gemm(j);
  // any row count, in passes of four rows that decode the weights again: against the portable kernel
  // (the panel decoded once, then one FMA chain per row) 2.3-2.5x at 32 / 128 rows per job
  // (mixtral-8x7b M = 128 / 512, fourteenth session)
  if (j.nrows < 1 || !w.gidx.empty() || (a.fmt != ActFmt::kBF16 && a.fmt != ActFmt::kF32)) return false;
  const int seg = w.group > 0 ? w.group : (a.group > 0 && !a.group_scale.empty()) ? a.group : w.k_pad;
  const bool word4 = w.code == CodeKind::kInt4 || w.code == CodeKind::kFp4;
  const int unit = word4 ? 8 : 2;  // k-columns decoded together
  if (seg % unit != 0 || (w.has_zp && (w.zp_group <= 0 || w.zp_group % unit != 0))) return false;
  if (w.code != CodeKind::kBF16 && w.code != CodeKind::kInt8 && w.code != CodeKind::kFp8 && !word4) return false;
  float* C = j.scratch;  // [T][32], then the tokens' fp32 rows (<= 4 x k_pad floats of the scratch)
  generic::in_passes(j, [&](const GemmJob& s) {
    switch (w.code) {
      case CodeKind::kBF16: fused_t<CodeKind::kBF16>(s, seg, C); break;
      case CodeKind::kInt8: fused_t<CodeKind::kInt8>(s, seg, C); break;
      case CodeKind::kFp8:  // fp16 decode where no code is NaN
        if (!w.fp8_nan) fused_t<CodeKind::kFp8, true>(s, seg, C);
        else fused_t<CodeKind::kFp8>(s, seg, C);
        break;
      case CodeKind::kInt4:  // 128 + u operands where the zero point is constant over each segment
        if (!w.has_zp || w.zp_group % seg == 0) fused_t<CodeKind::kInt4, true>(s, seg, C);
        else fused_t<CodeKind::kInt4>(s, seg, C);
        break;
      default: fused_t<CodeKind::kFp4>(s, seg, C); break;
    }
  });
  return true;
}

// int8 activations: the kVnni8 / kVnni4 codes, segments in whole 4- / 8-column groups, zero points
// constant over a segment, no activation group scales (the int8 quantizer has none).
bool fused_s8_gemm(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  if (j.nrows < 1 || !w.gidx.empty() || !a.group_scale.empty()) return false;
  if (w.code != CodeKind::kVnni8 && w.code != CodeKind::kVnni4) return false;
  const int seg = w.group > 0 ? w.group : w.k_pad;
  const int unit = w.code == CodeKind::kVnni8 ? 4 : 8;
  if (seg % unit != 0 || (w.has_zp && (w.zp_group <= 0 || w.zp_group % seg != 0))) return false;
  generic::in_passes(j, [&](const GemmJob& s) {
    if (w.code == CodeKind::kVnni8) fused_s8_t<CodeKind::kVnni8>(s, seg, j.scratch);
    else fused_s8_t<CodeKind::kVnni4>(s, seg, j.scratch);
  });
  return true;
}

// 16-bit block fixed-point activations: the codes and blocks act16 accepted.
bool fused_s16_gemm(const GemmJob& j) {
  const PackedProj& w = *j.w;
  const ActBuf& a = *j.a;
  if (j.nrows < 1 || a.group <= 0 || act16(w) != a.group) return false;
  if (j.nrows > (w.code == CodeKind::kInt8 ? kS16Pass8 : kS16Pass) && kChunk % a.group == 0) {
    const auto tiled = [&]<CodeKind CK>() { with_scale_kind<CK>(w, [&]<ScaleKind SK>() { s16_tile<CK, SK>(j); }); };
    switch (w.code) {
      case CodeKind::kInt4: tiled.template operator()<CodeKind::kInt4>(); break;
      case CodeKind::kFp4: tiled.template operator()<CodeKind::kFp4>(); break;
      default: tiled.template operator()<CodeKind::kInt8>(); break;
    }
    return true;
  }
  generic::in_passes<kS16Pass>(j, [&](const GemmJob& s) {
    switch (w.code) {
      case CodeKind::kInt4: fused_s16_t<CodeKind::kInt4>(s, j.scratch); break;
      case CodeKind::kFp4: fused_s16_t<CodeKind::kFp4>(s, j.scratch); break;
      default: fused_s16_t<CodeKind::kInt8>(s, j.scratch); break;
    }
  });
  return true;
}

// RowQuant::kS16, 8 columns at a time (bit-identical to generic::quant_row): the block's largest
// magnitude as the max of the |x| bit patterns (finite iff below 0x7F800000), q by vcvtps2dq (RNE),
// packed to words with saturation (never reached: |q| <= 32640 for bf16 values).
void quant_s16(const float* x, int n, ActBuf& a, int i) {
  int16_t* d = a.row<int16_t>(i);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const int B = a.group;  // 16 or 32, and a.ld a multiple of it
  for (int g = 0; g < a.num_groups; ++g) {
    const int k0 = g * B, k1 = k0 + B;
    __m256 v[4];  // B <= 32 columns
    __m256i mx = _mm256_setzero_si256();
    for (int c = 0; c < (k1 - k0) / 8; ++c) {
      const int k = k0 + 8 * c, left = n - k;
      if (left >= 8) {
        v[c] = _mm256_loadu_ps(x + k);
      } else if (left > 0) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        v[c] = _mm256_maskload_ps(x + k, m);
      } else {
        v[c] = _mm256_setzero_ps();
      }
      mx = _mm256_max_epi32(mx, _mm256_and_si256(_mm256_castps_si256(v[c]), abs_mask));
    }
    __m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4E));
    m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xB1));
    const uint32_t amax_bits = uint32_t(_mm_cvtsi128_si32(m4));
    const bool finite = amax_bits < 0x7F800000u;
    const int E = std::max(int(amax_bits >> 23) - 127, -112);
    const __m256 mul = _mm256_castsi256_ps(_mm256_set1_epi32((14 - E + 127) << 23));
    __m256i sum = _mm256_setzero_si256();
    for (int c = 0; c < (k1 - k0) / 8; c += 2) {  // 16 columns per step
      __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[c], mul));
      __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[c + 1], mul));
      if (!finite) q0 = q1 = _mm256_setzero_si256();
      sum = _mm256_add_epi32(sum, _mm256_add_epi32(q0, q1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k0 + 8 * c), _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8));
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    a.group_scale[size_t(i) * a.num_groups + g] = finite ? generic::f32_of(uint32_t(E - 14 + 127) << 23) : std::nanf("");
    a.group_sum[size_t(i) * a.num_groups + g] = _mm_cvtsi128_si32(s4);
  }
}

// RowQuant::kNVFP4S16, 16 columns per block as two vectors (bit-identical to generic::quant_row for
// finite values): the block scale in scalar code as there; x * r, the clamp and the e2m1 rounding
// ladder (ties to the even code, as codec::e2m1_round) on 8 lanes; q = 2 e2m1 with c's sign (vpsignd).
void quant_nvfp4_s16(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) {
  const float G = q.static_scale, inv_g = 1.f / G;
  int16_t* d = a.row<int16_t>(i);
  const __m256 lim = _mm256_set1_ps(6.f), nlim = _mm256_set1_ps(-6.f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int g = 0; g < a.num_groups; ++g) {
    const int k0 = 16 * g;
    __m256 v[2];
    for (int h = 0; h < 2; ++h) {
      const int left = n - (k0 + 8 * h);
      v[h] = left >= 8 ? _mm256_loadu_ps(x + k0 + 8 * h)
             : left > 0 ? _mm256_maskload_ps(x + k0 + 8 * h, _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane))
                        : _mm256_setzero_ps();
    }
    const __m256 m8 = _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float vmax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    const float sc = k0 < n ? generic::e4m3_round_sat(G * (vmax * (1 / 6.f))) : 0.f;
    const float r = sc == 0.f ? 0.f : 1.f / (sc * inv_g);
    __m256i qv[2];
    for (int h = 0; h < 2; ++h) {
      const __m256 c = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[h], _mm256_set1_ps(r)), nlim), lim);
      const __m256 ab = _mm256_and_ps(c, abs_mask);
      __m256 e = _mm256_setzero_ps();  // twice the e2m1 magnitude
      e = _mm256_blendv_ps(e, _mm256_set1_ps(1.f), _mm256_cmp_ps(ab, _mm256_set1_ps(0.25f), _CMP_GT_OQ));
      e = _mm256_blendv_ps(e, _mm256_set1_ps(2.f), _mm256_cmp_ps(ab, _mm256_set1_ps(0.75f), _CMP_GE_OQ));
      e = _mm256_blendv_ps(e, _mm256_set1_ps(3.f), _mm256_cmp_ps(ab, _mm256_set1_ps(1.25f), _CMP_GT_OQ));
      e = _mm256_blendv_ps(e, _mm256_set1_ps(4.f), _mm256_cmp_ps(ab, _mm256_set1_ps(1.75f), _CMP_GE_OQ));
      e = _mm256_blendv_ps(e, _mm256_set1_ps(6.f), _mm256_cmp_ps(ab, _mm256_set1_ps(2.5f), _CMP_GT_OQ));
      e = _mm256_blendv_ps(e, _mm256_set1_ps(8.f), _mm256_cmp_ps(ab, _mm256_set1_ps(3.5f), _CMP_GE_OQ));
      e = _mm256_blendv_ps(e, _mm256_set1_ps(12.f), _mm256_cmp_ps(ab, _mm256_set1_ps(5.f), _CMP_GT_OQ));
      qv[h] = _mm256_sign_epi32(_mm256_cvttps_epi32(e), _mm256_castps_si256(c));  // -0.0 and 0 give 0 either way
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k0), _mm256_permute4x64_epi64(_mm256_packs_epi32(qv[0], qv[1]), 0xD8));
    __m256i s8 = _mm256_add_epi32(qv[0], qv[1]);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    a.group_scale[size_t(i) * a.num_groups + g] = 0.5f * sc;
    a.group_sum[size_t(i) * a.num_groups + g] = _mm_cvtsi128_si32(s4);
  }
}

}  // namespace

int act16(const PackedProj& w) { return act16_block(w); }

void gemm(const GemmJob& j) {
  if (!fused_gemm(j)) generic::gemm(j);
}
namespace {
// exp on 8 lanes, as the AVX-512 exp16 (cpu_kernels_avx512.cpp) but without vscalefps: 2^k applied
// as two factors 2^k1 * 2^k2 (k1 = k >> 1, each a normal fp32 built from its exponent bits), so the
// product rounds once where it underflows; lanes past the fp32 range set afterwards, NaN kept.
inline __m256 exp8(__m256 x) {
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kExpLn2Hi), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTaylor[i]));
  // |k| <= 151 for the x kept below: k1, k2 in [-76, 76]
  const __m256i ki = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(k, _mm256_set1_ps(151.f)), _mm256_set1_ps(-151.f)));
  const __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
  __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(88.73f), _CMP_GT_OQ));
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-104.f), _CMP_LT_OQ));
  return e;
}
}  // namespace

// GEMM1's activation on 8 lanes (Kernels::act_row; the AVX-512 act_row's expressions).
void act_row(Activation act, const float* g, const float* u, int n, float* h) {
  if (act != Activation::kSiluMul && act != Activation::kSwigluOai) {
    for (int c = 0; c < n; ++c) h[c] = ref::apply_activation(act, g[c], u[c]);
    return;
  }
  const __m256 one = _mm256_set1_ps(1.f);
  const auto f = [&](__m256 gv, __m256 uv) {
    if (act == Activation::kSiluMul) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
      return _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv);
    }
    // min / max return their second operand when either is NaN: NaN stays NaN
    const __m256 gc = _mm256_min_ps(_mm256_set1_ps(7.f), gv);
    const __m256 uc = _mm256_max_ps(_mm256_set1_ps(-7.f), _mm256_min_ps(_mm256_set1_ps(7.f), uv));
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(gc, _mm256_set1_ps(1.702f))));
    const __m256 glu = _mm256_mul_ps(gc, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    return _mm256_mul_ps(_mm256_add_ps(uc, one), glu);
  };
  // whole vectors straight from the rows (a run-length memcpy per operand and vector through stack
  // buffers took ~7% of a warm one-token layer's kernel time, forty-second session); the tail through them
  int c0 = 0;
  for (; c0 + 8 <= n; c0 += 8) _mm256_storeu_ps(h + c0, f(_mm256_loadu_ps(g + c0), _mm256_loadu_ps(u + c0)));
  if (c0 < n) {
    const int len = n - c0;
    alignas(32) float gb[8] = {}, ub[8] = {}, hb[8];
    std::memcpy(gb, g + c0, size_t(len) * 4);
    std::memcpy(ub, u + c0, size_t(len) * 4);
    _mm256_store_ps(hb, f(_mm256_load_ps(gb), _mm256_load_ps(ub)));
    std::memcpy(h + c0, hb, size_t(len) * 4);
  }
}

void quant_row(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i) {
  if (q.q == RowQuant::kS16 && (a.group == 16 || a.group == 32) && a.ld % a.group == 0) return quant_s16(x, n, a, i);
  if (q.q == RowQuant::kNVFP4S16 && a.group == 16 && a.ld % 16 == 0) return quant_nvfp4_s16(x, n, q, a, i);
  generic::quant_row(x, n, q, a, i);
}
}  // namespace qmoe::cpu::avx2
