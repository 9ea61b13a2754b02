// The grouped MoE GEMM for fp4 weights (NVFP4, MXFP4) on mma.sync m16n8k16 with bf16 / fp16
// operands: Hopper has no fp4 tensor cores. Same tiles, A pipeline and epilogue as backend I's
// moe_gemm.cu; the weights are "fp4 units": per (n16 tile, 64-k atom) the 512 bytes of backend I's
// int4 atom (each lane's B-fragment nibbles) followed by the 16 rows' block scales (NVFP4: 4 e4m3
// per row, 64 B; MXFP4: 2 e8m0 per row, 32 B), so one linear cp.async stream carries both.
// Each B pair is dequantized to e2m1(q) * block_scale * 2^c, EXACT in the operand dtype, with a
// fixed power of two 2^c (bf16: 2^-63, fp16: 2^-7) folded into the scale so that one multiply
// per pair does it (the e2m1 bit pattern alone is e2m1 * 2^-126 / 2^-14); the epilogue multiplies
// the fp32 sum by 2^-c (exact):
//  * e2m1 has 2 significant bits, e4m3 4 (subnormals 3): the NVFP4 product has <= 6 significant
//    bits in [2^-11 (lowest bit), 6 * 448 = 2688]; times 2^-63 it is a normal bf16, times 2^-7 an
//    fp16 whose lowest bit is >= 2^-19 (fp16 reaches 2^-24) and whose maximum is 21;
//  * MXFP4: e2m1 * 2^(e - 127) * 2^c is a power-of-two scaling of a 2-bit value: exact for e in
//    [59, 191] (bf16) and [112, 135] (fp16); prepare_q refuses other scales.
// bf16 x bf16 (fp16 x fp16) products are exact in the MMA's fp32, so GEMM = the reference's exact
// dequantized products summed in fp32 (a product smaller than 2^-126 in the scaled domain, i.e.
// |a * w| < 2^-63 for bf16, may be flushed: far below any output's rounding). W4A4 activations
// arrive as e2m1(qa) * s_a (exact for the same reason), making each MMA product
// e2m1(qa) s_a e2m1(qw) s_w 2^c exactly (numerics.md "Products"). The per-row fp32 factors
// (global scale; W4A4 also 1/G via the row scale) multiply the fp32 sum once in the epilogue.
#include "cuda/device_common.cuh"
#include "cuda/fp4_ops.cuh"
#include "cuda/mma_tile.cuh"
#include "cuda/moe_q.cuh"

