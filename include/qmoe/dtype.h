// Element types qmoe reads, stores and computes with. Names follow safetensors where it has one.
// Sub-byte types are described by the packing, not by DType: e2m1 pairs are kU8, packed int4 is
// kU8 (two per byte, low nibble = even index) or kI32 (compressed-tensors / GPTQ / AWQ words).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace qmoe {

enum class DType : uint8_t {
  kF64, kF32, kF16, kBF16,
  kF8E4M3,   // float8_e4m3fn: no inf, NaN = S.1111.111, max 448
  kF8E5M2,   // float8_e5m2: IEEE-like, inf and NaN
  kE8M0,     // OCP MX scale: 2^(e-127), 0xFF = NaN (safetensors "F8_E8M0"; often stored as U8)
  kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kBool,
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: case DType::kU64: return 8;
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: case DType::kU16: return 2;
    default: return 1;
  }
}

// safetensors dtype string ("BF16", "F8_E4M3", "U8", ...). Never null.
const char* dtype_name(DType t);
// Inverse of dtype_name; also accepts "F8_E8M0". nullopt for unknown names.
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace qmoe
