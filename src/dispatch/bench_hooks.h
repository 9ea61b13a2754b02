// Seam between `qmoe bench` (tools/cmd_bench.cpp) and the CUDA backend (src/cuda). The CUDA side
// times a whole layer on the device with routing given, the way anchors.md's peers were timed:
// weights created on the device in the canonical layout (random codes and scales, never zeros),
// uniform random distinct expert ids, CUDA-graph replays, L2 flushed (or weights rotated), median.
#pragma once
#include <string>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe::detail {

struct BenchProblem {
  std::string shape;        // anchor shape name or "E,topk,H,I"
  int num_experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  int m = 1;
  MoeScheme scheme;
  int group_size = 0;                // int / fp4 group
  std::array<int, 2> block = {0, 0}; // fp8 block
  Activation activation = Activation::kSiluMul;
  bool apply_router_weight_on_input = false;
  uint64_t seed = 1;
};

struct BenchResult {
  double us = 0;              // median microseconds per layer
  double us_min = 0;
  double weight_bytes = 0;    // bytes of the touched experts' weights + scales actually read
  double io_bytes = 0;        // input read + output written
  std::string kernel;         // kernel key(s) used
};

struct DeviceCeilings {
  double read_tbps = 0;       // streaming read
  double copy_tbps = 0;       // device copy (read + write)
  double bf16_tflops = 0;     // dense bf16 matmul (the project's own measurement)
  double fp8_tflops = 0;
  double int8_tops = 0;
  std::string device;         // "NVIDIA H200 (132 SMs)"
};

#if defined(QMOE_HAVE_CUDA)
bool cuda_device_available(std::string* why);
DeviceCeilings cuda_measure_ceilings(double settle_ms);
// warmup replays, then untimed replays until settle_ms of GPU time have passed (the card's clocks
// and memory system reach their sustained state; docs/perf.md, tenth session), then `iters` timed.
BenchResult cuda_bench(const BenchProblem& p, int warmup, int iters, double settle_ms);
#endif

}  // namespace qmoe::detail
