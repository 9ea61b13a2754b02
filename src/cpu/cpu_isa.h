// Runtime ISA selection for the CPU backend. The kernels exist in three builds: baseline x86-64
// ("scalar": portable C++, whatever the compiler makes of it), AVX2+FMA+F16C, and AVX-512
// (F/BW/VL/DQ + VNNI + BF16 + VBMI). cpu_isa() is the detected best one, or the one forced by
// the environment variable QMOE_CPU_ISA=scalar|avx2|avx512 or by set_cpu_isa() (tests); forcing a
// path the CPU lacks throws kUnsupported.
#pragma once
#include <optional>
#include <string>

namespace qmoe::cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* isa_name(Isa isa);
std::optional<Isa> isa_from_name(const std::string& name);  // "scalar" | "avx2" | "avx512"

// The best ISA this CPU supports (cpuid + OS xsave state).
Isa detected_isa();
bool isa_supported(Isa isa);
// The ISA new layers use: set_cpu_isa() override, else $QMOE_CPU_ISA, else detected_isa().
Isa cpu_isa();
// Forces (or with nullopt clears) the ISA for layers created afterwards. Throws kUnsupported when
// this CPU cannot run `isa`.
void set_cpu_isa(std::optional<Isa> isa);

// Whether the AVX-512 kernels take bf16 activations as 16-bit block fixed point (Kernels::act16:
// vpdpwssd integer products) instead of exact bf16 (vdpbf16ps): $QMOE_CPU_ACT16=1 forces it (tests
// run those kernels on any CPU), =0 keeps bf16 everywhere (the layer reads that too), else on Intel
// CPUs, whose vdpbf16ps issues at a fraction of vpdpwssd's rate (the Xeon model 207 of the
// thirty-ninth session: 160 GFLOP/s bf16 dot against 864 GOP/s int8 dot on two cores; Zen 4 runs
// both at one 512-bit instruction per cycle and keeps the exact bf16 products).
bool prefer_int16_dot();

}  // namespace qmoe::cpu
