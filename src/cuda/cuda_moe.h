// The CUDA fused MoE on raw device pointers: a prepared (repacked, device-resident) layer and a
// forward that takes device pointers and a cudaStream_t. MoeLayer (cuda_layer.cu), the C ABI and
// the Python helper call this; the bench (bench.cu) builds layers from device-generated weights.
// Prepared weight layout ("atoms", one 512-byte unit per warp, 16 bytes per lane holding exactly
// that lane's mma.sync m16n8k16 B fragments): [E][Np/16][Kp/KA][32 lanes][16 B], KA = 16 / 32 / 64
// k-columns per atom for 16-bit / 8-bit / 4-bit weights. w13 rows are interleaved per n16 tile
// (8 gate rows then the 8 matching up rows) so GEMM1's epilogue sees gate and up in one thread.
// C++17-clean; no CUDA headers needed to include it (cudaStream_t is forward-declared).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/config.h"
#include "qmoe/moe.h"

typedef struct CUstream_st* cudaStream_t;

namespace qmoe::cuda {

// A device allocation freed by its owner.
struct DevBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t n);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; o.bytes = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept;
  template <class T> T* as() const { return static_cast<T*>(ptr); }
};

// One prepared projection (w13 or w2) of all local experts.
struct DevProj {
  WFmt fmt = WFmt::k16;
  int n = 0, k = 0;      // logical out rows (2I or H) and in columns (H or I)
  int np = 0, kp = 0;    // padded: np multiple of 16, kp multiple of 64
  bool interleaved = false;  // w13: gate/up rows interleaved by 8 (see header comment)
  DevBuf w;              // atoms
  DevBuf wp;             // Hopper path (sm90_moe.cuh): plain [E][np][kp] copy in the prepared row
                         // order, 16-bit and fp8 weights on sm_90 only; empty = no Hopper path
  // Column (weight) scales, fp32 [E][kg][nsc]: scale of original row r at k-chunk c is
  // scale[(e * kg + c) * nsc + r / n_div]. kchunk = k-columns per chunk (0 = whole K).
  DevBuf scale;
  int kg = 0, kchunk = 0, nsc = 0, n_div = 1;
  // every scale is exactly a value of the activation dtype (bf16 / fp16, as checkpoints of such
  // models store them) and 16 x it is finite there: (u - z) x scale then rounds once in that dtype
  // (the Hopper int4 kernel's folded group scales, Sm90Gemm::fold)
  bool scale16 = false;
  DevBuf zero;           // asym int: fp32 zero points [E][kg][n] (original rows), else empty
  // The sm_90 bulk decode kernel's copy of the column scales / zero points of int4 / int8 group
  // weights, one contiguous run per 32-column item: fp32 [E][np / 32][kgt][32], kgt = ceil(kp /
  // kchunk); entry (e, tile, g, r) belongs to prepared row 32 tile + r (scale 0 for rows past n and
  // groups past K, zero point the symmetric offset for rows past n, group min(g, kg - 1)), so an
  // item's scales land with one bulk copy (build_decode_tiles; empty where that kernel cannot run)
  DevBuf scale_t, zero_t;
  DevBuf g_idx;          // int32 [E][k] group of each input column (actorder), else empty
  DevBuf bias;           // fp32 [E][n] (original rows), else empty
  std::vector<float> in_scale;  // fp8 static activation scale per expert (host copy)
  DevBuf in_scale_dev;   // fp32 [E]
};

// A prepared set of experts (the routed experts, or a shared expert with E = 1).
struct DevExperts {
  int num_experts = 0, hidden = 0, intermediate = 0;
  DType act = DType::kBF16;   // bf16 or f16: activation dtype and MMA operand type
  WFmt fmt = WFmt::k16;
  ActQuant act_quant = ActQuant::kNone;
  Activation activation = Activation::kSiluMul;
  DevProj w13, w2;
  std::string method;         // "cuda/wna16-u4-g128", ...
};

