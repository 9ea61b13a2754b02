// The fused MoE's non-GEMM kernels: routing (one warp per token, every RouterKind of the
// reference), moe_align_block_size (one block, shared-memory histogram), activation preparation
// with fp8 quantization (numerics.md: s = max(amax, 1e-10) / 448, q = e4m3_satfinite(x / s)),
// the split-K activation finish and the sum over top-k.

#include <algorithm>
#include <cfloat>

#include "cuda/cuda_moe.h"
#include "cuda/device_common.cuh"
#include "cuda/moe_kernels.cuh"
#include "cuda/moe_q.cuh"

namespace qmoe::cuda {
namespace {

using namespace dev;

// ---- routing --------------------------------------------------------------------------------------
// Warp-wide argmax over sc[0..n) among entries with taken[i] == 0; ties -> lowest index.
__device__ int warp_argmax(const float* sc, const uint8_t* taken, int n, int lane) {
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = lane; i < n; i += 32) {
    if (taken[i]) continue;
    float v = sc[i];
    if (v > bv || (v == bv && i < bi) || bi == INT_MAX) { bv = v; bi = i; }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi != INT_MAX && (bi == INT_MAX || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
  }
  return bi;
}

__device__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct RouteArgs {
  int kind, top_k, renorm, grouped_sigmoid, num_groups, topk_group;
  float scaling;
};

constexpr int kRouteWarps = 4;

__global__ void route_kernel(const float* __restrict__ logits, int64_t m, int E, RouteArgs ra,
                             const float* __restrict__ bias, float* __restrict__ topk_w,
                             int32_t* __restrict__ topk_ids) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* sc = reinterpret_cast<float*>(smem) + warp * 2 * E;  // scores, selection scores
  float* sel = sc + E;
  uint8_t* taken = smem + kRouteWarps * 2 * E * 4 + warp * E;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= m) return;
  const float* lg = logits + t * E;
  const int kind = ra.kind, K = ra.top_k;
  // scores
  if (kind == static_cast<int>(RouterKind::kSoftmaxTopK) ||
      (kind == static_cast<int>(RouterKind::kGrouped) && !ra.grouped_sigmoid)) {
    float mx = -INFINITY;
    for (int i = lane; i < E; i += 32) mx = fmaxf(mx, lg[i]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int i = lane; i < E; i += 32) {
      float ev = expf(lg[i] - mx);
      sc[i] = ev;
      sum += ev;
    }
    sum = warp_sum(sum);
    for (int i = lane; i < E; i += 32) sc[i] = sc[i] / sum;
  } else if (kind == static_cast<int>(RouterKind::kSigmoidTopK) || kind == static_cast<int>(RouterKind::kGrouped)) {
    for (int i = lane; i < E; i += 32) sc[i] = 1.f / (1.f + expf(-lg[i]));
  } else {  // top-k on raw logits (kTopKSoftmax, kLlama4)
    for (int i = lane; i < E; i += 32) sc[i] = lg[i];
  }
  for (int i = lane; i < E; i += 32) {
    sel[i] = sc[i] + ((kind == static_cast<int>(RouterKind::kGrouped) && bias != nullptr) ? bias[i] : 0.f);
    taken[i] = 0;
  }
  __syncwarp();
  if (kind == static_cast<int>(RouterKind::kGrouped) && ra.num_groups > 1) {
    // group score: sum of the top-2 biased scores (with bias) or the max score (without);
    // keep topk_group groups (ties -> lowest group), mask the others out of the selection.
    const int G = ra.num_groups, per = E / G;
    float gs = -INFINITY;
    if (lane < G) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = lane * per; i < (lane + 1) * per; ++i) {
        float v = sel[i];
        if (v > b1) { b2 = b1; b1 = v; } else if (v > b2) { b2 = v; }
      }
      gs = bias != nullptr ? b1 + b2 : b1;
    }
    // select topk_group groups by repeated warp argmax over lanes (G <= 32)
    unsigned keep = 0;
    for (int r = 0; r < ra.topk_group; ++r) {
      float bv = lane < G && !((keep >> lane) & 1u) ? gs : -INFINITY;
      int bi = lane < G && !((keep >> lane) & 1u) ? lane : INT_MAX;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != INT_MAX && (bi == INT_MAX || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
      }
      if (bi != INT_MAX) keep |= 1u << bi;
    }
    for (int i = lane; i < E; i += 32)
      if (!((keep >> (i / per)) & 1u)) taken[i] = 1;  // pruned group: never selected
    __syncwarp();
  }
  int ids[32];
  float ws[32];
  for (int r = 0; r < K; ++r) {
    int bi = warp_argmax(sel, taken, E, lane);
    __syncwarp();
    if (lane == 0) taken[bi] = 1;
    __syncwarp();
    ids[r] = bi;
    ws[r] = sc[bi];
  }
  if (lane != 0) return;
  if (kind == static_cast<int>(RouterKind::kTopKSoftmax)) {
    float mx = ws[0];
    for (int r = 1; r < K; ++r) mx = fmaxf(mx, ws[r]);
    float sum = 0.f;
    for (int r = 0; r < K; ++r) { ws[r] = expf(ws[r] - mx); sum += ws[r]; }
    for (int r = 0; r < K; ++r) ws[r] = ws[r] / sum;
  } else if (kind == static_cast<int>(RouterKind::kLlama4)) {
    for (int r = 0; r < K; ++r) ws[r] = 1.f / (1.f + expf(-ws[r]));
  } else if (ra.renorm) {
    float sum = 0.f;
    for (int r = 0; r < K; ++r) sum += ws[r];
    for (int r = 0; r < K; ++r) ws[r] = ws[r] / sum;
  }
  if (kind == static_cast<int>(RouterKind::kGrouped))
    for (int r = 0; r < K; ++r) ws[r] = ws[r] * ra.scaling;
  for (int r = 0; r < K; ++r) {
    topk_w[t * K + r] = ws[r];
    topk_ids[t * K + r] = ids[r];
  }
}

