// Quantization-config readers (see quant_config.h). Facts and sources: formats.md §2a (compressed-
// tensors: quant_config.py, quant_scheme.py, utils/match.py), §2b (ModelOpt: vLLM modelopt.py,
// from_config / is_layer_excluded / ModelOptMixedPrecisionConfig), §2c (GPTQ, AWQ, gpt-oss,
// DeepSeek FP8). Every reader validates the whole config up front; resolve() never throws for a
// config that parsed.
#include "formats/quant_config.h"

#include <algorithm>
#include <set>

#include "checkpoint/json_strict.h"
#include "formats/quant_args.h"
#include "qmoe/checkpoint.h"
#include "qmoe/error.h"

namespace qmoe::formats {
namespace {

using json = nlohmann::json;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const json* find_key(const json& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const json& j, const char* k, const std::string& where) {
  const json* v = find_key(j, k);
  if (!v) bad_input(where, ": missing \"", k, "\"");
  if (!v->is_string()) bad_input(where, ".", k, ": must be a string, got ", v->type_name());
  return v->get<std::string>();
}

std::optional<std::string> opt_string(const json& j, const char* k, const std::string& where) {
  const json* v = find_key(j, k);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_input(where, ".", k, ": must be a string, got ", v->type_name());
  return v->get<std::string>();
}

std::optional<int> opt_int(const json& j, const char* k, const std::string& where) {
  const json* v = find_key(j, k);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad_input(where, ".", k, ": must be an integer, got ", v->dump().substr(0, 40));
  int64_t x = v->get<int64_t>();
  if (x < INT32_MIN || x > INT32_MAX) bad_input(where, ".", k, ": ", x, " is out of range");
  return static_cast<int>(x);
}

std::optional<bool> opt_bool(const json& j, const char* k, const std::string& where) {
  const json* v = find_key(j, k);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_input(where, ".", k, ": must be true or false, got ", v->dump().substr(0, 40));
  return v->get<bool>();
}

std::vector<std::string> string_list(const json& j, const char* k, const std::string& where) {
  std::vector<std::string> r;
  const json* v = find_key(j, k);
  if (!v) return r;
  if (!v->is_array()) bad_input(where, ".", k, ": must be a list of strings, got ", v->type_name());
  for (const auto& e : *v) {
    if (!e.is_string()) bad_input(where, ".", k, ": must be a list of strings, found ", e.type_name());
    r.push_back(e.get<std::string>());
  }
  return r;
}

QuantArgs validated(QuantArgs a, const std::string& where) {
  a.validate(where);
  return a;
}

QuantArgs int_args(int bits, std::optional<int> group, bool sym, Strategy s) {
  QuantArgs a;
  a.num_bits = bits;
  a.type = QuantType::kInt;
  a.symmetric = sym;
  a.strategy = s;
  a.group_size = group;
  return a;
}
QuantArgs float_args(int bits, Strategy s, std::optional<int> group = std::nullopt, Dynamic d = Dynamic::kStatic) {
  QuantArgs a;
  a.num_bits = bits;
  a.type = QuantType::kFloat;
  a.symmetric = true;
  a.strategy = s;
  a.group_size = group;
  a.dynamic = d;
  return a;
}

// ---- compressed-tensors -----------------------------------------------------------------------

const std::set<std::string>& ct_formats() {
  static const std::set<std::string> f = {
      "dense", "int-quantized", "float-quantized", "naive-quantized", "pack-quantized", "nvfp4-pack-quantized",
      "mxfp4-pack-quantized", "mxfp8-quantized", "sparse-bitmask", "sparse-24-bitmask", "marlin-24"};
  return f;
}

// compressed-tensors' infer_quantization_format, for configs that name no format at all.
std::string infer_ct_format(const SchemeGroup& g) {
  if (!g.weights) return "dense";
  const QuantArgs& w = *g.weights;
  if (w.type == QuantType::kFloat && w.num_bits == 4)
    return w.group_size == 32 ? "mxfp4-pack-quantized" : "nvfp4-pack-quantized";
  if (w.type == QuantType::kFloat && w.num_bits == 8 && w.group_size == 32 && w.scale_dtype == DType::kU8)
    return "mxfp8-quantized";
  const bool acts = g.input_activations.has_value();
  if (w.type == QuantType::kInt && acts && g.input_activations->type == QuantType::kInt && w.num_bits == 8)
    return "int-quantized";
  if (w.type == QuantType::kInt && (w.num_bits == 4 || w.num_bits == 8)) return "pack-quantized";
  if (w.type == QuantType::kFloat && w.num_bits == 8) return "float-quantized";
  return "naive-quantized";
}

Target make_target(const std::string& t, const std::string& where) {
  Target r;
  r.text = t;
  if (t.rfind("re:", 0) == 0) {
    r.kind = Target::kRegex;
    r.re = compile_python_regex(t.substr(3), where);
  } else if (t.find('.') == std::string::npos && !t.empty() && std::isupper(static_cast<unsigned char>(t[0]))) {
    // "Linear", "Llama4TextMLP": a class name. Module paths are dotted and lower-case by
    // convention; an undotted capitalised name matches both ways (exact name or class).
    r.kind = Target::kClass;
  } else {
    r.kind = Target::kExact;
  }
  return r;
}

std::vector<Target> make_targets(const json& list, const std::string& where) {
  if (!list.is_array()) bad_input(where, ": must be a list of strings, got ", list.type_name());
  std::vector<Target> r;
  for (const auto& e : list) {
    if (!e.is_string()) bad_input(where, ": must be a list of strings, found ", e.type_name());
    r.push_back(make_target(e.get<std::string>(), where));
  }
  return r;
}

bool target_matches(const Target& t, Target::Kind pass, const std::string& module, const std::string& cls) {
  switch (pass) {
    case Target::kExact: return t.kind != Target::kRegex && t.text == module;
    case Target::kRegex: return t.kind == Target::kRegex && python_re_match(*t.re, module);
    case Target::kClass: return t.kind == Target::kClass && t.text == cls;
  }
  return false;
}

std::optional<QuantArgs> parse_args_field(const json& g, const char* key, const std::string& where) {
  const json* v = find_key(g, key);
  if (!v) return std::nullopt;
  return parse_quant_args(*v, where + "." + key);
}

// ---- ModelOpt ----------------------------------------------------------------------------------

const char* kModelOptAlgos = "FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION";

// quant_algo -> weights / input activations.
SchemeGroup modelopt_scheme(const std::string& algo, std::optional<int> group_size, const std::string& where) {
  SchemeGroup g;
  g.name = algo;
  g.format = "modelopt " + algo;
  if (algo == "FP8") {
    g.weights = float_args(8, Strategy::kTensor);
    g.input_activations = float_args(8, Strategy::kTensor);
  } else if (algo == "FP8_PER_CHANNEL_PER_TOKEN") {
    g.weights = float_args(8, Strategy::kChannel);
    g.input_activations = float_args(8, Strategy::kToken, std::nullopt, Dynamic::kDynamic);
  } else if (algo == "FP8_PB_WO") {
    QuantArgs w = float_args(8, Strategy::kBlock);
    w.block_structure = std::array<int, 2>{128, 128};
    g.weights = w;
    g.input_activations = float_args(8, Strategy::kGroup, 128, Dynamic::kDynamic);  // dynamic 1x128
  } else if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    int gs = group_size.value_or(16);
    if (gs <= 0) bad_input(where, ": group_size must be positive for ", algo, ", got ", gs);
    QuantArgs w = float_args(4, Strategy::kTensorGroup, gs);
    w.scale_dtype = DType::kF8E4M3;
    g.weights = w;
    if (algo == "NVFP4") {
      QuantArgs a = float_args(4, Strategy::kTensorGroup, gs, Dynamic::kLocal);
      a.scale_dtype = DType::kF8E4M3;
      g.input_activations = a;
    }
  } else if (algo == "MXFP8") {
    QuantArgs w = float_args(8, Strategy::kGroup, 32);
    w.scale_dtype = DType::kU8;
    g.weights = w;
    QuantArgs a = float_args(8, Strategy::kGroup, 32, Dynamic::kDynamic);
    a.scale_dtype = DType::kU8;
    g.input_activations = a;
  } else {
    unsupported(where, ": ModelOpt quant_algo ", qname(algo), " is not supported; supported: ", kModelOptAlgos);
  }
  if (g.weights) g.weights = validated(*g.weights, where + " (" + algo + " weights)");
  if (g.input_activations) g.input_activations = validated(*g.input_activations, where + " (" + algo + " activations)");
  return g;
}

// exclude_modules: vLLM rewrites a trailing "module_path*" (not ".*") into "module_path" and
// "module_path.*" so that "layers.1*" does not also exclude "layers.10".
std::vector<std::string> rewrite_excludes(const std::vector<std::string>& in) {
  std::vector<std::string> r;
  for (const auto& e : in) {
    if (e.size() >= 2 && e.back() == '*' && e[e.size() - 2] != '.') {
      r.push_back(e.substr(0, e.size() - 1));
      r.push_back(e.substr(0, e.size() - 1) + ".*");
    } else {
      r.push_back(e);
    }
  }
  return r;
}

// vLLM is_layer_excluded: exact name, substring (older ModelOpt exports), or fnmatch wildcard.
bool modelopt_excluded(const std::vector<std::string>& ex, const std::string& module) {
  for (const auto& e : ex) {
    if (e.empty()) continue;
    if (e == module || module.find(e) != std::string::npos || fnmatch(e, module)) return true;
  }
  return false;
}

void parse_mixed_layers(QuantConfig& c, const json& src, std::optional<int> group_size, const std::string& where) {
  const json* ql = find_key(src, "quantized_layers");
  if (!ql || !ql->is_object() || ql->empty())
    bad_input(where, ": MIXED_PRECISION needs a non-empty \"quantized_layers\" map {layer: {quant_algo, group_size}}");
  for (auto it = ql->begin(); it != ql->end(); ++it) {
    const std::string lw = where + ".quantized_layers." + it.key();
    if (!it.value().is_object()) bad_input(lw, ": must be an object {quant_algo, group_size}");
    std::string algo = upper(get_string(it.value(), "quant_algo", lw));
    if (algo != "FP8" && algo != "NVFP4" && algo != "W4A16_NVFP4")
      unsupported(lw, ": quant_algo ", qname(algo), " is not supported in MIXED_PRECISION; supported: FP8, NVFP4, W4A16_NVFP4");
    auto gs = opt_int(it.value(), "group_size", lw);
    SchemeGroup g = modelopt_scheme(algo, gs ? gs : group_size, lw);
    g.name = "quantized_layers." + it.key();
    c.layers[it.key()] = std::move(g);
  }
}

QuantConfig modelopt_common(const std::string& algo_raw, std::optional<int> group_size,
                            const std::vector<std::string>& exclude, const json& src, const std::string& where,
                            QuantSource source) {
  QuantConfig c;
  c.source = source;
  c.where = where;
  c.quant_method = "modelopt";
  c.algo = upper(algo_raw);
  c.exclude = rewrite_excludes(exclude);
  if (c.algo == "MIXED_PRECISION") {
    parse_mixed_layers(c, src, group_size, where);
  } else {
    c.groups.push_back(modelopt_scheme(c.algo, group_size, where));
  }
  return c;
}

std::string fmt_args(const std::optional<QuantArgs>& a) { return a ? a->str() : std::string("-"); }

}  // namespace

