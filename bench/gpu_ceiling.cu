// Ceilings at the byte counts of one decode layer (not part of the library): how fast a plain
// streaming read of N bytes runs when it is one CUDA-graph replay with a cold L2 (the bench's
// method), and what an empty kernel, and chains of empty kernels with / without programmatic
// dependent launch, cost as graph replays. Built as qmoe_gpu_ceiling with the CUDA backend (or, from
// the repository root: nvcc -O3 -std=c++17 -arch=sm_90a
// -Isrc -o gpu_ceiling bench/gpu_ceiling.cu); run it on the GPU machine (prints a table).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/sm90_sync.cuh"    // mbarriers and bulk copies (the decode kernel's ring)
#include "cuda/stream_read.cuh"  // the bench's read kernel

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

// Unrolled variant: each thread keeps 4 independent 16-byte loads in flight.
__global__ void read4_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ d.w ^ a.w ^ b.x ^ c.y ^ d.z;
  }
  for (; i < n; i += stride) acc ^= __ldcs(p + i).x;
  if (acc == 0x12345678u) *sink = acc;
}
__global__ void empty_kernel(int* sink, int v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (v == 12345 && threadIdx.x == 0) *sink = v;
}

// The bulk-decode kernel's stream without its math (`gpu_ceiling ring`): items of two columns of
// col_bytes each (a 32-row tile of one expert over K), one producer lane bulk-copying both columns
// stage by stage into a `stages`-deep ring, 8 consumer warps releasing each stage. Items go to the
// blocks as contiguous shares (the decode kernel's order: the blocks read far-apart regions at
// once) or interleaved (item i to block i % blocks: the blocks read neighbouring items at once).
__global__ void __launch_bounds__(288) ring_read_kernel(const uint8_t* __restrict__ base, int items, int col_bytes,
                                                        int stage_col, int stages, int interleave, unsigned* sink) {
#if QMOE_SM90A
  using namespace qmoe::cuda::dev;
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * 2 * stage_col);
  uint64_t* empty = full + stages;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);
    }
    mbar_init_fence();
  }
  __syncthreads();
  const int B = gridDim.x, b = blockIdx.x;
  const int i0 = interleave ? b : static_cast<int>(static_cast<int64_t>(b) * items / B);
  const int i1 = interleave ? items : static_cast<int>(static_cast<int64_t>(b + 1) * items / B);
  const int di = interleave ? B : 1;
  const int nst = col_bytes / stage_col;
  int slot = 0;
  uint32_t ph = 0;
  if (warp == 8) {
    if (lane == 0)
      for (int it = i0; it < i1; it += di)
        for (int st = 0; st < nst; ++st) {
          mbar_wait(&empty[slot], ph ^ 1u);
          mbar_expect_tx(&full[slot], 2 * stage_col);
          const uint8_t* src = base + static_cast<size_t>(it) * 2 * col_bytes + static_cast<size_t>(st) * stage_col;
          bulk_load(smem + slot * 2 * stage_col, src, stage_col, &full[slot]);
          bulk_load(smem + slot * 2 * stage_col + stage_col, src + col_bytes, stage_col, &full[slot]);
          if (++slot == stages) { slot = 0; ph ^= 1u; }
        }
    return;
  }
  unsigned acc = 0;
  for (int it = i0; it < i1; it += di)
    for (int st = 0; st < nst; ++st) {
      mbar_wait(&full[slot], ph);
      acc ^= reinterpret_cast<const unsigned*>(smem + slot * 2 * stage_col)[(warp * 32 + lane) & (stage_col / 4 - 1)];
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
      if (++slot == stages) { slot = 0; ph ^= 1u; }
    }
  if (acc == 0x12345678u) *sink = acc;
#endif
}