namespace qmoe::cuda {
namespace {

using namespace dev;

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
using Cfg = MmaCfg<BM, BN, WARPS_M, WARPS_N, STAGES>;
// Backend I's tile families (config.h Tile), picked by their M-block height.
using SmallCfg = Cfg<16, 64, 1, 4, 6>;
using MediumCfg = Cfg<64, 128, 2, 2, 4>;
using LargeCfg = Cfg<128, 128, 2, 4, 3>;

template <WFmt F>
constexpr int unit_bytes() {
  return F == WFmt::kNV4 ? 512 + 64 : 512 + 32;
}
template <class C, WFmt F>
constexpr int smem_bytes() {
  return C::STAGES * (C::BM * 128 + (C::BN / 16) * unit_bytes<F>()) + C::BM * 4;
}

template <class Op, class C, WFmt F>
__global__ void __launch_bounds__(C::kThreads) moe_gemm_fp4_kernel(const GemmParams p) {
  constexpr int U = unit_bytes<F>();
  constexpr int A_BYTES = C::BM * 128;
  constexpr int B_BYTES = (C::BN / 16) * U;
  pdl_wait();  // launch_kernel: may start while the previous kernel finishes
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + C::STAGES * A_BYTES;
  int* s_rows = reinterpret_cast<int*>(smem + C::STAGES * (A_BYTES + B_BYTES));

  const int mb = blockIdx.x, nb = blockIdx.y, split = blockIdx.z;
  if (mb * C::BM >= *p.num_post) return;
  const int e = p.expert_ids[mb];
  if (e < 0) return;  // expert on another rank: its slots stay zero (pre-cleared)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;

  for (int r = tid; r < C::BM; r += C::kThreads) s_rows[r] = p.sorted_ids[mb * C::BM + r];
  __syncthreads();

  const int ktiles = p.kp / 64;
  const int kt0 = split * p.ktiles_per_split;
  const int kt1 = min(ktiles, kt0 + p.ktiles_per_split);
  if (kt0 >= kt1) return;
  const int ntiles16 = p.np / 16;
  const uint8_t* wexp = p.w + static_cast<size_t>(e) * ntiles16 * ktiles * U;
  const char* abase = static_cast<const char*>(p.a);

  // Per-thread copy sources, computed once (the same rows / units every k-tile): A row chunks
  // (row of the gathered token, 16-byte column chunk) and B unit chunks.
  constexpr int A_ITERS = (C::BM * 8 + C::kThreads - 1) / C::kThreads;
  constexpr int B_ITERS = (B_BYTES / 16 + C::kThreads - 1) / C::kThreads;
  const char* a_src[A_ITERS];
  int a_col[A_ITERS];  // first k column of the chunk within a k-tile, or -1 (no such chunk / padding row)
#pragma unroll
  for (int i = 0; i < A_ITERS; ++i) {
    const int idx = tid + i * C::kThreads, r = idx >> 3, c = idx & 7;
    const int sid = idx < C::BM * 8 ? s_rows[r] : p.numel;
    a_col[i] = sid < p.numel ? c * 8 : -1;
    a_src[i] = sid < p.numel ? abase + static_cast<size_t>(sid / p.a_row_div) * p.lda * 2 + c * 16 : abase;
  }
  const uint8_t* b_src[B_ITERS];
  bool b_ok[B_ITERS];
#pragma unroll
  for (int i = 0; i < B_ITERS; ++i) {
    const int idx = tid + i * C::kThreads;
    const int t = idx / (U / 16), rem = idx % (U / 16);
    const int gt = nb * (C::BN / 16) + t;
    b_ok[i] = idx < B_BYTES / 16 && gt < ntiles16;
    b_src[i] = b_ok[i] ? wexp + static_cast<size_t>(gt) * ktiles * U + rem * 16 : p.w;
  }
  auto load_stage = [&](int stage, int kt) {
    uint8_t* dA = sA + stage * A_BYTES;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const int idx = tid + i * C::kThreads;
      if (idx >= C::BM * 8) break;
      const int r = idx >> 3, c = idx & 7;
      const bool ok = a_col[i] >= 0 && kt * 64 + a_col[i] < p.k;
      cp_async16(dA + r * 128 + ((c ^ (r & 7)) << 4), ok ? a_src[i] + kt * 128 : abase, ok ? 16 : 0);
    }
    uint8_t* dB = sB + stage * B_BYTES;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
      const int idx = tid + i * C::kThreads;
      if (idx >= B_BYTES / 16) break;
      cp_async16(dB + idx * 16, b_ok[i] ? b_src[i] + static_cast<size_t>(kt) * U : p.w, b_ok[i] ? 16 : 0);
    }
  };

  float acc[C::MI][C::NT][2][4];
  zero_acc<C>(acc);

  const int ncol0 = nb * C::BN + warp_n * C::WN;

