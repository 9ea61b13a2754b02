// cpu_probe.h: timing, threading and the portable fallbacks around the AVX-512 probe loops.
#include "cpu/cpu_probe.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "cpu/cpu_isa.h"
#include "cpu/cpu_pack.h"
#include "qmoe/error.h"

namespace qmoe::cpu {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

unsigned long long read_sum_portable(const void* p, size_t bytes) {
  const uint64_t* v = static_cast<const uint64_t*>(p);
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 4 <= bytes / 8; i += 4) a0 ^= v[i], a1 ^= v[i + 1], a2 ^= v[i + 2], a3 ^= v[i + 3];
  return a0 ^ a1 ^ a2 ^ a3;
}

unsigned long long read_slice(const uint8_t* p, size_t bytes) {
  if (isa_supported(Isa::kAvx512)) return avx512::read_sum(p, bytes);
  if (isa_supported(Isa::kAvx2)) return avx2::read_sum(p, bytes);
  return read_sum_portable(p, bytes);
}

// One buffer for bandwidth and flushing, touched once so its pages exist.
AlignedBytes& buffer(size_t bytes) {
  static AlignedBytes b;
  if (b.n < bytes) {
    b.alloc(bytes);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(bytes / 4096); ++i) std::memset(b.data() + size_t(i) * 4096, int(i & 0x7f), 4096);
  }
  return b;
}

volatile unsigned long long g_sink;

// Runs `body(thread)` on every OpenMP thread at once; returns wall seconds.
template <class F>
double timed_parallel(F body) {
  double t0 = 0, t1 = 0;
#pragma omp parallel
  {
#pragma omp barrier
#pragma omp master
    t0 = now_s();
    body(omp_get_thread_num(), omp_get_num_threads());
#pragma omp barrier
#pragma omp master
    t1 = now_s();
  }
  return t1 - t0;
}

}  // namespace

double measure_read_gbps(size_t bytes, int reps) {
  bytes = size_t(round_up(int64_t(bytes), 4096 * 64));
  AlignedBytes& b = buffer(bytes);
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    const double s = timed_parallel([&](int t, int nt) {
      const size_t slice = bytes / size_t(nt) / 256 * 256;
      g_sink = g_sink + read_slice(b.data() + size_t(t) * slice, slice);
    });
    gbps.push_back(double(bytes) / s * 1e-9);
  }
  // the best pass: a ceiling (on a shared machine, time slices given to other processes only
  // ever lower a pass, and a floor computed from a lowered pass would flatter the kernels)
  return *std::max_element(gbps.begin(), gbps.end());
}

void flush_caches(size_t bytes) {
  AlignedBytes& b = buffer(bytes);
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t slice = bytes / size_t(nt) / 256 * 256;
    g_sink = g_sink + read_slice(b.data() + size_t(t) * slice, slice);
  }
}

namespace {

// The best of three timed runs of `loop(iters)` on every thread at once: units per second x 1e-9.
double peak_of(double (*loop)(long)) {
  const long iters = 2000000;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    double units = 0;
    const double s = timed_parallel([&](int, int) {
      const double f = loop(iters);
#pragma omp atomic
      units += f;
    });
    best = std::max(best, units / s * 1e-9);
  }
  return best;
}

}  // namespace

// The peaks are those of the ISA whose kernels run (cpu_isa(), QMOE_CPU_ISA included): a forced
// avx2 path on an AVX-512 CPU is measured against the avx2 instructions' peak.
double measure_bf16_dot_gflops() {
  switch (cpu_isa()) {
    case Isa::kAvx512: return peak_of(avx512::bf16_dot_loop);
    case Isa::kAvx2: return peak_of(avx2::fma_loop);
    default: return 0;
  }
}

double measure_int8_dot_gops() {
  switch (cpu_isa()) {
    case Isa::kAvx512: return peak_of(avx512::int8_dot_loop);
    case Isa::kAvx2: return peak_of(avx2::madd16_loop);
    default: return 0;
  }
}

double measure_int16_dot_gops() {
  switch (cpu_isa()) {
    case Isa::kAvx512: return peak_of(avx512::int16_dot_loop);
    case Isa::kAvx2: return peak_of(avx2::madd16_loop);
    default: return 0;
  }
}

double measure_fma_gflops() {
  switch (cpu_isa()) {
    case Isa::kAvx512: return peak_of(avx512::fma_loop);
    case Isa::kAvx2: return peak_of(avx2::fma_loop);
    default: return 0;
  }
}

const char* bf16_dot_instruction() {
  return cpu_isa() == Isa::kAvx512 ? "vdpbf16ps" : cpu_isa() == Isa::kAvx2 ? "vfmadd231ps" : "-";
}
const char* int8_dot_instruction() {
  return cpu_isa() == Isa::kAvx512 ? "vpdpbusd" : cpu_isa() == Isa::kAvx2 ? "vpmaddwd" : "-";
}
const char* int16_dot_instruction() {
  return cpu_isa() == Isa::kAvx512 ? "vpdpwssd" : cpu_isa() == Isa::kAvx2 ? "vpmaddwd" : "-";
}

std::string cpu_description() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return str(model, ", ", omp_get_max_threads(), " threads, ISA ", isa_name(cpu_isa()));
}

}  // namespace qmoe::cpu