const char* quant_source_name(QuantSource s) {
  switch (s) {
    case QuantSource::kNone: return "unquantized";
    case QuantSource::kCompressedTensors: return "compressed-tensors";
    case QuantSource::kModelOpt: return "modelopt";
    case QuantSource::kModelOptLegacy: return "modelopt (hf_quant_config.json)";
    case QuantSource::kGPTQ: return "gptq";
    case QuantSource::kAWQ: return "awq";
    case QuantSource::kMXFP4: return "mxfp4 (gpt-oss)";
    case QuantSource::kFP8: return "fp8 (block)";
  }
  return "?";
}

std::string ModuleQuant::describe() const {
  if (ignored) return str("ignored (", matched, ")");
  return str("weights ", fmt_args(weights), ", activations ", fmt_args(input_activations), " (", format, ")");
}

// ---- matchers ---------------------------------------------------------------------------------

std::shared_ptr<const std::regex> compile_python_regex(const std::string& pattern, const std::string& where) {
  if (pattern.size() > 1000) bad_input(where, ": regex of ", pattern.size(), " characters is too long (limit 1000)");
  std::string out;
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) bad_input(where, ": regex ", qname(pattern), " ends with a lone backslash");
      char n = pattern[++i];
      if (!in_class && n == 'A') out += '^';
      else if (!in_class && n == 'Z') out += '$';
      else if (!in_class && (n >= '1' && n <= '9')) bad_input(where, ": regex ", qname(pattern), ": back-references are not supported");
      else { out += '\\'; out += n; }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both dialects.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') { out += "\\]"; ++i; }
      continue;
    }
    if (c == '(') {
      if (++depth > 32) bad_input(where, ": regex ", qname(pattern), " nests groups deeper than 32");
      if (pattern.compare(i, 4, "(?P<") == 0) {  // Python named group -> plain group
        size_t close = pattern.find('>', i + 4);
        if (close == std::string::npos) bad_input(where, ": regex ", qname(pattern), ": unterminated group name");
        out += '(';
        i = close;
        continue;
      }
      if (pattern.compare(i, 2, "(?") == 0 && i + 2 < pattern.size()) {
        char k = pattern[i + 2];
        if (k != ':' && k != '=' && k != '!')
          bad_input(where, ": regex ", qname(pattern), ": Python group syntax '(?", k, "' is not supported");
      }
    } else if (c == ')') {
      --depth;
    }
    out += c;
  }
  try {
    // __polynomial (libstdc++): the breadth-first executor, linear in the subject length, so a
    // hostile pattern cannot make matching take exponential time.
    return std::make_shared<const std::regex>(out, std::regex::ECMAScript | std::regex_constants::__polynomial);
  } catch (const std::regex_error& e) {
    bad_input(where, ": invalid regex ", qname(pattern), ": ", e.what());
  }
}

