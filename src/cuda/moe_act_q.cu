// Activation quantization of CUDA backend II (docs/numerics.md, bit-exact with ref/act_quant.cpp:
// the same fp32 operations in the same order, IEEE division, nothing an FMA could contract),
// writing each quantized value as an exact operand-dtype value for the bf16 / fp16 MMA:
//  * int8 per token: s = max(amax, 1e-10f) / 127.f; q = clamp(rint(x / s), -128, 127); the
//    operand is q (integers up to 128 are exact in bf16 / fp16); fp32 row scale s.
//  * NVFP4 per 16 (W4A4), with the static multiplier A of the slot's expert, G = 1.f / A:
//    s = e4m3_satfinite(G * (vmax * (1 / 6.f))); r = s == 0 ? 0 : 1.f / (s * (1.f / G));
//    q = e2m1(clamp(x * r, -6, 6)); the operand is e2m1(q) * s (exact: <= 6 significant bits in
//    [2^-11, 2688], see moe_gemm_fp4.cu); row scale 1.f / G, applied to the GEMM's fp32 sum.
// Rows are tokens or slots exactly as backend I's act_prep (moe_kernels.cu) defines them.
#include "cuda/device_common.cuh"
#include "cuda/fp4_ops.cuh"
#include "cuda/moe_q.cuh"

namespace qmoe::cuda {
namespace {

using namespace dev;


template <class Op>
__global__ void act_prep_q_kernel(const ActPrep p) {
  using T = typename Op::T;
  extern __shared__ float row[];  // [cols]
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  int e = 0;  // local expert of the slot (NVFP4: whose static multiplier quantizes the row)
  if (p.quant == kQuantNvfp4) {
    if (p.topk_ids != nullptr) {
      e = p.topk_ids[r];
      if (p.expert_map != nullptr) e = p.expert_map[e];
    }
    if (e < 0) return;  // slot of another rank's expert: never read
  }
  const int64_t tok = p.slot_mode ? r / p.top_k : r;
  const T* src = static_cast<const T*>(p.x) + tok * p.ldx;
  const float w = p.topk_w != nullptr ? p.topk_w[r] : 1.f;
  load_row<Op>(src, p.cols, p.topk_w != nullptr, w, row);
  __syncthreads();
  T* dst = static_cast<T*>(p.a) + r * p.cols;
  if (p.quant == kQuantInt8Token) {
    const float s = fmaxf(block_absmax(row, p.cols, red), 1e-10f) / 127.f;
    for (int i = tid; i < p.cols; i += blockDim.x)
      dst[i] = Op::from_f(fminf(fmaxf(rintf(row[i] / s), -128.f), 127.f));
    if (tid == 0) p.scales[r * p.groups] = s;
    return;
  }
  // NVFP4: 16 consecutive threads own one 16-element block (blockDim is a multiple of 32, so a
  // block never straddles warps); columns past `cols` count as 0 in the block's max, as the
  // reference's shorter last block does.
  const float A = p.in_scale[e];
  const float G = 1.f / A;
  const float inv_G = 1.f / G;
  for (int base = 0; base < p.cols; base += blockDim.x) {
    const int i = base + tid;
    const float v = nvfp4_quant_lane(i < p.cols ? row[i] : 0.f, G, inv_G);
    if (i < p.cols) dst[i] = Op::from_f(v);
  }
  if (tid == 0) p.scales[r * p.groups] = inv_G;
}

}  // namespace

void launch_act_prep_q(bool f16, const ActPrep& p, cudaStream_t s) {
  QMOE_CHECK(p.quant == kQuantInt8Token || p.quant == kQuantNvfp4, kInternal, "launch_act_prep_q: quant code ",
             p.quant);
  if (p.rows == 0) return;
  QMOE_CHECK(p.quant != kQuantNvfp4 || p.in_scale != nullptr, kInternal,
             "launch_act_prep_q: NVFP4 activations need the static input multipliers");
  const size_t smem = static_cast<size_t>(p.cols) * 4;
  auto go = [&](auto kern) {
    if (smem > 48 * 1024)
      QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch_kernel(kern, dim3(static_cast<unsigned>(p.rows)), dim3(256), smem, s, p);
  };
  if (f16) go(act_prep_q_kernel<F16>);
  else go(act_prep_q_kernel<BF16>);
}

}  // namespace qmoe::cuda
