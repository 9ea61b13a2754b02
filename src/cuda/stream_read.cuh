// The streaming-read kernel whose rate is the bench's read ceiling (bench.cu) and which
// bench/gpu_ceiling.cu times at a layer's byte counts: a grid-stride sweep of 16-byte streaming
// loads (ld.global.cs), XOR-folded so the loads stay alive.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace qmoe::cuda {
namespace {  // one copy per translation unit that launches it

__global__ void stream_read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads alive
}

}  // namespace
}  // namespace qmoe::cuda