// ---- align ----------------------------------------------------------------------------------------
__global__ void align_kernel(const int32_t* __restrict__ ids, int numel, const int32_t* __restrict__ emap,
                             int E, int B, int capacity, int32_t* __restrict__ sorted,
                             int32_t* __restrict__ eids, int32_t* __restrict__ num_post, int32_t* __restrict__ zero) {
  extern __shared__ int sh[];
  pdl_trigger();  // launched plainly (the layer's first kernel): the next kernel may start early
  if (zero != nullptr && threadIdx.x < kAlignZeroInts) zero[threadIdx.x] = 0;
  int* cnt = sh;         // [E]
  int* off = sh + E;     // [E + 1]
  int* cur = sh + 2 * E + 1;  // [E]
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += blockDim.x) { cnt[e] = 0; cur[e] = 0; }
  __syncthreads();
  // the ids are read kU at a time per thread, all loads issued before their atomics (one loop
  // iteration per id waited a full memory round trip: 48 us for 32768 ids, ncu, qwen3 M = 4096)
  constexpr int kU = 8;
  auto local_ids = [&](int i0, int (&ev)[kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      ev[u] = i < numel ? ids[i] : -1;
    }
    if (emap != nullptr)
#pragma unroll
      for (int u = 0; u < kU; ++u) ev[u] = ev[u] >= 0 ? emap[ev[u]] : -1;
  };
  for (int i0 = tid; i0 < numel; i0 += kU * blockDim.x) {
    int ev[kU];
    local_ids(i0, ev);
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (ev[u] >= 0) atomicAdd(&cnt[ev[u]], 1);
  }
  for (int i = tid; i < capacity; i += blockDim.x) sorted[i] = numel;
  __syncthreads();
  // exclusive scan of the padded counts: each thread sums a run of experts, warps scan by shuffles
  {
    const int per = (E + blockDim.x - 1) / blockDim.x, e0 = tid * per, e1 = min(E, e0 + per);
    int local = 0;
    for (int e = e0; e < e1; ++e) local += (cnt[e] + B - 1) / B * B;
    const int lane = tid & 31, wid = tid >> 5;
    int incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    __shared__ int wsum[32];
    if (lane == 31) wsum[wid] = incl;
    __syncthreads();
    if (wid == 0) {
      int w = lane < static_cast<int>(blockDim.x >> 5) ? wsum[lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += v;
      }
      wsum[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    int run = incl - local + (wid > 0 ? wsum[wid - 1] : 0);
    for (int e = e0; e < e1; ++e) {
      off[e] = run;
      run += (cnt[e] + B - 1) / B * B;
    }
    if (tid == blockDim.x - 1) {
      off[E] = run;
      *num_post = run;
    }
  }
  __syncthreads();
  for (int b = tid; b < capacity / B; b += blockDim.x) eids[b] = -1;
  __syncthreads();
  for (int e = tid; e < E; e += blockDim.x)
    for (int b = off[e] / B; b < off[e + 1] / B; ++b) eids[b] = e;
  for (int i0 = tid; i0 < numel; i0 += kU * blockDim.x) {
    int ev[kU];
    local_ids(i0, ev);
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (ev[u] >= 0) sorted[off[ev[u]] + atomicAdd(&cur[ev[u]], 1)] = i0 + u * static_cast<int>(blockDim.x);
  }
}

// Many entries (align_hist_ints > 0): three kernels over a grid instead of one block (ncu, qwen3-30b-a3b
// M = 4096, 32768 entries: the one-block kernel took 40 us, its shared-memory atomics on 128
// counters and the capacity-long sentinel fill on one SM). Block b of kAlignChunk entries:
//   count:   hist[b][e] = entries of block b on local expert e;
//   offsets: (one block) per expert the exclusive prefix of hist over blocks (in place), the padded
//            exclusive scan over experts (off), num_post, expert ids of the blocks, and the sentinel
//            in each expert's padding positions;
//   scatter: block b's entries of expert e at off[e] + hist[b][e] + rank (rank by shared atomics;
//            the order of an expert's rows does not change any row's result), and the sentinel
//            past num_post.
constexpr int kAlignChunk = 1024;
__device__ __forceinline__ int align_local(const int32_t* ids, const int32_t* emap, int i) {
  const int e = ids[i];
  return emap != nullptr ? emap[e] : e;
}
__global__ void align_count_kernel(const int32_t* __restrict__ ids, int numel, const int32_t* __restrict__ emap,
                                   int E, int32_t* __restrict__ hist) {
  extern __shared__ int cnt[];  // [E]
  pdl_trigger();  // launched plainly (the layer's first kernel): the next kernel may start early
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  const int i = blockIdx.x * kAlignChunk + threadIdx.x;  // blockDim == kAlignChunk
  if (i < numel) {
    const int e = align_local(ids, emap, i);
    if (e >= 0) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[static_cast<size_t>(blockIdx.x) * E + e] = cnt[e];
}
__global__ void align_offsets_kernel(int nb, int E, int B, int numel, int32_t* __restrict__ hist,
                                     int32_t* __restrict__ off_out, int32_t* __restrict__ sorted,
                                     int32_t* __restrict__ eids, int capacity, int32_t* __restrict__ num_post,
                                     int32_t* __restrict__ zero) {
  extern __shared__ int sh[];
  int* padded = sh;       // [E]
  int* off = sh + E;      // [E + 1]
  pdl_wait();
  pdl_trigger();
  if (zero != nullptr && threadIdx.x < kAlignZeroInts) zero[threadIdx.x] = 0;
  // per expert, the exclusive prefix over blocks: loads 8 blocks at a time (one loop iteration per
  // block waited an L2 round trip each: 25 us for 32 blocks, ncu)
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int b0 = 0; b0 < nb; b0 += 8) {
      int c[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) c[u] = b0 + u < nb ? hist[static_cast<size_t>(b0 + u) * E + e] : 0;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (b0 + u < nb) hist[static_cast<size_t>(b0 + u) * E + e] = run;
        run += c[u];
      }
    }
    padded[e] = run;  // the expert's count for now
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // padded exclusive scan over experts: lane l sums a contiguous run, warp scan
    const int lane = threadIdx.x, per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int local = 0;
    for (int e = e0; e < e1; ++e) local += (padded[e] + B - 1) / B * B;
    int incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    int run = incl - local;
    for (int e = e0; e < e1; ++e) {
      off[e] = run;
      run += (padded[e] + B - 1) / B * B;
    }
    if (lane == 31) {
      off[E] = incl;
      *num_post = incl;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= E; e += blockDim.x) off_out[e] = off[e];
  for (int b = off[E] / B + threadIdx.x; b < capacity / B; b += blockDim.x) eids[b] = -1;
  // one warp per expert, its lanes on consecutive blocks / padding positions: coalesced stores (a
  // thread per expert storing its blocks and up to B - 1 padding positions one after the other
  // took 13 us for 128 experts and 23 us for 256 at B = 128, ncu: one cache line per lane and store)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int e = warp; e < E; e += nw) {
    const int o0 = off[e], o1 = off[e + 1];
    for (int b = o0 / B + lane; b < o1 / B; b += 32) eids[b] = e;
    for (int i = o0 + padded[e] + lane; i < o1; i += 32) sorted[i] = numel;  // the expert's padding
  }
}
__global__ void align_scatter_kernel(const int32_t* __restrict__ ids, int numel, const int32_t* __restrict__ emap,
                                     int E, const int32_t* __restrict__ hist, const int32_t* __restrict__ off,
                                     int32_t* __restrict__ sorted, int capacity, const int32_t* __restrict__ num_post) {
  extern __shared__ int cur[];  // [E]
  pdl_wait();
  pdl_trigger();
  for (int e = threadIdx.x; e < E; e += blockDim.x) cur[e] = off[e] + hist[static_cast<size_t>(blockIdx.x) * E + e];
  __syncthreads();
  const int i = blockIdx.x * kAlignChunk + threadIdx.x;
  if (i < numel) {
    const int e = align_local(ids, emap, i);
    if (e >= 0) sorted[atomicAdd(&cur[e], 1)] = i;
  }
  const int np = *num_post;
  for (int j = np + blockIdx.x * blockDim.x + threadIdx.x; j < capacity; j += gridDim.x * blockDim.x) sorted[j] = numel;
}

