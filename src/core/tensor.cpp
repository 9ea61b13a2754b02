// Tensor storage, shapes and dtype names.
#include "qmoe/tensor.h"

#include <limits>

namespace qmoe {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) bad_input("negative dimension in shape ", shape_str(s));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      bad_input("shape ", shape_str(s), " overflows 64-bit element count");
    n *= d;
  }
  return n;
}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), dtype_set_(true), shape_(std::move(shape)), numel_(shape_numel(shape_)), owns_(true) {
  size_t bytes = nbytes();
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[bytes ? bytes : 1]());
  data_ = buf.get();
  owner_ = std::shared_ptr<const void>(buf, buf.get());
}

Tensor::Tensor(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner)
    : dtype_(dtype), dtype_set_(true), shape_(std::move(shape)), numel_(shape_numel(shape_)),
      data_(data), owns_(false), owner_(std::move(owner)) {}

void* Tensor::raw_mut() {
  QMOE_CHECK(owns_, kInternal, "Tensor::raw_mut on a tensor that does not own its storage");
  return const_cast<void*>(data_);
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes()) memcpy(t.raw_mut(), data_, nbytes());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  QMOE_CHECK(shape_numel(shape) == numel_, kInternal, "reshape ", shape_str(shape_), " -> ",
             shape_str(shape), " changes the element count");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  QMOE_CHECK(dim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], kInternal,
             "slice0 [", begin, ", ", end, ") out of range for ", shape_str(shape_));
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.data_ = static_cast<const uint8_t*>(data_) + static_cast<size_t>(row * begin) * dtype_size(dtype_);
  return t;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF64: return "F64";
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
    case DType::kE8M0: return "F8_E8M0";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI16: return "I16";
    case DType::kU16: return "U16";
    case DType::kI32: return "I32";
    case DType::kU32: return "U32";
    case DType::kI64: return "I64";
    case DType::kU64: return "U64";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  static constexpr DType kAll[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                   DType::kF8E5M2, DType::kE8M0, DType::kI8, DType::kU8, DType::kI16,
                                   DType::kU16, DType::kI32, DType::kU32, DType::kI64, DType::kU64,
                                   DType::kBool};
  for (DType t : kAll)
    if (n == dtype_name(t)) return t;
  return std::nullopt;
}

}  // namespace qmoe