bool python_re_match(const std::regex& re, const std::string& text) {
  // re.match: the match must start at position 0 and may end anywhere.
  return std::regex_search(text, re, std::regex_constants::match_continuous);
}

bool fnmatch(const std::string& p, const std::string& s) {
  // Dynamic programming over (pattern position, name position): O(|p| * |s|), no backtracking.
  const size_t n = s.size();
  std::vector<char> cur(n + 1, 0), next(n + 1, 0);
  cur[0] = 1;
  size_t i = 0;
  while (i < p.size()) {
    std::fill(next.begin(), next.end(), 0);
    if (p[i] == '*') {
      char any = 0;
      for (size_t j = 0; j <= n; ++j) next[j] = any = static_cast<char>(any | cur[j]);
      ++i;
    } else {
      // One-character token: '?', a class [..] / [!..], or a literal. A '[' without a closing ']'
      // is a literal (as in Python).
      size_t tok_end = i + 1;
      std::vector<std::pair<unsigned char, unsigned char>> ranges;
      bool is_class = false, negate = false, any_char = p[i] == '?';
      if (p[i] == '[') {
        size_t k = i + 1;
        if (k < p.size() && p[k] == '!') { negate = true; ++k; }
        if (k < p.size() && p[k] == ']') ++k;  // leading ']' is a member
        size_t close = p.find(']', k);
        if (close != std::string::npos) {
          is_class = true;
          size_t m = negate ? i + 2 : i + 1;
          while (m < close) {
            unsigned char lo = static_cast<unsigned char>(p[m]);
            if (m + 2 < close && p[m + 1] == '-') {
              ranges.emplace_back(lo, static_cast<unsigned char>(p[m + 2]));
              m += 3;
            } else {
              ranges.emplace_back(lo, lo);
              m += 1;
            }
          }
          tok_end = close + 1;
        }
      }
      for (size_t j = 0; j < n; ++j) {
        if (!cur[j]) continue;
        unsigned char ch = static_cast<unsigned char>(s[j]);
        bool ok;
        if (any_char) ok = true;
        else if (is_class) {
          bool in = false;
          for (auto [lo, hi] : ranges) in |= (ch >= lo && ch <= hi);
          ok = in != negate;
        } else ok = ch == static_cast<unsigned char>(p[i]);
        if (ok) next[j + 1] = 1;
      }
      i = tok_end;
    }
    std::swap(cur, next);
  }
  return cur[n] != 0;
}

// ---- presets ----------------------------------------------------------------------------------

std::optional<SchemeGroup> preset_scheme(const std::string& name) {
  SchemeGroup g;
  g.name = name;
  const std::string n = upper(name);
  auto int_token = [] {
    QuantArgs a = int_args(8, std::nullopt, true, Strategy::kToken);
    a.dynamic = Dynamic::kDynamic;
    return a;
  };
  if (n == "UNQUANTIZED") {
  } else if (n == "W8A16") {
    g.weights = int_args(8, std::nullopt, true, Strategy::kChannel);
  } else if (n == "W4A16") {
    g.weights = int_args(4, 128, true, Strategy::kGroup);
  } else if (n == "W4A16_ASYM") {
    g.weights = int_args(4, 128, false, Strategy::kGroup);
  } else if (n == "W8A8" || n == "INT8") {
    g.weights = int_args(8, std::nullopt, true, Strategy::kChannel);
    g.input_activations = int_token();
  } else if (n == "W4A8") {
    g.weights = int_args(4, 128, true, Strategy::kGroup);
    g.input_activations = int_token();
  } else if (n == "W4AFP8") {
    g.weights = int_args(4, 128, true, Strategy::kGroup);
    g.input_activations = float_args(8, Strategy::kToken, std::nullopt, Dynamic::kDynamic);
  } else if (n == "FP8") {
    g.weights = float_args(8, Strategy::kTensor);
    g.input_activations = float_args(8, Strategy::kTensor);
  } else if (n == "FP8_DYNAMIC") {
    g.weights = float_args(8, Strategy::kChannel);
    g.input_activations = float_args(8, Strategy::kToken, std::nullopt, Dynamic::kDynamic);
  } else if (n == "FP8_BLOCK") {
    QuantArgs w = float_args(8, Strategy::kBlock);
    w.block_structure = std::array<int, 2>{128, 128};
    g.weights = w;
    g.input_activations = float_args(8, Strategy::kGroup, 128, Dynamic::kDynamic);
  } else if (n == "NVFP4A16" || n == "NVFP4") {
    QuantArgs w = float_args(4, Strategy::kTensorGroup, 16);
    w.scale_dtype = DType::kF8E4M3;
    g.weights = w;
    if (n == "NVFP4") {
      QuantArgs a = float_args(4, Strategy::kTensorGroup, 16, Dynamic::kLocal);
      a.scale_dtype = DType::kF8E4M3;
      g.input_activations = a;
    }
  } else if (n == "MXFP4A16" || n == "MXFP4" || n == "MXFP8A16" || n == "MXFP8") {
    const int bits = n.rfind("MXFP4", 0) == 0 ? 4 : 8;
    QuantArgs w = float_args(bits, Strategy::kGroup, 32);
    w.scale_dtype = DType::kU8;  // E8M0 exponents stored as uint8
    g.weights = w;
    if (n == "MXFP4" || n == "MXFP8") {
      QuantArgs a = float_args(bits, Strategy::kGroup, 32, Dynamic::kDynamic);
      a.scale_dtype = DType::kU8;
      g.input_activations = a;
    }
  } else {
    return std::nullopt;
  }
  if (g.weights) g.weights = validated(*g.weights, "preset " + name);
  if (g.input_activations) g.input_activations = validated(*g.input_activations, "preset " + name);
  return g;
}

