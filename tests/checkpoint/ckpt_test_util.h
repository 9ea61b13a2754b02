// Helpers for the checkpoint tests: a scratch directory per test, raw safetensors byte builders
// (so malformed files can be written byte by byte) and an error-message checker.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "qmoe/error.h"

namespace qmoe::test {

// A fresh directory under the build tree, removed at destruction.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::path(QMOE_BINARY_DIR) / "test_scratch" / name;
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
inline void write_text(const std::string& path, const std::string& text) { write_bytes(path, text); }

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// 8-byte little-endian length + header + data; `len` overrides the length field.
inline std::string st_bytes(const std::string& header, const std::string& data, int64_t len = -1) {
  uint64_t n = len < 0 ? header.size() : static_cast<uint64_t>(len);
  std::string r(8, '\0');
  for (int i = 0; i < 8; ++i) r[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return r + header + data;
}

inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string r(n, '\0');
  for (auto& c : r) c = static_cast<char>(rng() & 0xff);
  return r;
}

// Runs `f`, expects a qmoe::Error of `kind` whose one-line message contains every needle.
inline void expect_error(const std::function<void()>& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "multi-line message: " << m;
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-qmoe exception: " << e.what();
  }
}

}  // namespace qmoe::test
