// Test helpers for model directories written by `qmoe gen` (src/models/gen.h): a scratch directory,
// generation, and editing a checkpoint's safetensors (rename, replace, drop, reinterpret a
// tensor's dtype / shape) to build corrupted inputs from a valid one.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/codecs.h"
#include "models/gen.h"
#include "qmoe/checkpoint.h"

namespace qmoe::test {

struct ModelScratch {
  std::filesystem::path path;
  explicit ModelScratch(const std::string& name) {
    path = std::filesystem::path(QMOE_BINARY_DIR) / "test_scratch_models" / name;
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ModelScratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

inline std::string gen_model(const ModelScratch& s, const std::string& arch, const std::string& format,
                             const std::string& name = "m", int intermediate = 128, uint64_t seed = 3) {
  models::GenOptions o;
  o.arch = arch;
  o.format = format;
  o.out = s / name;
  o.intermediate = intermediate;
  o.seed = seed;
  models::generate_checkpoint(o);
  return o.out;
}

// One tensor as edited: name, dtype, shape and bytes.
struct EditTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};

// Rewrites DIR/model.safetensors: `edit` may change any entry (or clear its name to drop it).
inline void edit_checkpoint(const std::string& dir, const std::function<void(std::vector<EditTensor>&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  std::vector<EditTensor> ts;
  {
    auto f = SafetensorsFile::open(path);
    for (const TensorInfo& ti : f->tensors()) {
      Tensor t = f->get(ti.name);
      const auto* p = static_cast<const uint8_t*>(t.raw());
      ts.push_back({ti.name, ti.dtype, ti.shape, std::vector<uint8_t>(p, p + t.nbytes())});
    }
  }
  edit(ts);
  SafetensorsWriter w;
  std::vector<Tensor> keep;
  for (const EditTensor& e : ts) {
    if (e.name.empty()) continue;
    Tensor t(e.dtype, e.shape);
    EXPECT_EQ(t.nbytes(), e.bytes.size()) << e.name;
    if (t.nbytes() == e.bytes.size() && !e.bytes.empty()) memcpy(t.raw_mut(), e.bytes.data(), e.bytes.size());
    w.add(e.name, t);
    keep.push_back(t);
  }
  w.write(path);
}

inline EditTensor* find_tensor(std::vector<EditTensor>& ts, const std::string& name) {
  for (EditTensor& e : ts)
    if (e.name == name) return &e;
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

// Relative L2 distance of two float tensors of equal size.
inline double rel_l2(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    double d = static_cast<double>(a.data<float>()[i]) - b.data<float>()[i];
    num += d * d;
    den += static_cast<double>(b.data<float>()[i]) * b.data<float>()[i];
  }
  return std::sqrt(num / den);
}

}  // namespace qmoe::test
