#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <functional>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static uint8_t* huge(size_t n) { void* p = std::aligned_alloc(2 << 20, n); madvise(p, n, MADV_HUGEPAGE); std::memset(p, 1, n); return (uint8_t*)p; }
static volatile float g_sinkf; static volatile unsigned long long g_sink;
static void rd(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i)); a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128)); a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  g_sink = g_sink + _mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
}
// NP panels of `panel` bytes each in lockstep per job; jobs contiguous; pf = bytes ahead (T1) + T0 512
template <int NP>
static void int4(const uint8_t* p, size_t n, const uint32_t* act, size_t panel, size_t pf) {
  __m512 c[NP][2];
  for (int h = 0; h < NP; ++h) c[h][0] = c[h][1] = _mm512_setzero_ps();
  const __m512i tbl = _mm512_set1_epi16(0x3f80);
  const size_t job = panel * NP;
  for (size_t b = 0; b + job <= n; b += job) {
    const uint8_t* s[NP]; for (int h = 0; h < NP; ++h) s[h] = p + b + h * panel;
    for (size_t o = 0, kp = 0; o < panel; o += 64, kp += 4) {
      __m512i v[NP][4];
      for (int h = 0; h < NP; ++h) {
        _mm_prefetch((const char*)s[h] + o + pf, _MM_HINT_T1);
        _mm_prefetch((const char*)s[h] + o + 512, _MM_HINT_T0);
        const __m512i b0 = _mm512_load_si512(s[h] + o), b1 = _mm512_loadu_si512(s[h] + o + 1);
        v[h][0] = _mm512_permutexvar_epi16(b0, tbl); v[h][1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b0, 4), tbl);
        v[h][2] = _mm512_permutexvar_epi16(b1, tbl); v[h][3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b1, 4), tbl);
      }
      for (int i = 0; i < 4; ++i) {
        const __m512bh A = (__m512bh)_mm512_set1_epi32(act[(kp + i) & 1023]);
        for (int h = 0; h < NP; ++h) c[h][i & 1] = _mm512_dpbf16_ps(c[h][i & 1], A, (__m512bh)v[h][i]);
      }
    }
  }
  __m512 t = _mm512_setzero_ps(); for (int h = 0; h < NP; ++h) t = _mm512_add_ps(t, _mm512_add_ps(c[h][0], c[h][1]));
  g_sinkf = _mm512_reduce_add_ps(t);
}
int main(int argc, char** argv) {
  const size_t n = size_t(atoi(argc > 1 ? argv[1] : "128")) << 20;
  uint8_t* buf = huge(n + (1 << 20)); uint8_t* fl = huge(256 << 20);
  alignas(64) static uint32_t act[1024]; for (int i = 0; i < 1024; ++i) act[i] = 0x3f803f80u;
  const int nt = omp_get_max_threads();
  struct V { const char* name; std::function<void(const uint8_t*, size_t)> f; };
  std::vector<V> vs = {
    {"read", rd},
    {"int4 NP2 16K pf job", [&](const uint8_t* p, size_t m) { int4<2>(p, m, act, 16384, 32768); }},
    {"int4 NP2 16K pf 4K", [&](const uint8_t* p, size_t m) { int4<2>(p, m, act, 16384, 4096); }},
    {"int4 NP4 16K pf job", [&](const uint8_t* p, size_t m) { int4<4>(p, m, act, 16384, 65536); }},
    {"int4 NP4 16K pf 32K", [&](const uint8_t* p, size_t m) { int4<4>(p, m, act, 16384, 32768); }},
    {"int4 NP1 32K pf 8K", [&](const uint8_t* p, size_t m) { int4<1>(p, m, act, 32768, 8192); }},
  };
  for (int round = 0; round < 6; ++round) {
    printf("round %d:", round);
    for (auto& v : vs) {
      double best = 0;
      for (int rep = 0; rep < 3; ++rep) {
#pragma omp parallel
        { const int t = omp_get_thread_num(); const size_t sl = (256u << 20) / nt; g_sink = g_sink + 0; rd(fl + t * sl, sl); }
        double t0 = now();
#pragma omp parallel
        { const int t = omp_get_thread_num(); const size_t sl = n / nt / 65536 * 65536; v.f(buf + t * sl, sl); }
        best = std::max(best, n / (now() - t0) * 1e-9);
      }
      printf("  %s %.1f", v.name, best);
    }
    printf("\n"); fflush(stdout);
  }
}
