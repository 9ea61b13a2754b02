// Shared body of the config fuzzers: parse the input as JSON (strictly, as the loader does), hand
// it to a reader, then resolve a fixed set of realistic module names and derive the MoE scheme.
// Only qmoe::Error may escape a reader; any other exception, crash or sanitizer report is a finding.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/json_strict.h"
#include "formats/quant_config.h"
#include "qmoe/error.h"

namespace qmoe::fuzz {

inline void exercise(const formats::QuantConfig& c) {
  static const char* kModules[] = {
      "model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.experts.0.up_proj",
      "model.layers.0.mlp.experts.0.down_proj", "model.layers.12.mlp.experts.127.gate_proj",
      "model.layers.3.self_attn.q_proj",        "model.layers.3.mlp.gate",
      "model.layers.3.mlp.experts",             "lm_head",
      "",                                       "a"};
  for (const char* m : kModules) {
    (void)c.resolve(m);
    (void)c.resolve(m, "FusedMoE");
  }
  const std::string p = "model.layers.0.mlp.experts.0.";
  try {
    (void)formats::moe_scheme("layer 0", c.resolve(p + "gate_proj"), c.resolve(p + "up_proj"), c.resolve(p + "down_proj"));
  } catch (const qmoe::Error&) {
  }
}

inline int run(const uint8_t* data, size_t size, const std::function<formats::QuantConfig(const nlohmann::json&)>& read) {
  try {
    nlohmann::json j = qmoe::parse_json_strict(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    exercise(read(j));
  } catch (const qmoe::Error&) {
  }
  return 0;
}

}  // namespace qmoe::fuzz