// ---- readers ----------------------------------------------------------------------------------

// compressed-tensors' sparsity_config (a format other than "dense" stores the targeted weights
// sparse-compressed: bitmask / 2:4 values under other tensor names) and transform_config (Hadamard
// / matrix transforms; "weight_input" / "weight_output" ones are folded into the stored weights,
// the others act on activations at run time): the modules they cover become QuantConfig::refusals.
void read_ct_refusals(const json& qc, const std::string& where, QuantConfig& c) {
  const auto list = [&](const json& o, const char* key, const std::string& w) {
    const json* v = find_key(o, key);
    return v && !v->is_null() ? make_targets(*v, w + "." + key) : std::vector<Target>{};
  };
  // no targets: every module (the refusal errs on the loud side)
  const auto targets = [&](const json& o, const std::string& w) {
    std::vector<Target> t = list(o, "targets", w);
    if (t.empty()) t.push_back(make_target("re:.*", w + ".targets"));
    return t;
  };
  if (const json* sp = find_key(qc, "sparsity_config"); sp && !sp->is_null()) {
    const std::string sw = where + ".sparsity_config";
    if (!sp->is_object()) bad_input(sw, ": must be an object, got ", sp->type_name());
    const std::string fmt = opt_string(*sp, "format", sw).value_or("dense");
    if (!sp->empty() && fmt != "dense")
      c.refusals.push_back({str(sw, ": format ", qname(fmt)),
                            "stores its weights sparse-compressed; qmoe reads dense or quantized expert weights",
                            targets(*sp, sw), list(*sp, "ignore", sw)});
  }
  const json* tc = find_key(qc, "transform_config");
  if (!tc || tc->is_null()) return;
  const std::string tw = where + ".transform_config";
  if (!tc->is_object()) bad_input(tw, ": must be an object, got ", tc->type_name());
  const json* groups = find_key(*tc, "config_groups");
  if (!groups || groups->is_null()) return;
  if (!groups->is_object()) bad_input(tw, ".config_groups: must be an object, got ", groups->type_name());
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const std::string gw = tw + ".config_groups." + it.key();
    if (!it->is_object()) bad_input(gw, ": must be an object, got ", it->type_name());
    const std::string type = opt_string(*it, "type", gw).value_or("transform");
    const json* apply = find_key(*it, "apply");
    if (!apply || apply->is_null()) continue;
    if (!apply->is_array()) bad_input(gw, ".apply: must be a list, got ", apply->type_name());
    for (size_t i = 0; i < apply->size(); ++i) {
      const json& a = (*apply)[i];
      const std::string aw = str(gw, ".apply[", i, "]");
      if (!a.is_object()) bad_input(aw, ": must be an object, got ", a.type_name());
      const std::string loc = get_string(a, "location", aw);
      if (loc == "weight_input" || loc == "weight_output") continue;  // folded into the stored weights
      c.refusals.push_back({str(aw, ": a ", qname(type), " transform at location ", qname(loc)),
                            "acts on activations at run time, which qmoe does not do", targets(a, aw),
                            list(a, "ignore", aw)});
    }
  }
}

QuantConfig parse_compressed_tensors(const json& qc, const std::string& where) {
  QuantConfig c;
  c.source = QuantSource::kCompressedTensors;
  c.where = where;
  c.quant_method = "compressed-tensors";
  std::string global_format = opt_string(qc, "format", where).value_or("");
  if (!global_format.empty() && global_format != "mixed-precision" && !ct_formats().count(global_format))
    unsupported(where, ".format: unknown compressed-tensors format ", qname(global_format));
  c.format = global_format;
  if (auto st = opt_string(qc, "quantization_status", where); st && *st != "compressed" && *st != "frozen")
    unsupported(where, ".quantization_status: ", qname(*st), "; qmoe reads compressed (or frozen) checkpoints");

  const json* groups = find_key(qc, "config_groups");
  if (!groups || !groups->is_object() || groups->empty())
    bad_input(where, ": needs a non-empty \"config_groups\" object");
  std::map<std::string, std::string> exact_owner;  // exact target -> group, to catch ambiguity
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const std::string gw = where + ".config_groups." + it.key();
    const json& gj = it.value();
    SchemeGroup g;
    if (gj.is_array()) {
      // {"W4A16": ["Linear"]}: the key is a preset name, the value its targets.
      auto p = preset_scheme(it.key());
      if (!p) bad_input(gw, ": a list of targets needs a preset name as key; ", qname(it.key()), " is not a preset");
      g = *p;
      g.targets = make_targets(gj, gw);
    } else if (gj.is_object()) {
      for (auto f = gj.begin(); f != gj.end(); ++f)
        if (f.key() != "targets" && f.key() != "weights" && f.key() != "input_activations" &&
            f.key() != "output_activations" && f.key() != "format")
          bad_input(gw, ": unknown field ", qname(f.key()));
      const json* t = find_key(gj, "targets");
      if (!t) bad_input(gw, ": missing \"targets\"");
      g.targets = make_targets(*t, gw + ".targets");
      g.weights = parse_args_field(gj, "weights", gw);
      g.input_activations = parse_args_field(gj, "input_activations", gw);
      if (find_key(gj, "output_activations"))
        unsupported(gw, ": output_activations quantization is not supported");
      if (auto f = opt_string(gj, "format", gw)) {
        if (!ct_formats().count(*f)) unsupported(gw, ".format: unknown compressed-tensors format ", qname(*f));
        g.format = *f;
      }
    } else {
      bad_input(gw, ": must be a scheme object or a list of targets, got ", gj.type_name());
    }
    g.name = it.key();
    if (g.targets.empty()) bad_input(gw, ": \"targets\" is empty");
    if (g.format.empty()) {
      if (global_format == "mixed-precision") bad_input(gw, ": format is \"mixed-precision\" but this group names no format");
      g.format = global_format.empty() ? infer_ct_format(g) : global_format;
    }
    for (const auto& t : g.targets) {
      if (t.kind == Target::kRegex) continue;
      auto [pos, fresh] = exact_owner.emplace(t.text, g.name);
      if (!fresh) bad_input(where, ": target ", qname(t.text), " is in both config_groups.", pos->second, " and ", g.name);
    }
    c.groups.push_back(std::move(g));
  }
  if (const json* ig = find_key(qc, "ignore")) c.ignore = make_targets(*ig, where + ".ignore");
  read_ct_refusals(qc, where, c);
  return c;
}

