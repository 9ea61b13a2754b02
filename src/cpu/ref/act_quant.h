// Activation quantization, emulated exactly as docs/numerics.md defines it (the contract the CPU
// and CUDA kernels follow). Inputs are fp32 values that are already exact in the activation dtype
// (bf16 / fp16 / f32). Row functions work on one token's K values; the Tensor function does M rows.
//   fp8 token / 1x128 group: s = max(amax, 1e-10f) / 448.f; q = e4m3_satfinite(x / s)
//   fp8 static tensor:       s given;                      q = e4m3_satfinite(x / s)
//   int8 token:              s = max(amax, 1e-10f) / 127.f; q = clamp(rint(x / s), -128, 127)
//   NVFP4 (A = input multiplier, G = 1.f / A): per 16 elements
//       s = e4m3_satfinite(G * (vmax * (1 / 6.f))); r = s == 0 ? 0 : 1.f / (s * (1.f / G));
//       q = e2m1_rne(clamp(x * r, -6, 6)); value = e2m1(q) * s * (1.f / G)
#pragma once
#include <cstdint>

#include "qmoe/quant.h"
#include "qmoe/tensor.h"

namespace qmoe::ref {

constexpr int kFP8GroupSize = 128;   // DeepSeek 1x128 activation groups along K
constexpr int kNVFP4GroupSize = 16;  // NVFP4 block along K

// Number of scales per row: 1 (token / tensor), ceil(K/128) (group), ceil(K/16) (NVFP4).
int64_t act_scales_per_row(ActQuant kind, int64_t K);

// fp8 e4m3 per-token. Returns s; q[K] are e4m3 codes.
float quantize_fp8_token(const float* x, int64_t K, uint8_t* q);
// fp8 e4m3 per 1x128 group (the last group is shorter when K % 128 != 0). s[ceil(K/128)].
void quantize_fp8_group128(const float* x, int64_t K, uint8_t* q, float* s);
// fp8 e4m3 with a static scale s (> 0).
void quantize_fp8_static(const float* x, int64_t K, float s, uint8_t* q);
// int8 symmetric per-token (RNE). Returns s.
float quantize_int8_token(const float* x, int64_t K, int8_t* q);
// NVFP4 with static input multiplier A (> 0). q[K]: one e2m1 code per byte (NOT packed);
// s[ceil(K/16)]: e4m3 codes of the block scales. The last block is shorter when K % 16 != 0.
void quantize_nvfp4(const float* x, int64_t K, float A, uint8_t* q, uint8_t* s);

// All rows of x [M, K] (BF16 / F16 / F32). static_scale: fp8 tensor s, or NVFP4 A; ignored else.
struct QuantizedActs {
  ActQuant kind = ActQuant::kNone;
  Tensor q;      // [M, K]: F8E4M3 codes (fp8), I8 (int8), U8 e2m1 codes one per byte (NVFP4)
  Tensor scale;  // F32 [M, act_scales_per_row] (fp8, int8); F8E4M3 [M, ceil(K/16)] (NVFP4)
  float static_scale = 0.f;  // fp8 tensor s / NVFP4 A as given
};
QuantizedActs quantize_activations(const Tensor& x, ActQuant kind, float static_scale = 0.f);
// The dequantized values F32 [M, K] (q * s; NVFP4: e2m1(q) * s * (1.f / G)).
Tensor dequantize_activations(const QuantizedActs& a);

}  // namespace qmoe::ref
