// The CPU kernel entry points, one set per ISA build (cpu_kernels_{scalar,avx2,avx512}.cpp).
// A GemmJob computes one panel pair (32 output rows) of one expert for a run of activation rows:
//   out[i][c] = (sum_k w[row, k] * a[row0 + i, k]) * rowscale[row] * a.row_scale[i] * extra + bias[row]
// with row = 32 * pair + c, group scales applied per K group as the numerics contract orders them.
// Activation quantizers turn fp32 rows (already rounded to the activation dtype) into the kernels'
// activation formats, bit-identically to docs/numerics.md.
#pragma once
#include <cstdint>

#include "cpu/cpu_isa.h"
#include "cpu/cpu_pack.h"

namespace qmoe::cpu {

// Up to this many activation rows per expert a job is a weight stream (the AVX-512 kernels fuse
// decode and dot): the layer hands jobs out in contiguous runs, so each thread streams adjacent
// panels (the prefetch running past a job's end lands in the next job).
constexpr int kFewRows = 12;

struct GemmJob {
  const PackedProj* w = nullptr;
  int e = 0;         // local expert
  int pair = 0;      // panels 2*pair, 2*pair + 1
  const ActBuf* a = nullptr;
  int row0 = 0, nrows = 0;
  float* out = nullptr;  // [nrows][ldo], columns [0, 32) written
  int ldo = 0;
  float extra = 1.f;
  float* scratch = nullptr;  // gemm_scratch_floats(*w, nrows) floats, 64-byte aligned, per thread
  // The job the layer runs after this one on the same thread if its run goes on (same w): the
  // short weight streams prefetch its panels while they finish this one. next_e < 0: the panels
  // that follow in memory (the next pair of the same expert).
  int next_e = -1, next_pair = 0;
};
// Panel `half` (0 / 1) of the job that follows j (GemmJob::next_e), where the fused streams prefetch.
inline const uint8_t* next_job_panel(const PackedProj& w, const GemmJob& j, int half) {
  return j.next_e >= 0 ? w.panel(j.next_e, 2 * j.next_pair + half) : w.panel(j.e, 2 * j.pair + 2 + half);
}

// Scratch a GemmJob needs (the ISA files allocate nothing: no std templates are instantiated with
// ISA flags, so the linker can never pick an AVX-512 copy of a shared inline function).
inline size_t gemm_scratch_floats(const PackedProj& w, int nrows) {
  return size_t(w.k_pad) * kPanelRows + size_t(nrows) * kJobRows * 2 + 64 * 1024;
}

// How one activation row is quantized (docs/numerics.md "Activation quantization").
enum class RowQuant : uint8_t {
  kBF16,      // exact copy of bf16-rounded values (fmt kBF16)
  kF32,       // copy (fmt kF32)
  kFp8Token,  // dynamic per-token e4m3; values stored as bf16, row_scale = s
  kFp8Group,  // dynamic per 1 x group e4m3; group_scale[g] = s_g
  kFp8Static, // e4m3 with the given static scale; row_scale = s
  kInt8Token, // dynamic per-token int8 (fmt kS8); row_scale = s; group sums per weight group
  kNVFP4,     // e2m1 * e4m3 block scale stored as bf16 (exact); global handled by the caller
  kS16,       // bf16 values in 16-bit block fixed point (fmt kS16; docs/numerics.md "Products"): per
              // a.group columns q = rint(x * 2^(14 - E)), E = floor(log2(amax)) (>= -112),
              // group_scale = 2^(E - 14), group_sum = sum q; exact where the block's exponents span <= 7
  kNVFP4S16,  // kNVFP4's values as fmt kS16 (a.group = 16): q = 2 e2m1, group_scale = s / 2 (exact)
};

struct QuantRowArgs {
  RowQuant q = RowQuant::kBF16;
  float static_scale = 1.f;  // kFp8Static: s; kNVFP4 / kNVFP4S16: G (the input "global scale" = 1/A)
  float* scratch = nullptr;  // >= n floats
};

// Quantizes x[0, n) into row i of `a` (columns [n, a.ld) zeroed). a.group / a.num_groups give the
// fp8 group size or the int8 sum groups.
using QuantRowFn = void (*)(const float* x, int n, const QuantRowArgs& q, ActBuf& a, int i);
using GemmFn = void (*)(const GemmJob& j);

// Whether the ISA's kernels take a projection's activations as 16-bit integer codes (fmt kS16: bf16
// activations as RowQuant::kS16 for A16 int / fp4 codes, NVFP4 activations as kNVFP4S16; the avx2
// kernels' integer dot products, cpu_kernels_avx2.cpp), and with which block.
using Act16Fn = int (*)(const PackedProj& w);  // block (16 / 32 columns), 0 = keep bf16
// Whether the ISA's kernels take a bf16-weight projection's bf16 activations as fp32 (fmt kF32:
// fp32 FMAs on the widened bf16 weights instead of vdpbf16ps where that issues slowly).
using F32ActsFn = bool (*)(const PackedProj& w);

// GEMM1's activation for n columns: h[c] = act(g[c], u[c]) in fp32, the expression
// ref::apply_activation evaluates, with the ISA's exp (within a few fp32 ulps of expf: the kernels'
// GEMM1 sums already differ from the reference's in their last bits, the tolerances cover both).
// silu and swigluoai (AVX-512, AVX2); nullptr or gelu: ref::apply_activation per element.
using ActRowFn = void (*)(Activation act, const float* g, const float* u, int n, float* h);
// The act_row kernels' exp (both ISA files): k = rint(x log2 e), r = x - k ln2_hi - k ln2_lo
// (ln2_hi has 16 significant bits, so k ln2_hi is exact for |k| < 256), exp(r) = Taylor series to
// r^7 evaluated by Horner from kExpTaylor[0] (1/7!) down to the constant 1.
constexpr float kExpLog2e = 1.44269504088896341f, kExpLn2Hi = 0.693145751953125f,
                kExpLn2Lo = 1.42860682030941723e-06f;
constexpr float kExpTaylor[8] = {1.f / 5040, 1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};

struct Kernels {
  GemmFn gemm;
  QuantRowFn quant_row;
  const char* name;
  Act16Fn act16 = nullptr;
  ActRowFn act_row = nullptr;
  F32ActsFn f32_acts = nullptr;
};
const Kernels& kernels_for(Isa isa);

namespace scalar { void gemm(const GemmJob&); void quant_row(const float*, int, const QuantRowArgs&, ActBuf&, int); }
namespace avx2 {
void gemm(const GemmJob&);
void quant_row(const float*, int, const QuantRowArgs&, ActBuf&, int);
int act16(const PackedProj&);
void act_row(Activation, const float*, const float*, int, float*);
}  // namespace avx2
namespace avx512 {
void gemm(const GemmJob&);
void quant_row(const float*, int, const QuantRowArgs&, ActBuf&, int);
int act16(const PackedProj&);
void act_row(Activation, const float*, const float*, int, float*);
bool f32_acts(const PackedProj&);
}  // namespace avx512

}  // namespace qmoe::cpu