QuantConfig parse_modelopt(const json& qc, const std::string& where) {
  std::string algo = get_string(qc, "quant_algo", where);
  if (algo.empty()) bad_input(where, ".quant_algo: is empty");
  auto gs = opt_int(qc, "group_size", where);
  auto ex = string_list(qc, "ignore", where);
  return modelopt_common(algo, gs, ex, qc, where, QuantSource::kModelOpt);
}

QuantConfig parse_modelopt_legacy(const json& hf, const std::string& where) {
  if (!hf.is_object()) bad_input(where, ": must be a JSON object");
  if (const json* p = find_key(hf, "producer")) {
    if (!p->is_object()) bad_input(where, ".producer: must be an object");
    if (auto name = opt_string(*p, "name", where + ".producer"); name && lower(*name) != "modelopt")
      unsupported(where, ".producer.name: ", qname(*name), "; only ModelOpt writes hf_quant_config.json");
  }
  const json* q = find_key(hf, "quantization");
  if (!q || !q->is_object()) bad_input(where, ": needs a \"quantization\" object");
  const std::string qw = where + ".quantization";
  std::string algo = upper(get_string(*q, "quant_algo", qw));
  if (algo == "NVFP4") {
    // vLLM refuses a legacy NVFP4 file without these three keys (null values are fine).
    for (const char* k : {"group_size", "kv_cache_quant_algo", "exclude_modules"})
      if (!q->contains(k)) bad_input(qw, ": NVFP4 needs \"", k, "\" (group_size, kv_cache_quant_algo, exclude_modules)");
  }
  if (auto kv = find_key(*q, "kv_cache_quant_algo"); kv && !kv->is_string())
    bad_input(qw, ".kv_cache_quant_algo: must be a string or null");
  auto gs = opt_int(*q, "group_size", qw);
  auto ex = string_list(*q, "exclude_modules", qw);
  return modelopt_common(algo, gs, ex, *q, qw, QuantSource::kModelOptLegacy);
}

QuantConfig parse_gptq(const json& qc, const std::string& where) {
  QuantConfig c;
  c.source = QuantSource::kGPTQ;
  c.where = where;
  c.quant_method = "gptq";
  auto bits = opt_int(qc, "bits", where);
  if (!bits) bad_input(where, ": GPTQ needs \"bits\"");
  auto gs = opt_int(qc, "group_size", where).value_or(-1);
  bool desc_act = opt_bool(qc, "desc_act", where).value_or(false);
  bool sym = opt_bool(qc, "sym", where).value_or(true);
  c.quantize_lm_head = opt_bool(qc, "lm_head", where).value_or(false);
  std::string ckfmt = lower(opt_string(qc, "checkpoint_format", where).value_or("gptq"));
  if (ckfmt != "gptq" && ckfmt != "gptq_v2")
    unsupported(where, ".checkpoint_format: ", qname(ckfmt), "; supported: gptq, gptq_v2");
  auto make = [&](int b, int g, bool da, bool s, const std::string& w) {
    if (b != 2 && b != 3 && b != 4 && b != 8) bad_input(w, ": GPTQ bits must be 2, 3, 4 or 8, got ", b);
    if (g == 0 || g < -1) bad_input(w, ": GPTQ group_size must be -1 or positive, got ", g);
    QuantArgs a = int_args(b, g, s, g > 0 ? Strategy::kGroup : Strategy::kChannel);
    // desc_act with per-channel scales has no effect on dequantization (every column is group 0).
    a.actorder = (da && g > 0) ? ActOrder::kGroup : ActOrder::kNone;
    return validated(a, w);
  };
  SchemeGroup g;
  g.name = "gptq";
  g.format = ckfmt;
  g.weights = make(*bits, gs, desc_act, sym, where);
  c.groups.push_back(g);
  if (const json* dyn = find_key(qc, "dynamic")) {
    if (!dyn->is_object()) bad_input(where, ".dynamic: must be an object {\"+:regex\" | \"-:regex\": overrides}");
    for (auto it = dyn->begin(); it != dyn->end(); ++it) {
      const std::string dw = where + ".dynamic." + it.key();
      QuantConfig::DynamicRule r;
      std::string pat = it.key();
      if (pat.rfind("-:", 0) == 0) { r.skip = true; pat = pat.substr(2); }
      else if (pat.rfind("+:", 0) == 0) pat = pat.substr(2);
      r.text = it.key();
      r.re = compile_python_regex(pat, dw);
      if (!it.value().is_object()) bad_input(dw, ": must be an object of overrides");
      for (auto f = it.value().begin(); f != it.value().end(); ++f)
        if (f.key() != "bits" && f.key() != "group_size" && f.key() != "desc_act" && f.key() != "sym")
          unsupported(dw, ": override ", qname(f.key()), " is not supported (bits, group_size, desc_act, sym)");
      if (!r.skip)
        r.weights = make(opt_int(it.value(), "bits", dw).value_or(*bits), opt_int(it.value(), "group_size", dw).value_or(gs),
                         opt_bool(it.value(), "desc_act", dw).value_or(desc_act), opt_bool(it.value(), "sym", dw).value_or(sym), dw);
      c.dynamic.push_back(std::move(r));
    }
  }
  return c;
}