// The Hopper streaming GEMM's weight stream without math (`gpu_ceiling ring2`): per stage one
// 32 KiB piece (a 256-row x 128-byte weight box), by a 1-D bulk copy or a 2-D TMA box (128B
// swizzle, as the kernel loads it), from 1 or 2 items at once (2: each stage half from each of two
// halves of the CTA's share), `bpsm` CTAs per SM.
__global__ void __launch_bounds__(160) ring2_kernel(const __grid_constant__ CUtensorMap map, const uint8_t* __restrict__ base,
                                                    long long total_bytes, int stage_bytes, int stages, int tma,
                                                    int streams, unsigned* sink) {
#if QMOE_SM90A
  using namespace qmoe::cuda::dev;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * stage_bytes);
  uint64_t* empty = full + stages;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4);
    }
    mbar_init_fence();
  }
  __syncthreads();
  const long long units = total_bytes / stage_bytes;  // stages of the whole stream
  const long long u0 = units * blockIdx.x / gridDim.x, u1 = units * (blockIdx.x + 1) / gridDim.x;
  const long long n = (u1 - u0) / streams;
  const int piece = stage_bytes / streams;
  int slot = 0;
  uint32_t ph = 0;
  if (warp == 4) {
    if (lane == 0)
      for (long long i = 0; i < n; ++i) {
        mbar_wait(&empty[slot], ph ^ 1u);
        mbar_expect_tx(&full[slot], stage_bytes);
        for (int q = 0; q < streams; ++q) {
          const long long off = (u0 + q * n + i) * static_cast<long long>(stage_bytes);  // stream q's position
          uint8_t* dst = smem + slot * stage_bytes + q * piece;
          if (tma) {
            const int row = static_cast<int>(off / 128);
            asm volatile(
                "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
                    smem_u32(dst)),
                "l"(reinterpret_cast<uint64_t>(&map)), "r"(smem_u32(&full[slot])), "r"(0), "r"(row)
                : "memory");
          } else {
            bulk_load(dst, base + off, piece, &full[slot]);
          }
        }
        if (++slot == stages) { slot = 0; ph ^= 1u; }
      }
    return;
  }
  unsigned acc = 0;
  for (long long i = 0; i < n; ++i) {
    mbar_wait(&full[slot], ph);
    acc ^= reinterpret_cast<const unsigned*>(smem + slot * stage_bytes)[(warp * 32 + lane)];
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);
    if (++slot == stages) { slot = 0; ph ^= 1u; }
  }
  if (acc == 0x12345678u) *sink = acc;
