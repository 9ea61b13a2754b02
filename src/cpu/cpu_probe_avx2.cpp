// AVX2 loops of cpu_probe.h, for CPUs without AVX-512 (Zen 2 / 3, most client CPUs): a streaming
// read (32-byte loads, xor-reduced so they stay live) and register-resident loops of the
// instructions the avx2 kernels (cpu_kernels_avx2.cpp) spend their products on: vfmadd231ps (bf16
// codes and activations widened to fp32; 12 independent accumulators cover the latency on every
// AVX2 core) and vpmaddwd + vpaddd (int8 activations and act16 int16 activations on 16-bit lanes).
// One call per thread.
#include <immintrin.h>

#include "cpu/cpu_probe.h"

namespace qmoe::cpu::avx2 {

unsigned long long read_sum(const void* p, size_t bytes) {
  const __m256i* v = static_cast<const __m256i*>(p);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const size_t n = bytes / 32;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
  }
  a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) unsigned long long w[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), a0);
  return w[0] ^ w[1] ^ w[2] ^ w[3];
}

double fma_loop(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float w[8];
  _mm256_store_ps(w, s);
  volatile float sink = w[0] + w[7];
  (void)sink;
  return double(iters) * 12 * 8 * 2;  // instructions x lanes x 2 flops
}

// vpmaddwd on operands independent of the sums (the kernels' shape: the codes times the token's
// pair, added into a running int32 sum), the six operands made opaque once per iteration so that
// the products can be neither hoisted nor shared; six sums cover the add's latency; named variables,
// not arrays, so that all 13 stay in registers. (The first version chained each product on its own
// sum, 12 chains in an array, and the compiler spilled half of them to the stack inside the loop: it
// measured 164 GOP/s where the act16 kernel reached ~260 at qwen3-30b-a3b M = 512.)
double madd16_loop(long iters) {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2);
  __m256i a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5);
  __m256i x0 = _mm256_set1_epi16(3), x1 = _mm256_set1_epi16(4), x2 = _mm256_set1_epi16(5);
  __m256i x3 = _mm256_set1_epi16(6), x4 = _mm256_set1_epi16(7), x5 = _mm256_set1_epi16(8);
  const __m256i b = _mm256_set1_epi16(-2);
  for (long it = 0; it < iters; ++it) {
    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(x0, b));
    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(x1, b));
    a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(x2, b));
    a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(x3, b));
    a4 = _mm256_add_epi32(a4, _mm256_madd_epi16(x4, b));
    a5 = _mm256_add_epi32(a5, _mm256_madd_epi16(x5, b));
    asm volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5));
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)), _mm256_add_epi32(a4, a5));
  alignas(32) int w[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), s);
  volatile int sink = w[0] + w[7];
  (void)sink;
  return double(iters) * 6 * 16 * 2;  // vpmaddwd x 16 multiply-adds x 2 ops
}

}  // namespace qmoe::cpu::avx2
