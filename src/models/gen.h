// `qmoe gen`: writes a small but complete model directory (config.json with the architecture's real
// keys, safetensors with the non-MoE tensors too, the quantization config where the producer puts
// it) for an (architecture, checkpoint format) pair, quantized round-to-nearest from seeded random
// bf16 weights with the reference quantizers (src/cpu/ref/quantize.h), plus the bf16 original.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qmoe::models {

struct GenFormat {
  std::string name;         // "ct-w4a16", "modelopt-nvfp4", ...
  std::string description;  // one line
  std::vector<std::string> archs;  // architectures it applies to
};
const std::vector<GenFormat>& gen_formats();

struct GenOptions {
  std::string arch;               // llama4, mixtral, qwen3_moe, deepseek_v3, gpt_oss
  std::string format = "bf16";
  std::string out;                // model directory to write (created)
  std::string reference_out;      // bf16 original; "" = <out>/bf16; "-" = none
  int layers = 2;                 // MoE layers (deepseek_v3 adds one dense layer in front)
  int experts = 8;
  int hidden = 256;
  int intermediate = 128;
  int top_k = 0;                  // 0 = the arch's usual (llama4 1, gpt_oss 2, others 2)
  uint64_t seed = 1;
  int shards = 1;                 // > 1: sharded safetensors + model.safetensors.index.json
};

// Throws kBadInput for an unknown arch / format, or a format that does not apply to the arch.
void generate_checkpoint(const GenOptions& o);

}  // namespace qmoe::models
