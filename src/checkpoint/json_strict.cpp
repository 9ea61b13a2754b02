// Strict JSON parsing (duplicate keys, depth limit) and file reading for checkpoint metadata.
#include "checkpoint/json_strict.h"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "qmoe/error.h"

namespace qmoe {
namespace {

// Thrown from inside the parser callback to stop at the first violation; converted below.
struct StrictViolation {
  std::string why;
};

}  // namespace

std::string qname(std::string_view name) {
  // at most 200 bytes, escaped as every error message is (error.h printable_message)
  const bool cut = name.size() > 200;
  return "'" + printable_message(std::string(name.substr(0, 200))) + (cut ? "..." : "") + "'";
}

nlohmann::json parse_json_strict(std::string_view text, const std::string& what) {
  std::vector<std::set<std::string>> keys;  // one key set per open object
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) -> bool {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxJsonDepth) throw StrictViolation{str("nesting deeper than ", kMaxJsonDepth, " levels")};
    switch (ev) {
      case E::object_start: keys.emplace_back(); break;
      case E::object_end: if (!keys.empty()) keys.pop_back(); break;
      case E::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second)
          throw StrictViolation{str("duplicate key ", qname(k))};
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const StrictViolation& v) {
    bad_input(what, ": invalid JSON: ", v.why);
  } catch (const nlohmann::json::exception& e) {
    // e.what() is one line; nlohmann escapes control characters in the token it quotes.
    bad_input(what, ": invalid JSON: ", e.what());
  }
}

nlohmann::json read_json_file(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad_input(path, ": cannot open");
  f.seekg(0, std::ios::end);
  std::streamoff n = f.tellg();
  if (n < 0) bad_input(path, ": cannot read");
  if (static_cast<uint64_t>(n) > max_bytes) bad_input(path, ": ", n, " bytes, more than the ", max_bytes, " allowed");
  f.seekg(0);
  std::string text(static_cast<size_t>(n), '\0');
  if (n > 0 && !f.read(text.data(), n)) bad_input(path, ": read failed");
  return parse_json_strict(text, path);
}

}  // namespace qmoe