QuantConfig parse_awq(const json& qc, const std::string& where) {
  QuantConfig c;
  c.source = QuantSource::kAWQ;
  c.where = where;
  c.quant_method = "awq";
  auto bits = opt_int(qc, "bits", where);
  if (!bits) bits = opt_int(qc, "w_bit", where);  // AutoAWQ's quant_config.json spelling
  if (!bits) bad_input(where, ": AWQ needs \"bits\"");
  if (*bits != 4) unsupported(where, ".bits: AWQ packing is defined for 4 bits, got ", *bits);
  auto gs = opt_int(qc, "group_size", where);
  if (!gs) gs = opt_int(qc, "q_group_size", where);
  if (!gs) bad_input(where, ": AWQ needs \"group_size\"");
  if (*gs == 0 || *gs < -1) bad_input(where, ".group_size: must be -1 or positive, got ", *gs);
  bool zp = opt_bool(qc, "zero_point", where).value_or(true);
  std::string ver = lower(opt_string(qc, "version", where).value_or("gemm"));
  if (ver != "gemm") unsupported(where, ".version: AWQ ", qname(ver), " packing is not supported; supported: gemm");
  SchemeGroup g;
  g.name = "awq";
  g.format = "awq";
  g.weights = validated(int_args(4, *gs, !zp, *gs > 0 ? Strategy::kGroup : Strategy::kChannel), where);
  c.groups.push_back(g);
  c.not_convert = string_list(qc, "modules_to_not_convert", where);
  return c;
}

QuantConfig parse_gpt_oss_mxfp4(const json& qc, const std::string& where) {
  QuantConfig c;
  c.source = QuantSource::kMXFP4;
  c.where = where;
  c.quant_method = "mxfp4";
  SchemeGroup g;
  g.name = "mxfp4";
  g.format = "mxfp4";
  QuantArgs w = float_args(4, Strategy::kGroup, 32);
  w.scale_dtype = DType::kU8;
  g.weights = validated(w, where);
  c.groups.push_back(g);
  c.not_convert = string_list(qc, "modules_to_not_convert", where);
  return c;
}

QuantConfig parse_fp8(const json& qc, const std::string& where) {
  QuantConfig c;
  c.source = QuantSource::kFP8;
  c.where = where;
  c.quant_method = "fp8";
  std::string fmt = lower(opt_string(qc, "fmt", where).value_or("e4m3"));
  if (fmt != "e4m3") unsupported(where, ".fmt: ", qname(fmt), "; supported: e4m3");
  std::string act = lower(opt_string(qc, "activation_scheme", where).value_or("dynamic"));
  if (act != "dynamic" && act != "static") bad_input(where, ".activation_scheme: must be \"dynamic\" or \"static\", got ", qname(act));
  SchemeGroup g;
  g.name = "fp8";
  g.format = "fp8";
  if (const json* bs = find_key(qc, "weight_block_size")) {
    if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer() ||
        (*bs)[0].get<int64_t>() <= 0 || (*bs)[1].get<int64_t>() <= 0 || (*bs)[0].get<int64_t>() > 65536 ||
        (*bs)[1].get<int64_t>() > 65536)
      bad_input(where, ".weight_block_size: must be two positive integers [rows, cols], got ", bs->dump().substr(0, 60));
    if (act != "dynamic") bad_input(where, ": block-wise FP8 needs activation_scheme \"dynamic\", got ", qname(act));
    QuantArgs w = float_args(8, Strategy::kBlock);
    w.block_structure = std::array<int, 2>{(*bs)[0].get<int>(), (*bs)[1].get<int>()};
    g.weights = validated(w, where);
    g.input_activations = validated(float_args(8, Strategy::kGroup, (*bs)[1].get<int>(), Dynamic::kDynamic), where);
  } else {
    g.weights = validated(float_args(8, Strategy::kTensor), where);
    g.input_activations = validated(
        float_args(8, Strategy::kTensor, std::nullopt, act == "dynamic" ? Dynamic::kDynamic : Dynamic::kStatic), where);
  }
  c.groups.push_back(g);
  c.not_convert = string_list(qc, "ignored_layers", where);
  for (auto& s : string_list(qc, "modules_to_not_convert", where)) c.not_convert.push_back(s);
  return c;
}

QuantConfig read_quant_config(const json& config, const json* hf_quant_config, const std::string& dir) {
  const std::string cfg_where = dir + "/config.json";
  if (!config.is_object()) bad_input(cfg_where, ": must be a JSON object");
  const json* qc = find_key(config, "quantization_config");
  const char* key = "quantization_config";
  if (const json* cc = find_key(config, "compression_config")) {
    if (qc) bad_input(cfg_where, ": has both quantization_config and compression_config");
    qc = cc;
    key = "compression_config";
  }
  const std::string hf_where = dir + "/hf_quant_config.json";
  if (!qc) {
    if (hf_quant_config) return parse_modelopt_legacy(*hf_quant_config, hf_where);
    return QuantConfig{};  // no quantization anywhere: an unquantized checkpoint
  }
  const std::string where = cfg_where + ": " + key;
  if (!qc->is_object()) bad_input(where, ": must be an object, got ", qc->type_name());
  auto method = opt_string(*qc, "quant_method", where);
  if (!method) {
    if (qc->contains("quant_algo"))
      bad_input(where, ": has quant_algo but no quant_method (a ModelOpt config needs \"quant_method\": \"modelopt\")");
    bad_input(where, ": names no quant_method");
  }
  const std::string m = lower(*method);
  QuantConfig c;
  if (m == "compressed-tensors") c = parse_compressed_tensors(*qc, where);
  else if (m == "modelopt" || m == "modelopt_fp4" || m == "modelopt_fp8" || m == "modelopt_mixed") c = parse_modelopt(*qc, where);
  else if (m == "gptq") c = parse_gptq(*qc, where);
  else if (m == "awq") c = parse_awq(*qc, where);
  else if (m == "mxfp4") c = parse_gpt_oss_mxfp4(*qc, where);
  else if (m == "fp8") c = parse_fp8(*qc, where);
  else
    unsupported(where, ".quant_method: ", qname(*method),
                " is not supported; supported: compressed-tensors, modelopt, gptq, awq, mxfp4, fp8");
  if (hf_quant_config && c.source == QuantSource::kModelOpt) {
    // Both files describe the checkpoint: they must name the same algorithm.
    QuantConfig legacy = parse_modelopt_legacy(*hf_quant_config, hf_where);
    if (legacy.algo != c.algo)
      bad_input(where, ": quant_algo ", c.algo, " disagrees with ", hf_where, " (", legacy.algo, ")");
  }
  return c;
}

QuantConfig read_quant_config(const CheckpointDir& ck) {
  return read_quant_config(ck.config(), ck.hf_quant_config(), ck.dir());
}

// ---- resolve ----------------------------------------------------------------------------------

