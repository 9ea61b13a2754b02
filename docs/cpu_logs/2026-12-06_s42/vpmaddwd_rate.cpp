#include <chrono>
#include <cstdio>
// vpmaddwd + vpaddd throughput on one core, written in asm so that the compiler can neither merge nor
// spill: 8 independent accumulators ymm0-7, operands ymm8-9, per iteration 8 vpmaddwd and 8 vpaddd.
__attribute__((noinline)) void loop(long n) {
  asm volatile(
      "vpxor %%ymm0, %%ymm0, %%ymm0\n vmovdqa %%ymm0, %%ymm1\n vmovdqa %%ymm0, %%ymm2\n vmovdqa %%ymm0, %%ymm3\n"
      "vmovdqa %%ymm0, %%ymm4\n vmovdqa %%ymm0, %%ymm5\n vmovdqa %%ymm0, %%ymm6\n vmovdqa %%ymm0, %%ymm7\n"
      "vpcmpeqw %%ymm8, %%ymm8, %%ymm8\n vpcmpeqw %%ymm9, %%ymm9, %%ymm9\n"
      "1:\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm10\n vpaddd %%ymm10, %%ymm0, %%ymm0\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm11\n vpaddd %%ymm11, %%ymm1, %%ymm1\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm12\n vpaddd %%ymm12, %%ymm2, %%ymm2\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm13\n vpaddd %%ymm13, %%ymm3, %%ymm3\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm14\n vpaddd %%ymm14, %%ymm4, %%ymm4\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm15\n vpaddd %%ymm15, %%ymm5, %%ymm5\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm10\n vpaddd %%ymm10, %%ymm6, %%ymm6\n"
      "vpmaddwd %%ymm8, %%ymm9, %%ymm11\n vpaddd %%ymm11, %%ymm7, %%ymm7\n"
      "dec %0\n jnz 1b\n"
      : "+r"(n)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "cc");
}
__attribute__((noinline)) long chain(long n) {  // dependent scalar adds, one per cycle: the clock
  long v = 1;
  for (long i = 0; i < n; ++i) asm volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(v));
  return v;
}
int main() {
  const long n = 50000000;
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    long c = chain(n);
    auto t1 = std::chrono::steady_clock::now();
    const double ghz = 4.0 * n / std::chrono::duration<double>(t1 - t0).count() * 1e-9;
    t0 = std::chrono::steady_clock::now();
    loop(n);
    t1 = std::chrono::steady_clock::now();
    const double g = 8.0 * n / std::chrono::duration<double>(t1 - t0).count() * 1e-9;
    std::printf("clock ~%.2f GHz; vpmaddwd %.2f G/s per core = %.2f per cycle (%ld)\n", ghz, g, g / ghz, c);
  }
}
