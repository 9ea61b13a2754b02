// Microbenchmark: per-64-byte-block cost of 4-bit decode + dot at T = 1 (L1-resident data).
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
alignas(64) static uint8_t W[16384 + 128];
alignas(64) static int32_t A[4096];
static inline __m512 dp_bcst(__m512 acc, __m512i w, const int32_t* a) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
  return acc;
}
static inline __m512i dpw_bcst(__m512i acc, __m512i w, const int32_t* a) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
  return acc;
}
__attribute__((noinline)) float run_bf16(int reps, __m512i tbl) {
  __m512 p0 = _mm512_setzero_ps(), p1 = p0, q0 = p0, q1 = p0;
  for (int r = 0; r < reps; ++r)
    for (int b = 0; b < 16384; b += 128) {  // two panels' blocks per iteration (NP = 2)
      for (int h = 0; h < 2; ++h) {
        const uint8_t* blk = W + b + 64 * h;
        const __m512i b0 = _mm512_load_si512(blk), b1 = _mm512_loadu_si512(blk + 1);
        __m512i o0 = _mm512_permutexvar_epi16(b0, tbl), o1 = _mm512_permutexvar_epi16(_mm512_srli_epi16(b0, 4), tbl);
        __m512i o2 = _mm512_permutexvar_epi16(b1, tbl), o3 = _mm512_permutexvar_epi16(_mm512_srli_epi16(b1, 4), tbl);
        const int32_t* a = A + (b >> 5);
        if (h == 0) { p0 = dp_bcst(p0, o0, a); p1 = dp_bcst(p1, o1, a + 1); p0 = dp_bcst(p0, o2, a + 2); p1 = dp_bcst(p1, o3, a + 3); }
        else { q0 = dp_bcst(q0, o0, a); q1 = dp_bcst(q1, o1, a + 1); q0 = dp_bcst(q0, o2, a + 2); q1 = dp_bcst(q1, o3, a + 3); }
      }
    }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(p0, p1), _mm512_add_ps(q0, q1)));
}
__attribute__((noinline)) int run_s16(int reps) {
  __m512i p0 = _mm512_setzero_si512(), p1 = p0, q0 = p0, q1 = p0;
  const __m512i m = _mm512_set1_epi16(15);
  for (int r = 0; r < reps; ++r)
    for (int b = 0; b < 16384; b += 128) {
      for (int h = 0; h < 2; ++h) {
        const uint8_t* blk = W + b + 64 * h;
        const __m512i b0 = _mm512_load_si512(blk);
        __m512i o0 = _mm512_and_si512(b0, m), o1 = _mm512_and_si512(_mm512_srli_epi16(b0, 4), m);
        __m512i o2 = _mm512_and_si512(_mm512_srli_epi16(b0, 8), m), o3 = _mm512_srli_epi16(b0, 12);
        const int32_t* a = A + (b >> 5);
        if (h == 0) { p0 = dpw_bcst(p0, o0, a); p1 = dpw_bcst(p1, o1, a + 1); p0 = dpw_bcst(p0, o2, a + 2); p1 = dpw_bcst(p1, o3, a + 3); }
        else { q0 = dpw_bcst(q0, o0, a); q1 = dpw_bcst(q1, o1, a + 1); q0 = dpw_bcst(q0, o2, a + 2); q1 = dpw_bcst(q1, o3, a + 3); }
      }
    }
  return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(p0, p1), _mm512_add_epi32(q0, q1)));
}
// variant: u8 weights with vpdpbusd (s8 activation halves): 2 dots per 64 codes... per block of 128 nibbles -> 2 zmm bytes, x2 halves = 4 dots
static inline __m512i dpb_bcst(__m512i acc, __m512i w, const int32_t* a) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
  return acc;
}
__attribute__((noinline)) int run_u8(int reps) {
  __m512i p0 = _mm512_setzero_si512(), p1 = p0, q0 = p0, q1 = p0;
  const __m512i m = _mm512_set1_epi8(15);
  for (int r = 0; r < reps; ++r)
    for (int b = 0; b < 16384; b += 128) {
      for (int h = 0; h < 2; ++h) {
        const uint8_t* blk = W + b + 64 * h;
        const __m512i b0 = _mm512_load_si512(blk);
        __m512i lo = _mm512_and_si512(b0, m), hi = _mm512_and_si512(_mm512_srli_epi16(b0, 4), m);
        const int32_t* a = A + (b >> 5);
        if (h == 0) { p0 = dpb_bcst(p0, lo, a); p1 = dpb_bcst(p1, hi, a + 1); p0 = dpb_bcst(p0, lo, a + 2); p1 = dpb_bcst(p1, hi, a + 3); }
        else { q0 = dpb_bcst(q0, lo, a); q1 = dpb_bcst(q1, hi, a + 1); q0 = dpb_bcst(q0, lo, a + 2); q1 = dpb_bcst(q1, hi, a + 3); }
      }
    }
  return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(p0, p1), _mm512_add_epi32(q0, q1)));
}
int main() {
  for (int i = 0; i < 16384 + 128; ++i) W[i] = uint8_t(rand());
  for (int i = 0; i < 4096; ++i) A[i] = rand() & 0x3F003F00;
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) { float f = float((i & 15) - 8); uint32_t u; memcpy(&u, &f, 4); t[i] = u >> 16; }
  const __m512i tbl = _mm512_load_si512(t);
  const int reps = 20000;
  const double blocks = double(reps) * 16384 / 64;
  for (int k = 0; k < 3; ++k) {
    auto t0 = std::chrono::steady_clock::now(); volatile float r1 = run_bf16(reps, tbl);
    auto t1 = std::chrono::steady_clock::now(); volatile int r2 = run_s16(reps);
    auto t2 = std::chrono::steady_clock::now(); volatile int r3 = run_u8(reps);
    auto t3 = std::chrono::steady_clock::now();
    auto ns = [&](auto a, auto b) { return std::chrono::duration<double, std::nano>(b - a).count() / blocks; };
    std::printf("ns per 64B block: bf16 vpermw+vdpbf16ps %.3f (%.1f GB/s)  s16 and/shift+vpdpwssd %.3f (%.1f GB/s)  u8 vpdpbusd %.3f (%.1f GB/s)\n",
                ns(t0, t1), 64 / ns(t0, t1), ns(t1, t2), 64 / ns(t1, t2), ns(t2, t3), 64 / ns(t2, t3));
    (void)r1; (void)r2; (void)r3;
  }
}