namespace {

ModuleQuant from_group(const SchemeGroup& g, QuantSource src, std::string matched) {
  ModuleQuant m;
  m.weights = g.weights;
  m.input_activations = g.input_activations;
  m.format = g.format;
  m.matched = std::move(matched);
  m.source = src;
  return m;
}

ModuleQuant ignored_module(QuantSource src, std::string matched) {
  ModuleQuant m;
  m.ignored = true;
  m.matched = std::move(matched);
  m.source = src;
  return m;
}

// `module` equals `entry` or lies under it ("a.b" covers "a.b" and "a.b.c").
bool covers(const std::string& entry, const std::string& module) {
  return !entry.empty() && module.compare(0, entry.size(), entry) == 0 &&
         (module.size() == entry.size() || module[entry.size()] == '.');
}

bool is_experts_module(const std::string& module, const std::string& cls) {
  return cls == "FusedMoE" || cls == "GptOssExperts" || module.find(".experts.") != std::string::npos ||
         (module.size() >= 8 && module.compare(module.size() - 8, 8, ".experts") == 0) ||
         module.rfind("experts.", 0) == 0;
}

}  // namespace

std::optional<ModuleQuant> QuantConfig::resolve(const std::string& module, const std::string& cls) const {
  switch (source) {
    case QuantSource::kNone: return std::nullopt;
    case QuantSource::kCompressedTensors: {
      const auto any = [&](const std::vector<Target>& ts) {
        for (auto pass : {Target::kExact, Target::kRegex, Target::kClass})
          for (const auto& t : ts)
            if (target_matches(t, pass, module, cls)) return true;
        return false;
      };
      for (const auto& r : refusals)
        if (any(r.targets) && !any(r.ignore)) unsupported(r.what, " covers ", qname(module), " and ", r.why);
      for (auto pass : {Target::kExact, Target::kRegex, Target::kClass})
        for (const auto& t : ignore)
          if (target_matches(t, pass, module, cls)) return ignored_module(source, "ignore " + qname(t.text));
      for (auto pass : {Target::kExact, Target::kRegex, Target::kClass})
        for (const auto& g : groups)
          for (const auto& t : g.targets)
            if (target_matches(t, pass, module, cls))
              return from_group(g, source, "config_groups." + g.name + " target " + qname(t.text));
      return std::nullopt;
    }
    case QuantSource::kModelOpt:
    case QuantSource::kModelOptLegacy: {
      if (modelopt_excluded(exclude, module)) return ignored_module(source, "excluded by exclude_modules");
      if (algo != "MIXED_PRECISION") return from_group(groups.at(0), source, "quant_algo " + algo);
      if (auto it = layers.find(module); it != layers.end()) return from_group(it->second, source, it->second.name);
      // An entry for an enclosing module (fused experts) covers its children.
      const SchemeGroup* best = nullptr;
      for (const auto& [k, g] : layers)
        if (covers(k, module) && (!best || k.size() > best->name.size())) best = &g;
      if (best) return from_group(*best, source, best->name);
      // A parent queried for its children (vLLM's RoutedExperts lookup): first child in order.
      for (const auto& [k, g] : layers)
        if (covers(module, k)) return from_group(g, source, g.name);
      return std::nullopt;  // not in quantized_layers: unquantized
    }
    case QuantSource::kGPTQ: {
      if (module == "lm_head" || (module.size() > 8 && module.compare(module.size() - 8, 8, ".lm_head") == 0))
        if (!quantize_lm_head) return std::nullopt;
      for (const auto& r : dynamic) {
        if (!python_re_match(*r.re, module)) continue;
        if (r.skip) return ignored_module(source, "dynamic " + qname(r.text));
        SchemeGroup g = groups.at(0);
        g.weights = r.weights;
        return from_group(g, source, "dynamic " + qname(r.text));
      }
      return from_group(groups.at(0), source, "gptq");
    }
    case QuantSource::kAWQ: {
      // AutoAWQ / vLLM is_layer_skipped_awq: substring match.
      for (const auto& n : not_convert)
        if (!n.empty() && module.find(n) != std::string::npos)
          return ignored_module(source, "modules_to_not_convert " + qname(n));
      return from_group(groups.at(0), source, "awq");
    }
    case QuantSource::kMXFP4: {
      // transformers' Mxfp4Config converts only the MoE experts; patterns may use '*' wildcards.
      for (const auto& n : not_convert)
        if (covers(n, module) || fnmatch(n, module) || fnmatch(n + ".*", module))
          return ignored_module(source, "modules_to_not_convert " + qname(n));
      if (!is_experts_module(module, cls)) return std::nullopt;
      return from_group(groups.at(0), source, "mxfp4 experts");
    }
    case QuantSource::kFP8: {
      for (const auto& n : not_convert)
        if (covers(n, module)) return ignored_module(source, "ignored_layers " + qname(n));
      return from_group(groups.at(0), source, "fp8");
    }
  }
  return std::nullopt;
}

// ---- MoE scheme ---------------------------------------------------------------------------------

namespace {

bool same_args(const std::optional<QuantArgs>& a, const std::optional<QuantArgs>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->num_bits == b->num_bits && a->type == b->type && a->symmetric == b->symmetric && a->strat() == b->strat() &&
         a->group_size == b->group_size && a->block_structure == b->block_structure && a->dynamic == b->dynamic &&
         a->actorder == b->actorder && a->scale_dtype == b->scale_dtype;
}

bool same_module_quant(const std::optional<ModuleQuant>& a, const std::optional<ModuleQuant>& b) {
  const bool ua = !a || a->ignored, ub = !b || b->ignored;
  if (ua || ub) return ua == ub;
  return same_args(a->weights, b->weights) && same_args(a->input_activations, b->input_activations) &&
         a->format == b->format;
}

std::string describe(const std::optional<ModuleQuant>& m) { return m ? m->describe() : "unquantized (no target matched)"; }

const char* kSupported =
    "supported: unquantized; WNA16 int4/int8 group or channel (pack-quantized, gptq, awq); FP8 W8A8 "
    "(tensor W + static tensor A, tensor/channel W + dynamic token A, 128x128 block W + dynamic 1x128 or token A); "
    "FP8 weight-only; INT8 W8A8 (channel W + dynamic token A); W4A8 (int4 group W + dynamic token fp8/int8 A); "
    "NVFP4 (W4A4 or A16, group 16); MXFP4 A16 (group 32)";

bool is_float_format(const std::string& f) {
  return f == "float-quantized" || f == "naive-quantized" || f == "fp8" || f.rfind("modelopt FP8", 0) == 0;
}

}  // namespace

