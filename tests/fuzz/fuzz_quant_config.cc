// libFuzzer target: the whole config.json dispatch (read_quant_config): every quant_method, which
// covers the GPTQ (incl. "dynamic" regex rules), AWQ, gpt-oss MXFP4 and DeepSeek FP8 readers.
#include "fuzz_config_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return qmoe::fuzz::run(data, size, [](const nlohmann::json& j) {
    return qmoe::formats::read_quant_config(j, nullptr, "fuzz");
  });
}
