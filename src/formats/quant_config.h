// Quantization-config readers: config.json's quantization_config (compressed-tensors, ModelOpt,
// GPTQ, AWQ, gpt-oss MXFP4, DeepSeek FP8) and ModelOpt's legacy hf_quant_config.json, turned into
// one per-module lookup, QuantConfig::resolve(module, class) -> the weight / input-activation
// QuantArgs and the storage format of that module, or "ignored", or nothing (not quantized).
// moe_scheme() then applies formats.md §2a "How vLLM picks the MoE scheme" to a layer's
// gate / up / down modules. A config that names quantization but is malformed, names an unknown
// method, or has quant_algo without quant_method is an error (never silently unquantized).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qmoe/quant.h"

namespace qmoe {
class CheckpointDir;
}

namespace qmoe::formats {

enum class QuantSource { kNone, kCompressedTensors, kModelOpt, kModelOptLegacy, kGPTQ, kAWQ, kMXFP4, kFP8 };
const char* quant_source_name(QuantSource s);  // "compressed-tensors", "modelopt", ...

// What one module (an unfused Linear, e.g. "model.layers.3.mlp.experts.7.gate_proj") runs.
struct ModuleQuant {
  bool ignored = false;                        // ignore / exclude_modules / modules_to_not_convert
  std::optional<QuantArgs> weights;            // unset when ignored
  std::optional<QuantArgs> input_activations;  // unset: 16-bit activations
  // Storage format: compressed-tensors names ("pack-quantized", "float-quantized",
  // "nvfp4-pack-quantized", ...), "modelopt <ALGO>", "gptq", "gptq_v2", "awq", "mxfp4" (gpt-oss
  // _blocks/_scales), "fp8" (DeepSeek weight_scale_inv).
  std::string format;
  std::string matched;  // what selected it: "config_groups.group_0 target 're:.*gate_proj'", ...
  QuantSource source = QuantSource::kNone;

  std::string describe() const;  // one line: "int4 sym group128 / - (pack-quantized)"
};

// A compiled target / ignore entry of compressed-tensors: exact name, "re:" (Python re.match:
// anchored at the start only) or class name.
struct Target {
  enum Kind { kExact, kRegex, kClass } kind = kExact;
  std::string text;                            // as written in the config
  std::shared_ptr<const std::regex> re;        // kRegex only
};

struct SchemeGroup {
  std::string name;
  std::vector<Target> targets;
  std::optional<QuantArgs> weights, input_activations;
  std::string format;
};

struct QuantConfig {
  QuantSource source = QuantSource::kNone;
  std::string where;         // the file and key it came from, for messages
  std::string quant_method;  // as written (lower-cased)
  std::string algo;          // ModelOpt quant_algo (upper-cased)
  std::string format;        // compressed-tensors global format ("" when absent)
  std::vector<SchemeGroup> groups;   // compressed-tensors config_groups; one group elsewhere
  std::vector<Target> ignore;        // compressed-tensors ignore
  std::vector<std::string> exclude;  // ModelOpt exclude_modules / ignore (after the "path*" rewrite)
  std::vector<std::string> not_convert;  // AWQ / gpt-oss / fp8 modules not converted
  std::map<std::string, SchemeGroup> layers;  // ModelOpt MIXED_PRECISION quantized_layers
  struct DynamicRule {  // GPTQ "dynamic": "+:re" overrides, "-:re" skips
    bool skip = false;
    std::shared_ptr<const std::regex> re;
    std::string text;
    std::optional<QuantArgs> weights;
  };
  std::vector<DynamicRule> dynamic;
  bool quantize_lm_head = false;  // GPTQ lm_head
  // compressed-tensors parts qmoe does not run, over the modules their targets name (and their
  // ignore lists do not): a sparse-compressed sparsity_config, a transform_config transform applied
  // to activations at run time ("input" / "output" locations). resolve() refuses such a module.
  struct Refusal {
    std::string what;  // "<where>.sparsity_config: format 'sparse-24-bitmask'"
    std::string why;   // what qmoe would have to do
    std::vector<Target> targets, ignore;
  };
  std::vector<Refusal> refusals;

  bool quantized() const { return source != QuantSource::kNone; }
  // The quantization of `module` (a dotted module path) of class `class_name`. nullopt: not
  // quantized (no target matched, or an unquantized checkpoint). Precedence for
  // compressed-tensors: ignore first, then exact name > regex > class name across all groups.
  std::optional<ModuleQuant> resolve(const std::string& module, const std::string& class_name = "Linear") const;
};

// Reads the checkpoint's quantization: config.json's "quantization_config" (or the older
// "compression_config"), else hf_quant_config.json (ModelOpt legacy), else unquantized. `dir`
// names the directory in messages. When both files describe ModelOpt they must agree.
QuantConfig read_quant_config(const nlohmann::json& config, const nlohmann::json* hf_quant_config,
                              const std::string& dir);
// The same for an opened model directory.
QuantConfig read_quant_config(const CheckpointDir& ck);

// The individual readers; `where` names the file and key in messages.
QuantConfig parse_compressed_tensors(const nlohmann::json& qc, const std::string& where);
QuantConfig parse_modelopt(const nlohmann::json& qc, const std::string& where);         // config.json style
QuantConfig parse_modelopt_legacy(const nlohmann::json& hf, const std::string& where);  // hf_quant_config.json
QuantConfig parse_gptq(const nlohmann::json& qc, const std::string& where);
QuantConfig parse_awq(const nlohmann::json& qc, const std::string& where);
QuantConfig parse_gpt_oss_mxfp4(const nlohmann::json& qc, const std::string& where);
QuantConfig parse_fp8(const nlohmann::json& qc, const std::string& where);

// compressed-tensors preset names (formats.md §2a) -> scheme; nullopt for unknown names.
std::optional<SchemeGroup> preset_scheme(const std::string& name);

// The MoE scheme of `layer` from its gate / up / down module quantizations (formats.md §2a):
// all three must agree (else kUnsupported naming the layer and both schemes); none or ignored ->
// unquantized; anything qmoe does not run -> kUnsupported naming the layer, the scheme and what
// is supported.
MoeScheme moe_scheme(const std::string& layer, const std::optional<ModuleQuant>& gate,
                     const std::optional<ModuleQuant>& up, const std::optional<ModuleQuant>& down);

// ---- matchers (exposed for tests) -------------------------------------------------------------
// Compiles a Python `re` pattern for re.match semantics (anchored at the start, not at the end).
// Python-only syntax is translated ((?P<name>...), \A, \Z) or rejected with kBadInput naming `where`.
std::shared_ptr<const std::regex> compile_python_regex(const std::string& pattern, const std::string& where);
bool python_re_match(const std::regex& re, const std::string& text);
// Python fnmatch.fnmatchcase: *, ?, [seq], [!seq]; the whole name must match.
bool fnmatch(const std::string& pattern, const std::string& name);

}  // namespace qmoe::formats
