// Device helpers shared by the CUDA kernels: error checks, cp.async, ldmatrix, mma.sync, operand
// type traits (bf16 / fp16), weight dequantization into mma B fragments, activation functions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/codecs.h"
#include "cuda/config.h"
#include "cuda/row_div.h"
#include "qmoe/error.h"

#define QMOE_CUDA_OK(expr)                                                                       \
  do {                                                                                           \
    cudaError_t err_ = (expr);                                                                   \
    if (err_ != cudaSuccess)                                                                     \
      ::qmoe::fail(::qmoe::ErrorKind::kInternal, "CUDA error ", cudaGetErrorString(err_), " at ", \
                   __FILE__, ":", __LINE__, " (", #expr, ")");                                   \
  } while (0)
#define QMOE_CUDA_LAUNCH_OK() QMOE_CUDA_OK(cudaGetLastError())

namespace qmoe::cuda {
// The dynamic shared memory one block may take on sm_90 (H100 / H200): 227 KiB.
constexpr int kSm90MaxSmem = 227 * 1024;
// Programmatic dependent launch (sm_90 and up; QMOE_CUDA_PDL=0 turns it off): the layer's kernels
// after the first are launched so that each may start while its predecessor finishes (CUDA graphs
// keep the programmatic edges); every such kernel calls dev::pdl_wait() before it reads what an
// earlier kernel wrote or writes what one reads, and dev::pdl_trigger() after that wait, so a
// kernel that starts early finds everything two launches back complete.
bool pdl_enabled();
// kern<<<grid, block, smem, s>>>(args...), with the programmatic-serialization attribute when
// pdl_enabled() (the layer's first kernel, align, is launched plainly).
template <class... KArgs, class... Args>
void launch_kernel(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  QMOE_CUDA_OK(cudaLaunchKernelEx(&cfg, kern, static_cast<KArgs>(args)...));
}
}  // namespace qmoe::cuda

namespace qmoe::cuda::dev {

// griddepcontrol (launch_kernel above): no-ops for a kernel launched without the attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---- operand types ---------------------------------------------------------------------------
struct BF16 {
  using T = __nv_bfloat16;
  static constexpr uint32_t kInt4Magic = 0x43004300u;  // bf16 128.0: 0x4300 | u == 128 + u for u < 16
  static constexpr float kInt4Base = 128.f;
  __device__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ static uint32_t sub2(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static uint32_t mul2(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static float to_f(T v) { return __bfloat162float(v); }
  __device__ static T from_f(float f) { return __float2bfloat16_rn(f); }
  // results the GEMM epilogues write in the model dtype (h of GEMM1): the operand dtype here
  using OutT = T;
  __device__ static OutT out_f(float f) { return from_f(f); }
  __device__ static uint32_t out_pack(float lo, float hi) { return pack(lo, hi); }
  // e4m3 bits placed in the high byte of each 16-bit half -> bf16 bits of value * 2^-120.
  static constexpr int kFp8Shift = 4;
  static constexpr uint32_t kFp8Fix = 0x7B807B80u;  // bf16 2^120 in both halves
  static constexpr uint32_t kNaN2 = 0x7FC07FC0u;    // a NaN in both halves (OR-ed into any value)
};
struct F16 {
  using T = __half;
  static constexpr uint32_t kInt4Magic = 0x64006400u;  // fp16 1024.0: 0x6400 | u == 1024 + u
  static constexpr float kInt4Base = 1024.f;
  __device__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ static uint32_t sub2(uint32_t a, uint32_t b) {
    __half2 r = __hsub2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static uint32_t mul2(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static float to_f(T v) { return __half2float(v); }
  __device__ static T from_f(float f) { return __float2half_rn(f); }
  using OutT = T;
  __device__ static OutT out_f(float f) { return from_f(f); }
  __device__ static uint32_t out_pack(float lo, float hi) { return pack(lo, hi); }
  static constexpr int kFp8Shift = 1;
  static constexpr uint32_t kFp8Fix = 0x5C005C00u;  // fp16 2^8
  static constexpr uint32_t kNaN2 = 0x7E007E00u;    // a NaN in both halves (OR-ed into any value)
};
// fp16 operands, bf16 results: fp8 W8A8 (e4m3 weights x e4m3-quantized activations) of a bf16
// model on the mma.sync kernels. Every e4m3 value (2^-9 .. 448) is exact in fp16 as in bf16, so
// the products and their fp32 sums are the same; fp16 lets the weights be decoded by the hardware
// conversion (cvt.rn.f16x2.e4m3x2: one instruction per pair on sm_89+, against five for the
// bit-shuffle into bf16). The activations reach the kernel as fp16 values (ActPrep::q_f16); the
// GEMM1 epilogue writes h in bf16, the model dtype.
struct F16B : F16 {
  using OutT = __nv_bfloat16;
  __device__ static OutT out_f(float f) { return __float2bfloat16_rn(f); }
  __device__ static uint32_t out_pack(float lo, float hi) { return BF16::pack(lo, hi); }
};
// Launch tag (never an operand type): a bf16 model whose fp8 weights meet 16-bit activations (FP8
// weight-only, GemmParams::a16). Its A rows are the bf16 activations themselves, which fp16 does not
// hold exactly, so its fp8 kernels run on bf16 operands (OperandOf below).
struct BF16A16 : BF16 {};
template <class Op> constexpr bool kF16Operands = std::is_same_v<Op, F16> || std::is_same_v<Op, F16B>;
// Operand type of the mma.sync kernels for weights F of a model whose dtype is Op's: fp8 W8A8 runs
// on fp16 operands, its A rows fp16 values (ActPrep::q_f16); fp8 weight-only of a bf16 model
// (BF16A16) on bf16 operands, like every other format of a bf16 model.
template <class Op, WFmt F>
using OperandOf = std::conditional_t<std::is_same_v<Op, BF16A16>, BF16,
                                     std::conditional_t<F == WFmt::kFP8 && std::is_same_v<Op, BF16>, F16B, Op>>;

// ---- async copies, ldmatrix, mma ---------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte global -> shared copy; src_bytes = 0 zero-fills (out-of-range rows / columns).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}
template <class Op>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<BF16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<F16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<F16B>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma16816<F16>(d, a, b0, b1);
}

// ---- dequantization into B fragments ------------------------------------------------------------
// int4 pair p (0..3) of a 32-bit word: nibble p = first element, nibble p + 4 = second; returns
// the operand pair (u0 - z, u1 - z) exactly (zmagic = Op(base + z) in both halves).
template <class Op>
__device__ __forceinline__ uint32_t dq_u4_pair(uint32_t w, int p, uint32_t zmagic) {
  // one LOP3 for (x & 0x000F000F) | magic (written as two C operations, ptxas emits an AND and an OR)
  uint32_t t;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(t) : "r"(w >> (4 * p)), "n"(0x000F000Fu), "r"(Op::kInt4Magic));
  return Op::sub2(t, zmagic);
}
// int8: 2 consecutive bytes at byte offset `b` (0 or 2) of `w`, minus zero point z, exactly.
template <class Op>
__device__ __forceinline__ uint32_t dq_u8_pair(uint32_t w, int b, float z) {
  float lo = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7650 + b)) - (8388608.f + z);
  float hi = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7650 + b + 1)) - (8388608.f + z);
  return Op::pack(lo, hi);
}
// fp8 e4m3: 2 consecutive bytes at byte offset b (0 or 2) -> exact operand pair.
template <class Op>
__device__ __forceinline__ uint32_t dq_fp8_pair(uint32_t w, int b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kF16Operands<Op>) {  // the hardware conversion (F2FP.F16.E4M3.UNPACK_B): byte b -> low half
    uint32_t r;
    const uint16_t pair = static_cast<uint16_t>(b == 0 ? w : w >> 16);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(pair));
    return r;
  }
