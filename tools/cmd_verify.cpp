// `qmoe verify DIR [--reference BF16_DIR] [--backend cpu|cuda|all] [--tokens M]`: for every MoE
// layer, random activations through each available backend against the exact reference
// (Backend::kReference); with a bf16 original, each layer's quantization error (dequantized
// weights and layer output) against the error a plain round-to-nearest quantization of the same
// bf16 weights with the same scheme gives. A scale read in the wrong dtype, a swapped gate/up, an
// inverted global scale or a transposed tensor lands far outside that band. Exit 1 if flagged.
#include <cmath>
#include <cstdio>

#include "cli_util.h"
#include "commands.h"
#include "core/codecs.h"
#include "cpu/ref/quantize.h"
#include "dispatch/select.h"

namespace qmoe::cli {
namespace {

std::vector<float> floats(const Tensor& t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype() == DType::kF32 ? t.data<float>()[i]
           : t.dtype() == DType::kBF16 ? codec::bf16_to_f32(t.data<uint16_t>()[i])
                                       : codec::f16_to_f32(t.data<uint16_t>()[i]);
  return v;
}

// ||a - b|| / ||b|| over all elements (b the reference).
double rel_l2(const Tensor& a, const Tensor& b) {
  std::vector<float> x = floats(a), y = floats(b);
  QMOE_CHECK(x.size() == y.size(), kInternal, "rel_l2 of ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = static_cast<double>(x[i]) - y[i];
    num += d * d;
    den += static_cast<double>(y[i]) * y[i];
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Backend vs reference tolerance (relative L2 of the layer output). Both round y to bf16 once
// (2^-9 relative each, so up to 2^-8 apart per element); kernels may sum in another fp32 order and
// may round dequantized int / fp4 weights to bf16 MMA operands (2^-9 per weight, ~2^-9 on each
// GEMM's output for random signs): about 4 * 2^-9 = 0.008 in all; 2e-2 leaves 2.5x margin. With
// quantized activations a different fp32 sum can move an fp8 / int8 / fp4 code of the
// intermediate by one step (up to 2^-4 relative for e4m3, more for e2m1), rarely: 5e-2.
double backend_tolerance(const MoeScheme& s) { return s.act == ActQuant::kNone ? 2e-2 : 5e-2; }

// The reference quantizer's spec for the loaded scheme (round-to-nearest, no actorder).
ref::SchemeSpec spec_of(const ExpertWeights& w) {
  ref::SchemeSpec s;
  s.kind = w.scheme.kind;
  s.act = w.scheme.act;
  s.act_dtype = w.act_dtype;
  if (w.scheme.kind == SchemeKind::kUnquantized) {
    s.weight_dtype = w.w13.weight.dtype();
    return s;
  }
  s.bits = w.scheme.weights.num_bits;
  s.group_size = w.group_size;
  s.symmetric = w.scheme.weights.symmetric;
  s.actorder = false;
  s.fp8_strategy = w.scheme.weights.strat();
  if (w.block[0] > 0) s.block = w.block;
  DType sd = w.w13.scale.defined() ? w.w13.scale.dtype() : DType::kBF16;
  s.scale_dtype = (sd == DType::kBF16 || sd == DType::kF16 || sd == DType::kF32) ? sd : DType::kBF16;
  return s;
}

// Round-to-nearest quantization of the bf16 original `orig` with the scheme of `q`; static input
// scales and biases taken from `q` so that only the weight quantization differs.
ExpertWeights rtn_like(const ExpertWeights& q, const ExpertWeights& orig) {
  ExpertWeights r = ref::quantize_expert_weights(orig.w13.weight, orig.w2.weight, spec_of(q));
  r.w13.bias = orig.w13.bias, r.w2.bias = orig.w2.bias;
  if (q.w13.input_scale.defined()) r.w13.input_scale = q.w13.input_scale, r.w2.input_scale = q.w2.input_scale;
  return r;
}

struct Verify {
  std::string dir, reference, backend = "all";
  int tokens = 16;
  uint64_t seed = 1;
  LoadOptions load;  // TP / EP rank
};

int run_verify(const Verify& v) {
  LoadOptions lo = v.load;
  lo.progress = progress_bar(v.dir);
  Model m = load_model(v.dir, lo);
  Model bf;
  if (!v.reference.empty()) {
    lo.progress = progress_bar(v.reference);
    bf = load_model(v.reference, lo);
    if (bf.arch != m.arch) bad_input("verify: reference ", v.reference, " is ", bf.arch, ", checkpoint is ", m.arch);
  }
  std::vector<Backend> backends;
  if (v.backend == "cpu" || v.backend == "all") backends.push_back(Backend::kCpu);
  if (v.backend == "cuda" || v.backend == "all") backends.push_back(Backend::kCuda);
  if (backends.empty()) bad_input("verify: --backend must be cpu, cuda or all, got '", v.backend, "'");
  if (v.tokens < 1) bad_input("verify: --tokens must be >= 1");

  std::printf("%s: arch %s, quantization %s, %zu MoE layers, %d tokens\n", v.dir.c_str(), m.arch.c_str(),
              m.quant_method.c_str(), m.layers.size(), v.tokens);
  std::vector<std::string> flagged;
  for (const MoeLayerSpec& l : m.layers) {
    const ExpertWeights& w = l.experts;
    const int H = w.hidden, M = v.tokens;
    // x: bf16 uniform in [-2, 2); logits = x . router^T in fp32 (the checkpoint's own router).
    Tensor x(w.act_dtype, {M, H});
    for (int64_t i = 0; i < x.numel(); ++i) {
      float f = ref::random_uniform(v.seed * 7777 + l.layer, i, -2.f, 2.f);
      if (w.act_dtype == DType::kBF16) x.data_mut<uint16_t>()[i] = codec::f32_to_bf16(f);
      else if (w.act_dtype == DType::kF16) x.data_mut<uint16_t>()[i] = codec::f32_to_f16(f);
      else x.data_mut<float>()[i] = f;
    }
    const int E = l.config.num_experts;
    std::vector<float> xf = floats(x), rw = floats(l.router_weight);
    Tensor logits(DType::kF32, {M, E});
    for (int t = 0; t < M; ++t)
      for (int e = 0; e < E; ++e) {
        double s = 0;
        for (int h = 0; h < H; ++h) s += static_cast<double>(xf[t * H + h]) * rw[static_cast<size_t>(e) * H + h];
        logits.data_mut<float>()[t * E + e] = static_cast<float>(s);
      }
    // DeepSeek's e_score_correction_bias steers selection inside the router; gpt-oss's router bias
    // is the router Linear's bias, part of the logits.
    const bool grouped = l.config.router.kind == RouterKind::kGrouped;
    Tensor layer_bias = grouped ? l.router_bias : Tensor();
    if (!grouped && l.router_bias.defined())
      for (int t = 0; t < M; ++t)
        for (int e = 0; e < E; ++e) logits.data_mut<float>()[t * E + e] += l.router_bias.data<float>()[e];
    auto layer_of = [&](const ExpertWeights& ew, const std::optional<ExpertWeights>& sh, const MoeConfig& cfg, Backend b) {
      return MoeLayer::create(ew, cfg, b, sh, layer_bias);
    };
    std::printf("layer %d  %s  %s\n", l.layer, w.scheme.key().c_str(), l.format_source.c_str());
    Tensor y_ref = layer_of(w, l.shared_expert, l.config, Backend::kReference)->forward(x, logits);
    for (Backend b : backends) {
      MethodChoice c = query_method(w, b, l.config, l.shared_expert ? &*l.shared_expert : nullptr, layer_bias);
      if (!c.ok) {
        // A backend the user named explicitly must run every layer: a skip would let "all checks
        // passed" cover a check that never happened. `--backend all` reports and goes on.
        if (v.backend != "all")
          unsupported("verify: --backend ", v.backend, " cannot run layer ", l.layer, " (", w.scheme.key(), "): ", c.reason);
        std::printf("  %-9s skipped: %s\n", backend_name(b), c.reason.c_str());
        continue;
      }
      Tensor y = layer_of(w, l.shared_expert, l.config, b)->forward(x, logits);
      double err = rel_l2(y, y_ref), tol = backend_tolerance(w.scheme);
      bool bad = !(err <= tol);
      std::printf("  %-9s %-34s rel err vs reference %.2e (tol %.0e)%s\n", backend_name(b), c.method.c_str(), err, tol,
                  bad ? "  FLAGGED" : "");
      if (bad) flagged.push_back(str("layer ", l.layer, " backend ", backend_name(b), ": output off the reference by ", err));
    }
    if (v.reference.empty()) continue;
    const MoeLayerSpec* o = nullptr;
    for (const MoeLayerSpec& b : bf.layers)
      if (b.layer == l.layer) o = &b;
    if (!o) bad_input("verify: reference ", v.reference, " has no MoE layer ", l.layer);
    if (o->experts.num_experts != w.num_experts || o->experts.hidden != w.hidden || o->experts.intermediate != w.intermediate)
      bad_input("verify: layer ", l.layer, " shapes differ from the reference (E, H, I = ", w.num_experts, ", ", w.hidden,
                ", ", w.intermediate, " vs ", o->experts.num_experts, ", ", o->experts.hidden, ", ", o->experts.intermediate, ")");
    // Weights: dequantized vs original, against a round-to-nearest quantization of the original.
    ExpertWeights nominal = rtn_like(w, o->experts);
    std::optional<ExpertWeights> nominal_shared;
    if (l.shared_expert && o->shared_expert) nominal_shared = rtn_like(*l.shared_expert, *o->shared_expert);
    const double kWeightSlack = 1e-3;  // bf16 rounding of the original itself, 2^-9 relative rms
    for (bool w13 : {true, false}) {
      Tensor orig = ref::dequantize_proj(o->experts, w13);
      double err = rel_l2(ref::dequantize_proj(w, w13), orig);
      double nom = rel_l2(ref::dequantize_proj(nominal, w13), orig);
      bool bad = !(err <= 2 * nom + kWeightSlack);
      std::printf("  %-9s weight rel err %.2e (round-to-nearest %.2e)%s\n", w13 ? "w13" : "w2", err, nom, bad ? "  FLAGGED" : "");
      if (bad)
        flagged.push_back(str("layer ", l.layer, " ", w13 ? "w13" : "w2", ": weight error ", err, " vs ", nom,
                              " expected for ", w.scheme.key(), " (a scale in the wrong dtype, swapped gate/up or a wrong global scale?)"));
    }
    // Layer output: quantized vs bf16 original, against the round-to-nearest layer's.
    Tensor y_bf = layer_of(o->experts, o->shared_expert, o->config, Backend::kReference)->forward(x, logits);
    Tensor y_nom = layer_of(nominal, nominal_shared ? nominal_shared : o->shared_expert, o->config, Backend::kReference)
                       ->forward(x, logits);
    double err = rel_l2(y_ref, y_bf), nom = rel_l2(y_nom, y_bf);
    const double kOutSlack = 4e-3;  // bf16 output rounding of both layers (2 x 2^-9)
    bool bad = !(err <= 2 * nom + kOutSlack);
    std::printf("  output    rel err vs bf16 %.2e (round-to-nearest %.2e)%s\n", err, nom, bad ? "  FLAGGED" : "");
    if (bad) flagged.push_back(str("layer ", l.layer, ": output error vs bf16 ", err, ", expected about ", nom));
  }
  if (!flagged.empty()) {
    for (const std::string& f : flagged) std::printf("FLAGGED %s\n", f.c_str());
    fail(ErrorKind::kVerifyFailed, "verify: ", flagged.size(), " check(s) flagged in ", v.dir, "; first: ", flagged[0]);
  }
  std::printf("verify: all checks passed\n");
  return 0;
}

Registrar reg("verify", "run every MoE layer through each backend vs the exact reference; with --reference, check "
              "quantization error against the bf16 original",
              [](CLI::App& app) -> std::function<int()> {
                auto v = std::make_shared<Verify>();
                app.add_option("dir", v->dir, "model directory")->required();
                app.add_option("--reference", v->reference, "bf16 original of the same model");
                app.add_option("--backend", v->backend, "cpu | cuda | all")->capture_default_str();
                app.add_option("--tokens", v->tokens, "tokens of random activations")->capture_default_str();
                app.add_option("--seed", v->seed, "random seed")->capture_default_str();
                app.add_option("--tp", v->load.tp_size, "tensor-parallel size (splits I)")->capture_default_str();
                app.add_option("--tp-rank", v->load.tp_rank, "this TP rank")->capture_default_str();
                app.add_option("--ep", v->load.ep_size, "expert-parallel size (splits E)")->capture_default_str();
                app.add_option("--ep-rank", v->load.ep_rank, "this EP rank")->capture_default_str();
                return [v]() { return run_verify(*v); };
              });

}  // namespace
}  // namespace qmoe::cli
