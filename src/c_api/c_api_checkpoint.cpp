// C ABI: checkpoints. qmoe_checkpoint_load runs load_model (src/models) and keeps the canonical
// MoE layers; info_json reports what `qmoe inspect` does (scheme, shapes, dtypes, router) as one
// JSON object; qmoe_checkpoint_tensor exposes any canonical tensor as a read-only host view; and
// qmoe_checkpoint_layer_create prepares one layer for a backend.
#include <cstring>

#include <nlohmann/json.hpp>

#include "c_api/c_api_internal.h"
#include "qmoe/model.h"

struct qmoe_checkpoint {
  qmoe::Model model;
  std::string info_json;
};

namespace qmoe::capi {

qmoe_layer* make_layer(ExpertWeights w, MoeConfig cfg, Backend backend, std::optional<ExpertWeights> shared,
                       Tensor router_bias);

namespace {

constexpr const char* kProjFields[] = {"weight", "scale", "zero_point", "g_idx", "global_scale", "input_scale", "bias"};

const Tensor& proj_field(const ProjWeights& p, std::string_view f) {
  if (f == "weight") return p.weight;
  if (f == "scale") return p.scale;
  if (f == "zero_point") return p.zero_point;
  if (f == "g_idx") return p.g_idx;
  if (f == "global_scale") return p.global_scale;
  if (f == "input_scale") return p.input_scale;
  if (f == "bias") return p.bias;
  static const Tensor kNone;
  return kNone;
}

// Every tensor of a layer that is present, by the names qmoe_checkpoint_tensor accepts.
std::vector<std::pair<std::string, const Tensor*>> layer_tensors(const MoeLayerSpec& s) {
  std::vector<std::pair<std::string, const Tensor*>> r;
  if (s.router_weight.defined()) r.emplace_back("router_weight", &s.router_weight);
  if (s.router_bias.defined()) r.emplace_back("router_bias", &s.router_bias);
  auto add = [&](const std::string& prefix, const ExpertWeights& w) {
    for (const char* f : kProjFields) {
      const Tensor& a = proj_field(w.w13, f);
      if (a.defined()) r.emplace_back(prefix + "w13." + f, &a);
    }
    for (const char* f : kProjFields) {
      const Tensor& a = proj_field(w.w2, f);
      if (a.defined()) r.emplace_back(prefix + "w2." + f, &a);
    }
  };
  add("", s.experts);
  if (s.shared_expert) add("shared.", *s.shared_expert);
  return r;
}

nlohmann::json router_json(const RouterConfig& r) {
  nlohmann::json j = {{"kind", router_kind_name(r.kind)},
                      {"top_k", r.top_k},
                      {"renormalize", r.renormalize},
                      {"apply_router_weight_on_input", r.apply_router_weight_on_input}};
  if (r.kind == RouterKind::kGrouped) {
    j["scoring"] = r.grouped_sigmoid ? "sigmoid" : "softmax";
    j["num_groups"] = r.num_groups;
    j["topk_group"] = r.topk_group;
    j["routed_scaling_factor"] = r.routed_scaling_factor;
  }
  return j;
}

std::string info_json(const Model& m) {
  nlohmann::json layers = nlohmann::json::array();
  for (const MoeLayerSpec& s : m.layers) {
    const ExpertWeights& w = s.experts;
    nlohmann::json tensors = nlohmann::json::object();
    for (auto& [name, t] : layer_tensors(s))
      tensors[name] = {{"dtype", dtype_name(t->dtype())}, {"shape", t->shape()}};
    layers.push_back({
        {"layer", s.layer},
        {"prefix", s.prefix},
        {"scheme", w.scheme.key()},
        {"scheme_kind", scheme_kind_name(w.scheme.kind)},
        {"act_quant", act_quant_name(w.scheme.act)},
        {"format", w.scheme.format},
        {"format_source", s.format_source},
        {"global_scale_convention", s.global_scale_convention},
        {"num_experts", w.num_experts},
        {"num_experts_global", s.config.num_experts},
        {"hidden", w.hidden},
        {"intermediate", w.intermediate},
        {"group_size", w.group_size},
        {"block", {w.block[0], w.block[1]}},
        {"act_dtype", dtype_name(w.act_dtype)},
        {"activation", activation_name(s.config.activation)},
        {"router", router_json(s.config.router)},
        {"expert_parallel", !s.config.expert_map.empty()},
        {"shared_expert", s.shared_expert.has_value()},
        {"tensors", tensors},
    });
  }
  nlohmann::json j = {{"dir", m.dir}, {"arch", m.arch}, {"quant_method", m.quant_method}, {"layers", layers}};
  return j.dump();
}

const MoeLayerSpec& layer_at(const qmoe_checkpoint* c, int32_t index) {
  QMOE_CHECK(c != nullptr, kBadInput, "checkpoint is NULL");
  QMOE_CHECK(index >= 0 && static_cast<size_t>(index) < c->model.layers.size(), kBadInput, c->model.dir,
             ": MoE layer index ", index, " is outside [0, ", c->model.layers.size(), ")");
  return c->model.layers[index];
}

}  // namespace
}  // namespace qmoe::capi

