// Streaming-read microbenchmark for the fused M = 1 kernels (not built by CMake):
//   g++ -O3 -march=cooperlake -mavx512vbmi -fopenmp bench/cpu_stream_micro.cpp -o /tmp/stream_micro
//   OMP_NUM_THREADS=1 /tmp/stream_micro [MiB]   (and OMP_NUM_THREADS=2)
// Reads a huge-page buffer (cold: a second buffer is read between passes) with variants of the
// fused kernel's access pattern: plain 64-byte loads (the bench's read probe), software prefetch
// at several distances and hints, the pair-of-panels lockstep (two streams 64 KiB apart), with
// and without bf16 dot products. Prints GB/s per variant, best of 5 passes.
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static uint8_t* huge(size_t n) {
  void* p = std::aligned_alloc(2 << 20, n);
  madvise(p, n, MADV_HUGEPAGE);
  std::memset(p, 1, n);
  return static_cast<uint8_t*>(p);
}

static volatile float g_sinkf;
static volatile unsigned long long g_sink;

// plain read, 4 independent xor chains
template <int kHint, int kDist>
static void rd(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    if (kDist > 0)
      for (int l = 0; l < 256; l += 64) _mm_prefetch((const char*)p + i + l + kDist, (_mm_hint)kHint);
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  g_sink = g_sink + _mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
}

// the fused bf16 T = 1 kernel's pattern: blocks of `pair` bytes, two panels (halves) in lockstep,
// 4 lines of each per step; kDot: vdpbf16ps with a broadcast activation pair, 4 chains per panel
template <int kHint, int kDist, bool kDot, int kPair = 131072>
static void pairs(const uint8_t* p, size_t n, const uint32_t* act) {
  __m512 c[2][4];
  __m512i x[2][4];
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) c[h][i] = _mm512_setzero_ps(), x[h][i] = _mm512_setzero_si512();
  constexpr size_t half = kPair / 2;
  for (size_t b = 0; b < n; b += kPair) {
    const uint8_t* s[2] = {p + b, p + b + half};
    for (size_t o = 0, kp = 0; o < half; o += 256, kp += 4) {
      for (int h = 0; h < 2; ++h) {
        if (kDist > 0)
          for (int l = 0; l < 256; l += 64) _mm_prefetch((const char*)s[h] + o + l + kDist, (_mm_hint)kHint);
      }
      for (int i = 0; i < 4; ++i) {
        const __m512bh A = (__m512bh)_mm512_set1_epi32(act[(kp + i) & 1023]);
        for (int h = 0; h < 2; ++h) {
          const __m512i v = _mm512_load_si512(s[h] + o + 64 * i);
          if (kDot) c[h][i] = _mm512_dpbf16_ps(c[h][i], A, (__m512bh)v);
          else x[h][i] = _mm512_xor_si512(x[h][i], v);
        }
      }
    }
  }
  __m512 t = _mm512_setzero_ps();
  __m512i u = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) t = _mm512_add_ps(t, c[h][i]), u = _mm512_xor_si512(u, x[h][i]);
  g_sinkf = _mm512_reduce_add_ps(t);
  g_sink = g_sink + _mm512_reduce_add_epi64(u);
}

// one panel at a time, (kDot) 8 chains
template <int kHint, int kDist, bool kDot>
static void seq_dot(const uint8_t* p, size_t n, const uint32_t* act) {
  __m512 c[8];
  for (int i = 0; i < 8; ++i) c[i] = _mm512_setzero_ps();
  for (size_t o = 0, kp = 0; o < n; o += 512, kp += 8) {
    if (kDist > 0)
      for (int l = 0; l < 512; l += 64) _mm_prefetch((const char*)p + o + l + kDist, (_mm_hint)kHint);
    for (int i = 0; i < 8; ++i) {
      const __m512bh A = (__m512bh)_mm512_set1_epi32(act[(kp + i) & 1023]);
      c[i] = _mm512_dpbf16_ps(c[i], A, (__m512bh)_mm512_load_si512(p + o + 64 * i));
    }
  }
  __m512 t = _mm512_setzero_ps();
  for (int i = 0; i < 8; ++i) t = _mm512_add_ps(t, c[i]);
  g_sinkf = _mm512_reduce_add_ps(t);
}

