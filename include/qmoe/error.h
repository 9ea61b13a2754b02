// qmoe errors. Every failure is an exception carrying one human-readable line that names the
// file / tensor / layer and what was expected. The CLI prints it as "qmoe: error: <what>" and
// maps the kind to an exit code (BadInput/Unsupported -> 2, VerifyFailed -> 1).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace qmoe {

enum class ErrorKind {
  kBadInput,      // malformed file, wrong shape / dtype, NaN scale, bad argument
  kUnsupported,   // a valid scheme / layout / feature qmoe (or this backend) does not run
  kVerifyFailed,  // a numeric check failed (qmoe verify)
  kInternal,      // a bug in qmoe or a runtime (CUDA) failure
};

// `m` as one line of valid UTF-8: control characters and bytes that do not form a well-formed
// UTF-8 sequence become \xNN. Messages quote file contents (a JSON parser's "last read: ..." of a
// header with a lying length, a tensor name with a newline), and a message that is not UTF-8 broke
// its consumers: Python's exception translation raised UnicodeDecodeError in place of the error.
inline std::string printable_message(const std::string& m) {
  std::string out;
  out.reserve(m.size());
  const auto esc = [&](unsigned char c) {
    static const char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  const size_t n = m.size();
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(m[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
      ++i;
      continue;
    }
    // well-formed multi-byte sequences (RFC 3629: no overlongs, no surrogates, <= U+10FFFF)
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(m[i + k]);
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (ok) {
      out.append(m, i, size_t(len));
      i += size_t(len);
    } else {
      esc(c);
      ++i;
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(printable_message(what)), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
inline void cat(std::ostringstream&) {}
template <class T, class... R>
void cat(std::ostringstream& os, const T& v, const R&... r) {
  os << v;
  cat(os, r...);
}
}  // namespace detail

// str("tensor ", name, " has shape ", n) -> one string.
template <class... A>
std::string str(const A&... a) {
  std::ostringstream os;
  detail::cat(os, a...);
  return os.str();
}

template <class... A>
[[noreturn]] void fail(ErrorKind kind, const A&... a) {
  throw Error(kind, str(a...));
}
template <class... A>
[[noreturn]] void bad_input(const A&... a) {
  throw Error(ErrorKind::kBadInput, str(a...));
}
template <class... A>
[[noreturn]] void unsupported(const A&... a) {
  throw Error(ErrorKind::kUnsupported, str(a...));
}

}  // namespace qmoe

// QMOE_CHECK(cond, ErrorKind, pieces...): throw qmoe::Error with the concatenated message.
#define QMOE_CHECK(cond, kind, ...)                         \
  do {                                                      \
    if (!(cond)) ::qmoe::fail(::qmoe::ErrorKind::kind, __VA_ARGS__); \
  } while (0)