// ---- activation preparation / quantization --------------------------------------------------------
// One 16-byte chunk of an A row: values of the operand dtype, quantized values as fp16 with q_f16.
template <class T>
__device__ __forceinline__ uint4 act_chunk(const ActPrep& p, const float (&q)[8]) {
  return p.q_f16 && p.quant != 0 ? pack8<__half>(q) : pack8<T>(q);
}
// Local expert of slot r (static per-tensor scales are per expert), -1 for another rank's expert.
__device__ __forceinline__ int slot_expert(const ActPrep& p, int64_t r) {
  if (p.topk_ids == nullptr) return 0;
  const int e = p.topk_ids[r];
  return p.expert_map != nullptr ? p.expert_map[e] : e;
}
// s = the row's static scale (quant 3; other quant codes leave s); false for a slot of another
// rank's expert.
__device__ __forceinline__ bool row_static_scale(const ActPrep& p, int64_t r, float& s) {
  if (p.quant != 3) return true;
  const int e = slot_expert(p, r);
  if (e < 0) return false;
  s = p.in_scale[e];
  return true;
}
// ActPrep::zero: every thread of the grid clears its share (after pdl_wait: the kernels before are done)
__device__ __forceinline__ void act_prep_zero(const ActPrep& p) {
  if (p.zero == nullptr) return;
  const int64_t n = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.zero_n; i += n) p.zero[i] = 0.f;
}
template <class Op>
__global__ void act_prep_kernel(const ActPrep p) {
  using T = typename Op::T;
  extern __shared__ float row[];  // [cols]
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  act_prep_zero(p);
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  const int64_t tok = p.slot_mode ? r / p.top_k : r;
  const T* src = static_cast<const T*>(p.x) + tok * p.ldx;
  const float w = p.topk_w != nullptr ? p.topk_w[r] : 1.f;
  load_row<Op>(src, p.cols, p.topk_w != nullptr, w, row);
  __syncthreads();
  T* dst = static_cast<T*>(p.a) + r * p.cols;
  if (p.quant == 0) {
    for (int i = tid; i < p.cols; i += blockDim.x) dst[i] = Op::from_f(row[i]);
    return;
  }
  // a quantized value v (an e4m3 value: exact in either 16-bit type) at column i
  __half* dst_h = static_cast<__half*>(p.a) + r * p.cols;
  auto put = [&](int i, float v) {
    if (p.q_f16) dst_h[i] = __float2half_rn(v);
    else dst[i] = Op::from_f(v);
  };
  if (p.quant == 3) {
    const int e = slot_expert(p, r);
    if (e < 0) return;  // slot of another rank's expert: never read
    const float s = p.in_scale[e];
    for (int i = tid; i < p.cols; i += blockDim.x)
      put(i, round_e4m3_sat(row[i] / s));
    if (tid == 0) p.scales[r * p.groups] = s;
    return;
  }
  if (p.quant == 1) {
    const float s = fmaxf(block_absmax(row, p.cols, red), 1e-10f) / 448.f;
    for (int i = tid; i < p.cols; i += blockDim.x)
      put(i, round_e4m3_sat(row[i] / s));
    if (tid == 0) p.scales[r * p.groups] = s;
    return;
  }
  // quant == 2: one warp per 128-column group
  const int warp = tid >> 5, lane = tid & 31, nw = blockDim.x >> 5;
  for (int g = warp; g < p.groups; g += nw) {
    const int c0 = g * 128, c1 = min(p.cols, c0 + 128);
    float mx = 0.f;
    for (int i = c0 + lane; i < c1; i += 32) mx = fmaxf(mx, fabsf(row[i]));
    mx = warp_max(mx);
    const float s = fmaxf(mx, 1e-10f) / 448.f;
    for (int i = c0 + lane; i < c1; i += 32)
      put(i, round_e4m3_sat(row[i] / s));
    if (lane == 0) p.scales[r * p.groups + g] = s;
  }
}