using namespace qmoe;
using namespace qmoe::capi;

extern "C" {

void qmoe_load_options_init(qmoe_load_options_t* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->tp_size = 1;
  o->ep_size = 1;
}

qmoe_status_t qmoe_checkpoint_load(const char* dir, const qmoe_load_options_t* opts, qmoe_checkpoint_t** out) {
  return fence([&] {
    QMOE_CHECK(out != nullptr, kBadInput, "qmoe_checkpoint_load: out is NULL");
    *out = nullptr;
    QMOE_CHECK(dir != nullptr, kBadInput, "qmoe_checkpoint_load: dir is NULL");
    LoadOptions lo;
    if (opts != nullptr) {
      lo.tp_rank = opts->tp_rank;
      lo.tp_size = opts->tp_size;
      lo.ep_rank = opts->ep_rank;
      lo.ep_size = opts->ep_size;
      QMOE_CHECK(opts->num_only_layers >= 0 && (opts->num_only_layers == 0 || opts->only_layers != nullptr),
                 kBadInput, "load options: only_layers is NULL with num_only_layers ", opts->num_only_layers);
      lo.only_layers.assign(opts->only_layers, opts->only_layers + opts->num_only_layers);
    }
    QMOE_CHECK(lo.tp_size >= 1 && lo.tp_rank >= 0 && lo.tp_rank < lo.tp_size && lo.ep_size >= 1 && lo.ep_rank >= 0 &&
                   lo.ep_rank < lo.ep_size,
               kBadInput, "load options: need 0 <= tp_rank < tp_size and 0 <= ep_rank < ep_size; got tp ", lo.tp_rank,
               "/", lo.tp_size, ", ep ", lo.ep_rank, "/", lo.ep_size);
    auto c = std::make_unique<qmoe_checkpoint>();
    c->model = load_model(dir, lo);
    c->info_json = info_json(c->model);
    *out = c.release();
  });
}

void qmoe_checkpoint_free(qmoe_checkpoint_t* c) { delete c; }

qmoe_status_t qmoe_checkpoint_num_layers(const qmoe_checkpoint_t* c, int32_t* out) {
  return fence([&] {
    QMOE_CHECK(c != nullptr && out != nullptr, kBadInput, "qmoe_checkpoint_num_layers: NULL argument");
    *out = static_cast<int32_t>(c->model.layers.size());
  });
}

qmoe_status_t qmoe_checkpoint_info_json(const qmoe_checkpoint_t* c, const char** out) {
  return fence([&] {
    QMOE_CHECK(c != nullptr && out != nullptr, kBadInput, "qmoe_checkpoint_info_json: NULL argument");
    *out = c->info_json.c_str();
  });
}

qmoe_status_t qmoe_checkpoint_tensor(const qmoe_checkpoint_t* c, int32_t index, const char* name, qmoe_tensor_t* out) {
  return fence([&] {
    QMOE_CHECK(name != nullptr && out != nullptr, kBadInput, "qmoe_checkpoint_tensor: NULL argument");
    const MoeLayerSpec& s = layer_at(c, index);
    auto all = layer_tensors(s);
    for (auto& [n, t] : all) {
      if (n != name) continue;
      QMOE_CHECK(t->dim() <= QMOE_MAX_DIMS, kInternal, n, " has ", t->dim(), " dims");
      std::memset(out, 0, sizeof(*out));
      out->data = const_cast<void*>(t->raw());
      out->dtype = static_cast<int32_t>(t->dtype());
      out->ndim = static_cast<int32_t>(t->dim());
      for (int64_t i = 0; i < t->dim(); ++i) out->shape[i] = t->size(i);
      out->device = QMOE_DEVICE_CPU;
      return;
    }
    std::string have;
    for (auto& [n, t] : all) have += (have.empty() ? "" : ", ") + n;
    bad_input(c->model.dir, ": MoE layer ", s.layer, " (", s.prefix, ") has no tensor '", name, "'; it has ", have);
  });
}

qmoe_status_t qmoe_checkpoint_layer_create(const qmoe_checkpoint_t* c, int32_t index, qmoe_backend_t backend,
                                           qmoe_layer_t** out) {
  return fence([&] {
    QMOE_CHECK(out != nullptr, kBadInput, "qmoe_checkpoint_layer_create: out is NULL");
    *out = nullptr;
    const MoeLayerSpec& s = layer_at(c, index);
    QMOE_CHECK(backend >= QMOE_BACKEND_REFERENCE && backend <= QMOE_BACKEND_CUDA, kBadInput, "backend ",
               static_cast<int>(backend), " is not a qmoe_backend_t");
    // Copies of the specs share the mapped bytes (Tensor holds the mapping), so the layer outlives
    // the checkpoint handle.
    *out = make_layer(s.experts, s.config, static_cast<Backend>(backend), s.shared_expert, s.router_bias);
  });
}

}  // extern "C"
