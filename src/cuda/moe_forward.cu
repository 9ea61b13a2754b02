// forward(): the whole fused MoE layer on device pointers, graph-capturable (no syncs, no
// allocations): align -> (activation prep / fp8 quantization) -> GEMM1 + act -> (fp8 quantization
// of h) -> GEMM2 + router weight -> sum over top-k (+ shared expert) -> rounding. The workspace is
// carved by one Plan so workspace_bytes() and forward() agree.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "cuda/cuda_moe.h"
#include "cuda/device_common.cuh"
#include "cuda/env_switch.h"
#include "cuda/moe_decode.cuh"
#include "cuda/moe_gemm.cuh"
#include "cuda/moe_kernels.cuh"
#include "cuda/sm90_moe.cuh"

namespace qmoe::cuda {

int device_sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 132;
    return v;
  }();
  return n;
}

bool pdl_enabled() {
  static const bool on = [] {
    if (!env_on("QMOE_CUDA_PDL")) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return on;
}

bool device_present(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string(cudaGetErrorString(e)) : std::string("no CUDA device");
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 8) {
    if (why) *why = "the CUDA device is older than sm_80";
    return false;
  }
  return true;
}

void Workspace::reserve(size_t need) {
  if (need <= bytes) return;
  buf = DevBuf(need);
  bytes = need;
}

