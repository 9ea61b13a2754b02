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

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
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