#endif
  // place byte b in bits 8..15 and byte b+1 in bits 24..31 (zeros elsewhere)
  uint32_t t = __byte_perm(w, 0u, b == 0 ? 0x1404 : 0x3424);
  uint32_t r = (t & 0x80008000u) | ((t & 0x7F007F00u) >> Op::kFp8Shift);
  return Op::mul2(r, Op::kFp8Fix);  // times 2^(bias difference): exact, subnormals included
}
// fp8 e4m3 weight codes: as dq_fp8_pair, and the NaN code (S.1111.111 in e4m3fn, which has no
// infinities) gives NaN, as in the reference's decode (a checkpoint may hold it; the CPU kernels
// keep it too, PackedProj::fp8_nan). The bit shuffle reads that code as 480, so: fp16 operands on
// sm_89+ take the hardware conversion as dq_fp8_pair does; bf16 operands (FP8 weight-only of a bf16
// model) take it too and then fp32 (e4m3 -> fp16 -> fp32 -> bf16: every e4m3 value and NaN is exact
// in each); older GPUs mark the NaN lanes after the shuffle.
template <class Op>
__device__ __forceinline__ uint32_t dq_fp8_weight_pair(uint32_t w, int b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (!kF16Operands<Op>) {
    uint32_t h2;
    const uint16_t pair = static_cast<uint16_t>(b == 0 ? w : w >> 16);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(pair));
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    return Op::pack(f.x, f.y);
  }
  return dq_fp8_pair<Op>(w, b);
