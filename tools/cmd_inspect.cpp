// `qmoe inspect DIR [--json]`: what qmoe reads from a checkpoint, per MoE layer: architecture,
// scheme, where it came from, tensor shapes and scale dtypes, the NVFP4 global-scale convention,
// bytes, and the method each backend would run (or why it refuses).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "dispatch/select.h"

namespace qmoe::cli {
namespace {

using nlohmann::json;

json proj_json(const ProjWeights& p) {
  json j;
  auto put = [&](const char* k, const Tensor& t) {
    if (t.defined()) j[k] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}};
  };
  put("weight", p.weight), put("scale", p.scale), put("zero_point", p.zero_point), put("g_idx", p.g_idx);
  put("global_scale", p.global_scale), put("input_scale", p.input_scale), put("bias", p.bias);
  return j;
}

std::string proj_line(const ProjWeights& p) {
  std::string s = "weight " + tensor_desc(p.weight);
  auto add = [&](const char* k, const Tensor& t) {
    if (t.defined()) s += std::string("  ") + k + " " + tensor_desc(t);
  };
  add("scale", p.scale), add("zero_point", p.zero_point), add("g_idx", p.g_idx);
  add("global_scale", p.global_scale), add("input_scale", p.input_scale), add("bias", p.bias);
  return s;
}

int run_inspect(const std::string& dir, bool as_json, LoadOptions lo) {
  lo.progress = progress_bar(dir);
  Model m = load_model(dir, lo);
  json out = {{"dir", m.dir}, {"arch", m.arch}, {"quant_method", m.quant_method}, {"layers", json::array()}};
  if (!as_json)
    std::printf("%s: arch %s, quantization %s, %zu MoE layers\n", dir.c_str(), m.arch.c_str(), m.quant_method.c_str(),
                m.layers.size());
  for (const MoeLayerSpec& l : m.layers) {
    const ExpertWeights& w = l.experts;
    const RouterConfig& r = l.config.router;
    size_t bytes = proj_bytes(w.w13) + proj_bytes(w.w2);
    size_t shared_bytes = l.shared_expert ? proj_bytes(l.shared_expert->w13) + proj_bytes(l.shared_expert->w2) : 0;
    json lj = {{"layer", l.layer},
               {"prefix", l.prefix},
               {"arch", m.arch},
               {"scheme", w.scheme.key()},
               {"scheme_kind", scheme_kind_name(w.scheme.kind)},
               {"activation_quant", act_quant_name(w.scheme.act)},
               {"format_source", l.format_source},
               {"global_scale_convention", l.global_scale_convention},
               {"num_experts", l.config.num_experts},
               {"local_experts", w.num_experts},
               {"hidden", w.hidden},
               {"intermediate", w.intermediate},
               {"group_size", w.group_size},
               {"block", {w.block[0], w.block[1]}},
               {"router", {{"kind", router_kind_name(r.kind)}, {"top_k", r.top_k}, {"renormalize", r.renormalize},
                           {"apply_router_weight_on_input", r.apply_router_weight_on_input}}},
               {"activation", activation_name(l.config.activation)},
               {"w13", proj_json(w.w13)},
               {"w2", proj_json(w.w2)},
               {"bytes", bytes},
               {"shared_expert_bytes", shared_bytes},
               {"methods", json::object()}};
    if (l.shared_expert) lj["shared_expert"] = {{"scheme", l.shared_expert->scheme.key()}, {"intermediate", l.shared_expert->intermediate},
                                                {"w13", proj_json(l.shared_expert->w13)}, {"w2", proj_json(l.shared_expert->w2)}};
    if (l.router_bias.defined()) lj["router_bias"] = tensor_desc(l.router_bias);
    const ExpertWeights* sh = l.shared_expert ? &*l.shared_expert : nullptr;
    std::string methods;
    for (Backend b : {Backend::kReference, Backend::kCpu, Backend::kCuda}) {
      MethodChoice c = query_method(w, b, l.config, sh, r.kind == RouterKind::kGrouped ? l.router_bias : Tensor());
      lj["methods"][backend_name(b)] = c.ok ? json{{"method", c.method}} : json{{"refused", c.reason}};
      methods += str("\n    ", backend_name(b), ": ", c.ok ? c.method : "refused: " + c.reason);
    }
    out["layers"].push_back(lj);
    if (as_json) continue;
    std::printf("layer %d  %s\n", l.layer, l.prefix.c_str());
    std::printf("  scheme       %s  [%s]\n", w.scheme.key().c_str(), l.format_source.c_str());
    std::printf("  experts      E=%d (local %d)  H=%d  I=%d  group %d  block %dx%d  activation %s\n", l.config.num_experts,
                w.num_experts, w.hidden, w.intermediate, w.group_size, w.block[0], w.block[1],
                activation_name(l.config.activation));
    std::printf("  router       %s top_k=%d renormalize=%d weight_on_input=%d%s\n", router_kind_name(r.kind), r.top_k,
                r.renormalize, r.apply_router_weight_on_input,
                l.router_bias.defined() ? ("  bias " + tensor_desc(l.router_bias)).c_str() : "");
    std::printf("  w13          %s\n  w2           %s\n", proj_line(w.w13).c_str(), proj_line(w.w2).c_str());
    if (!l.global_scale_convention.empty()) std::printf("  global scale %s\n", l.global_scale_convention.c_str());
    if (l.shared_expert)
      std::printf("  shared       %s I=%d  w13 %s  w2 %s\n", l.shared_expert->scheme.key().c_str(),
                  l.shared_expert->intermediate, tensor_desc(l.shared_expert->w13.weight).c_str(),
                  tensor_desc(l.shared_expert->w2.weight).c_str());
    std::printf("  bytes        %zu experts + %zu shared\n", bytes, shared_bytes);
    std::printf("  methods%s\n", methods.c_str());
  }
  if (as_json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

Registrar reg("inspect", "show every MoE layer of a checkpoint: scheme, layout, shapes, scale dtypes, methods",
              [](CLI::App& app) -> std::function<int()> {
                auto dir = std::make_shared<std::string>();
                auto as_json = std::make_shared<bool>(false);
                app.add_option("dir", *dir, "model directory")->required();
                app.add_flag("--json", *as_json, "machine-readable output");
                auto lo = std::make_shared<LoadOptions>();
                app.add_option("--tp", lo->tp_size, "tensor-parallel size (splits I)")->capture_default_str();
                app.add_option("--tp-rank", lo->tp_rank, "this TP rank")->capture_default_str();
                app.add_option("--ep", lo->ep_size, "expert-parallel size (splits E)")->capture_default_str();
                app.add_option("--ep-rank", lo->ep_rank, "this EP rank")->capture_default_str();
                return [dir, as_json, lo]() { return run_inspect(*dir, *as_json, *lo); };
              });

}  // namespace
}  // namespace qmoe::cli
