// Machine ceilings for `qmoe bench --backend cpu`, measured in the same run as the kernels:
// streaming read bandwidth (all OpenMP threads reading disjoint slices of a buffer larger than the
// last-level cache), and the dot-product peaks of the instructions the kernels of the selected ISA
// use (avx512: vdpbf16ps for bf16, vpdpbusd for int8, vpdpwssd for int16; avx2: vfmadd231ps, vpmaddwd; register-only
// loops, all threads). Also a cache flush for cold-weight timing. The SIMD loops live in
// cpu_probe_avx512.cpp / cpu_probe_avx2.cpp and run only when the CPU has them.
#pragma once
#include <cstddef>
#include <string>

namespace qmoe::cpu {

// GB/s (1e9 bytes per second), the best of `reps` passes over `bytes`.
double measure_read_gbps(size_t bytes = size_t(1) << 30, int reps = 5);
// GFLOP/s of the bf16 products of the kernels that run here (cpu_isa(); 2 flops per multiply-add):
// avx512 vdpbf16ps, avx2 vfmadd231ps (bf16 widened to fp32); 0 on the scalar path (no peak: the
// bench's floor is then the bandwidth term alone).
double measure_bf16_dot_gflops();
// GOP/s of the int8-activation products likewise (2 ops per multiply-add): avx512 vpdpbusd, avx2
// vpmaddwd + vpaddd; 0 on the scalar path.
double measure_int8_dot_gops();
// GOP/s of the 16-bit integer products of the act16 kernels ("/s16" layers: bf16 activations as
// 16-bit block fixed point): avx512 vpdpwssd (2 multiply-adds per 32-bit lane, half of vpdpbusd's
// 4), avx2 vpmaddwd + vpaddd (the int8 peak's loop: both kernels widen to 16-bit words there).
double measure_int16_dot_gops();
// GFLOP/s of fp32 FMAs (2 flops each; "/f32" layers: bf16 weights widened to fp32, fp32 activations):
// avx512 vfmadd231ps zmm, avx2 vfmadd231ps ymm; 0 on the scalar path.
double measure_fma_gflops();
// The instruction the measure_* functions time on this ISA ("-" if none).
const char* bf16_dot_instruction();
const char* int8_dot_instruction();
const char* int16_dot_instruction();
// Evicts the caches by reading a buffer of `bytes` (default: 4 x 64 MiB sized for large LLCs).
void flush_caches(size_t bytes = size_t(256) << 20);
// "AMD EPYC ..., 2 threads" from /proc/cpuinfo and OpenMP.
std::string cpu_description();

namespace avx512 {
unsigned long long read_sum(const void* p, size_t bytes);
double bf16_dot_loop(long iters);  // returns flops executed
double int8_dot_loop(long iters);  // returns ops executed
double int16_dot_loop(long iters);  // returns ops executed
double fma_loop(long iters);        // returns flops executed
}  // namespace avx512
namespace avx2 {
unsigned long long read_sum(const void* p, size_t bytes);
double fma_loop(long iters);     // returns flops executed
double madd16_loop(long iters);  // returns ops executed
}  // namespace avx2

}  // namespace qmoe::cpu