namespace {

int quant_code(ActQuant a) {
  switch (a) {
    case ActQuant::kFP8Token: return 1;
    case ActQuant::kFP8Group128: return 2;
    case ActQuant::kFP8Tensor: return 3;
    case ActQuant::kINT8Token: return 4;  // backend II (moe_q.cuh kQuantInt8Token)
    case ActQuant::kNVFP4: return 5;      // backend II (moe_q.cuh kQuantNvfp4)
    default: return 0;
  }
}

int act_code(Activation a) {
  return a == Activation::kSiluMul ? 0 : a == Activation::kGeluMul ? 1 : 2;
}

// Accumulation chunk: the finer of the weight's k-chunk and the activation's 128-column group.
int chunk_of(const DevProj& pr, ActQuant aq) {
  int c = 1 << 30;
  if (pr.kchunk > 0) c = pr.kchunk;
  if (aq == ActQuant::kFP8Group128) c = std::min(c, 128);
  return c;
}

// fp8 weights with 16-bit activations (FP8 weight-only): GemmParams::a16.
bool fp8_a16(const DevExperts& ex) { return ex.fmt == WFmt::kFP8 && ex.act_quant == ActQuant::kNone; }
// FP8 weight-only with tensor / channel scales on the Hopper wq kernel (sm90_eligible), the default
// since s47: CudaSm90.Fp8WeightOnlyOnTheWqKernelAndOffIt and the whole CUDA suite with it on passed
// on an H100 (docs/gpu_logs/2026-12-07_s47/r1), after s46's first run had found NaN from stale ring
// slots past K; 1.0-2.4x faster than mma.sync at 256-4096 tokens (docs/perf.md).
// QMOE_CUDA_FP8A16_WGMMA=0 keeps FP8A16 on the mma.sync / decode kernels.
bool fp8_a16_wgmma_on() { return env_on("QMOE_CUDA_FP8A16_WGMMA", true); }

int mode_of(const DevProj& pr, ActQuant aq) {
  if (pr.fmt == WFmt::k16) return 0;
  if (pr.g_idx.ptr != nullptr) return 2;
  if (pr.fmt == WFmt::kFP8 && chunk_of(pr, aq) >= pr.kp) return 3;  // one scale pair for all of K
  return 1;
}

// Overrides of select_sm90's rule (config.h) for measurements: QMOE_CUDA_WGMMA_MIN_ROWS=n (the
// Hopper path from n rows per expert), QMOE_CUDA_WG64_MAX_ROWS=v (64-row M-blocks up to v rows, 0:
// never).
// (read per plan: tests switch it)
int wgmma_min_rows_env() { return std::max(0, env_int("QMOE_CUDA_WGMMA_MIN_ROWS", 0)); }
int wg64_max_rows_env() {
  static const int v = std::max(-1, env_int("QMOE_CUDA_WG64_MAX_ROWS", -1));
  return v;
}

// QMOE_CUDA_WQ_TN=32 / 64 / 128 / 256: the quantized-weight wgmma kernel's token tile (select_sm90;
// measurements, tests; read per plan).
int wq_tn_env() { return env_int("QMOE_CUDA_WQ_TN", 0); }

// Direct routing for one token on the bulk decode kernel (no align); QMOE_CUDA_DIRECT=0 keeps align
// (measurements; read per plan).
bool direct_on() { return env_on("QMOE_CUDA_DIRECT"); }
// A K-split GEMM2's output zeroed by a bulk-kernel GEMM1 (GemmParams::zero_out); QMOE_CUDA_O_BY_GEMM1=0:
// by a memset before the layer (measurements, tests; read per forward).
bool o_by_gemm1_on() { return env_on("QMOE_CUDA_O_BY_GEMM1"); }
// GEMM2's K splits on the decode kernels: more splits where they shorten the longest block walk
// (config.h select_decode, balanced); QMOE_CUDA_FILL_BALANCE=0 keeps the doubling fill rule alone
// (measurements; read per plan).
bool fill_balance_on() { return env_on("QMOE_CUDA_FILL_BALANCE"); }
// fp8 (mode 3) GEMM2 on the bulk decode kernel quantizes h while staging it (GemmParams::q_rows):
// no act_prep launch between the GEMMs, where config.h select_h_quant_in_gemm2 takes it;
// QMOE_CUDA_H_QUANT_IN_GEMM2=0 / 1: never / wherever it can run (measurements, tests; read per forward).
int h_quant_in_gemm2_env() { return env_int("QMOE_CUDA_H_QUANT_IN_GEMM2", -1); }

// The Hopper path's streaming kernel (select_sm90_stream): QMOE_CUDA_STREAM=0 / 1 never / always
// where eligible, QMOE_CUDA_STREAM_NT=16 / 64 its M-block (read per plan: tests switch them).
int stream_mode_env() { return env_int("QMOE_CUDA_STREAM", -1); }
int stream_nt_env() { return env_int("QMOE_CUDA_STREAM_NT", 0); }
// QMOE_CUDA_STREAM_HINT=0 / 1: the streaming kernel's evict-first weight loads never / always
// (measurements; read once: no test switches it, and run_experts_sm90 asks for every GEMM).
int stream_hint_env() {
  static const int v = env_int("QMOE_CUDA_STREAM_HINT", -1);
  return v;
}
// QMOE_CUDA_STREAM_XHINT=0 / 1: the streaming kernel's evict-last token-tile loads never / always
// (measurements, tests; read per call).
int stream_xhint_env() { return env_int("QMOE_CUDA_STREAM_XHINT", -1); }

// fp8 / int8 activations quantized once per token and then gathered as codes where the same token feeds
// top_k > 1 slots (ExpertsPlan::quant_once); QMOE_CUDA_QUANT_ONCE=0 quantizes every slot's row
// (measurements, tests; read per plan).
bool quant_once_on() { return env_on("QMOE_CUDA_QUANT_ONCE"); }

// int4 WNA16 group scales folded into the Hopper wq kernel's operands where they are exact
// operand-dtype values (Sm90Gemm::fold, numerics.md "Products"); QMOE_CUDA_WQ_FOLD=0 keeps the
// exact operands with fp32 promotion per group (measurements, tests; read per plan).
bool wq_fold_on() { return env_on("QMOE_CUDA_WQ_FOLD"); }
// Whether projection pr's scales fold: exact operand-dtype values that change along K.
bool proj_folds(const DevExperts& ex, const DevProj& pr) {
  return pr.scale16 && chunk_of(pr, ex.act_quant) < pr.kp;
}

// W4A8 with fp8 per-token activations on QGMMA (Sm90Gemm::q8: the int4 codes converted to e4m3 in
// registers, the activation codes multiplied as they are); QMOE_CUDA_W4A8_QGMMA=0 keeps them as
// exact 16-bit values on HGMMA (measurements, tests; read per plan).
bool w4a8_qgmma_on() { return env_on("QMOE_CUDA_W4A8_QGMMA"); }

// fp8 block weight scales loaded once per 64-row tile half and k-block on the Hopper tile kernel
// (Sm90Gemm::block_slots); QMOE_CUDA_FP8_BLOCK_SLOTS=0 loads them per column (measurements, tests;
// read per plan).
bool fp8_block_slots_on() { return env_on("QMOE_CUDA_FP8_BLOCK_SLOTS"); }

// The tile kernel's epilogue 4 columns per lane (Sm90Gemm::wide_store); QMOE_CUDA_WIDE_STORE=0: 2
// (measurements, tests; read per plan).
bool wide_store_on() { return env_on("QMOE_CUDA_WIDE_STORE"); }

// fp8 n256 tiles where one scale pair covers all of K (Sm90Gemm::fp8_wide); QMOE_CUDA_FP8_WIDE=0:
// the n128 tiles (measurements, tests; read per plan).
bool fp8_wide_on() { return env_on("QMOE_CUDA_FP8_WIDE"); }

// The tile kernel on 128-row M-blocks as CTA pairs sharing A by multicast (Sm90Gemm::cluster2) where
// select_pairs takes them; QMOE_CUDA_PAIRS=0: never, 1: wherever the kernel can (measurements,
// tests; read per plan).
int pairs_env() { return env_int("QMOE_CUDA_PAIRS", -1); }

// The tile kernel's 16-bit A rows copied straight from x (Sm90Gemm::a_src: no gather of x) where
// select_a_direct takes it; QMOE_CUDA_A_DIRECT=0: always gathered into sorted rows, then TMA; 1:
// copied from x at every size (measurements, tests; read per plan).
int a_direct_env() { return env_int("QMOE_CUDA_A_DIRECT", -1); }

// The Hopper tile kernel and the one-CTA quantized-weight (wq) kernels persistent
// (Sm90Gemm::tile_counter); QMOE_CUDA_PERSIST=0: one CTA per tile (measurements, tests; read per plan).
bool persist_on() { return env_on("QMOE_CUDA_PERSIST"); }

// One consumer warpgroup for an expert's last 128-row M-block when it holds <= 64 live rows
// (Sm90Gemm::half_tail); QMOE_CUDA_HALF_TAIL=0 turns it off for measurements.
bool half_tail_on() {
  static const bool v = env_on("QMOE_CUDA_HALF_TAIL");
  return v;
}

// The wq kernel's M-blocks multiplied as far as their live rows, by 32 (Sm90Gemm::live_cols):
// H100 (s51 r1, one binary alternated): int4 / MXFP4 / NVFP4A16 at M = 256-4096 1.031x geomean over
// the 45 anchor rows, up to 1.16x at M = 4096, no row where it runs below 0.99x.
// QMOE_CUDA_WQ_LIVE_COLS=0: the whole / half tile (measurements, tests; read per call).
bool wq_live_cols_on() { return env_on("QMOE_CUDA_WQ_LIVE_COLS"); }

// The last weight box of N loaded and multiplied only as far as it holds rows (Sm90Gemm::trim_box);
// QMOE_CUDA_TRIM_BOX=0: whole 256-row boxes (measurements, tests; read per call).
bool trim_box_on() { return env_on("QMOE_CUDA_TRIM_BOX"); }

// How the Hopper path feeds a set of experts (sm90_moe.cuh): byte operands (e4m3 / int8 codes:
// fp8 W8A8 on QGMMA, INT8 W8A8 on IGMMA), weights as the register operand (the wq kernel: int4 /
// int8 atoms, fp4 units), and quantized activations as exact 16-bit values (W4A8, NVFP4 W4A4).
struct Sm90Operands {
  bool i8, bytes, wq, q16;
  explicit Sm90Operands(const DevExperts& ex)
      : i8(ex.fmt == WFmt::kU8 && ex.act_quant == ActQuant::kINT8Token),
        bytes((ex.fmt == WFmt::kFP8 && !fp8_a16(ex)) || i8),
        wq(!i8 && (ex.fmt == WFmt::kU4 || ex.fmt == WFmt::kU8 || ex.fmt == WFmt::kNV4 || ex.fmt == WFmt::kMX4 ||
                   fp8_a16(ex))),
        q16(!bytes && ex.act_quant != ActQuant::kNone) {}
  bool quant() const { return bytes || q16; }  // the gather quantizes the activation rows
};

bool sm90_eligible(const DevExperts& ex) {
  if (!sm90_available()) return false;
  // FP8 weight-only: not the QGMMA kernels (e4m3 activations) but the wq kernel, its atoms decoded
  // to exact bf16 / fp16 register operands as int8's are; one scale per row for K (tensor /
  // channel weights: the wq kernel has no block rows), else the mma.sync / decode kernels
  if (fp8_a16(ex))
    return fp8_a16_wgmma_on() && mode_of(ex.w13, ex.act_quant) == 3 && mode_of(ex.w2, ex.act_quant) == 3;
  // INT8 W8A8 with symmetric channel weights: the IGMMA kernel on the signed plain copy
  if (ex.fmt == WFmt::kU8 && ex.act_quant == ActQuant::kINT8Token)
    return ex.w13.wp.ptr != nullptr && ex.w2.wp.ptr != nullptr && ex.w13.zero.ptr == nullptr &&
           ex.w2.zero.ptr == nullptr && ex.w13.kchunk == 0 && ex.w2.kchunk == 0 && ex.w13.g_idx.ptr == nullptr;
  // fp4 units (NVFP4 A16 / W4A4, MXFP4): the wq kernel, block scales folded into the operands
  if (ex.fmt == WFmt::kNV4 || ex.fmt == WFmt::kMX4)
    return ex.act_quant == ActQuant::kNone || ex.act_quant == ActQuant::kNVFP4;
  // the wq kernel reads the atoms: WNA16, and W4A8 (int4 x fp8 / int8 per-token activations as
  // exact 16-bit values); other int8-weight activation schemes stay on mma.sync
  const bool atoms = (ex.fmt == WFmt::kU4 || ex.fmt == WFmt::kU8);
  if (atoms && ex.act_quant != ActQuant::kNone &&
      !(ex.fmt == WFmt::kU4 && (ex.act_quant == ActQuant::kFP8Token || ex.act_quant == ActQuant::kINT8Token)))
    return false;
  if (!atoms && (ex.w13.wp.ptr == nullptr || ex.w2.wp.ptr == nullptr)) return false;
  return sm90_supports(ex.fmt, mode_of(ex.w13, ex.act_quant), chunk_of(ex.w13, ex.act_quant)) &&
         sm90_supports(ex.fmt, mode_of(ex.w2, ex.act_quant), chunk_of(ex.w2, ex.act_quant));
}

// Tuning knob for measurements: QMOE_CUDA_SPLIT_CAP1 / _CAP2 cap the K splits of GEMM1 / GEMM2
// (unset: select_config's choice).
int split_cap(int which) {
  static const int caps[2] = {std::max(1, env_int("QMOE_CUDA_SPLIT_CAP1", 1 << 20)),
                              std::max(1, env_int("QMOE_CUDA_SPLIT_CAP2", 1 << 20))};
  return caps[which - 1];
}

// The decode kernel (moe_decode.cuh) for few rows per expert; QMOE_CUDA_DECODE=0 keeps the 16-row
// tile of moe_gemm.cu instead (A/B measurements). Both GEMMs share one align, so both must run it.
int mode_of(const DevProj& pr, ActQuant aq);

bool decode_eligible(const DevExperts& ex) {
  static const bool on = env_on("QMOE_CUDA_DECODE");
  return on && decode_supports(ex.fmt, mode_of(ex.w13, ex.act_quant)) &&
         decode_supports(ex.fmt, mode_of(ex.w2, ex.act_quant));
}

struct Carve {
  size_t off = 0;
  char* base = nullptr;
  template <class T>
  T* take(size_t n) {
    off = (off + 255) / 256 * 256;
    T* p = base ? reinterpret_cast<T*>(base + off) : nullptr;
    off += n * sizeof(T);
    return p;
  }
};

// Everything one set of experts needs for one forward.
struct ExpertsPlan {
  int64_t m = 0, numel = 0;
  int top_k = 1;
  GemmConfig c1, c2;
  bool dec = false;          // decode kernel (moe_decode.cu): M-blocks of kDecodeRows, splits from d1 / d2
  DecodeConfig d1, d2;
  bool dec90_1 = false, dec90_2 = false;  // the sm_90 bulk-streaming decode kernel for GEMM1 / GEMM2
  int dec_r = kDecodeRows;                // decode M-block rows (8, or 16 on the sm_90 bulk kernel)
  // one token on the bulk kernel: no align, M-block b is slot b (GemmParams::direct_ids)
  bool direct = false;
  // bound on the valid rows of one decode M-block: each valid row is a distinct slot (direct
  // routing: M-block b is slot b alone)
  int dec_rows() const { return direct ? 1 : static_cast<int>(std::min<int64_t>(dec_r, numel)); }
  int bm = 16, cap = 0;
  bool prep_a = false, slot_rows = false;
  int32_t *sorted = nullptr, *eids = nullptr, *npost = nullptr, *hist = nullptr;
  void* a = nullptr;
  float* a_scale = nullptr;
  int a_groups = 1;
  void* h = nullptr;
  void* hq = nullptr;
  float* h_scale = nullptr;
  float* h_amax = nullptr;  // [numel]: GEMM1's per-row maxima of h for a q_rows GEMM2 (GemmParams::h_amax)
  int h_groups = 1;
  float* partial = nullptr;
  float* o = nullptr;
  // Hopper path: A rows in sorted order (operand dtype or e4m3), h in sorted order, its e4m3 codes
  bool wg = false;
  bool stream = false;  // ... on the streaming kernel (M-blocks of bm = 16 / 64 rows)
  void* as = nullptr;
  void* hs = nullptr;
  void* hsq = nullptr;
  // fp8 / int8 dynamic activations (per token / 1x128) of a top_k > 1 layer without weight on input: x
  // quantized once per token into xq / xq_scale, then its codes gathered (ncu, deepseek-v3 fp8
  // M = 4096: quantizing each of the 8 slots of a token took 214 us, 72% SM-busy)
  bool quant_once = false;
  // the tile kernel reads 16-bit x rows itself (Sm90Gemm::a_src), where x is 16-byte aligned
  bool a_direct = false;
  // int4 WNA16 group scales folded into the wq kernel's operands (Sm90Gemm::fold) where a
  // projection has scales that change along K
  bool fold = false;
  // W4A8 fp8 on QGMMA (Sm90Gemm::q8): A and h rows as e4m3 codes in the Sm90Gather::kperm order
  bool q8 = false;
  // the wq kernel's live token columns on 128- / 256-row tiles (Sm90Gemm::live_cols; not Q8)
  bool live_cols = false;
  // fp8 block weight scales by tile half on the Hopper tile kernel (Sm90Gemm::block_slots)
  bool block_slots = false;
  // the tile kernel's epilogue 4 columns per lane (Sm90Gemm::wide_store)
  bool wide_store = true;
  // fp8 n256 tiles (Sm90Gemm::fp8_wide), where they apply
  bool fp8_wide = false;
  // the tile kernel's CTA pairs (Sm90Gemm::cluster2)
  bool pairs = false;
  // the tile / wq kernels persistent: GEMM1's and GEMM2's tile counters (Sm90Gemm::tile_counter),
  // zeroed by align (kAlignZeroInts)
  int32_t* tile_counters = nullptr;
  void* xq = nullptr;
  float* xq_scale = nullptr;