// the fused int4 T = 1 kernel's work per 64-byte line (dec4x: 2 loads, 2 shifts, 4 vpermw,
// 4 vdpbf16ps), two panels in lockstep as `pairs`, kpf bytes of software prefetch (T1) ahead
template <int kHint, int kPair = 32768>
static void pairs_int4(const uint8_t* p, size_t n, const uint32_t* act, int kDist) {
  __m512 c[2][2];
  for (int h = 0; h < 2; ++h) c[h][0] = c[h][1] = _mm512_setzero_ps();
  const __m512i tbl = _mm512_set1_epi16(0x3f80);
  constexpr size_t half = kPair / 2;
  for (size_t b = 0; b < n; b += kPair) {
    const uint8_t* s[2] = {p + b, p + b + half};
    for (size_t o = 0, kp = 0; o < half; o += 64, kp += 4) {
      __m512i v[2][4];
      for (int h = 0; h < 2; ++h) {
        if (kDist > 0) _mm_prefetch((const char*)s[h] + o + kDist, (_mm_hint)kHint);
        const __m512i b0 = _mm512_load_si512(s[h] + o), b1 = _mm512_loadu_si512(s[h] + o + 1);
        v[h][0] = _mm512_permutexvar_epi16(b0, tbl);
        v[h][1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b0, 4), tbl);
        v[h][2] = _mm512_permutexvar_epi16(b1, tbl);
        v[h][3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b1, 4), tbl);
      }
      for (int i = 0; i < 4; ++i) {
        const __m512bh A = (__m512bh)_mm512_set1_epi32(act[(kp + i) & 1023]);
        for (int h = 0; h < 2; ++h) c[h][i & 1] = _mm512_dpbf16_ps(c[h][i & 1], A, (__m512bh)v[h][i]);
      }
    }
  }
  g_sinkf = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(c[0][0], c[0][1]), _mm512_add_ps(c[1][0], c[1][1])));
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const size_t n = mib << 20;
  uint8_t* buf = huge(n);
  uint8_t* flush = huge(n);
  alignas(64) static uint32_t act[1024];
  for (int i = 0; i < 1024; ++i) act[i] = 0x3f803f80u;
  const int nt = omp_get_max_threads();
  using Fn = std::function<void(const uint8_t*, size_t)>;
  struct V { const char* name; Fn f; };
  std::vector<V> vs = {
      {"read (probe)", rd<0, 0>},
      {"read pf T1 +2K", rd<_MM_HINT_T1, 2048>},
      {"read pf T1 +8K", rd<_MM_HINT_T1, 8192>},
      {"read pf T1 +16K", rd<_MM_HINT_T1, 16384>},
      {"read pf T0 +1K", rd<_MM_HINT_T0, 1024>},
      {"read pf T0 +4K", rd<_MM_HINT_T0, 4096>},
      {"read pf NTA +4K", rd<_MM_HINT_NTA, 4096>},
      {"pairs xor no pf", [&](const uint8_t* p, size_t m) { pairs<0, 0, false>(p, m, act); }},
      {"pairs xor pf T1 +8K", [&](const uint8_t* p, size_t m) { pairs<_MM_HINT_T1, 8192, false>(p, m, act); }},
      {"pairs dot no pf", [&](const uint8_t* p, size_t m) { pairs<0, 0, true>(p, m, act); }},
      {"pairs dot pf T1 +8K", [&](const uint8_t* p, size_t m) { pairs<_MM_HINT_T1, 8192, true>(p, m, act); }},
      {"pairs dot pf T1 +2K", [&](const uint8_t* p, size_t m) { pairs<_MM_HINT_T1, 2048, true>(p, m, act); }},
      {"pairs dot pf T0 +2K", [&](const uint8_t* p, size_t m) { pairs<_MM_HINT_T0, 2048, true>(p, m, act); }},
      {"int4 no pf", [&](const uint8_t* p, size_t m) { pairs_int4<0>(p, m, act, 0); }},
      {"int4 pf T1 +2K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T1>(p, m, act, 2048); }},
      {"int4 pf T1 +4K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T1>(p, m, act, 4096); }},
      {"int4 pf T1 +6K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T1>(p, m, act, 6144); }},
      {"int4 pf T1 +8K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T1>(p, m, act, 8192); }},
      {"int4 pf T1 +12K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T1>(p, m, act, 12288); }},
      {"int4 pf T0 +4K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T0>(p, m, act, 4096); }},
      {"int4 pf T0 +8K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_T0>(p, m, act, 8192); }},
      {"int4 pf NTA +4K", [&](const uint8_t* p, size_t m) { pairs_int4<_MM_HINT_NTA>(p, m, act, 4096); }},
      {"seq dot no pf", [&](const uint8_t* p, size_t m) { seq_dot<0, 0, true>(p, m, act); }},
      {"seq dot pf T1 +8K", [&](const uint8_t* p, size_t m) { seq_dot<_MM_HINT_T1, 8192, true>(p, m, act); }},
      {"seq dot pf T0 +2K", [&](const uint8_t* p, size_t m) { seq_dot<_MM_HINT_T0, 2048, true>(p, m, act); }},
  };
  const char* only = std::getenv("ONLY");
  for (int round = 0; round < 2; ++round)
    for (auto& v : vs) {
      if (only && !std::strstr(v.name, only)) continue;
      double best = 0;
      for (int r = 0; r < 5; ++r) {
        double t0 = 0, t1 = 0;
#pragma omp parallel
        {
          const int t = omp_get_thread_num();
          const size_t slice = n / size_t(nt) / 131072 * 131072;
          rd<0, 0>(flush + t * slice, slice);
#pragma omp barrier
#pragma omp master
          t0 = now();
          v.f(buf + t * slice, slice);
#pragma omp barrier
#pragma omp master
          t1 = now();
        }
        best = std::max(best, double(n / size_t(nt) / 131072 * 131072 * nt) / (t1 - t0) * 1e-9);
      }
      std::printf("%d thr  %-24s %6.1f GB/s\n", nt, v.name, best);
    }
}