#else
  const uint32_t t = __byte_perm(w, 0u, b == 0 ? 0x1404 : 0x3424) & 0x7F007F00u;
  return dq_fp8_pair<Op>(w, b) | (__vcmpeq2(t, 0x7F007F00u) & Op::kNaN2);
#endif
}

// ---- activation rows -----------------------------------------------------------------------------
// The block loads row src[0, cols) (operand dtype) into shared fp32 `row`; with w_on each value is
// multiplied by the router weight w and rounded to the operand dtype (Llama 4: round(x * w)).
// 16-byte loads, four per thread in flight at once (a scalar loop waited one DRAM latency per
// element per thread: ~10 us for one 5120-column row on the H200).
template <class Op>
__device__ __forceinline__ void load_row(const typename Op::T* src, int cols, bool w_on, float w, float* row) {
  auto put = [&](int i, typename Op::T x) {
    float v = Op::to_f(x);
    if (w_on) v = Op::to_f(Op::from_f(v * w));
    row[i] = v;
  };
  if (cols % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    const int nv = cols / 8;
    constexpr int kU = 4;
    for (int base = threadIdx.x; base < nv; base += kU * blockDim.x) {
      uint4 v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = base + u * blockDim.x;
        if (i < nv) v[u] = __ldg(s4 + i);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = base + u * blockDim.x;
        if (i < nv) {
          const typename Op::T* x = reinterpret_cast<const typename Op::T*>(&v[u]);
#pragma unroll
          for (int j = 0; j < 8; ++j) put(i * 8 + j, x[j]);
        }
      }
    }
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) put(i, src[i]);
  }
}

// Max over a warp (every lane gets it).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Max over the block (blockDim a multiple of 32, <= 1024); red: 32 floats of shared scratch, not
// in use by another call in flight. Every thread gets the result.
__device__ __forceinline__ float block_max(float v, float* red) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
  for (int i = 1; i < static_cast<int>(blockDim.x >> 5); ++i) r = fmaxf(r, red[i]);
  return r;
}
// max |row[i]| over i < cols for the whole block (blockDim a multiple of 32, <= 1024); red: 32
// floats of shared scratch. Every thread gets the result.
__device__ __forceinline__ float block_absmax(const float* row, int cols, float* red) {
  float mx = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, fabsf(row[i]));
  return block_max(mx, red);
}

// e4m3_satfinite(v): the hardware conversion (RNE, saturate to +-448, NaN kept) is the codec's
// f32_to_e4m3(v, true) bit for bit; round_e4m3_sat returns that code's value (exact in f32).
__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float e4m3_value(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
}
__device__ __forceinline__ float round_e4m3_sat(float v) { return e4m3_value(to_e4m3(v)); }
// e4m3 codes (saturating, round to nearest even) of 8 values, two per conversion instruction:
// the same codes as to_e4m3 value by value (cvt.rn.satfinite.e4m3x2.f32).
__device__ __forceinline__ uint2 e4m3_codes8(const float (&q)[8]) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(q[4 * h], q[4 * h + 1]), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(q[4 * h + 2], q[4 * h + 3]), __NV_SATFINITE, __NV_E4M3);
    w[h] = (lo & 0xFFFFu) | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}
// The codes of 16 columns held by a lane pair (even lane: columns 0-7, odd lane: 8-15) in the
// Sm90Gather::kperm order: position 4q + 2u + b holds column 8u + 2q + b, so the even lane stores
// positions 0-7 (columns 0 1 8 9 2 3 10 11) and the odd lane 8-15 (4 5 12 13 6 7 14 15). Each lane
// sends the partner the word it needs (the even lane its columns 4-7, the odd lane its 8-11); every
// lane of the warp must call it.
__device__ __forceinline__ uint2 perm16_pair(uint2 c, bool odd) {
  const uint32_t other = __shfl_xor_sync(0xffffffffu, odd ? c.x : c.y, 1);
  const uint32_t x = odd ? other : c.x, y = odd ? c.y : other;
  return make_uint2(__byte_perm(x, y, 0x5410), __byte_perm(x, y, 0x7632));
}