  void plan(const DevExperts& ex, int64_t m_, int top_k_, bool weight_on_input, Carve& cv) {
    m = m_;
    top_k = top_k_;
    numel = m * top_k;
    const int sms = device_sm_count();
    int64_t rows_per_expert = 1;
    {
      const int64_t touched = std::min<int64_t>(numel, ex.num_experts);
      rows_per_expert = (numel + touched - 1) / std::max<int64_t>(touched, 1);
      const Sm90Operands op(ex);
      const Sm90Kind kind = op.i8                                              ? Sm90Kind::kInt8
                            : ex.fmt == WFmt::kNV4 || ex.fmt == WFmt::kMX4   ? Sm90Kind::kFp4
                            : op.wq                                            ? Sm90Kind::kWq
                                                                               : Sm90Kind::kPlain;
      // WNA16 whose GEMMs both accumulate straight into acc (int4: channel or folded group scales; int8:
      // channel scales), and FP8 weight-only (tensor / channel scales only: sm90_eligible): the wq
      // kernel's 256-row token tiles apply, from config.h's rows per expert
      const auto direct_acc = [&](const DevProj& pr) {
        return chunk_of(pr, ex.act_quant) >= pr.kp ||
               (ex.fmt == WFmt::kU4 && wq_fold_on() && proj_folds(ex, pr));
      };
      const bool direct = op.wq && (fp8_a16(ex) || ((ex.fmt == WFmt::kU4 || ex.fmt == WFmt::kU8) &&
                                                    ex.act_quant == ActQuant::kNone && direct_acc(ex.w13) &&
                                                    direct_acc(ex.w2)));
      const int64_t wide_rows = !direct ? 0 : ex.fmt == WFmt::kU4 ? kWq256Rows : kWq256Rows8;
      Sm90Choice c2 =
          select_sm90(rows_per_expert, ex.num_experts, kind, wgmma_min_rows_env(), wg64_max_rows_env(), wq_tn_env(),
                      ex.fmt == WFmt::kU4 && ex.act_quant != ActQuant::kNone,  // W4A8 (int4 x quantized activations)
                      wide_rows);
      const bool sm90_ok = sm90_eligible(ex);
      c2.wgmma = c2.wgmma && sm90_ok;
      // 16-bit weights, fp8 with one scale pair for all of K in both projections, INT8 W8A8 (channel
      // x per-token scales: sm90_eligible)
      const bool stream_ok =
          sm90_ok && ((kind == Sm90Kind::kPlain && (ex.fmt == WFmt::k16 || (mode_of(ex.w13, ex.act_quant) == 3 &&
                                                                            mode_of(ex.w2, ex.act_quant) == 3))) ||
                      kind == Sm90Kind::kInt8);
      select_sm90_stream(c2, rows_per_expert, ex.num_experts, touched, (ex.w13.np + 255) / 256, op.bytes, sms,
                         stream_ok, stream_mode_env(), stream_nt_env(), op.i8);
      wg = c2.wgmma;
      bm = c2.bm;
      stream = c2.stream;
    }
    if (wg) {
      const Sm90Operands op(ex);
      cap = align_capacity(static_cast<int>(numel), ex.num_experts, bm);
      sorted = cv.take<int32_t>(cap);
      eids = cv.take<int32_t>(cap / bm);
      npost = cv.take<int32_t>(1);
      if (const int hn = align_hist_ints(static_cast<int>(numel), ex.num_experts)) hist = cv.take<int32_t>(hn);
      const size_t esz = op.bytes ? 1 : 2;
      // not on 32-row token tiles (two CTAs, fragments-first): H200 (thirteenth session) 0.96-0.98x
      // there, 1.05-1.12x on 64- and 128-row tiles
      fold = op.wq && ex.fmt == WFmt::kU4 && ex.act_quant == ActQuant::kNone && bm >= 64 && wq_fold_on() &&
             (proj_folds(ex, ex.w13) || proj_folds(ex, ex.w2));
      const auto q8_fits = [&](const DevProj& pr) {
        return sm90_wq_q8_supports(bm, chunk_of(pr, ex.act_quant) >= pr.kp);
      };
      q8 = op.wq && ex.fmt == WFmt::kU4 && ex.act_quant == ActQuant::kFP8Token && q8_fits(ex.w13) &&
           q8_fits(ex.w2) && w4a8_qgmma_on();
      live_cols = op.wq && bm >= 128 && !q8 && wq_live_cols_on();
      block_slots = op.bytes && ex.fmt == WFmt::kFP8 && fp8_block_slots_on();
      wide_store = wide_store_on();
      if (!stream && !op.wq && !op.quant() && !weight_on_input && ex.hidden % 8 == 0)
        a_direct = select_a_direct(rows_per_expert, a_direct_env());
      // (x's rows copied by the producer threads keep one CTA per tile: pairs load A by TMA)
      pairs = !op.i8 && !op.wq && !stream && bm == 128 && !a_direct &&
              select_pairs(ex.fmt == WFmt::kFP8, pairs_env());
      // (one scale pair for all of K: per-tensor / per-channel weights, per-tensor / per-token activations)
      fp8_wide = op.bytes && ex.fmt == WFmt::kFP8 && !stream && !pairs && ex.w13.kchunk == 0 &&
                 ex.w2.kchunk == 0 && ex.act_quant != ActQuant::kFP8Group128 && fp8_wide_on();
      if (!stream && persist_on()) tile_counters = cv.take<int32_t>(kAlignZeroInts);
      as = cv.take<char>(static_cast<size_t>(cap) * ex.w13.kp * esz);
      hs = cv.take<char>(static_cast<size_t>(cap) * ex.w2.kp * 2);
      if (op.bytes || q8) {
        a_groups = ex.act_quant == ActQuant::kFP8Group128 ? (ex.hidden + 127) / 128 : 1;
        a_scale = cv.take<float>(static_cast<size_t>(cap) * a_groups);
        hsq = cv.take<char>(static_cast<size_t>(cap) * ex.w2.kp);
        h_groups = ex.act_quant == ActQuant::kFP8Group128 ? (ex.intermediate + 127) / 128 : 1;
        h_scale = cv.take<float>(static_cast<size_t>(cap) * h_groups);
        quant_once = top_k > 1 && !weight_on_input &&
                     (ex.act_quant == ActQuant::kFP8Token || ex.act_quant == ActQuant::kFP8Group128 ||
                      ex.act_quant == ActQuant::kINT8Token) &&
                     ex.hidden % 8 == 0 && ex.w13.kp % 16 == 0 && quant_once_on();
        if (quant_once) {
          xq = cv.take<char>(static_cast<size_t>(m) * ex.w13.kp);
          xq_scale = cv.take<float>(static_cast<size_t>(m) * a_groups);
        }
      } else if (op.q16) {
        a_scale = cv.take<float>(static_cast<size_t>(cap));
        hsq = cv.take<char>(static_cast<size_t>(cap) * ex.w2.kp * 2);
        h_scale = cv.take<float>(static_cast<size_t>(cap));
      }
      o = cv.take<float>(static_cast<size_t>(numel) * ex.hidden);
      return;
    }
    c1 = select_config({m, top_k, ex.num_experts, ex.w13.np, ex.hidden, ex.fmt, sms});
    c2 = select_config({m, top_k, ex.num_experts, ex.hidden, ex.intermediate, ex.fmt, sms});
    c2.tile = c1.tile;  // one align for both GEMMs
    bm = tile_bm(c1.tile);
    if (c2.tile == Tile::kLarge) c2.splits = 1;
    c1.splits = std::min(c1.splits, split_cap(1));
    c2.splits = std::min(c2.splits, split_cap(2));
    if (c1.tile == Tile::kSmall && decode_eligible(ex)) {
      // GEMM1 splits K over the grid only past kDecodeMaxK (a split costs a memset and act_finish)
      d1 = select_decode({m, top_k, ex.num_experts, ex.w13.np, ex.hidden, ex.fmt, sms, chunk_of(ex.w13, ex.act_quant)},
                         false);
      d2 = select_decode({m, top_k, ex.num_experts, ex.hidden, ex.intermediate, ex.fmt, sms,
                          chunk_of(ex.w2, ex.act_quant)}, true, kDecodeMaxK, fill_balance_on());
      dec = d1.use;
      if (dec) {
        dec_r = d1.rows;
        const int mo1 = mode_of(ex.w13, ex.act_quant), mo2 = mode_of(ex.w2, ex.act_quant);
        // One token on the bulk kernel (direct routing below): each M-block stages one row, so
        // GEMM1's K needs no split for staging (a GEMM1 split costs a memset, partial sums and
        // act_finish; llama4-scout / deepseek-v3 at M = 1, K = 5120 / 7168, split it in two for
        // the staging of 8 rows). H200 (fourteenth session, r6): their M = 1 rows 1.03-1.15x on
        // every scheme but llama4-scout's bf16 / fp8 (1.00). GEMM2 keeps its splits (atomics into
        // o, no extra launch): with GEMM2 under the same cap (r5) mixtral-8x7b's K = 14336 went from
        // 4 to 2 splits and its bf16 / fp8 rows measured 0.96-0.97x.
        bool one_row = false;
        if (m == 1 && dec_r == kDecodeRows && numel <= kDirectMaxSlots && direct_on()) {
          DecodeConfig e1 = select_decode({m, top_k, ex.num_experts, ex.w13.np, ex.hidden, ex.fmt, sms,
                                           chunk_of(ex.w13, ex.act_quant)}, false, kDecodeMaxK1);
          DecodeConfig e2 = d2;
          one_row = decode90_fit(ex.fmt, mo1, chunk_of(ex.w13, ex.act_quant), ex.w13.kp, e1, 1,
                                 ex.w13.zero.ptr != nullptr, dec_r) &&
                    decode90_fit(ex.fmt, mo2, chunk_of(ex.w2, ex.act_quant), ex.w2.kp, e2, 1,
                                 ex.w2.zero.ptr != nullptr, dec_r);
          if (one_row) {
            d1 = e1;
            d2 = e2;
            dec90_1 = dec90_2 = true;
          }
        }
        // the bulk kernel where it fits, if need be with K split further (measured on the H200:
        // mixtral-8x7b M = 16 GEMM1 on the register-ring kernel streamed at 29% of DRAM bandwidth,
        // the bulk kernel elsewhere at 45-50%; a GEMM1 split costs a memset and act_finish)
        if (!one_row) {
          dec90_1 = decode90_fit(ex.fmt, mo1, chunk_of(ex.w13, ex.act_quant), ex.w13.kp, d1, dec_rows(),
                                 ex.w13.zero.ptr != nullptr, dec_r);
          dec90_2 = decode90_fit(ex.fmt, mo2, chunk_of(ex.w2, ex.act_quant), ex.w2.kp, d2, dec_rows(),
                                 ex.w2.zero.ptr != nullptr, dec_r);
        }
        // 16-row M-blocks and 16-bit weights run on the bulk kernel only (both GEMMs share align's
        // blocks); without it, the 16-row mma.sync tile. QMOE_CUDA_DECODE16=0 keeps 16-bit weights
        // on the tile (A/B measurements).
        static const bool dec16 = env_on("QMOE_CUDA_DECODE16");
        const bool bulk_only = dec_r > kDecodeRows || ex.fmt == WFmt::k16;
        const bool bulk_ok = dec90_1 && dec90_2 && (dec16 || ex.fmt != WFmt::k16);
        if (bulk_only && !bulk_ok) {
          dec = false;
          dec90_1 = dec90_2 = false;
          dec_r = kDecodeRows;
        } else {
          bm = dec_r;
          c1.splits = d1.splits;
          c2.splits = d2.splits;
          direct = one_row || (m == 1 && dec90_1 && dec90_2 && dec_r == kDecodeRows && numel <= kDirectMaxSlots &&
                               direct_on());
        }
      }
    }
    cap = align_capacity(static_cast<int>(numel), ex.num_experts, bm);
    sorted = cv.take<int32_t>(cap);
    eids = cv.take<int32_t>(cap / bm);
    npost = cv.take<int32_t>(1);
    if (const int hn = align_hist_ints(static_cast<int>(numel), ex.num_experts)) hist = cv.take<int32_t>(hn);
    const bool quant = ex.act_quant != ActQuant::kNone;
    prep_a = quant || weight_on_input;
    slot_rows = weight_on_input || ex.act_quant == ActQuant::kFP8Tensor || ex.act_quant == ActQuant::kNVFP4;
    const int64_t arows = slot_rows ? numel : m;
    const size_t esz = 2;
    if (prep_a) {
      a = cv.take<char>(static_cast<size_t>(arows) * ex.hidden * esz);
      a_groups = ex.act_quant == ActQuant::kFP8Group128 ? (ex.hidden + 127) / 128 : 1;
      a_scale = cv.take<float>(static_cast<size_t>(arows) * a_groups);
    }
    h = cv.take<char>(static_cast<size_t>(numel) * ex.intermediate * esz);
    if (quant) {
      hq = cv.take<char>(static_cast<size_t>(numel) * ex.intermediate * esz);
      h_groups = ex.act_quant == ActQuant::kFP8Group128 ? (ex.intermediate + 127) / 128 : 1;
      h_scale = cv.take<float>(static_cast<size_t>(numel) * h_groups);
      h_amax = cv.take<float>(static_cast<size_t>(numel));
    }
    if (c1.splits > 1) partial = cv.take<float>(static_cast<size_t>(numel) * ex.w13.np);
    o = cv.take<float>(static_cast<size_t>(numel) * ex.hidden);
  }
};

struct Plan {
  ExpertsPlan routed, shared;
  int32_t* zero_ids = nullptr;
  bool has_shared = false;
  size_t bytes = 0;

