// Tensor: a dense, row-major, host-resident n-d array of one DType. It owns (or shares) its bytes
// through a shared_ptr, so a tensor can alias an mmap'ed checkpoint without copying.
// A default-constructed Tensor is "absent" (defined() == false): optional tensors use that.
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "qmoe/dtype.h"
#include "qmoe/error.h"

namespace qmoe {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[16, 512, 5120]"
int64_t shape_numel(const Shape& s);    // product; throws kBadInput on overflow / negative dims

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised storage.
  Tensor(DType dtype, Shape shape);
  // Wraps existing bytes; `owner` keeps them alive (may be null for caller-managed memory).
  Tensor(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner);

  bool defined() const { return dtype_set_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(d < 0 ? d + dim() : d); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  const void* raw() const { return data_; }
  // Mutable access; only valid for tensors that own their storage (created by Tensor(dtype, shape)).
  void* raw_mut();

  template <class T> const T* data() const { return static_cast<const T*>(data_); }
  template <class T> T* data_mut() { return static_cast<T*>(raw_mut()); }

  // A deep copy that owns its bytes.
  Tensor clone() const;
  // Same bytes, new shape with the same numel.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the leading dimension, sharing storage.
  Tensor slice0(int64_t begin, int64_t end) const;

 private:
  DType dtype_ = DType::kU8;
  bool dtype_set_ = false;
  Shape shape_;
  int64_t numel_ = 0;
  const void* data_ = nullptr;
  bool owns_ = false;
  std::shared_ptr<const void> owner_;
};

}  // namespace qmoe
