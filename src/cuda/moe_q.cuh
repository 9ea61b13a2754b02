// Launchers of CUDA backend II's kernels (cuda_moe_q.h): the grouped GEMM over fp4 units
// (moe_gemm_fp4.cu) and the int8-per-token / NVFP4 activation quantization (moe_act_q.cu).
// Backend I's launch_moe_gemm / launch_act_prep hand these formats / quant codes over.
#pragma once
#include <cuda_runtime.h>

#include "cuda/config.h"
#include "cuda/moe_gemm.cuh"
#include "cuda/moe_kernels.cuh"

namespace qmoe::cuda {

// Activation quantization codes of ActPrep::quant beyond backend I's 0..3.
constexpr int kQuantInt8Token = 4;  // int8 per token: q = clamp(rint(x / s), -128, 127), s = amax / 127
constexpr int kQuantNvfp4 = 5;      // NVFP4 per 16 with the static multiplier of the slot's expert

// fmt: WFmt::kNV4 or WFmt::kMX4 (weights prepared by prepare_q).
void launch_moe_gemm_fp4(bool f16, WFmt fmt, Tile tile, const GemmParams& p, cudaStream_t s);
// p.quant: kQuantInt8Token or kQuantNvfp4.
void launch_act_prep_q(bool f16, const ActPrep& p, cudaStream_t s);

}  // namespace qmoe::cuda
