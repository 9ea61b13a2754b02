// Strict JSON parsing for checkpoint headers and config files. nlohmann::json silently keeps the
// last of two equal keys and accepts any nesting depth; checkpoints must do neither, so this
// parser rejects duplicate keys (at any depth) and nesting deeper than kMaxJsonDepth, and turns
// every parse error into one qmoe::Error line naming `what` (a file, or "file: header").
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace qmoe {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; throws kBadInput "<what>: invalid JSON: ..." / "<what>: duplicate key ...".
nlohmann::json parse_json_strict(std::string_view text, const std::string& what);

// Reads a whole file (text) and parses it strictly; throws kBadInput naming `path` when the file
// cannot be read or is larger than `max_bytes`.
nlohmann::json read_json_file(const std::string& path, size_t max_bytes = 64u << 20);

// Quotes a name read from a file for an error message: control characters become \xNN so that a
// hostile name cannot break the one-line error rule; long names are cut at 200 characters.
std::string qname(std::string_view name);

}  // namespace qmoe
