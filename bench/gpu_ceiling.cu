// Ceilings at the byte counts of one decode layer (not part of the library): how fast a plain
// streaming read of N bytes runs when it is one CUDA-graph replay with a cold L2 (the bench's
// method), and what an empty kernel, and chains of empty kernels with / without programmatic
// dependent launch, cost as graph replays. Built as qmoe_gpu_ceiling with the CUDA backend (or, from
// the repository root: nvcc -O3 -std=c++17 -arch=sm_90a
// -Isrc -o gpu_ceiling bench/gpu_ceiling.cu); run it on the GPU machine (prints a table).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

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

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
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
