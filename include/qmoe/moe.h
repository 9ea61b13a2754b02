// The MoE layer: canonical expert weights + scheme + routing config -> forward(x, router_logits).
//
// Canonical expert weights (design.md): per projection, all experts stacked, "out x in":
//   w13: [E, 2*I, H]  gate rows [0, I) then up rows [I, 2I)      w2: [E, H, I]
// Weight encoding per scheme (N = out rows, K = in columns):
//   kUnquantized   weight BF16/F16/F32 [E, N, K]
//   int b-bit      weight U8 codes u = q + 2^(b-1) (sym) or raw unsigned u (asym); b = 8: [E, N, K];
//                  b = 4: [E, N, K/2] two per byte, low nibble = even k. Dequant: (u - z) * s with
//                  z = 2^(b-1) (sym) or zero_point (U8 [E, N, K/G], asym).
//   fp8            weight F8E4M3 (stored as its bytes) [E, N, K]
//   nvfp4 / mxfp4  weight U8 [E, N, K/2] e2m1 pairs, low nibble = even k
// scale, in the dtype the checkpoint stored (never reinterpreted):
//   group G        [E, N, ceil(K/G)]   (int, nvfp4 G=16 e4m3, mxfp4 G=32 e8m0 as U8/E8M0)
//   channel        [E, N, 1]
//   tensor         [E, S]              S = shards: 2 for w13 (gate, up), 1 for w2
//   block bn x bk  [E, ceil(N/bn), ceil(K/bk)]
// g_idx            I32 [E, K] group of each input column (actorder), absent otherwise
//                  With g_idx, the scale's (and zero_point's) last dim is the number of groups g_idx
//                  indexes into, >= max(g_idx)+1 (a TP rank's w2 keeps all ceil(I_full/G) groups).
// global_scale     F32 [E, S] NVFP4 weight multiplier: w = e2m1 * e4m3 * global_scale[e, shard]
// input_scale      F32 [E, S] static activation scale: fp8 per-tensor (x ~ q * s), or the NVFP4
//                  input multiplier A (= 1 / compressed-tensors input_global_scale = ModelOpt
//                  input_scale). Absent when activations are dynamic.
// bias             F32/BF16 [E, N] (gpt-oss) or absent.
//
// Numerics contract (the reference and every kernel):
//   a = x (activation dtype; Llama 4: a = round_to_act_dtype(float(x) * w_topk))
//   [if activations are quantized: quantize a per ActQuant, exactly as ref/ does]
//   h = act(GEMM1(a, w13) + b13)  in fp32, then rounded to the activation dtype (bf16/f16)
//   [if activations are quantized: quantize h the same way, with w2's input scale]
//   o = GEMM2(h, w2) + b2 in fp32;  y = sum_k (w_topk * o) in fp32 (w_topk = 1 on Llama 4)
//   y += shared_expert(x) (fp32), then y is rounded to the activation dtype once.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qmoe/quant.h"
#include "qmoe/routing.h"
#include "qmoe/tensor.h"

namespace qmoe {

enum class Activation {
  kSiluMul,    // silu(gate) * up
  kGeluMul,    // gelu(gate) * up, exact erf form
  kSwigluOai,  // gpt-oss: g = min(gate, 7); u = clamp(up, -7, 7); (u + 1) * g * sigmoid(1.702 g)
};
const char* activation_name(Activation a);

struct ProjWeights {
  Tensor weight;        // see header comment
  Tensor scale;
  Tensor zero_point;
  Tensor g_idx;
  Tensor global_scale;
  Tensor input_scale;
  Tensor bias;
};

struct ExpertWeights {
  MoeScheme scheme;
  int num_experts = 0;     // E of these tensors (local experts after EP slicing)
  int hidden = 0;          // H
  int intermediate = 0;    // I (per TP rank)
  int group_size = 0;      // weight group along K (int/nvfp4/mxfp4 group), 0 = none
  std::array<int, 2> block = {0, 0};  // fp8 block (bn, bk), {0, 0} = none
  DType act_dtype = DType::kBF16;     // dtype of x and y
  ProjWeights w13;
  ProjWeights w2;

  // Throws kBadInput naming `where` and the tensor when any shape / dtype / value violates the
  // canonical contract above (including NaN / Inf / zero / negative scales).
  void validate(const std::string& where) const;
};

struct MoeConfig {
  int num_experts = 0;      // global E (router width)
  RouterConfig router;
  Activation activation = Activation::kSiluMul;
  std::vector<int32_t> expert_map;  // EP: global -> local or -1; empty = identity
};

enum class Backend { kReference, kCpu, kCuda };
const char* backend_name(Backend b);

class MoeLayer {
 public:
  // Builds the layer; weights are validated and then prepared (repacked) for the backend.
  // Throws kUnsupported when the backend cannot run the scheme / routing feature.
  static std::unique_ptr<MoeLayer> create(ExpertWeights weights, MoeConfig cfg, Backend backend,
                                          std::optional<ExpertWeights> shared_expert = std::nullopt,
                                          Tensor router_bias = Tensor());
  virtual ~MoeLayer() = default;

  // x [M, H] (act dtype), router_logits [M, E] F32 -> y [M, H] (act dtype).
  virtual Tensor forward(const Tensor& x, const Tensor& router_logits) = 0;
  // The same with routing given (topk_weights F32 [M, k], topk_ids I32 [M, k]).
  virtual Tensor forward_routed(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids) = 0;

  virtual Backend backend() const = 0;
  virtual std::string method_name() const = 0;  // kernel family key, for logs and errors
};

}  // namespace qmoe