// act_prep for quant 0..3 on 16-byte-aligned rows (cols % 8 == 0): the row in registers
// (device_common.cuh load_row_regs), one block per row; same values as act_prep_kernel.
template <class Op>
__global__ void act_prep_vec_kernel(const ActPrep p) {
  using T = typename Op::T;
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  act_prep_zero(p);
  const int64_t r = blockIdx.x;
  const int64_t tok = p.slot_mode ? r / p.top_k : r;
  const int nch = p.cols / 8;
  float s = 1.f;
  if (!row_static_scale(p, r, s)) return;  // slot of another rank's expert: never read
  float v[kRowU][8];
  load_row_regs<Op>(static_cast<const T*>(p.x) + tok * p.ldx, nch, p.topk_w != nullptr,
                    p.topk_w != nullptr ? p.topk_w[r] : 1.f, v);
  uint4* dst = reinterpret_cast<uint4*>(static_cast<T*>(p.a) + r * p.cols);  // 16-bit either way
  auto store = [&](int u, const float (&q)[8]) {
    const int c = threadIdx.x + u * blockDim.x;
    if (c < nch) dst[c] = act_chunk<T>(p, q);
  };
  if (p.quant == 0) {
#pragma unroll
    for (int u = 0; u < kRowU; ++u) store(u, v[u]);
    return;
  }
  if (p.quant == 1) {
    float mx = 0.f;
#pragma unroll
    for (int u = 0; u < kRowU; ++u)
#pragma unroll
      for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fabsf(v[u][j]));
    s = fmaxf(block_max(mx, red), 1e-10f) / 448.f;
  }
  if (p.quant == 1 || p.quant == 3) {
#pragma unroll
    for (int u = 0; u < kRowU; ++u) {
      if (threadIdx.x + u * blockDim.x >= nch) break;  // no divisions for absent chunks
      float q[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = round_e4m3_sat(v[u][j] / s);
      store(u, q);
    }
    if (threadIdx.x == 0) p.scales[r * p.groups] = s;
    return;
  }
  // quant == 2: a 128-column group is 16 chunks, held by the 16 lanes of a half-warp (blockDim is
  // a multiple of 32); chunks past the row count zero
#pragma unroll
  for (int u = 0; u < kRowU; ++u) {
    const int c = threadIdx.x + u * blockDim.x;
    float mx = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fabsf(v[u][j]));
    const float sg = fmaxf(halfwarp_max(mx), 1e-10f) / 448.f;  // every lane: the shuffles
    if (c >= nch) continue;
    float q[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = round_e4m3_sat(v[u][j] / sg);
    store(u, q);
    if (c % 16 == 0) p.scales[r * p.groups + c / 16] = sg;
  }
}