#endif
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const bool ring = argc > 1 && std::string(argv[1]) == "ring";
  const bool ring2 = argc > 1 && std::string(argv[1]) == "ring2";
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t big = size_t(4) << 30;
  uint8_t* buf = nullptr;
  uint8_t* l2buf = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&buf, big));
  CK(cudaMalloc(&l2buf, 256u << 20));
  CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(buf, 1, big));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));

  auto time_graph = [&](cudaGraphExec_t ge, int reps, float* out) -> int {
    std::vector<float> ts;
    for (int r = 0; r < reps + 3; ++r) {
      CK(cudaMemsetAsync(l2buf, r, 256u << 20, s));
      CK(cudaEventRecord(a, s));
      CK(cudaGraphLaunch(ge, s));
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 3) ts.push_back(ms * 1000.f);
    }
    *out = median(ts);
    return 0;
  };

  std::printf("device SMs %d\n", sms);


  if (ring2) {  // the streaming GEMM's weight stream: 1-D bulk / 2-D TMA, 1 / 2 streams, CTAs per SM
    void* fp = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fp, cudaEnableDefault, &q));
    auto enc = reinterpret_cast<EncodeTiledFn>(fp);
    std::printf("| bytes MB | load | streams | stages x KB | CTAs/SM | us | TB/s |\n|---:|---|---:|---|---:|---:|---:|\n");
    for (double mb : {1880.0, 400.0, 100.0})
      for (int tma = 0; tma < 2; ++tma)
        for (int streams : {1, 2})
          for (int bpsm : {1, 2}) {
            const int stage = 32 * 1024;
            const int stages = bpsm == 1 ? 5 : 3;
            const long long bytes = static_cast<long long>(mb * 1e6) / stage * stage;
            CUtensorMap map;
            cuuint64_t dims[2] = {128, static_cast<cuuint64_t>(bytes / 128)};
            cuuint64_t strides[1] = {128};
            cuuint32_t box[2] = {128, static_cast<cuuint32_t>(stage / 128 / streams)};
            cuuint32_t estr[2] = {1, 1};
            if (enc(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, buf, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
              std::printf("encode failed\n");
              return 1;
            }
            const int smem = stages * stage + 1024 + 256;
            CK(cudaFuncSetAttribute(ring2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            ring2_kernel<<<sms * bpsm, 160, smem, s>>>(map, buf, bytes, stage, stages, tma, streams, sink);
            CK(cudaStreamEndCapture(s, &g));
            cudaGraphExec_t ge;
            CK(cudaGraphInstantiate(&ge, g, 0));
            float us = 0;
            if (time_graph(ge, 25, &us)) return 1;
            std::printf("| %.0f | %s | %d | %d x 32 | %d | %.2f | %.2f |\n", bytes / 1e6, tma ? "TMA 2-D" : "bulk 1-D", streams,
                        stages, bpsm, us, bytes / us / 1e6);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
          }
    return 0;
  }
  if (ring) {  // the decode kernel's stream without math: order x ring depth x blocks per SM
    std::printf("| bytes MB | col KB | order | stages x stage KB | blocks/SM | us | TB/s |\n|---:|---:|---|---|---:|---:|---:|\n");
    struct Cfg { double mb; int col_kb; };
    for (Cfg c : {Cfg{1880, 128}, Cfg{940, 96}, Cfg{50, 64}, Cfg{25, 24}, Cfg{400, 128}})
      for (int stage_kb : {8, 16})
        for (int stages : {2, 4})
          for (int bps : {2, 3})
            for (int il = 0; il < 2; ++il) {
              const int col = c.col_kb * 1024, sc = stage_kb * 1024;
              if (col % sc) continue;
              const int smem = stages * 2 * sc + 256;
              if (bps * (smem + 1024) > 228 * 1024) continue;
              const int items = static_cast<int>(c.mb * 1e6 / (2.0 * col));
              CK(cudaFuncSetAttribute(ring_read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
              cudaGraph_t g;
              CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
              ring_read_kernel<<<sms * bps, 288, smem, s>>>(buf, items, col, sc, stages, il, sink);
              CK(cudaStreamEndCapture(s, &g));
              cudaGraphExec_t ge;
              CK(cudaGraphInstantiate(&ge, g, 0));
              float us = 0;
              if (time_graph(ge, 25, &us)) return 1;
              const double bytes = 2.0 * col * items;
              std::printf("| %.0f | %d | %s | %d x %d | %d | %.2f | %.2f |\n", bytes / 1e6, c.col_kb,
                          il ? "interleaved" : "contiguous", stages, 2 * stage_kb, bps, us, bytes / us / 1e6);
              cudaGraphExecDestroy(ge);
              cudaGraphDestroy(g);
            }
    return 0;
  }
  std::printf("| bytes MB | kernel | blocks x threads | us | TB/s |\n|---:|---|---|---:|---:|\n");
  const double sizes_mb[] = {4.4 * 4.45, 19, 50, 88, 117, 176, 400, 1000, 4096};
  for (double mb : sizes_mb) {
    const size_t bytes = static_cast<size_t>(mb * 1e6) / 16 * 16;
    for (int kind = 0; kind < 2; ++kind)
      for (int bps : {4, 8}) {
        const int threads = 256 * (kind == 0 ? 2 : 1);
        const int blocks = sms * bps;
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        if (kind == 0) qmoe::cuda::stream_read_kernel<<<blocks, threads, 0, s>>>(reinterpret_cast<const uint4*>(buf), bytes / 16, sink);
        else read4_kernel<<<blocks, threads, 0, s>>>(reinterpret_cast<const uint4*>(buf), bytes / 16, sink);
        CK(cudaStreamEndCapture(s, &g));
        cudaGraphExec_t ge;
        CK(cudaGraphInstantiate(&ge, g, 0));
        float us = 0;
        if (time_graph(ge, 25, &us)) return 1;
        std::printf("| %.1f | %s | %d x %d | %.2f | %.2f |\n", bytes / 1e6, kind == 0 ? "read" : "read4", blocks, threads, us,
                    bytes / us / 1e6);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      }
  }
  // chains of empty kernels, plain and with programmatic dependent launch
  std::printf("\n| empty kernels in the graph | PDL | us per replay |\n|---:|---|---:|\n");
  for (int n : {1, 2, 4, 6})
    for (int pdl = 0; pdl < 2; ++pdl) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < n; ++i) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(sms * 2);
        cfg.blockDim = dim3(256);
        cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = (pdl && i > 0) ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, empty_kernel, reinterpret_cast<int*>(sink), i));
      }
      CK(cudaStreamEndCapture(s, &g));
      cudaGraphExec_t ge;
      CK(cudaGraphInstantiate(&ge, g, 0));
      float us = 0;
      if (time_graph(ge, 51, &us)) return 1;
      std::printf("| %d | %s | %.2f |\n", n, pdl ? "yes" : "no", us);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
  return 0;
}
