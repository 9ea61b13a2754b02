// compressed-tensors QuantizationArgs JSON -> qmoe::QuantArgs (formats.md §2a). Mirrors the
// pydantic model (extra = "forbid"): unknown keys are errors, `observer` / `observer_kwargs` are
// accepted and ignored; case-insensitive enum strings; actorder aliases ("dynamic" -> group,
// "static" -> weight, true -> group, false -> none); legacy "NxM" block_structure strings; torch
// dtype names ("torch.bfloat16" or "bfloat16") for scale_dtype / zp_dtype; then
// QuantArgs::validate(). Every error is kBadInput naming `where` and the key, except a real torch
// dtype qmoe has no DType for (kUnsupported).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "qmoe/quant.h"

namespace qmoe::formats {

// `where` names the object, e.g. "config.json: quantization_config.config_groups.group_0.weights".
QuantArgs parse_quant_args(const nlohmann::json& j, const std::string& where);

// torch dtype name ("torch.float8_e4m3fn", "bfloat16", "half", ...) -> DType. nullopt when the name
// is not a torch dtype; throws kUnsupported (naming `where`) for torch dtypes qmoe does not have.
std::optional<DType> torch_dtype_from_name(std::string_view name, const std::string& where);

}  // namespace qmoe::formats
