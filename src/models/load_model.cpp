// load_model: a checkpoint directory -> one MoeLayerSpec per MoE layer (canonical, validated,
// sliced for this TP / EP rank). config.json gives the architecture (arch.h), the quantization
// config the per-module scheme (formats/quant_config.h, vLLM's get_moe_method rules), and the
// layouts (layouts.h) turn the stored tensors into the canonical encoding. Every check that can
// fail (TP / EP divisibility, scheme agreement) runs for all layers before any tensor is decoded;
// any error aborts the whole load, so nothing is half-loaded.
#include <algorithm>
#include <cmath>

#include "core/codecs.h"
#include "formats/quant_config.h"
#include "models/arch.h"
#include "models/layouts.h"
#include "models/slicing.h"
#include "qmoe/checkpoint.h"
#include "qmoe/model.h"

namespace qmoe {
namespace {

using models::ArchInfo;
using models::ModuleFormat;

// The storage layout of a module from its scheme's format string (quant_config.h names).
ModuleFormat module_format(const MoeScheme& s, const std::string& where) {
  const std::string& f = s.format;
  if (s.kind == SchemeKind::kUnquantized) return ModuleFormat::kDense;
  if (f == "pack-quantized") return ModuleFormat::kCtPacked;
  if (f == "int-quantized" || f == "float-quantized" || f == "naive-quantized") return ModuleFormat::kCtNaive;
  if (f == "nvfp4-pack-quantized") return ModuleFormat::kCtNvfp4;
  if (f == "mxfp4-pack-quantized") return ModuleFormat::kCtMxfp4;
  if (f.rfind("modelopt", 0) == 0)
    return (s.kind == SchemeKind::kNVFP4 || s.kind == SchemeKind::kNVFP4A16) ? ModuleFormat::kModeloptNvfp4
                                                                              : ModuleFormat::kModeloptFp8;
  if (f == "gptq") return ModuleFormat::kGptq;
  if (f == "gptq_v2") return ModuleFormat::kGptqV2;
  if (f == "awq") return ModuleFormat::kAwq;
  if (f == "fp8") return ModuleFormat::kDeepseekFp8;
  unsupported(where, ": scheme ", s.key(), " stored as '", f, "' has no per-expert layout in qmoe (supported: "
              "compressed-tensors pack/int/float/nvfp4/mxfp4, modelopt, gptq, awq, fp8 weight_scale_inv)");
}

// Metadata-only ExpertWeights (no tensors): what TP checks and method selection need.
ExpertWeights skeleton(const MoeScheme& s, int E, int H, int I, DType act) {
  ExpertWeights w;
  w.scheme = s;
  w.num_experts = E, w.hidden = H, w.intermediate = I, w.act_dtype = act;
  if (s.kind != SchemeKind::kUnquantized) {
    int g = s.weights.group_size.value_or(0);
    Strategy st = s.weights.strat();
    if (g > 0 && (st == Strategy::kGroup || st == Strategy::kTensorGroup)) w.group_size = g;
    if (st == Strategy::kBlock && s.weights.block_structure) w.block = *s.weights.block_structure;
  }
  return w;
}

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor r(DType::kF32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    r.data_mut<float>()[i] = t.dtype() == DType::kBF16 ? codec::bf16_to_f32(t.data<uint16_t>()[i])
                                                        : codec::f16_to_f32(t.data<uint16_t>()[i]);
  return r;
}

struct LayerPlan {
  int layer = 0;
  std::string prefix, where;
  MoeScheme scheme;
  std::string fused;  // "" per-expert, else the fused kind
  ModuleFormat module = ModuleFormat::kDense;
  bool has_shared = false;
  MoeScheme shared_scheme;
  ModuleFormat shared_module = ModuleFormat::kDense;
};

std::string source_name(const formats::QuantConfig& qc) {
  return qc.quantized() ? formats::quant_source_name(qc.source) : "none";
}

}  // namespace

Model load_model(const std::string& dir, const LoadOptions& opts) {
  std::shared_ptr<CheckpointDir> ck = CheckpointDir::open(dir);
  const std::string cfg_path = dir + "/config.json";
  ArchInfo arch = models::read_arch(ck->config(), cfg_path);
  formats::QuantConfig qc = formats::read_quant_config(ck->config(), ck->hf_quant_config(), dir);
  Model model;
  model.dir = dir;
  model.arch = arch.arch;
  model.quant_method = source_name(qc);

  if (opts.tp_size < 1 || opts.tp_rank < 0 || opts.tp_rank >= opts.tp_size)
    bad_input(dir, ": TP rank ", opts.tp_rank, " of ", opts.tp_size, " is not a valid rank");
  if (opts.ep_size < 1 || opts.ep_rank < 0 || opts.ep_rank >= opts.ep_size)
    bad_input(dir, ": EP rank ", opts.ep_rank, " of ", opts.ep_size, " is not a valid rank");
  std::vector<int> layers;
  for (int l : opts.only_layers)
    if (!arch.is_moe_layer(l)) bad_input(dir, ": layer ", l, " is not a MoE layer of this ", arch.arch, " model");
  for (int l : arch.moe_layers)
    if (opts.only_layers.empty() || std::count(opts.only_layers.begin(), opts.only_layers.end(), l)) layers.push_back(l);

  // ---- plan every layer first: schemes, layouts, divisibility ----
  std::vector<LayerPlan> plans;
  for (int l : layers) {
    LayerPlan p;
    p.layer = l;
    p.prefix = arch.layer_prefix(l);
    p.where = str(dir, ": layer ", l, " (", p.prefix, ")");
    const std::string ex = p.prefix + ".experts";
    auto resolve = [&](const std::string& m) { return qc.resolve(m); };
    const std::string e0 = ex + ".0.";
    p.scheme = formats::moe_scheme(p.where, resolve(e0 + arch.gate_name), resolve(e0 + arch.up_name),
                                   resolve(e0 + arch.down_name));
    const bool fused = ck->has(ex + ".gate_up_proj") || ck->has(ex + ".gate_up_proj_blocks");
    if (arch.arch == "gpt_oss") {
      if (!fused) bad_input(dir, ": missing tensor ", ex, ".gate_up_proj_blocks or ", ex, ".gate_up_proj (", p.where, ")");
      if (p.scheme.kind == SchemeKind::kMXFP4A16) p.fused = "mxfp4";
      else if (p.scheme.kind == SchemeKind::kUnquantized) p.fused = "bf16";
      else unsupported(p.where, ": gpt-oss experts with scheme ", p.scheme.key(), " (qmoe reads gpt-oss MXFP4 and bf16)");
    } else if (fused) {
      if (arch.arch != "llama4")
        bad_input(p.where, ": fused expert tensor ", ex, ".gate_up_proj in a ", arch.arch, " checkpoint (expected per-expert ",
                  ex, ".N.", arch.gate_name, ")");
      if (p.scheme.kind == SchemeKind::kUnquantized) p.fused = "bf16";
      else if (p.scheme.format.rfind("modelopt", 0) == 0 &&
               (p.scheme.kind == SchemeKind::kFP8W8A8 || p.scheme.kind == SchemeKind::kFP8A16))
        p.fused = "fp8";
      else if (p.scheme.format.rfind("modelopt", 0) == 0 &&
               (p.scheme.kind == SchemeKind::kNVFP4 || p.scheme.kind == SchemeKind::kNVFP4A16))
        p.fused = "nvfp4";
      else
        unsupported(p.where, ": fused Llama 4 experts with scheme ", p.scheme.key(), " (", p.scheme.format,
                    "); fused layouts qmoe reads: bf16, ModelOpt FP8, ModelOpt NVFP4 / W4A16_NVFP4");
      if (p.fused == "fp8" && p.scheme.weights.strat() != Strategy::kTensor)
        unsupported(p.where, ": fused Llama 4 ModelOpt FP8 with ", strategy_name(p.scheme.weights.strat()),
                    " weight scales (the fused layout has flat per-tensor scales)");
    } else {
      p.module = module_format(p.scheme, p.where);
    }
    ExpertWeights sk = skeleton(p.scheme, arch.num_experts, arch.hidden, arch.intermediate, arch.act_dtype);
    if (sk.block[0] > 0 && arch.intermediate % sk.block[0])
      unsupported(p.where, ": fp8 block ", sk.block[0], "x", sk.block[1], " with I=", arch.intermediate,
                  " not a multiple of ", sk.block[0], " (gate and up would share a block of w13 rows)");
    std::string warn = models::check_tp(sk, opts.tp_size, p.where);
    if (!warn.empty()) std::fprintf(stderr, "qmoe: warning: %s\n", warn.c_str());
    models::ep_range(arch.num_experts, opts.ep_rank, opts.ep_size, p.where);  // throws the EP error
    if (!arch.shared_name.empty()) {
      const std::string sp = p.prefix + "." + arch.shared_name + ".";
      p.has_shared = true;
      p.shared_scheme = formats::moe_scheme(p.where + " shared expert", resolve(sp + "gate_proj"), resolve(sp + "up_proj"),
                                            resolve(sp + "down_proj"));
      p.shared_module = module_format(p.shared_scheme, p.where + " shared expert");
      ExpertWeights ss = skeleton(p.shared_scheme, 1, arch.hidden, arch.shared_intermediate, arch.act_dtype);
      models::check_tp(ss, opts.tp_size, p.where + " shared expert");
    }
    plans.push_back(std::move(p));
  }

  // ---- decode ----
  size_t done = 0;
  if (opts.progress) opts.progress(0, plans.size());
  for (const LayerPlan& p : plans) {
    const int E = arch.num_experts, H = arch.hidden, I = arch.intermediate;
    // EP: only this rank's experts are decoded (other ranks' tensors are never read or converted).
    const models::EpRange mine = models::ep_range(E, opts.ep_rank, opts.ep_size, p.where);
    MoeLayerSpec spec;
    spec.layer = p.layer;
    spec.prefix = p.prefix;
    const std::string ex = p.prefix + ".experts";
    ExpertWeights w;
    if (!p.fused.empty()) {
      models::FusedRef fr{ck.get(), ex, p.where, mine.first, mine.count};
      w = arch.arch == "gpt_oss" ? models::decode_gpt_oss(fr, p.fused, p.scheme, E, H, I, arch.act_dtype)
                                 : models::decode_llama4_fused(fr, p.fused, p.scheme, E, H, I, arch.act_dtype);
      ExpertWeights sk = skeleton(p.scheme, mine.count, H, I, arch.act_dtype);
      w.group_size = sk.group_size, w.block = sk.block;
    } else {
      w = skeleton(p.scheme, mine.count, H, I, arch.act_dtype);
      models::ModuleShape s13{I, H, w.group_size, w.block}, s2{H, I, w.group_size, w.block};
      std::vector<ProjWeights> w13s, w2s;
      for (int e = mine.first; e < mine.first + mine.count; ++e) {  // global expert ids
        const std::string ep = str(ex, ".", e, ".");
        auto ref = [&](const std::string& name) {
          return models::ModuleRef{ck.get(), ep + name, str("layer ", p.layer, " expert ", e, " ", name)};
        };
        ProjWeights g = models::decode_module(ref(arch.gate_name), p.module, p.scheme, s13);
        ProjWeights u = models::decode_module(ref(arch.up_name), p.module, p.scheme, s13);
        w13s.push_back(models::merge_gate_up(g, u, str(p.where, " expert ", e)));
        w2s.push_back(models::decode_module(ref(arch.down_name), p.module, p.scheme, s2));
      }
      w.w13 = models::stack_experts(w13s);
      w.w2 = models::stack_experts(w2s);
    }
    // NaN / Inf / zero scales, shapes, dtypes: before anything is cut (expert indices are local under EP)
    w.validate(opts.ep_size == 1 ? p.where
                                 : str(p.where, " EP rank ", opts.ep_rank, " (experts ", mine.first, "..",
                                       mine.first + mine.count - 1, ")"));
    spec.config.num_experts = E;
    spec.config.router = arch.router;
    spec.config.activation = arch.activation;
    models::slice_tp(w, opts.tp_rank, opts.tp_size, p.where);
    models::set_expert_map(spec.config, E, mine);
    spec.experts = std::move(w);

    // router
    const std::string rp = p.prefix + "." + arch.router_name + ".";
    spec.router_weight = models::fetch(*ck, rp + "weight", {DType::kBF16, DType::kF16, DType::kF32}, {E, H},
                                       p.where + " router", "experts x hidden");
    std::string bias_name = arch.arch == "deepseek_v3" ? rp + "e_score_correction_bias" : arch.arch == "gpt_oss" ? rp + "bias" : "";
    if (!bias_name.empty()) {
      Tensor b = to_f32(models::fetch(*ck, bias_name, {DType::kF32, DType::kBF16, DType::kF16}, {E}, p.where + " router bias"));
      for (int e = 0; e < E; ++e)
        if (!std::isfinite(b.data<float>()[e]))
          bad_input(ck->info(bias_name).file, ": tensor ", bias_name, ": non-finite value at expert ", e);
      spec.router_bias = b;
    }

    // shared expert (E = 1, replicated over EP ranks, split like the experts over TP)
    if (p.has_shared) {
      const int Is = arch.shared_intermediate;
      ExpertWeights s = skeleton(p.shared_scheme, 1, H, Is, arch.act_dtype);
      const std::string sp = p.prefix + "." + arch.shared_name + ".";
      auto ref = [&](const char* name) {
        return models::ModuleRef{ck.get(), sp + name, str("layer ", p.layer, " ", arch.shared_name, " ", name)};
      };
      models::ModuleShape s13{Is, H, s.group_size, s.block}, s2{H, Is, s.group_size, s.block};
      s.w13 = models::merge_gate_up(models::decode_module(ref("gate_proj"), p.shared_module, p.shared_scheme, s13),
                                    models::decode_module(ref("up_proj"), p.shared_module, p.shared_scheme, s13),
                                    p.where + " shared expert");
      s.w2 = models::decode_module(ref("down_proj"), p.shared_module, p.shared_scheme, s2);
      s.validate(p.where + " shared expert");
      models::slice_tp(s, opts.tp_rank, opts.tp_size, p.where + " shared expert");
      spec.shared_expert = std::move(s);
    }

    // provenance
    const std::string src = source_name(qc);
    spec.format_source = p.scheme.kind == SchemeKind::kUnquantized
                             ? str("unquantized ", dtype_name(spec.experts.w13.weight.dtype()))
                             : str(src, " ", p.scheme.format);
    spec.format_source += p.fused.empty() ? " (per-expert)" : arch.arch == "gpt_oss" ? " (fused, gate/up interleaved)" : " (fused in x out)";
    if (p.scheme.kind == SchemeKind::kNVFP4 || p.scheme.kind == SchemeKind::kNVFP4A16)
      spec.global_scale_convention = p.module == ModuleFormat::kCtNvfp4
                                         ? "compressed-tensors weight_global_scale = 448*6/amax (divides); stored as its reciprocal"
                                         : "modelopt weight_scale_2 = amax/(6*448) (multiplies); stored as is";
    model.layers.push_back(std::move(spec));
    if (opts.progress) opts.progress(++done, plans.size());
  }
  return model;
}

}  // namespace qmoe
