// libFuzzer target: ModelOpt readers, the legacy hf_quant_config.json and the config.json
// quantization_config (quant_algo, exclude_modules wildcards, MIXED_PRECISION quantized_layers),
// each followed by resolve() and moe_scheme().
#include "fuzz_config_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qmoe::fuzz::run(data, size, [](const nlohmann::json& j) { return qmoe::formats::parse_modelopt_legacy(j, "fuzz"); });
  return qmoe::fuzz::run(data, size, [](const nlohmann::json& j) { return qmoe::formats::parse_modelopt(j, "fuzz"); });
}
