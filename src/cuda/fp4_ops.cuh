// fp4 (e2m1) operands of the bf16 / fp16 mma kernels (moe_gemm_fp4.cu, moe_decode.cu). Hopper has
// no fp4 tensor cores, so each pair of e2m1 codes becomes an exact operand pair: the sign goes to
// bit 15, the 3 exponent / mantissa bits to the top of the operand's mantissa / bottom of its
// exponent; that bit pattern is value * 2^-126 (bf16) or value * 2^-14 (fp16), subnormal for 0.5.
// kFold = 2^(126 + c) / 2^(14 + c) is folded into the block scale (one multiply per pair), and the
// fp32 sum is multiplied by kUnscale = 2^-c (exact) at the end: bf16 c = -63, fp16 c = -7.
// moe_gemm_fp4.cu's header explains why every product stays exact.
#pragma once
#include <cstdint>

#include "cuda/device_common.cuh"

namespace qmoe::cuda::dev {

template <class Op> struct Fp4Bits;
template <> struct Fp4Bits<BF16> {
  static constexpr int kEmShift = 6;
  static constexpr uint32_t kEmMask = 0x01C001C0u;
  static constexpr uint32_t kFold = 0x5F005F00u;          // bf16 2^63 (c = -63)
  static constexpr float kUnscale = 9223372036854775808.f;  // 2^63
};
template <> struct Fp4Bits<F16> {
  static constexpr int kEmShift = 9;
  static constexpr uint32_t kEmMask = 0x0E000E00u;
  static constexpr uint32_t kFold = 0x58005800u;  // fp16 2^7 (c = -7)
  static constexpr float kUnscale = 128.f;
};

// Raw operand pair P (0..3) of an int4-atom word: nibble P = first element, nibble P + 4 = second.
template <class Op, int P>
__device__ __forceinline__ uint32_t e2m1_raw_pair(uint32_t w) {
  constexpr int se = Fp4Bits<Op>::kEmShift - 4 * P;  // nibble bits 0-2 -> the operand's EM field
  constexpr int ss = 12 - 4 * P;                     // nibble bit 3 -> bit 15
  uint32_t em, sg;
  if constexpr (se >= 0) em = w << se; else em = w >> (-se);
  if constexpr (ss >= 0) sg = w << ss; else sg = w >> (-ss);
  return (em & Fp4Bits<Op>::kEmMask) | (sg & 0x80008000u);
}

// MXFP4 group scale 2^(e - 127) times kFold's power of two, in both halves: normal for e <= 191
// (bf16); fp16 covers e in [112, 135] (prepare_q refuses other scales for fp16 activations).
// (NVFP4 scales: dq_fp8_pair gives two consecutive e4m3 scales exactly, times kFold.)
template <class Op>
__device__ __forceinline__ uint32_t mx_scale_pair(uint32_t e);
template <>
__device__ __forceinline__ uint32_t mx_scale_pair<BF16>(uint32_t e) {
  const uint32_t h = (e + 63u) << 7;  // 2^(e - 127) * 2^63
  return h | (h << 16);
}
template <>
__device__ __forceinline__ uint32_t mx_scale_pair<F16>(uint32_t e) {
  const int x = static_cast<int>(e) - 120;  // 2^(e - 127) * 2^7; x in [-8, 15]
  const uint32_t h = x >= -14 ? static_cast<uint32_t>(x + 15) << 10 : 1u << (x + 24);
  return h | (h << 16);
}

// NVFP4 activation quantization of one element (numerics.md, bit-exact with ref/act_quant.cpp):
// x's 16-element block is held by 16 consecutive lanes of the warp (elements past the row count as
// 0); G = 1.f / A, inv_G = 1.f / G. Returns the exact operand value e2m1(q) * s (moe_gemm_fp4.cu).
// Used by act_prep_q (moe_act_q.cu) and the Hopper gather (sm90_moe_gemm.cu).
__device__ __forceinline__ float nvfp4_quant_lane(float x, float G, float inv_G) {
  float vmax = fabsf(x);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
  const uint8_t sc = codec::f32_to_e4m3(G * (vmax * (1.f / 6.f)), true);
  const float sf = codec::e4m3_to_f32(sc);
  const float rr = sf == 0.f ? 0.f : 1.f / (sf * inv_G);
  const uint8_t q = codec::f32_to_e2m1(fminf(fmaxf(x * rr, -6.f), 6.f));
  return codec::e2m1_to_f32(q) * sf;  // exact product
}

}  // namespace qmoe::cuda::dev
