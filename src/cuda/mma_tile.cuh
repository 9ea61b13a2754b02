// Pieces shared by the mma.sync grouped-GEMM kernels (moe_gemm.cu for int / fp8 / 16-bit weights,
// moe_gemm_fp4.cu for fp4 units): the tile configuration and the epilogue that turns a warp's
// m16n8k16 accumulators into GEMM1's activation on interleaved gate / up rows or GEMM2's router-
// weighted fp32 slot outputs.
#pragma once
#include "cuda/device_common.cuh"
#include "cuda/moe_gemm.cuh"

namespace qmoe::cuda::dev {

// BM x BN block tile, WARPS_M x WARPS_N warps (warp tile WM x WN: MI m16 rows x NT n16 columns),
// STAGES-deep cp.async pipeline.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct MmaCfg {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MI = WM / 16, NT = WN / 16;
};

// Zeroes a warp's accumulators acc[MI][NT][2][4].
template <class C>
__device__ __forceinline__ void zero_acc(float (&acc)[C::MI][C::NT][2][4]) {
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mi][nt][j][c] = 0.f;
}

// A fragments of k16 step `step` for the warp's MI row blocks from an XOR-swizzled 128-byte-row
// stage (16-byte chunk c of row r at ((c ^ (r & 7)) << 4)).
template <class C>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[C::MI][4], const uint8_t* cA, int warp_m, int lane, int step) {
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi) {
    int row = warp_m * C::WM + mi * 16 + (lane & 15);
    int c = step * 2 + (lane >> 4);
    ldmatrix_x4(a[mi], cA + row * 128 + ((c ^ (row & 7)) << 4));
  }
}

// The cp.async pipeline over k-tiles [kt0, kt1): pipeline_start issues the first STAGES - 1
// stages; pipeline_next, at the top of k-tile kt, waits for its stage, lets every thread see it,
// issues the stage STAGES - 1 ahead and returns kt's slot.
template <class C, class Load>
__device__ __forceinline__ void pipeline_start(int kt0, int kt1, const Load& load_stage) {
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (kt0 + s < kt1) load_stage(s, kt0 + s);
    cp_async_commit();
  }
}
template <class C, class Load>
__device__ __forceinline__ int pipeline_next(int kt, int kt0, int kt1, const Load& load_stage) {
  cp_async_wait<C::STAGES - 2>();
  __syncthreads();
  const int pf = kt + C::STAGES - 1;
  if (pf < kt1) load_stage((pf - kt0) % C::STAGES, pf);
  cp_async_commit();
  return (kt - kt0) % C::STAGES;
}

// f(mi, h, nt, j, e2) for every accumulator of a warp: acc[mi][nt][j][h * 2 + e2] is m16 block mi's
// row (lane >> 2) + 8 h, n16 column nt's column j * 8 + 2 (lane & 3) + e2.
template <class C, class F>
__device__ __forceinline__ void for_each_acc(const F& f) {
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) f(mi, h, nt, j, e2);
}

// The block's outputs from the warp's fp32 sums val(mi, nt, j, c) (accumulator c of n8 half j of
// n16 column nt, m16 row block mi; rows (lane >> 2) + 8 (c >> 1), columns 2 (lane & 3) + (c & 1)),
// all scales already applied: GEMM1 (p.stage 1) writes act(gate, up) in the operand dtype (or adds
// the raw sums into p.partial when K is split), GEMM2 writes sum * router weight as fp32 (atomics
// when K is split; the bias is added by split 0 only). s_rows: the M-block's sorted ids.
template <class Op, class C, class Val>
__device__ __forceinline__ void mma_tile_epilogue(const GemmParams& p, const Val& val, const int* s_rows, int warp_m,
                                                  int lane, int ncol0, int ntiles16, int e, int split) {
  using OutT = typename Op::OutT;
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int sid = s_rows[warp_m * C::WM + mi * 16 + (lane >> 2) + h * 8];
      if (sid >= p.numel) continue;
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt) {
        const int tile = (ncol0 >> 4) + nt;
        if (p.stage == 1) {
          const int i = tile * 8 + 2 * (lane & 3);  // intermediate column (pair i, i + 1)
          if (tile >= ntiles16 || i >= p.half) continue;
          if (p.partial != nullptr) {
            float* dst = p.partial + static_cast<size_t>(sid) * p.np + tile * 16 + 2 * (lane & 3);
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              atomicAdd(dst + e2, val(mi, nt, 0, h * 2 + e2));
              atomicAdd(dst + 8 + e2, val(mi, nt, 1, h * 2 + e2));
            }
          } else {
            float hv[2];
#pragma unroll
            for (int e2 = 0; e2 < 2; ++e2) {
              float g = val(mi, nt, 0, h * 2 + e2), u = val(mi, nt, 1, h * 2 + e2);
              if (p.bias != nullptr) {
                g += p.bias[static_cast<size_t>(e) * p.n + i + e2];
                u += p.bias[static_cast<size_t>(e) * p.n + p.half + i + e2];
              }
              hv[e2] = act_fn(p.act, g, u);
            }
            *reinterpret_cast<uint32_t*>(static_cast<OutT*>(p.out) + static_cast<size_t>(sid) * p.ldo + i) =
                Op::out_pack(hv[0], hv[1]);
          }
        } else {
          const float w = p.topk_w != nullptr ? p.topk_w[sid] : 1.f;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int n = tile * 16 + j * 8 + 2 * (lane & 3);
            if (n >= p.n) continue;
            float v0 = val(mi, nt, j, h * 2), v1 = val(mi, nt, j, h * 2 + 1);
            if (p.bias != nullptr && split == 0) {
              v0 += p.bias[static_cast<size_t>(e) * p.n + n];
              v1 += p.bias[static_cast<size_t>(e) * p.n + n + 1];
            }
            float* dst = static_cast<float*>(p.out) + static_cast<size_t>(sid) * p.ldo + n;
            if (p.splits > 1) {
              atomicAdd(dst, v0 * w);
              atomicAdd(dst + 1, v1 * w);
            } else {
              *reinterpret_cast<float2*>(dst) = make_float2(v0 * w, v1 * w);
            }
          }
        }
      }
    }
}

}  // namespace qmoe::cuda::dev