// act_prep at many rows (prefill sizes): one warp per row (device_common.cuh warp_row_chunks),
// four rows per block; same values as act_prep_kernel.
// WPR warps per row (device_common.cuh row_warps), 128 threads per block.
template <class Op, int WPR>
__global__ void __launch_bounds__(128) act_prep_warp_kernel(const ActPrep p) {
  using T = typename Op::T;
  __shared__ float red[4];
  pdl_wait();
  pdl_trigger();
  act_prep_zero(p);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (4 / WPR) + (threadIdx.x >> 5) / WPR;
  if (r >= p.rows) return;  // uniform over a block when WPR = 4
  const int64_t tok = p.slot_mode ? r / p.top_k : r;
  const int nch = p.cols / 8;
  float s = 1.f;
  if (!row_static_scale(p, r, s)) return;  // slot of another rank's expert: never read
  const bool w_on = p.topk_w != nullptr;
  uint4* dst = reinterpret_cast<uint4*>(static_cast<T*>(p.a) + r * p.cols);  // 16-bit either way
  warp_row_quant<Op, WPR, false>(
      static_cast<const T*>(p.x) + tok * p.ldx, nch, w_on, w_on ? p.topk_w[r] : 1.f, p.quant, s, red,
      [&](int c, const float (&q)[8]) { dst[c] = act_chunk<T>(p, q); },
      [&](int g, float sg) { p.scales[r * p.groups + g] = sg; });
}

