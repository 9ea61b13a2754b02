// `qmoe run DIR [--layer L] [--tokens M] [--backend reference|cpu|cuda]`: loads one MoE layer of a
// checkpoint and runs its forward on seeded random tokens (router logits from the checkpoint's own
// router), printing the method, the time and a summary of y. A smoke test of a whole layer.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli_util.h"
#include "commands.h"
#include "core/codecs.h"
#include "cpu/ref/quantize.h"

namespace qmoe::cli {
namespace {

struct RunOpts {
  std::string dir, backend = "cpu";
  int layer = -1, tokens = 8;
  uint64_t seed = 1;
};

int run_layer(const RunOpts& r) {
  Backend b = r.backend == "reference" ? Backend::kReference
              : r.backend == "cpu"     ? Backend::kCpu
              : r.backend == "cuda"    ? Backend::kCuda
                                       : (bad_input("run: --backend must be reference, cpu or cuda, got '", r.backend, "'"), Backend::kCpu);
  if (r.tokens < 1) bad_input("run: --tokens must be >= 1");
  LoadOptions lo;
  lo.progress = progress_bar(r.dir);
  if (r.layer >= 0) lo.only_layers = {r.layer};
  Model m = load_model(r.dir, lo);
  if (m.layers.empty()) bad_input("run: ", r.dir, " has no MoE layers");
  const MoeLayerSpec& l = m.layers.front();
  const int M = r.tokens, H = l.experts.hidden, E = l.config.num_experts;
  Tensor x(DType::kBF16, {M, H});
  std::vector<float> xf(static_cast<size_t>(M) * H);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data_mut<uint16_t>()[i] = codec::f32_to_bf16(ref::random_uniform(r.seed, i, -2.f, 2.f));
    xf[i] = codec::bf16_to_f32(x.data<uint16_t>()[i]);
  }
  if (l.experts.act_dtype != DType::kBF16) bad_input("run: layer ", l.layer, " runs ", dtype_name(l.experts.act_dtype), " activations; run uses bf16");
  // logits = x . router^T (+ the router Linear's bias outside grouped routing)
  const bool grouped = l.config.router.kind == RouterKind::kGrouped;
  Tensor logits(DType::kF32, {M, E});
  for (int t = 0; t < M; ++t)
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int h = 0; h < H; ++h) {
        const Tensor& w = l.router_weight;
        int64_t i = static_cast<int64_t>(e) * H + h;
        float wv = w.dtype() == DType::kF32 ? w.data<float>()[i]
                   : w.dtype() == DType::kBF16 ? codec::bf16_to_f32(w.data<uint16_t>()[i])
                                               : codec::f16_to_f32(w.data<uint16_t>()[i]);
        s += static_cast<double>(xf[t * H + h]) * wv;
      }
      if (!grouped && l.router_bias.defined()) s += l.router_bias.data<float>()[e];
      logits.data_mut<float>()[t * E + e] = static_cast<float>(s);
    }
  auto layer = MoeLayer::create(l.experts, l.config, b, l.shared_expert, grouped ? l.router_bias : Tensor());
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = layer->forward(x, logits);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  double sum = 0, sq = 0, amax = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    float v = codec::bf16_to_f32(y.data<uint16_t>()[i]);
    sum += v, sq += static_cast<double>(v) * v, amax = std::max(amax, static_cast<double>(std::fabs(v)));
  }
  std::printf("%s layer %d (%s): %s, %d tokens -> y %s in %.2f ms; mean %.4g rms %.4g max|y| %.4g\n", r.dir.c_str(),
              l.layer, l.experts.scheme.key().c_str(), layer->method_name().c_str(), M, shape_str(y.shape()).c_str(), ms,
              sum / y.numel(), std::sqrt(sq / y.numel()), amax);
  if (!std::isfinite(sq)) fail(ErrorKind::kVerifyFailed, "run: layer ", l.layer, " produced non-finite outputs");
  return 0;
}

Registrar reg("run", "run one MoE layer of a checkpoint on random tokens", [](CLI::App& app) -> std::function<int()> {
  auto r = std::make_shared<RunOpts>();
  app.add_option("dir", r->dir, "model directory")->required();
  app.add_option("--layer", r->layer, "decoder layer index (default: the first MoE layer)");
  app.add_option("--tokens", r->tokens, "tokens")->capture_default_str();
  app.add_option("--backend", r->backend, "reference | cpu | cuda")->capture_default_str();
  app.add_option("--seed", r->seed, "random seed")->capture_default_str();
  return [r]() { return run_layer(*r); };
});

}  // namespace
}  // namespace qmoe::cli
