// Machine ceilings for `qmoe bench --backend cpu`, measured in the same run as the kernels:
// streaming read bandwidth (all OpenMP threads reading disjoint slices of a buffer larger than the
// last-level cache), and the dot-product peaks of the instructions the kernels use (vdpbf16ps for
// bf16, vpdpbusd for int8; register-only loops, all threads). Also a cache flush for cold-weight
// timing. The AVX-512 loops live in cpu_probe_avx512.cpp and run only when the CPU has them.
#pragma once
#include <cstddef>
#include <string>

namespace qmoe::cpu {

// GB/s (1e9 bytes per second), the best of `reps` passes over `bytes`.
double measure_read_gbps(size_t bytes = size_t(1) << 30, int reps = 5);
// GFLOP/s of bf16 dot products (2 flops per multiply-add); 0 when the CPU lacks AVX512-BF16.
double measure_bf16_dot_gflops();
// GOP/s of int8 dot products (2 ops per multiply-add); 0 when the CPU lacks AVX512-VNNI.
double measure_int8_dot_gops();
// Evicts the caches by reading a buffer of `bytes` (default: 4 x 64 MiB sized for large LLCs).
void flush_caches(size_t bytes = size_t(256) << 20);
// "AMD EPYC ..., 2 threads" from /proc/cpuinfo and OpenMP.
std::string cpu_description();

namespace avx512 {
unsigned long long read_sum(const void* p, size_t bytes);
double bf16_dot_loop(long iters);  // returns flops executed
double int8_dot_loop(long iters);  // returns ops executed
}  // namespace avx512

}  // namespace qmoe::cpu