// ---- activation rows in registers (act_prep, the Hopper gather) --------------------------------------
// A block holds one row of `cols` 16-bit values (cols % 8 == 0, 16-byte aligned rows) in registers:
// thread t the 8-element chunks t + u * blockDim, u < kRowU, as float values exactly as the
// reference sees them: x, or round(x * w) to the operand dtype (Llama 4 weight on input). One
// 16-byte load per chunk, all issued before any is used; nothing goes through shared memory (the
// shared-row versions ran at ~19 us for two 14336-column rows on the H200: bank-conflicted stores
// and a scalar, two-pass quantization loop on 256 threads of two SMs).
constexpr int kRowU = 4;
template <class Op>
__device__ __forceinline__ void load_row_regs(const typename Op::T* src, int nch, bool w_on, float w,
                                              float (&v)[kRowU][8]) {
  using T = typename Op::T;
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4 raw[kRowU];
#pragma unroll
  for (int u = 0; u < kRowU; ++u) {
    const int c = threadIdx.x + u * blockDim.x;
    raw[u] = c < nch ? __ldg(s4 + c) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kRowU; ++u) {
    const T* x = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float f = Op::to_f(x[j]);
      if (w_on) f = Op::to_f(Op::from_f(f * w));
      v[u][j] = f;
    }
  }
}
// Max over the 16 lanes of a half-warp (1x128 activation groups of 16 chunks); every lane of the
// warp must call it.
__device__ __forceinline__ float halfwarp_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// One warp per row (many rows: the Hopper gather, act_prep at prefill sizes): lane l handles the
// 8-element chunks l, l + 32, ... of a 16-byte-aligned row, loading kWarpU of them at a time;
// dynamic per-token scales take two passes over the row (the second from L1 / L2), so a warp
// holds no more than kWarpU chunks and an SM keeps up to 64 rows in flight (one block of 128
// threads per row held 16: ncu, qwen3-30b-a3b fp8 M = 4096, the gathers were 17% of the layer).
constexpr int kWarpU = 4;
// W: the router weight w multiplies each value (rounded to the operand dtype), a template flag so
// that rows without it issue nothing for it (a runtime flag left three predicated-off instructions
// per element in the gathers' SASS).
template <class Op, bool W>
__device__ __forceinline__ void chunk_vals(const uint4& raw, float w, float (&v)[8]) {
  const typename Op::T* x = reinterpret_cast<const typename Op::T*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float f = Op::to_f(x[j]);
    if constexpr (W) f = Op::to_f(Op::from_f(f * w));
    v[j] = f;
  }
}
// f(chunk index, values) for every chunk of the row this thread holds, kWarpU loads in flight; a
// row is held by WPR warps (WPR = 1: a warp per row; long rows: 4, so that a pass is one round of
// loads); every thread calls f the same number of times (c >= nch: zeros), so f may shuffle
// across the warp (1x128 groups: 16 chunks on 16 consecutive lanes).
template <class Op, int WPR, bool W, class F>
__device__ __forceinline__ void warp_row_chunks(const typename Op::T* src, int nch, float w, F&& f) {
  constexpr int kT = 32 * WPR;
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  const int tr = threadIdx.x & (kT - 1);
  for (int base = 0; base < nch; base += kT * kWarpU) {
    const int c0 = base + tr;
    uint4 raw[kWarpU];
#pragma unroll
    for (int u = 0; u < kWarpU; ++u) {
      const int c = c0 + kT * u;
      raw[u] = c < nch ? __ldg(s4 + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kWarpU; ++u) {
      float v[8];
      chunk_vals<Op, W>(raw[u], w, v);
      f(c0 + kT * u, v);
    }
  }
}
// Max over the WPR warps of a row (blocks of 128 threads: WPR = 4 is one row per block, so the
// barrier is uniform); red: 4 floats of shared scratch, one call per kernel.
template <int WPR>
__device__ __forceinline__ float row_max(float v, float* red) {
  v = warp_max(v);
  if constexpr (WPR == 1) {
    return v;
  } else {
    static_assert(WPR == 4, "a row per warp or per 128-thread block");
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  }
}
// One row held by WPR warps (warp_row_chunks): copied (quant 0: store(c, values)) or quantized
// to e4m3 (quant 1: per-token scale from the row's absmax, a first pass; 2: per 1x128 group, one
// pass; 3: the given static scale s), scale(g, s) once per scale group by one thread. CODES: the
// quantized chunks go to store(c, uint2 of 8 e4m3 codes), else to store(c, their 8 e4m3 values).
// The values as act_prep_kernel / the reference compute them (numerics.md: s = max(amax, 1e-10) /
// 448, q = e4m3_satfinite(x / s), the division correctly rounded: RowDiv). Quant 4: int8 per token
// as act_prep_q / the reference (s = max(amax, 1e-10) / 127, q = clamp(rint(x / s), -128, 127));
// CODES: 8 int8 bytes per chunk, else the 8 integers as values. red: 4 floats of shared scratch
// (row_max).
// PERM (CODES, quant 1 / 3): the codes of each 16 columns (chunks 2m, 2m + 1 on lanes 2m, 2m + 1)
// are stored in the Sm90Gather::kperm order (perm16_pair), and a row's codes run to an even chunk
// count (zeros past the row).
template <class Op, int WPR, bool CODES, bool PERM, bool W, class Store, class Scale>
__device__ __forceinline__ void warp_row_quant_w(const typename Op::T* src, int nch, float w, int quant, float s,
                                                 float* red, Store&& store, Scale&& scale) {
  const int tr = threadIdx.x & (32 * WPR - 1);
  if (quant == 0) {
    if constexpr (!CODES)
      warp_row_chunks<Op, WPR, W>(src, nch, w, [&](int c, const float (&v)[8]) {
        if (c < nch) store(c, v);
      });
    return;
  }
  // 8 quotients -> codes or values
  auto emit = [&](int c, float (&q)[8]) {
    const uint2 codes = e4m3_codes8(q);
    if constexpr (CODES) {
      store(c, codes);
    } else {
      float v[8];
      const uint32_t cw[2] = {codes.x, codes.y};
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) v[4 * h + j] = e4m3_value(static_cast<uint8_t>(cw[h] >> (8 * j)));
      store(c, v);
    }
  };
  if (quant == 1 || quant == 3 || quant == 4) {
    if (quant != 3) {  // first pass: the row's absmax
      float mx = 0.f;
      warp_row_chunks<Op, WPR, W>(src, nch, w, [&](int, const float (&v)[8]) {
#pragma unroll
        for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fabsf(v[j]));
      });
      s = fmaxf(row_max<WPR>(mx, red), 1e-10f) / (quant == 4 ? 127.f : 448.f);
    }
    const RowDiv div(s);
    // the second pass, chosen once per row: RowDiv where it is exact (`safe`), else the division
    // (a per-element choice cost a branch and its convergence barrier per element: ncu, gpt-oss-120b
    // INT8 M = 4096, the h gather issued 42 instructions per element at 69% issue-slot use)
    auto second = [&](auto fast_tag) {
      constexpr bool kFast = decltype(fast_tag)::value;
      if (quant == 4) {
        warp_row_chunks<Op, WPR, W>(src, nch, w, [&](int c, const float (&v)[8]) {
          if (c >= nch) return;
          uint32_t b[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            // |x / s| <= 127 (1 + 2^-22) (s is the row's absmax / 127): RowDiv's large-quotient and
            // signed-zero cases do not arise (row_div.h RowDiv::small, int8_code_bits)
            b[j] = int8_code_bits(kFast ? div.small(v[j]) : v[j] / s);
          }
          if constexpr (CODES) {
            store(c, make_uint2(__byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x0040), 0x5410),
                                __byte_perm(__byte_perm(b[4], b[5], 0x0040), __byte_perm(b[6], b[7], 0x0040), 0x5410)));
          } else {
            float q[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) q[j] = static_cast<float>(static_cast<int8_t>(b[j] & 0xFFu));
            store(c, q);
          }
        });
        return;
      }
      warp_row_chunks<Op, WPR, W>(src, nch, w, [&](int c, const float (&v)[8]) {
        if constexpr (PERM) {  // every lane: the pair exchange shuffles
          float q[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) q[j] = c < nch ? (kFast ? div(v[j]) : v[j] / s) : 0.f;
          const uint2 codes = perm16_pair(e4m3_codes8(q), c & 1);
          if (c < (nch + 1) / 2 * 2) store(c, codes);
          return;
        }
        if (c >= nch) return;
        float q[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = kFast ? div(v[j]) : v[j] / s;
        emit(c, q);
      });
    };
    if (RowDiv::safe(s)) second(std::true_type{});
    else second(std::false_type{});
    if (tr == 0) scale(0, s);
    return;
  }
  // quant 2: a 128-column group is 16 chunks, held by 16 consecutive lanes of one warp
  warp_row_chunks<Op, WPR, W>(src, nch, w, [&](int c, const float (&v)[8]) {
    float mx = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fabsf(v[j]));
    const float sg = fmaxf(halfwarp_max(mx), 1e-10f) / 448.f;  // every lane: the shuffles
    if (c >= nch) return;
    const RowDiv div(sg);
    float q[8];
    if (RowDiv::safe(sg)) {  // one choice per chunk (per element it cost a branch each, as above)
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = div(v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = v[j] / sg;
    }
    emit(c, q);
    if (c % 16 == 0) scale(c / 16, sg);
  });
}
// w_on: the router weight w multiplies the row (Llama 4's weight on the input), else w is unused.
template <class Op, int WPR, bool CODES, bool PERM = false, class Store, class Scale>
__device__ __forceinline__ void warp_row_quant(const typename Op::T* src, int nch, bool w_on, float w, int quant,
                                               float s, float* red, Store&& store, Scale&& scale) {
  if (w_on) warp_row_quant_w<Op, WPR, CODES, PERM, true>(src, nch, w, quant, s, red, store, scale);
  else warp_row_quant_w<Op, WPR, CODES, PERM, false>(src, nch, w, quant, s, red, store, scale);
}
// Warps per row for a row of nch 16-byte chunks: 4 past 256 chunks (2048 16-bit values).
__host__ __device__ constexpr int row_warps(int nch) { return nch > 256 ? 4 : 1; }

