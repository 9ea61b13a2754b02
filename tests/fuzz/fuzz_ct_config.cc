// libFuzzer target: compressed-tensors quantization_config reader (config_groups, presets,
// exact / re: / class targets, ignore, formats) followed by resolve() and moe_scheme().
#include "fuzz_config_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return qmoe::fuzz::run(data, size, [](const nlohmann::json& j) {
    return qmoe::formats::parse_compressed_tensors(j, "fuzz");
  });
}