  pipeline_start<C>(kt0, kt1, load_stage);
  for (int kt = kt0; kt < kt1; ++kt) {
    const int st = pipeline_next<C>(kt, kt0, kt1, load_stage);
    const uint8_t* cA = sA + st * A_BYTES;
    const uint8_t* cB = sB + st * B_BYTES;
    // this lane's codes and its two rows' scales for the whole 64-k atom
    uint32_t wv[C::NT][4];
    // scale pairs (two consecutive blocks / groups per register, already times 2^(126 + c))
    uint32_t sp[C::NT][2][2];
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt) {
      const uint8_t* unit = cB + (warp_n * C::NT + nt) * U;
      uint4 v = *reinterpret_cast<const uint4*>(unit + lane * 16);
      wv[nt][0] = v.x; wv[nt][1] = v.y; wv[nt][2] = v.z; wv[nt][3] = v.w;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = j * 8 + (lane >> 2);
        if constexpr (F == WFmt::kNV4) {
          const uint32_t sw = *reinterpret_cast<const uint32_t*>(unit + 512 + row * 4);  // blocks 0..3
          sp[nt][j][0] = Op::mul2(dq_fp8_pair<Op>(sw, 0), Fp4Bits<Op>::kFold);      // (s0, s1)
          sp[nt][j][1] = Op::mul2(dq_fp8_pair<Op>(sw, 2), Fp4Bits<Op>::kFold);      // (s2, s3)
        } else {
          const uint32_t sw = *reinterpret_cast<const uint16_t*>(unit + 512 + row * 2);  // groups 0, 1
          sp[nt][j][0] = mx_scale_pair<Op>(sw & 0xFFu);
          sp[nt][j][1] = mx_scale_pair<Op>(sw >> 8);
        }
      }
    }
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      uint32_t a[C::MI][4];
      load_a_frags<C>(a, cA, warp_m, lane, step);
      uint32_t b[C::NT][2][2];
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          // NVFP4: block `step` of this atom (half step & 1 of pair step / 2, broadcast); MXFP4:
          // group step / 2 (both halves already)
          const uint32_t s2 = F == WFmt::kNV4 ? __byte_perm(sp[nt][j][step >> 1], 0u, (step & 1) ? 0x3232 : 0x1010)
                                              : sp[nt][j][step >> 1];
          // pair index j * 2 + bi, spelled out so that the shifts are compile-time constants
          const uint32_t r0 = j == 0 ? e2m1_raw_pair<Op, 0>(wv[nt][step]) : e2m1_raw_pair<Op, 2>(wv[nt][step]);
          const uint32_t r1 = j == 0 ? e2m1_raw_pair<Op, 1>(wv[nt][step]) : e2m1_raw_pair<Op, 3>(wv[nt][step]);
          b[nt][j][0] = Op::mul2(r0, s2);
          b[nt][j][1] = Op::mul2(r1, s2);
        }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) mma16816<Op>(acc[mi][nt][j], a[mi], b[nt][j][0], b[nt][j][1]);
    }
  }
  cp_async_wait<0>();

  // ---- per-output fp32 factors: column (global) scale x row scale (W4A4: 1/G of the slot's expert)
  {
    float cs[C::NT][2][2];
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          int n = ncol0 + nt * 16 + j * 8 + 2 * (lane & 3) + e2;
          int r = orig_row(p, n);
          float s = 1.f;
          if (p.col_scale != nullptr && n < p.np && r < p.n)
            s = p.col_scale[static_cast<size_t>(e) * p.nsc + r / p.n_div];
          cs[nt][j][e2] = s;
        }
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float rs = 1.f;
        if (p.row_scale != nullptr) {
          int sid = s_rows[warp_m * C::WM + mi * 16 + (lane >> 2) + h * 8];
          rs = sid < p.numel ? p.row_scale[static_cast<size_t>(sid / p.a_row_div) * p.rs_groups] : 0.f;
        }
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2)  // (rs * cs) * 2^-c: the power of two is exact
              acc[mi][nt][j][h * 2 + e2] *= (rs * cs[nt][j][e2]) * Fp4Bits<Op>::kUnscale;
      }
  }

  // ---- epilogue (backend I's): GEMM1 activation on interleaved gate/up, or GEMM2 router weight
  auto val = [&](int mi, int nt, int j, int c) -> float { return acc[mi][nt][j][c]; };
  mma_tile_epilogue<Op, C>(p, val, s_rows, warp_m, lane, ncol0, ntiles16, e, split);
}

template <class Op, class C, WFmt F>
void launch_one(const GemmParams& p, cudaStream_t s) {
  constexpr int smem = smem_bytes<C, F>();
  auto kern = moe_gemm_fp4_kernel<Op, C, F>;
  static bool attr_set = false;  // per instantiation; benign if two threads race (same value)
  if (!attr_set) {
    QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    attr_set = true;
  }
  dim3 grid(p.max_blocks, (p.np + C::BN - 1) / C::BN, p.splits);
  launch_kernel(kern, grid, dim3(C::kThreads), smem, s, p);
}

template <class Op, class C>
void launch_fmt(WFmt fmt, const GemmParams& p, cudaStream_t s) {
  if (fmt == WFmt::kNV4) launch_one<Op, C, WFmt::kNV4>(p, s);
  else launch_one<Op, C, WFmt::kMX4>(p, s);
}

}  // namespace

void launch_moe_gemm_fp4(bool f16, WFmt fmt, Tile tile, const GemmParams& p, cudaStream_t s) {
  QMOE_CHECK(fmt == WFmt::kNV4 || fmt == WFmt::kMX4, kInternal, "launch_moe_gemm_fp4: format ", static_cast<int>(fmt),
             " is not an fp4 format");
  const int bm = tile_bm(tile);  // must match the M-blocks forward() aligned the rows to
  if (bm == SmallCfg::BM) {
    if (f16) launch_fmt<F16, SmallCfg>(fmt, p, s);
    else launch_fmt<BF16, SmallCfg>(fmt, p, s);
  } else if (bm == MediumCfg::BM) {
    if (f16) launch_fmt<F16, MediumCfg>(fmt, p, s);
    else launch_fmt<BF16, MediumCfg>(fmt, p, s);
  } else {
    QMOE_CHECK(bm == LargeCfg::BM, kInternal, "launch_moe_gemm_fp4: no tile with ", bm, "-row blocks");
    if (f16) launch_fmt<F16, LargeCfg>(fmt, p, s);
    else launch_fmt<BF16, LargeCfg>(fmt, p, s);
  }
}

}  // namespace qmoe::cuda