  void make(const DevExperts& ex, const DevExperts* sh, int64_t m, int top_k, bool on_input, void* base) {
    Carve cv;
    cv.base = static_cast<char*>(base);
    routed.plan(ex, m, top_k, on_input, cv);
    has_shared = sh != nullptr;
    if (has_shared) {
      shared.plan(*sh, m, 1, false, cv);
      zero_ids = cv.take<int32_t>(static_cast<size_t>(m));
    }
    bytes = cv.off + 256;
  }
};

// Whether GEMM2 quantizes h itself as it stages it (GemmParams::q_rows): fp8 weights with one scale
// pair for K on the bulk decode kernel (8-row M-blocks), per-token or static activations, rows of
// whole 16-byte chunks.
bool h_quant_in_gemm2(const DevExperts& ex, const ExpertsPlan& pl) {
  const int qa = quant_code(ex.act_quant);
  return pl.dec && pl.dec90_2 && pl.c1.splits == 1 && ex.fmt == WFmt::kFP8 && mode_of(ex.w2, ex.act_quant) == 3 &&
         (qa == 1 || qa == 3) && pl.dec_r == kDecodeRows && ex.intermediate % 8 == 0 &&
         select_h_quant_in_gemm2(pl.numel, ex.num_experts, ex.intermediate, h_quant_in_gemm2_env());
}

void fill_gemm_common(GemmParams& g, const DevProj& pr, const ExpertsPlan& pl, int n_local_experts) {
  g.sorted_ids = pl.sorted;
  g.expert_ids = pl.eids;
  g.num_post = pl.npost;
  g.numel = static_cast<int>(pl.numel);
  // every used M-block holds at least one entry: no more than numel of them are ever used
  g.max_blocks = static_cast<int>(std::min<int64_t>(pl.cap / pl.bm, pl.numel));
  g.w = pr.w.as<uint8_t>();
  g.np = pr.np;
  g.kp = pr.kp;
  g.n = pr.n;
  g.k = pr.k;
  g.interleaved = pr.interleaved ? 1 : 0;
  g.col_scale = pr.scale.as<float>();
  g.kg = pr.kg;
  g.kchunk = pr.kchunk;
  g.nsc = pr.nsc;
  g.n_div = pr.n_div;
  g.zero = pr.zero.as<float>();
  g.col_tiled = pr.scale_t.as<float>();
  g.zero_tiled = pr.zero_t.as<float>();
  g.g_idx = pr.g_idx.as<int32_t>();
  g.bias = pr.bias.as<float>();
}

// QMOE_CUDA_SYNC_CHECK=1 (diagnostics): after each kernel of the forward (outside stream capture)
// waits for it and names it in the error, so an asynchronous failure points at its kernel.
void sync_check(cudaStream_t s, const char* what) {
  static const bool on = env_int("QMOE_CUDA_SYNC_CHECK", 0) == 1;
  if (!on) return;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  QMOE_CUDA_OK(cudaStreamIsCapturing(s, &st));
  if (st != cudaStreamCaptureStatusNone) return;
  const cudaError_t e = cudaStreamSynchronize(s);
  QMOE_CHECK(e == cudaSuccess, kInternal, "CUDA error ", cudaGetErrorString(e), " in ", what);
}

// The Hopper path of run_experts (sm90_moe.cuh): gather (+ fp8 quantization; for 16-bit x up to
// 64 rows per expert the tile kernel copies x's rows itself: select_a_direct) -> wgmma GEMM1 +
// activation -> (fp8 quantization of h) -> wgmma GEMM2 + router weight.
void run_experts_sm90(const DevExperts& ex, const ExpertsPlan& pl, const void* x, const float* topk_w,
                      const int32_t* topk_ids, const int32_t* emap, bool on_input, cudaStream_t s) {
  const bool f16 = ex.act == DType::kF16;
  const Sm90Operands op(ex);
  const bool wq = op.wq, quant = op.quant();
  const int kind = op.i8 ? 2 : op.bytes ? 1 : 0;
  const int H = ex.hidden, I = ex.intermediate;
  const int qa = quant ? quant_code(ex.act_quant) : 0;
  // align zeroes the persistent kernels' two tile counters (no memset launch)
  launch_align(topk_ids, static_cast<int>(pl.numel), emap, ex.num_experts, pl.bm, pl.cap, pl.sorted, pl.eids,
               pl.npost, pl.hist, s, pl.tile_counters);
  sync_check(s, "align (Hopper path)");
  Sm90Gather g;
  g.x = x;
  g.ldx = H;
  g.cols = H;
  g.by_sorted = 1;
  g.row_div = pl.top_k;
  g.topk_w = on_input ? topk_w : nullptr;
  g.sorted_ids = pl.sorted;
  g.expert_ids = pl.eids;
  g.block = pl.bm;
  g.num_post = pl.npost;
  g.numel = static_cast<int>(pl.numel);
  g.rows = pl.cap;
  g.quant = qa;
  g.out16 = op.q16 && !pl.q8 ? 1 : 0;
  g.kperm = pl.q8 ? 1 : 0;
  g.in_scale = ex.w13.in_scale_dev.as<float>();
  g.out = pl.as;
  g.out_pitch = ex.w13.kp;
  g.scales = pl.a_scale;
  g.groups = pl.a_groups;
  if (pl.quant_once) {
    Sm90Gather once = g;  // the first pass: token t's codes into row t of xq
    once.sorted_ids = nullptr;
    once.num_post = nullptr;
    once.by_sorted = 0;
    once.rows = once.numel = static_cast<int>(pl.m);
    once.out = pl.xq;
    once.scales = pl.xq_scale;
    if (sm90_gather_warp_ok(once)) {  // x 16-byte aligned (the plan checked the sizes)
      launch_sm90_gather(f16, once, s);
      sync_check(s, "sm90_gather: x quantized per token");
      g.codes = pl.xq;
      g.codes_pitch = ex.w13.kp;
      g.code_scales = pl.xq_scale;
    }
  }
  // 16-bit x straight into the tile kernel's stages (no gather), where x is 16-byte aligned
  const bool a_direct = pl.a_direct && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (!a_direct) {
    launch_sm90_gather(f16, g, s);
    sync_check(s, "sm90_gather of x");
  }

  auto common = [&](Sm90Gemm& q, const DevProj& pr) {
    q.a_rows = pl.cap;
    q.block = pl.bm;
    q.sorted_ids = pl.sorted;
    q.expert_ids = pl.eids;
    q.num_post = pl.npost;
    q.numel = static_cast<int>(pl.numel);
    q.max_blocks = static_cast<int>(std::min<int64_t>(pl.cap / pl.bm, pl.numel));
    q.half_tail = half_tail_on() ? 1 : 0;
    q.live_cols = pl.live_cols ? 1 : 0;
    q.trim_box = trim_box_on() ? 1 : 0;
    // the streaming kernel's weight boxes evict-first where the token rows would not stay in L2
    // (config.h stream_evict_first)
    if (pl.stream) {
      q.w_evict_first = stream_evict_first(static_cast<size_t>(pl.cap) * pr.kp * (op.bytes ? 1 : 2), stream_hint_env());
      q.x_evict_last = stream_x_evict_last(stream_xhint_env()) ? 1 : 0;
    }
    q.w = wq ? pr.w.ptr : pr.wp.ptr;
    q.num_experts = ex.num_experts;
    q.np = pr.np;
    q.kp = pr.kp;
    q.n = pr.n;
    q.k = pr.k;
    q.interleaved = pr.interleaved ? 1 : 0;
    q.half = I;
    q.col_scale = pr.scale.as<float>();
    q.kg = pr.kg;
    q.kchunk = pr.kchunk;
    q.nsc = pr.nsc;
    q.n_div = pr.n_div;
    q.bias = pr.bias.as<float>();
    q.zero = pr.zero.as<float>();
    q.chunk = chunk_of(pr, ex.act_quant);
    q.fold = pl.fold && proj_folds(ex, pr) ? 1 : 0;
    q.q8 = pl.q8 ? 1 : 0;
    q.block_slots = pl.block_slots ? 1 : 0;
    q.wide_store = pl.wide_store ? 1 : 0;
    q.fp8_wide = pl.fp8_wide ? 1 : 0;
    q.cluster2 = pl.pairs ? 1 : 0;
  };
  // int4 / int8 weights: the quantized-weight wgmma kernel on the prepared atoms
  auto launch = [&](const Sm90Gemm& q) {
    if (wq) launch_sm90_wq_gemm(f16, ex.fmt, q, s);
    else if (pl.stream) launch_sm90_stream(f16, kind, q, s);
    else launch_sm90_gemm(f16, kind, q, s);
    sync_check(s, q.stage == 1 ? "sm90 GEMM1" : "sm90 GEMM2");
  };
  Sm90Gemm g1;
  common(g1, ex.w13);
  g1.a = pl.as;
  g1.a_pitch = ex.w13.kp;
  g1.row_scale = quant ? pl.a_scale : nullptr;
  g1.rs_groups = pl.a_groups;
  g1.stage = 1;
  g1.act = act_code(ex.activation);
  g1.out = pl.hs;
  g1.ldo = ex.w2.kp;
  g1.tile_counter = pl.tile_counters;
  if (a_direct) {
    g1.a_src = x;
    g1.a_src_pitch = H;
    g1.a_row_div = pl.top_k;
  }
  launch(g1);

  const void* a2 = pl.hs;
  if (quant) {
    Sm90Gather q = g;
    q.codes = nullptr;  // h is quantized here, row by row (x's codes may have been gathered)
    q.code_scales = nullptr;
    q.x = pl.hs;
    q.ldx = ex.w2.kp;
    q.cols = I;
    q.by_sorted = 0;
    q.topk_w = nullptr;
    q.in_scale = ex.w2.in_scale_dev.as<float>();
    q.out = pl.hsq;
    q.out_pitch = ex.w2.kp;
    q.scales = pl.h_scale;
    q.groups = pl.h_groups;
    launch_sm90_gather(f16, q, s);
    sync_check(s, "sm90_gather of h");
    a2 = pl.hsq;
  }
  Sm90Gemm g2;
  common(g2, ex.w2);
  g2.a = a2;
  g2.a_pitch = ex.w2.kp;
  g2.row_scale = quant ? pl.h_scale : nullptr;
  g2.rs_groups = pl.h_groups;
  g2.stage = 2;
  g2.out = pl.o;
  g2.ldo = H;
  g2.topk_w = on_input ? nullptr : topk_w;
  g2.tile_counter = pl.tile_counters != nullptr ? pl.tile_counters + 1 : nullptr;
  if (emap != nullptr) QMOE_CUDA_OK(cudaMemsetAsync(pl.o, 0, static_cast<size_t>(pl.numel) * H * 4, s));
  launch(g2);
}

// One set of experts: from x and routing to o[slot][H] (router weight applied unless on input).
void run_experts(const DevExperts& ex, const ExpertsPlan& pl, const void* x, const float* topk_w,
                 const int32_t* topk_ids, const int32_t* emap, bool on_input, cudaStream_t s) {
  if (pl.wg) return run_experts_sm90(ex, pl, x, topk_w, topk_ids, emap, on_input, s);
  const bool f16 = ex.act == DType::kF16;
  const int H = ex.hidden, I = ex.intermediate;
  const int qa = quant_code(ex.act_quant);
  // fp8 W8A8 of a bf16 model: the quantized activations as fp16 values, the fp8 kernels' fp16
  // operands (device_common.cuh OperandOf); FP8 weight-only (a16): the activations as they are
  const int a16 = fp8_a16(ex) ? 1 : 0;
  const int a_f16 = (!f16 && ex.fmt == WFmt::kFP8 && !a16) ? 1 : 0;
  QMOE_CHECK(!a_f16 || (qa >= 1 && qa <= 3), kInternal, "CUDA forward: fp8 weights without fp8 activations");
  // the split-K sums and GEMM2's output start at zero; cleared first so that the kernels after
  // align follow each other directly (programmatic dependent launch, device_common.cuh)
  if (pl.c1.splits > 1)
    QMOE_CUDA_OK(cudaMemsetAsync(pl.partial, 0, static_cast<size_t>(pl.numel) * ex.w13.np * 4, s));
  // (GEMM2 split over K on decode kernels after a bulk-kernel GEMM1: that GEMM1 clears o,
  // GemmParams::zero_out, so no memset node precedes the layer; QMOE_CUDA_O_BY_GEMM1=0: the memset)
  const bool o_by_g1 = pl.c2.splits > 1 && emap == nullptr && pl.dec && pl.dec90_1 &&
                       (reinterpret_cast<uintptr_t>(pl.o) & 15) == 0 && o_by_gemm1_on();
  if ((pl.c2.splits > 1 || emap != nullptr) && !o_by_g1)
    QMOE_CUDA_OK(cudaMemsetAsync(pl.o, 0, static_cast<size_t>(pl.numel) * H * 4, s));
  if (!pl.direct) {
    launch_align(topk_ids, static_cast<int>(pl.numel), emap, ex.num_experts, pl.bm, pl.cap, pl.sorted, pl.eids,
                 pl.npost, pl.hist, s);
    sync_check(s, "align");
  }
  // direct routing: the bulk decode kernels take the M-blocks from the routing itself
  auto direct = [&](GemmParams& g) {
    if (!pl.direct) return;
    g.sorted_ids = direct_rows_table();
    g.expert_ids = nullptr;
    g.num_post = nullptr;
    g.direct_ids = topk_ids;
    g.direct_emap = emap;
  };
  // GEMM2 quantizes h as it stages it (GemmParams::q_rows): no act_prep of h
  const bool q_in_g2 = h_quant_in_gemm2(ex, pl);
  QMOE_CHECK(!q_in_g2 || pl.prep_a, kInternal, "h quantized in GEMM2 without an act_prep of x to clear its maxima");
  // ---- GEMM1 operand rows
  const void* a = x;
  int a_row_div = pl.top_k;
  const float* a_scale = nullptr;
  if (pl.prep_a) {
    ActPrep ap;
    ap.x = x;
    ap.ldx = H;
    ap.cols = H;
    ap.rows = pl.slot_rows ? pl.numel : pl.m;
    ap.slot_mode = pl.slot_rows ? 1 : 0;
    ap.top_k = pl.top_k;
    ap.topk_w = on_input ? topk_w : nullptr;
    ap.quant = qa;
    ap.in_scale = ex.w13.in_scale_dev.as<float>();
    ap.topk_ids = topk_ids;
    ap.expert_map = emap;
    ap.a = pl.a;
    ap.scales = pl.a_scale;
    ap.groups = pl.a_groups;
    ap.q_f16 = a_f16;
    // GEMM1's per-row maxima of h (a q_rows GEMM2 with dynamic scales) start from zero
    if (q_in_g2 && qa == 1) {
      ap.zero = pl.h_amax;
      ap.zero_n = pl.numel;
    }
    launch_act_prep(f16, ap, s);
    sync_check(s, "act_prep of x");
    a = pl.a;
    a_row_div = pl.slot_rows ? 1 : pl.top_k;
    a_scale = qa != 0 ? pl.a_scale : nullptr;
  }
  GemmParams g1;
  fill_gemm_common(g1, ex.w13, pl, ex.num_experts);
  direct(g1);
  g1.a = a;
  g1.lda = H;
  g1.a_row_div = a_row_div;
  g1.row_scale = a_scale;
  g1.rs_groups = pl.a_groups;
  g1.rs_kchunk = ex.act_quant == ActQuant::kFP8Group128 ? 128 : 0;
  g1.chunk = chunk_of(ex.w13, ex.act_quant);
  g1.splits = pl.c1.splits;
  g1.ktiles_per_split = (ex.w13.kp / 64 + pl.c1.splits - 1) / pl.c1.splits;
  g1.stage = 1;
  g1.act = act_code(ex.activation);
  g1.half = I;
  g1.out = pl.h;
  g1.ldo = I;
  if (pl.c1.splits > 1) {
    g1.partial = pl.partial;
    g1.bias = nullptr;  // added by act_finish
  }
  // align's outputs are complete once the kernel before GEMM1 has waited: true when act_prep ran
  g1.ids_ready = pl.prep_a ? 1 : 0;
  g1.a16 = a16;
  if (q_in_g2 && qa == 1) g1.h_amax = pl.h_amax;
  if (o_by_g1) {
    g1.zero_out = pl.o;
    g1.zero_count = pl.numel * H;
  }
  if (pl.dec) {
    g1.ktiles_per_split = pl.d1.ktiles_per_split;
    launch_moe_decode(f16, ex.fmt, mode_of(ex.w13, ex.act_quant), pl.d1.slab_ktiles, pl.dec_rows(), pl.dec90_1, pl.dec_r,
                      g1, s);
  } else {
    launch_moe_gemm(f16, ex.fmt, mode_of(ex.w13, ex.act_quant), pl.c1.tile, g1, s);
  }
  sync_check(s, "GEMM1");
  if (pl.c1.splits > 1) {
    launch_act_finish(f16, pl.partial, ex.w13.np, pl.numel, I, g1.act, ex.w13.bias.as<float>(), topk_ids, emap, pl.h,
                      I, s);
    sync_check(s, "act_finish");
  }
  // ---- GEMM2 operand rows
  const void* a2 = pl.h;
  const float* a2_scale = nullptr;
  if (qa != 0 && !q_in_g2) {
    ActPrep hp;
    hp.x = pl.h;
    hp.ldx = I;
    hp.cols = I;
    hp.rows = pl.numel;
    hp.slot_mode = 0;
    hp.top_k = 1;
    hp.quant = qa;
    hp.in_scale = ex.w2.in_scale_dev.as<float>();
    hp.topk_ids = topk_ids;
    hp.expert_map = emap;
    hp.a = pl.hq;
    hp.scales = pl.h_scale;
    hp.groups = pl.h_groups;
    hp.q_f16 = a_f16;
    launch_act_prep(f16, hp, s);
    sync_check(s, "act_prep of h");
    a2 = pl.hq;
    a2_scale = pl.h_scale;
  }
  GemmParams g2;
  fill_gemm_common(g2, ex.w2, pl, ex.num_experts);
  direct(g2);
  g2.a = a2;
  g2.lda = I;
  g2.a_row_div = 1;
  g2.row_scale = a2_scale;
  g2.rs_groups = pl.h_groups;
  g2.rs_kchunk = ex.act_quant == ActQuant::kFP8Group128 ? 128 : 0;
  g2.chunk = chunk_of(ex.w2, ex.act_quant);
  g2.splits = pl.c2.splits;
  g2.ktiles_per_split = (ex.w2.kp / 64 + pl.c2.splits - 1) / pl.c2.splits;
  g2.stage = 2;
  g2.out = pl.o;
  g2.ldo = H;
  g2.topk_w = on_input ? nullptr : topk_w;
  g2.ids_ready = 1;  // GEMM1 (at least) lies between align and GEMM2
  g2.a16 = a16;
  if (q_in_g2) {  // A = h in the model dtype (a2 = pl.h); the static scale per expert; GEMM2 writes
    g2.q_rows = qa;  // the row scales into h_scale (one per slot) for its epilogue
    g2.in_scale = ex.w2.in_scale_dev.as<float>();
    g2.row_scale = pl.h_scale;
    g2.h_amax = pl.h_amax;  // GEMM1's per-row maxima (dynamic scales)
  }
  if (pl.dec) {
    g2.ktiles_per_split = pl.d2.ktiles_per_split;
    launch_moe_decode(f16, ex.fmt, mode_of(ex.w2, ex.act_quant), pl.d2.slab_ktiles, pl.dec_rows(), pl.dec90_2, pl.dec_r,
                      g2, s);
  } else {
    launch_moe_gemm(f16, ex.fmt, mode_of(ex.w2, ex.act_quant), pl.c2.tile, g2, s);
  }
  sync_check(s, "GEMM2");
}

}  // namespace

