#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <omp.h>
// vpmaddwd throughput: 12 independent accumulators, inputs kept in registers, no stores in the loop.
__attribute__((noinline)) long loop(long n, int seed) {
  __m256i a[12], x[12];
  for (int i = 0; i < 12; ++i) { a[i] = _mm256_set1_epi32(i + seed); x[i] = _mm256_set1_epi16(short(i + 3)); }
  const __m256i b = _mm256_set1_epi16(-2);
  for (long it = 0; it < n; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(x[i], b));
    asm volatile("" : "+x"(x[0]), "+x"(x[1]), "+x"(x[2]), "+x"(x[3]));
  }
  __m256i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_epi32(s, a[i]);
  return _mm256_extract_epi32(s, 0);
}
__attribute__((noinline)) long chain(long n) {  // 1-cycle dependent adds: clock estimate
  long v = 1;
  for (long i = 0; i < n; ++i) { asm volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(v)); }
  return v;
}
int main() {
  const long n = 50000000;
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    long c = chain(n);
    auto t1 = std::chrono::steady_clock::now();
    double ghz = 4.0 * n / std::chrono::duration<double>(t1 - t0).count() * 1e-9;
    t0 = std::chrono::steady_clock::now();
    long v = loop(n / 4, r);
    t1 = std::chrono::steady_clock::now();
    double mps = 12.0 * (n / 4) / std::chrono::duration<double>(t1 - t0).count() * 1e-9;
    std::printf("clock ~%.2f GHz; vpmaddwd %.2f G/s per core = %.2f per cycle (%ld %ld)\n", ghz, mps, mps / ghz, c, v);
  }
}