// Eight values as one 16-byte chunk of 16-bit type T (Op::T, or __half).
template <class T>
__device__ __forceinline__ uint4 pack8(const float (&q)[8]) {
  using P = std::conditional_t<std::is_same_v<T, __half>, F16, BF16>;
  return make_uint4(P::pack(q[0], q[1]), P::pack(q[2], q[3]), P::pack(q[4], q[5]), P::pack(q[6], q[7]));
}

// ---- prepared row order -------------------------------------------------------------------------
// Original weight row of prepared row n of w13, whose rows are interleaved per n16 tile: 8 gate rows
// then the 8 matching up rows (half = I); every kernel's epilogue and prepare() use this order.
__host__ __device__ __forceinline__ int interleaved_row(int n, int half) {
  return ((n >> 3) & 1) * half + (n >> 4) * 8 + (n & 7);
}
template <class P>  // GemmParams, Sm90Gemm: fields interleaved, half
__device__ __forceinline__ int orig_row(const P& p, int n) {
  return p.interleaved ? interleaved_row(n, p.half) : n;
}

// ---- activations (numerics.md) -------------------------------------------------------------------
// The reference's expressions, except that the divisions are the fast fp32 divide (__fdividef: at
// most 2 ulp, and no slow-path branch per element, which kept the Hopper GEMM1 epilogue from
// overlapping its elements: 9-15 us per CTA, ~30% of the kernel, per-CTA timeline on the H200);
// h is rounded to the operand dtype right after, 2^16 times coarser than that difference.
__device__ __forceinline__ float act_silu(float g, float u) { return __fdividef(g, 1.f + expf(-g)) * u; }
__device__ __forceinline__ float act_gelu(float g, float u) {
  return 0.5f * g * (1.f + erff(g * 0.70710678118654752f)) * u;
}
__device__ __forceinline__ float act_swiglu_oai(float g, float u) {
  const float gc = fminf(g, 7.f);
  const float uc = fminf(fmaxf(u, -7.f), 7.f);
  return (uc + 1.f) * (gc * __fdividef(1.f, 1.f + expf(-(gc * 1.702f))));  // the reference's order
}
// act: 0 silu*mul, 1 gelu(erf)*mul, 2 swigluoai
__device__ __forceinline__ float act_fn(int act, float g, float u) {
  if (act == 0) return act_silu(g, u);
  if (act == 1) return act_gelu(g, u);
  return act_swiglu_oai(g, u);
}
// f(fn) with fn the activation `act` as a functor: an epilogue written once runs branch-free per
// element (the act switch taken once, outside its loops).
template <class F>
__device__ __forceinline__ void with_act(int act, F&& f) {
  if (act == 0) f([](float g, float u) { return act_silu(g, u); });
  else if (act == 1) f([](float g, float u) { return act_gelu(g, u); });
  else f([](float g, float u) { return act_swiglu_oai(g, u); });
}

}  // namespace qmoe::cuda::dev