size_t workspace_bytes(const DevExperts& ex, const DevExperts* shared, int64_t m, int top_k, int) {
  Plan p;
  p.make(ex, shared, m, top_k, false, nullptr);
  Plan q;
  q.make(ex, shared, m, top_k, true, nullptr);
  return std::max(p.bytes, q.bytes);
}

void forward(const DevExperts& ex, const DevExperts* shared, const ForwardArgs& a, void* workspace, cudaStream_t s) {
  if (a.m == 0) return;
  QMOE_CHECK(a.top_k >= 1, kBadInput, "CUDA forward: top_k must be >= 1");
  if (shared != nullptr)
    QMOE_CHECK(shared->hidden == ex.hidden && shared->act == ex.act && shared->num_experts == 1, kBadInput,
               "CUDA forward: the shared expert must have E = 1 and the routed experts' hidden size and dtype");
  Plan p;
  p.make(ex, shared, a.m, a.top_k, a.weight_on_input, workspace);
  run_experts(ex, p.routed, a.x, a.topk_w, a.topk_ids, a.expert_map, a.weight_on_input, s);
  if (shared != nullptr) {
    QMOE_CUDA_OK(cudaMemsetAsync(p.zero_ids, 0, static_cast<size_t>(a.m) * 4, s));
    run_experts(*shared, p.shared, a.x, nullptr, p.zero_ids, nullptr, false, s);
  }
  launch_reduce(ex.act == DType::kF16, p.routed.o, shared ? p.shared.o : nullptr, a.m, a.top_k, ex.hidden, a.y, s);
  sync_check(s, "reduce");
}

