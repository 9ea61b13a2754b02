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

// Whether s is well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF), decoded
// code point by code point.
inline bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += size_t(n);
  }
  return true;
}

// Runs `f`, expects a qmoe::Error of `kind` whose one-line message (valid UTF-8) contains every needle.
inline void expect_error(const std::function<void()>& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "multi-line message: " << m;
    EXPECT_TRUE(valid_utf8(m)) << "message is not UTF-8: " << m;
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-qmoe exception: " << e.what();
  }
}

}  // namespace qmoe::test