// Waits until every upload issued so far has landed. A cudaMemcpy from pageable host memory may
// return before its DMA completes, and kernels on a non-blocking stream are not ordered after it:
// every function that uploads host data for later kernels ends with this (prepare*, the layers).
void uploads_done();

// Why the CUDA backend cannot run these weights ("" = it can).
std::string can_prepare(const ExpertWeights& w);
// Repacks canonical host weights (validated) into device experts. `activation` is the layer's.
// int8_plain: INT8 W8A8 (prepare_q) also wants the Hopper path's signed plain copy of the weights.
DevExperts prepare(const ExpertWeights& w, Activation activation, bool int8_plain = false);

// Device random weights in the canonical encoding of `scheme` (codes uniform over their range,
// never NaN; scales positive), prepared exactly like loaded ones. Used by the bench for
// full-size layers that would not fit comfortably in host memory.
DevExperts prepare_random(const MoeScheme& scheme, int num_experts, int hidden, int intermediate,
                          int group_size, std::array<int, 2> block, DType act, Activation activation,
                          bool with_bias, uint64_t seed,
                          bool int8_plain = false);

// Routing on the device: logits [M, E] f32 -> topk weights f32 [M, k], ids int32 [M, k].
void route_device(const float* logits, int64_t m, int num_experts, const RouterConfig& cfg,
                  const float* bias, float* topk_w, int32_t* topk_ids, cudaStream_t s);

// Workspace and per-call sizes of one forward; reused across calls (grown when M grows).
struct Workspace {
  DevBuf buf;
  size_t bytes = 0;
  void reserve(size_t need);
};

struct ForwardArgs {
  const void* x = nullptr;          // [M, H] act dtype
  const float* topk_w = nullptr;    // [M, k]
  const int32_t* topk_ids = nullptr;  // [M, k] global ids
  void* y = nullptr;                // [M, H] act dtype
  int64_t m = 0;
  int top_k = 1;
  int num_global_experts = 0;
  const int32_t* expert_map = nullptr;  // device [num_global_experts] global -> local or -1; null = identity
  bool weight_on_input = false;     // Llama 4
};

// Bytes of workspace forward() needs for M tokens.
size_t workspace_bytes(const DevExperts& ex, const DevExperts* shared, int64_t m, int top_k,
                       int num_global_experts);
// The whole layer: align, (activation quantization), GEMM1 + act, (quantization), GEMM2 +
// router weight, sum over top-k (+ shared expert), rounding. Graph-capturable: no host syncs,
// no allocations (the workspace must hold workspace_bytes()).
void forward(const DevExperts& ex, const DevExperts* shared, const ForwardArgs& a, void* workspace,
             cudaStream_t s);
// Kernel key(s) forward() uses for these sizes, for logs and bench rows.
std::string forward_kernels(const DevExperts& ex, int64_t m, int top_k);

// Device facts.
int device_sm_count();
bool device_present(std::string* why);
// Whether the sm_90 bulk-streaming decode kernel runs here (moe_decode.cuh; QMOE_CUDA_DECODE90=0
// turns it off): 16-bit weights decode only on it (up to 4 rows per expert).
bool decode90_available();
// Fills pr.scale_t / zero_t from pr.scale / zero (moe_decode.cu) where the bulk decode kernel
// can use them: int4 / int8 weights with per-group scales (no g_idx), np a multiple of 32, and
// decode90_available(); half = I for w13 (its rows are interleaved), unused for w2.
void build_decode_tiles(DevProj& pr, int num_experts, int half);
// The sm_90 bulk decode kernel's plan for one GEMM, as its launch uses it (moe_decode.cu; for tests and
// measurements): atoms per warp slab (config.h dec90_balance), reduction buffers, ring stages and
// shared memory per block.
struct Decode90Plan {
  int slab_atoms = 0, red_bufs = 0, stages = 0, smem = 0;
};
Decode90Plan decode90_plan(WFmt fmt, int mode, int chunk, int kp, int ktiles_per_split, int slab_ktiles, int max_rows,
                           bool zero, int rows = kDecodeRows);

}  // namespace qmoe::cuda
