// AVX-512 loops of cpu_probe.h: a streaming read (64-byte loads, xor-reduced so they stay live)
// and register-resident dot-product loops with 16 independent accumulators (enough to cover the
// instruction latency on every AVX-512 core), one call per thread.
#include <immintrin.h>

// GCC 12 flags the _mm*_undefined operands inside the reduce intrinsics as uninitialized at -O3:
// a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cpu/cpu_probe.h"

namespace qmoe::cpu::avx512 {

unsigned long long read_sum(const void* p, size_t bytes) {
  const __m512i* v = static_cast<const __m512i*>(p);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const size_t n = bytes / 64;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(v + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(v + i + 1));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(v + i + 2));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(v + i + 3));
  }
  a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return static_cast<unsigned long long>(_mm512_reduce_add_epi64(a0));
}

// 16 independent chains acc[i] = step(acc[i]), iters rounds, the sums kept live; fp32 / int32 lanes.
template <class Step>
void ps_chains(long iters, Step step) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i));
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = step(acc[i]);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
}
template <class Step>
void epi32_chains(long iters, Step step) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = step(acc[i]);
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
}

double bf16_dot_loop(long iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3c003c00);
  ps_chains(iters, [&](__m512 c) { return _mm512_dpbf16_ps(c, a, b); });
  return double(iters) * 16 * 16 * 2 * 2;  // instructions x lanes x (2 multiply-adds) x 2 flops
}

double int8_dot_loop(long iters) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  epi32_chains(iters, [&](__m512i c) { return _mm512_dpbusd_epi32(c, a, b); });
  return double(iters) * 16 * 16 * 4 * 2;  // instructions x lanes x (4 multiply-adds) x 2 ops
}

double int16_dot_loop(long iters) {
  const __m512i a = _mm512_set1_epi16(3), b = _mm512_set1_epi16(-2);
  epi32_chains(iters, [&](__m512i c) { return _mm512_dpwssd_epi32(c, a, b); });
  return double(iters) * 16 * 16 * 2 * 2;  // instructions x lanes x (2 multiply-adds) x 2 ops
}

double fma_loop(long iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  ps_chains(iters, [&](__m512 c) { return _mm512_fmadd_ps(c, a, b); });
  return double(iters) * 16 * 16 * 2;  // instructions x lanes x 2 flops
}

}  // namespace qmoe::cpu::avx512