template <class Op>
__global__ void act_finish_kernel(const float* __restrict__ partial, int np, int64_t slots, int inter, int act,
                                  const float* __restrict__ bias, const int32_t* __restrict__ topk_ids,
                                  const int32_t* __restrict__ emap, void* h, int ldh) {
  using T = typename Op::T;
  pdl_wait();
  pdl_trigger();
  const int64_t slot = blockIdx.x;
  int e = 0;
  if (topk_ids != nullptr) {
    e = topk_ids[slot];
    if (emap != nullptr) e = emap[e];
  }
  if (e < 0) return;
  const float* g = partial + slot * np;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < inter; i += gridDim.y * blockDim.x) {
    int ng = (i >> 3) * 16 + (i & 7);
    float gv = g[ng], uv = g[ng + 8];
    if (bias != nullptr) {
      gv += bias[static_cast<int64_t>(e) * 2 * inter + i];
      uv += bias[static_cast<int64_t>(e) * 2 * inter + inter + i];
    }
    static_cast<T*>(h)[slot * ldh + i] = Op::from_f(act_fn(act, gv, uv));
  }
}

template <class Op>
__global__ void reduce_kernel(const float* __restrict__ o, const float* __restrict__ shared, int top_k, int h,
                              void* y) {
  using T = typename Op::T;
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* ot = o + t * top_k * h;
  for (int n = (blockIdx.y * blockDim.x + threadIdx.x) * 4; n < h; n += gridDim.y * blockDim.x * 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    // the slot rows' loads of up to 8 k in flight before their adds (still added in k order, so the
    // sums are the same bits): one load per add in turn made a one-token layer's top-k sum a chain
    // of top_k dependent L2 round trips (thirtieth session)
    for (int k0 = 0; k0 < top_k; k0 += 8) {
      float4 v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (k0 + i < top_k) v[i] = *reinterpret_cast<const float4*>(ot + static_cast<int64_t>(k0 + i) * h + n);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (k0 + i < top_k) {
          acc.x += v[i].x; acc.y += v[i].y; acc.z += v[i].z; acc.w += v[i].w;
        }
    }
    if (shared != nullptr) {
      float4 v = *reinterpret_cast<const float4*>(shared + t * h + n);
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    T* dst = static_cast<T*>(y) + t * h + n;
    dst[0] = Op::from_f(acc.x);
    dst[1] = Op::from_f(acc.y);
    dst[2] = Op::from_f(acc.z);
    dst[3] = Op::from_f(acc.w);
  }
}

}  // namespace

