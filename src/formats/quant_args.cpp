// compressed-tensors QuantizationArgs JSON -> QuantArgs: field validators of quant_args.py
// (type / strategy / dynamic / actorder lower-cased, group_size >= -1, block_structure list or
// legacy "NxM"), extra = "forbid", then QuantArgs::validate() for the model-level rules.
#include "formats/quant_args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include "qmoe/error.h"

namespace qmoe::formats {

namespace {

using json = nlohmann::json;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

[[noreturn]] void bad_field(const std::string& where, const char* key, const json& v, const char* expected) {
  bad_input(where, ": ", key, " must be ", expected, ", got ", show(v));
}

// pydantic (lax) int: JSON integers, and floats with an integral value (8.0); not bools or strings.
int as_int(const json& v, const std::string& where, const char* key) {
  if (v.is_number_integer()) {
    const auto x = v.get<int64_t>();
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      bad_field(where, key, v, "an integer in the int range");
    return static_cast<int>(x);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= std::numeric_limits<int>::max())
      return static_cast<int>(d);
  }
  bad_field(where, key, v, "an integer");
}

// Python's int(str): optional surrounding whitespace, optional sign, decimal digits.
std::optional<int> python_int(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return std::nullopt;
  std::string t = s.substr(b, e - b + 1);
  size_t i = (t[0] == '+' || t[0] == '-') ? 1 : 0;
  if (i == t.size() || t.size() - i > 9) return std::nullopt;
  for (size_t k = i; k < t.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(t[k]))) return std::nullopt;
  return std::stoi(t);
}

std::array<int, 2> parse_block(const json& v, const std::string& where) {
  const char* want = "a list of two ints [rows, cols] (or the legacy string \"NxM\")";
  if (v.is_string()) {  // legacy "128x128": value.split("x") then int() of each part
    const std::string s = v.get<std::string>();
    const size_t x = s.find('x');
    if (x == std::string::npos || s.find('x', x + 1) != std::string::npos) bad_field(where, "block_structure", v, want);
    auto r = python_int(s.substr(0, x)), c = python_int(s.substr(x + 1));
    if (!r || !c) bad_field(where, "block_structure", v, want);
    return {*r, *c};
  }
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
    bad_field(where, "block_structure", v, want);
  return {as_int(v[0], where, "block_structure[0]"), as_int(v[1], where, "block_structure[1]")};
}

Strategy parse_strategy(const json& v, const std::string& where) {
  if (!v.is_string()) bad_field(where, "strategy", v, "a string");
  const std::string s = lower(v.get<std::string>());
  if (s == "tensor") return Strategy::kTensor;
  if (s == "channel") return Strategy::kChannel;
  if (s == "group") return Strategy::kGroup;
  if (s == "block") return Strategy::kBlock;
  if (s == "token") return Strategy::kToken;
  if (s == "tensor_group") return Strategy::kTensorGroup;
  if (s == "attn_head") return Strategy::kAttnHead;
  bad_field(where, "strategy", v, "one of tensor, channel, group, block, token, tensor_group, attn_head");
}

ActOrder parse_actorder(const json& v, const std::string& where) {
  if (v.is_null()) return ActOrder::kNone;
  if (v.is_boolean()) return v.get<bool>() ? ActOrder::kGroup : ActOrder::kNone;
  if (v.is_string()) {
    const std::string s = lower(v.get<std::string>());
    if (s == "group" || s == "dynamic") return ActOrder::kGroup;   // "dynamic" is an alias of group
    if (s == "weight" || s == "static") return ActOrder::kWeight;  // "static" is an alias of weight
  }
  bad_field(where, "actorder", v, "\"group\", \"weight\", \"dynamic\", \"static\", a bool or null");
}

Dynamic parse_dynamic(const json& v, const std::string& where) {
  if (v.is_boolean()) return v.get<bool>() ? Dynamic::kDynamic : Dynamic::kStatic;
  if (v.is_string() && lower(v.get<std::string>()) == "local") return Dynamic::kLocal;
  bad_field(where, "dynamic", v, "a bool or \"local\"");
}