MoeScheme moe_scheme(const std::string& layer, const std::optional<ModuleQuant>& gate,
                     const std::optional<ModuleQuant>& up, const std::optional<ModuleQuant>& down) {
  if (!same_module_quant(gate, up))
    unsupported(layer, ": gate_proj and up_proj use different schemes: gate ", describe(gate), "; up ", describe(up),
                "; a fused MoE needs one scheme for gate, up and down");
  if (!same_module_quant(gate, down))
    unsupported(layer, ": gate_proj and down_proj use different schemes: gate ", describe(gate), "; down ",
                describe(down), "; a fused MoE needs one scheme for gate, up and down");
  MoeScheme s;
  if (!gate || gate->ignored || (!gate->weights && !gate->input_activations)) {
    s.kind = SchemeKind::kUnquantized;
    s.format = gate && gate->ignored ? "unquantized (ignored)" : "unquantized";
    return s;
  }
  const ModuleQuant& m = *gate;
  auto fail = [&](const char* why) -> MoeScheme {
    unsupported(layer, ": MoE scheme ", m.describe(), " is not supported (", why, "); ", kSupported);
  };
  if (!m.weights) return fail("activation-only quantization");
  const QuantArgs& w = *m.weights;
  const std::optional<QuantArgs>& a = m.input_activations;
  if (m.format == "dense" || m.format.rfind("sparse", 0) == 0 || m.format == "marlin-24")
    return fail("weights are stored in a non-quantized or sparse format");
  s.weights = w;
  s.input_activations = a;
  s.format = m.format;
  const Strategy ws = w.strat();

  // 1. MXFP4 weights, 16-bit activations.
  if (w.type == QuantType::kFloat && w.num_bits == 4 && ws == Strategy::kGroup) {
    if (w.group_size != 32) return fail("MXFP4 needs group_size 32");
    if (a) return fail("MXFP4 with quantized activations");
    if (m.format != "mxfp4-pack-quantized" && m.format != "mxfp4") return fail("MXFP4 weights in a non-MXFP4 format");
    s.kind = SchemeKind::kMXFP4A16;
    return s;
  }
  // 3. NVFP4 weights (tensor_group 16), NVFP4 or 16-bit activations.
  if (w.type == QuantType::kFloat && w.num_bits == 4) {
    if (ws != Strategy::kTensorGroup || w.group_size != 16) return fail("NVFP4 needs strategy tensor_group, group_size 16");
    if (m.format != "nvfp4-pack-quantized" && m.format.rfind("modelopt", 0) != 0)
      return fail("NVFP4 weights in a non-NVFP4 format");
    if (!a) {
      s.kind = SchemeKind::kNVFP4A16;
      return s;
    }
    if (a->type == QuantType::kFloat && a->num_bits == 4 && a->strat() == Strategy::kTensorGroup && a->group_size == 16 &&
        a->dynamic == Dynamic::kLocal) {
      s.kind = SchemeKind::kNVFP4;
      s.act = ActQuant::kNVFP4;
      return s;
    }
    return fail("NVFP4 weights need NVFP4 (tensor_group 16, dynamic local) or no activation quantization");
  }
  // 2. WNA16 and 6./7. W4A8: int weights, group or channel.
  if (w.type == QuantType::kInt) {
    if (w.num_bits != 4 && w.num_bits != 8) return fail("int weights need 4 or 8 bits");
    if (ws != Strategy::kGroup && ws != Strategy::kChannel) return fail("int weights need group or channel strategy");
    if (!a) {
      if (m.format != "pack-quantized" && m.format != "gptq" && m.format != "gptq_v2" && m.format != "awq")
        return fail("WNA16 needs format pack-quantized, gptq or awq");
      s.kind = SchemeKind::kWNA16;
      return s;
    }
    const bool token_dyn = a->strat() == Strategy::kToken && a->dynamic == Dynamic::kDynamic && a->symmetric;
    if (w.num_bits == 8 && ws == Strategy::kChannel && w.symmetric && a->type == QuantType::kInt && a->num_bits == 8 &&
        token_dyn) {
      if (m.format != "int-quantized" && m.format != "naive-quantized")
        return fail("INT8 W8A8 needs format int-quantized");
      s.kind = SchemeKind::kINT8W8A8;
      s.act = ActQuant::kINT8Token;
      return s;
    }
    if (w.num_bits == 4 && ws == Strategy::kGroup && w.symmetric && a->num_bits == 8 && token_dyn) {
      if (m.format != "pack-quantized" && m.format != "int-quantized")
        return fail("W4A8 needs format pack-quantized or int-quantized");
      s.kind = a->type == QuantType::kFloat ? SchemeKind::kW4A8FP8 : SchemeKind::kW4A8INT8;
      s.act = a->type == QuantType::kFloat ? ActQuant::kFP8Token : ActQuant::kINT8Token;
      return s;
    }
    return fail("int weights with these activations");
  }
  // 4. FP8 weights.
  if (w.type == QuantType::kFloat && w.num_bits == 8) {
    if (!is_float_format(m.format)) return fail("FP8 weights need format float-quantized, modelopt FP8 or fp8");
    if (w.scale_dtype == DType::kU8 || w.scale_dtype == DType::kE8M0) return fail("MXFP8 is not supported");
    if (ws != Strategy::kTensor && ws != Strategy::kChannel && ws != Strategy::kBlock)
      return fail("FP8 weights need tensor, channel or block strategy");
    if (ws == Strategy::kBlock && w.block_structure != std::array<int, 2>{128, 128})
      return fail("FP8 block weights need 128x128 blocks");
    if (!a) {
      s.kind = SchemeKind::kFP8A16;
      return s;
    }
    if (a->type != QuantType::kFloat || a->num_bits != 8) return fail("FP8 weights need FP8 activations or none");
    const Strategy as = a->strat();
    s.kind = SchemeKind::kFP8W8A8;
    if (as == Strategy::kTensor && a->dynamic == Dynamic::kStatic && ws != Strategy::kBlock) {
      s.act = ActQuant::kFP8Tensor;
      return s;
    }
    if (as == Strategy::kToken && a->dynamic == Dynamic::kDynamic) {
      s.act = ActQuant::kFP8Token;
      return s;
    }
    if (as == Strategy::kGroup && a->dynamic == Dynamic::kDynamic && a->group_size == 128 && ws == Strategy::kBlock) {
      s.act = ActQuant::kFP8Group128;
      return s;
    }
    return fail("this FP8 activation quantization (static per-channel, dynamic per-tensor, or group without block weights)");
  }
  return fail("unknown weight type");
}

}  // namespace qmoe::formats