std::string forward_kernels(const DevExperts& ex, int64_t m, int top_k) {
  Plan p;
  p.make(ex, nullptr, m, top_k, false, nullptr);
  if (p.routed.wg && p.routed.stream)
    return str(ex.method, " gemm1=sm90-stream", p.routed.bm, " gemm2=sm90-stream", p.routed.bm,
               p.routed.quant_once ? " x-once" : "");
  if (p.routed.wg)
    return str(ex.method, " gemm1=sm90-wgmma", p.routed.bm == 128 ? "" : std::to_string(p.routed.bm),
               " gemm2=sm90-wgmma", p.routed.bm == 128 ? "" : std::to_string(p.routed.bm),
               p.routed.quant_once ? " x-once" : "",
               p.routed.a_direct ? " x-direct" : "", p.routed.fold ? " fold" : "", p.routed.q8 ? " q8" : "",
               p.routed.live_cols ? " live" : "",
               p.routed.pairs ? " pairs" : "", p.routed.fp8_wide ? " n256" : "");
  if (p.routed.dec)
    return str(ex.method, " gemm1=", p.routed.dec90_1 ? "decode90" : "decode", p.routed.dec_r == 16 ? "r16" : "",
               "/split", p.routed.c1.splits, " gemm2=", p.routed.dec90_2 ? "decode90" : "decode",
               p.routed.dec_r == 16 ? "r16" : "", "/split", p.routed.c2.splits, p.routed.direct ? " direct" : "",
               h_quant_in_gemm2(ex, p.routed) ? " h-quant-in-gemm2" : "");
  auto tn = [](Tile t) { return t == Tile::kSmall ? "small" : t == Tile::kMedium ? "medium" : "large"; };
  return str(ex.method, " gemm1=", tn(p.routed.c1.tile), "/split", p.routed.c1.splits, " gemm2=", tn(p.routed.c2.tile),
             "/split", p.routed.c2.splits);
}

void route_device(const float* logits, int64_t m, int num_experts, const RouterConfig& cfg, const float* bias,
                  float* topk_w, int32_t* topk_ids, cudaStream_t s) {
  launch_route(logits, m, num_experts, cfg, bias, topk_w, topk_ids, s);
}

}  // namespace qmoe::cuda