std::optional<DType> parse_dtype(const json& v, const std::string& where, const char* key) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) bad_field(where, key, v, "a torch dtype name such as \"torch.bfloat16\"");
  const std::string name = v.get<std::string>();
  std::optional<DType> d = torch_dtype_from_name(name, str(where, ": ", key));
  if (!d) bad_input(where, ": ", key, ": no such torch dtype `", name, "`");
  return d;
}

}  // namespace

std::optional<DType> torch_dtype_from_name(std::string_view name, const std::string& where) {
  std::string n(name);
  if (n.rfind("torch.", 0) == 0) n = n.substr(6);
  struct Entry {
    const char* name;
    DType dtype;
  };
  static const Entry kMap[] = {
      {"float32", DType::kF32},       {"float", DType::kF32},          {"float64", DType::kF64},
      {"double", DType::kF64},        {"float16", DType::kF16},        {"half", DType::kF16},
      {"bfloat16", DType::kBF16},     {"float8_e4m3fn", DType::kF8E4M3}, {"float8_e5m2", DType::kF8E5M2},
      {"float8_e8m0fnu", DType::kE8M0}, {"int8", DType::kI8},          {"uint8", DType::kU8},
      {"int16", DType::kI16},         {"short", DType::kI16},          {"uint16", DType::kU16},
      {"int32", DType::kI32},         {"int", DType::kI32},            {"uint32", DType::kU32},
      {"int64", DType::kI64},         {"long", DType::kI64},           {"uint64", DType::kU64},
      {"bool", DType::kBool},
  };
  for (const Entry& e : kMap)
    if (n == e.name) return e.dtype;
  // real torch dtypes with no qmoe DType
  static const char* kTorchOnly[] = {"complex32", "complex64", "complex128", "cfloat", "cdouble", "chalf",
                                     "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn_x2", "qint8", "quint8",
                                     "qint32", "quint4x2", "quint2x4", "bits8", "bits16", "bits1x8", "bits2x4",
                                     "bits4x2", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
                                     "int1", "int2", "int3", "int4", "int5", "int6", "int7"};
  for (const char* t : kTorchOnly)
    if (n == t) unsupported(where, ": torch dtype torch.", n, " has no qmoe equivalent");
  return std::nullopt;
}

QuantArgs parse_quant_args(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) bad_input(where, ": quantization args must be a JSON object, got ", j.type_name());
  QuantArgs a;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "num_bits") {
      a.num_bits = as_int(v, where, "num_bits");
    } else if (k == "type") {
      if (!v.is_string()) bad_field(where, "type", v, "\"int\" or \"float\"");
      const std::string t = lower(v.get<std::string>());
      if (t == "int") a.type = QuantType::kInt;
      else if (t == "float") a.type = QuantType::kFloat;
      else bad_field(where, "type", v, "\"int\" or \"float\"");
    } else if (k == "symmetric") {
      if (!v.is_boolean()) bad_field(where, "symmetric", v, "a bool");
      a.symmetric = v.get<bool>();
    } else if (k == "group_size") {
      if (!v.is_null()) {
        a.group_size = as_int(v, where, "group_size");
        if (*a.group_size < -1)
          bad_input(where, ": invalid group_size ", *a.group_size,
                    "; use group_size > 0 for strategy 'group' and group_size = -1 for 'channel'");
      }
    } else if (k == "strategy") {
      if (!v.is_null()) a.strategy = parse_strategy(v, where);
    } else if (k == "block_structure") {
      if (!v.is_null()) a.block_structure = parse_block(v, where);
    } else if (k == "dynamic") {
      a.dynamic = parse_dynamic(v, where);
    } else if (k == "actorder") {
      a.actorder = parse_actorder(v, where);
    } else if (k == "scale_dtype") {
      a.scale_dtype = parse_dtype(v, where, "scale_dtype");
    } else if (k == "zp_dtype") {
      a.zp_dtype = parse_dtype(v, where, "zp_dtype");
    } else if (k == "observer" || k == "observer_kwargs") {
      // calibration-only fields: accepted and ignored, as inference engines do
    } else {
      bad_input(where, ": unknown key \"", k, "\" (compressed-tensors QuantizationArgs forbids extra fields; known: "
                "num_bits, type, symmetric, group_size, strategy, block_structure, dynamic, actorder, scale_dtype, "
                "zp_dtype, observer, observer_kwargs)");
    }
  }
  a.validate(where);
  return a;
}

}  // namespace qmoe::formats