void launch_route(const float* logits, int64_t m, int E, const RouterConfig& cfg, const float* bias,
                  float* topk_w, int32_t* topk_ids, cudaStream_t s) {
  if (m == 0) return;
  QMOE_CHECK(cfg.top_k >= 1 && cfg.top_k <= 32 && cfg.top_k <= E, kUnsupported,
             "CUDA routing: top_k ", cfg.top_k, " must be in [1, min(32, E = ", E, ")]");
  if (cfg.kind == RouterKind::kGrouped && cfg.num_groups > 1)
    QMOE_CHECK(cfg.num_groups <= 32 && E % cfg.num_groups == 0, kUnsupported,
               "CUDA routing: grouped router needs num_groups <= 32 dividing E (got ", cfg.num_groups, ", E = ", E, ")");
  RouteArgs ra{static_cast<int>(cfg.kind), cfg.top_k, cfg.renormalize ? 1 : 0, cfg.grouped_sigmoid ? 1 : 0,
               cfg.num_groups, cfg.topk_group, cfg.routed_scaling_factor};
  size_t smem = static_cast<size_t>(kRouteWarps) * E * 9;
  QMOE_CHECK(smem <= 200 * 1024, kUnsupported, "CUDA routing: E = ", E, " is too large");
  if (smem > 48 * 1024)
    QMOE_CUDA_OK(cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int blocks = static_cast<int>((m + kRouteWarps - 1) / kRouteWarps);
  route_kernel<<<blocks, 32 * kRouteWarps, smem, s>>>(logits, m, E, ra, cfg.kind == RouterKind::kGrouped ? bias : nullptr,
                                                       topk_w, topk_ids);
  QMOE_CUDA_LAUNCH_OK();
}

int align_hist_ints(int numel, int num_local) {
  if (numel <= kAlignMultiMin) return 0;
  return ((numel + kAlignChunk - 1) / kAlignChunk) * num_local + num_local + 1;  // hist, then off
}

void launch_align(const int32_t* topk_ids, int numel, const int32_t* expert_map, int num_local, int block,
                  int capacity, int32_t* sorted_ids, int32_t* expert_ids, int32_t* num_post, int32_t* hist,
                  cudaStream_t s, int32_t* zero) {
  size_t smem = (3 * static_cast<size_t>(num_local) + 1) * sizeof(int);
  QMOE_CHECK(smem <= 48 * 1024, kUnsupported, "CUDA align: ", num_local, " local experts is too many");
  if (align_hist_ints(numel, num_local) > 0) {
    QMOE_CHECK(hist != nullptr, kInternal, "CUDA align: ", numel, " entries need the histogram workspace");
    const int nb = (numel + kAlignChunk - 1) / kAlignChunk;
    int32_t* off = hist + static_cast<size_t>(nb) * num_local;
    const size_t e_smem = static_cast<size_t>(num_local) * sizeof(int);
    align_count_kernel<<<nb, kAlignChunk, e_smem, s>>>(topk_ids, numel, expert_map, num_local, hist);
    QMOE_CUDA_LAUNCH_OK();
    launch_kernel(align_offsets_kernel, dim3(1), dim3(512), (2 * static_cast<size_t>(num_local) + 1) * sizeof(int), s,
                  nb, num_local, block, numel, hist, off, sorted_ids, expert_ids, capacity, num_post, zero);
    launch_kernel(align_scatter_kernel, dim3(nb), dim3(kAlignChunk), e_smem, s, topk_ids, numel, expert_map, num_local,
                  static_cast<const int32_t*>(hist), static_cast<const int32_t*>(off), sorted_ids, capacity,
                  static_cast<const int32_t*>(num_post));
    return;
  }
  align_kernel<<<1, 1024, smem, s>>>(topk_ids, numel, expert_map, num_local, block, capacity, sorted_ids,
                                      expert_ids, num_post, zero);
  QMOE_CUDA_LAUNCH_OK();
}

void launch_act_prep(bool f16, const ActPrep& p, cudaStream_t s) {
  if (p.quant >= kQuantInt8Token) return launch_act_prep_q(f16, p, s);  // backend II: int8 token, NVFP4
  if (p.rows == 0) return;
  size_t smem = static_cast<size_t>(p.cols) * 4;
  auto go = [&](auto kern) {
    if (smem > 48 * 1024)
      QMOE_CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch_kernel(kern, dim3(static_cast<unsigned>(p.rows)), dim3(256), smem, s, p);
  };
  // 16-byte-aligned rows: many rows (prefill sizes) a warp or four each (act_prep_warp_kernel),
  // few rows (decode) a block each with the row in registers (act_prep_vec_kernel, up to kRowU
  // chunks of 8 per thread); else the shared-row kernel
  const int nch = p.cols / 8;
  if (p.cols % 8 == 0 && p.ldx % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && (nch <= 1024 * kRowU || p.rows > 2 * device_sm_count())) {
    if (p.rows > 2 * device_sm_count()) {  // many rows: one warp each (latency-bound per row)
      const int wpr = row_warps(nch);
      const dim3 grid(static_cast<unsigned>((p.rows * wpr + 3) / 4));
      if (wpr == 4) {
        if (f16) launch_kernel(act_prep_warp_kernel<F16, 4>, grid, dim3(128), 0, s, p);
        else launch_kernel(act_prep_warp_kernel<BF16, 4>, grid, dim3(128), 0, s, p);
      } else {
        if (f16) launch_kernel(act_prep_warp_kernel<F16, 1>, grid, dim3(128), 0, s, p);
        else launch_kernel(act_prep_warp_kernel<BF16, 1>, grid, dim3(128), 0, s, p);
      }
      return;
    }
    // few rows (decode): a block per row, as many threads as chunks (up to 1024, at least 128)
    const int threads = std::min(1024, std::max(128, (nch + 31) / 32 * 32));
    QMOE_CHECK(nch <= threads * kRowU, kInternal, "act_prep: ", p.cols, " columns on ", threads, " threads");
    if (f16) launch_kernel(act_prep_vec_kernel<F16>, dim3(static_cast<unsigned>(p.rows)), dim3(threads), 0, s, p);
    else launch_kernel(act_prep_vec_kernel<BF16>, dim3(static_cast<unsigned>(p.rows)), dim3(threads), 0, s, p);
    return;
  }
  if (f16) go(act_prep_kernel<F16>);
  else go(act_prep_kernel<BF16>);
}

void launch_act_finish(bool f16, const float* partial, int np, int64_t slots, int inter, int act, const float* bias,
                       const int32_t* topk_ids, const int32_t* expert_map, void* h, int ldh, cudaStream_t s) {
  if (slots == 0) return;
  // one thread per intermediate column (few slots at decode: a row over many blocks)
  const dim3 grid(static_cast<unsigned>(slots), std::min(64, (inter + 255) / 256));
  launch_kernel(f16 ? act_finish_kernel<F16> : act_finish_kernel<BF16>, grid, dim3(256), 0, s, partial, np, slots,
                inter, act, bias, topk_ids, expert_map, h, ldh);
}

void launch_reduce(bool f16, const float* o, const float* shared, int64_t m, int top_k, int h, void* y,
                   cudaStream_t s) {
  if (m == 0) return;
  // one thread per 4 columns; few tokens (decode) spread a row over several blocks
  const int threads = 128;
  const int per_row = (h / 4 + threads - 1) / threads;
  const dim3 grid(static_cast<unsigned>(m), m >= 64 ? 1 : per_row);
  launch_kernel(f16 ? reduce_kernel<F16> : reduce_kernel<BF16>, grid, dim3(threads), 0, s, o, shared, top_k, h, y);
}

}  // namespace qmoe::cuda
