// CPU feature detection (GCC/Clang __builtin_cpu_supports, which checks cpuid and the OS's
// xsave-enabled state) and the QMOE_CPU_ISA override.
#include "cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>

#include "qmoe/error.h"

namespace qmoe::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> isa_from_name(const std::string& name) {
  if (name == "scalar") return Isa::kScalar;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  return std::nullopt;
}

bool isa_supported(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
             __builtin_cpu_supports("bmi2");
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("avx512vbmi");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa detected_isa() {
  static const Isa best = isa_supported(Isa::kAvx512) ? Isa::kAvx512
                          : isa_supported(Isa::kAvx2) ? Isa::kAvx2
                                                      : Isa::kScalar;
  return best;
}

namespace {
std::atomic<int> g_forced{-1};
}

void set_cpu_isa(std::optional<Isa> isa) {
  if (isa && !isa_supported(*isa))
    unsupported("CPU ISA '", isa_name(*isa), "' was requested but this CPU does not support it (best: ",
                isa_name(detected_isa()), ")");
  g_forced.store(isa ? static_cast<int>(*isa) : -1);
}

bool prefer_int16_dot() {
  if (const char* env = std::getenv("QMOE_CPU_ACT16"); env && *env) return env[0] != '0';
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

Isa cpu_isa() {
  int f = g_forced.load();
  if (f >= 0) return static_cast<Isa>(f);
  if (const char* env = std::getenv("QMOE_CPU_ISA"); env && *env) {
    auto isa = isa_from_name(env);
    if (!isa) bad_input("QMOE_CPU_ISA='", env, "': expected scalar, avx2 or avx512");
    if (!isa_supported(*isa))
      unsupported("QMOE_CPU_ISA='", env, "' but this CPU does not support it (best: ", isa_name(detected_isa()), ")");
    return *isa;
  }
  return detected_isa();
}

}  // namespace qmoe::cpu
