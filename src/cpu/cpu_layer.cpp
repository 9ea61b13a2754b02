// The CPU backend's MoeLayer: prepare (pack_proj) once, then per forward:
//   route (src/routing) -> group the (token, slot) pairs by local expert, in flat order (the
//   align contract without block padding) -> quantize GEMM1 inputs -> GEMM1 + activation per
//   (expert, 32-row pair of gate/up) job -> quantize h -> GEMM2 per (expert, 32-row) job ->
//   reduce each token's slots in increasing local-expert order (the reference's order), add the
//   shared expert, round once. The four phases up to GEMM2 run in one OpenMP team (JobRuns: the
//   jobs in runs of consecutive ones); kernels come from the ISA chosen at layer creation (cpu_isa.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <omp.h>

#include "core/codecs.h"
#include "cpu/cpu_kernels.h"
#include "cpu/ref/reference.h"
#include "dispatch/backends.h"

namespace qmoe::cpu {
namespace {

float round_act(DType dt, float v) {
  switch (dt) {
    case DType::kBF16: return codec::round_bf16(v);
    case DType::kF16: return codec::round_f16(v);
    default: return v;
  }
}

bool quantized_acts(ActQuant a) { return a != ActQuant::kNone; }

// Per-thread scratch, grown on demand.
struct Scratch {
  std::vector<AlignedBytes> bufs;
  float* get(size_t floats) {
    int t = omp_get_thread_num();
    AlignedBytes& b = bufs[size_t(t)];
    if (b.n < floats * 4) b.alloc(floats * 4);
    return reinterpret_cast<float*>(b.data());
  }
  void ensure_threads() {
    size_t n = size_t(omp_get_max_threads());
    if (bufs.size() < n) bufs.resize(n);
  }
};

// Job schedule. Where every expert has one row, the jobs are weight streams of equal cost and run
// guided (runs of consecutive jobs, remaining / threads long, shrinking to 2 at the end), so each
// thread reads long sequential stretches of panels and the fused kernels' prefetch past a job's end
// lands in the next job it runs. Fixed runs of n / (8 x threads) jobs left up to 30-55 µs of
// imbalance per GEMM at M = 1 on qwen3; n / (32 x threads) measured 5-10% slower than guided (qwen3
// M = 1, 64 GB/s). Otherwise the job list is cut into runs bounded by cost (a job costs its expert's
// rows plus one, so one expert with many rows does not fill one thread's first run), which the
// threads take in order from a shared counter. Before, such layers ran one job at a time (dynamic,
// 1), which started every job's stream cold: qwen3-30b-a3b M = 128 (8 rows per expert, some above
// 12) 1.05-1.4x slower, M = 512 1.0-1.08x (twenty-ninth session, alternating runs on the 2-core VM).
// Up to the fiftieth session layers with 2-12 rows per expert ran guided too, as if their jobs cost
// alike: guided's first run, half the jobs, then went to one thread whatever their rows, and the
// 2-4 token passes are compute-bound. Cost runs there: warm, two threads, 8 experts top-2, H = 1024,
// I = 2048, M = 8 / 16, int8 and MXFP4, 1.10-1.16x in four alternations (docs/perf.md).
struct JobRuns {
  std::vector<size_t> start;  // run i is jobs [start[i], start[i + 1])
  std::atomic<size_t> next{0};

  // cost(j): a job's relative cost
  template <class Cost>
  void plan(size_t n, int threads, Cost&& cost) {
    start.clear();
    double rem = 0;
    for (size_t j = 0; j < n; ++j) rem += cost(j);
    const double floor = rem / double(n > 0 ? n : 1);  // the mean job
    for (size_t i = 0; i < n;) {
      start.push_back(i);
      const double target = std::max(rem / threads, 2 * floor);
      double c = cost(i++);
      while (i < n && c + cost(i) <= target) c += cost(i++);
      rem -= c;
    }
    start.push_back(n);
    next.store(0, std::memory_order_relaxed);
  }
  // Called by every thread of the team; ends with the team's barrier. `guided`: OpenMP's guided
  // schedule over the n jobs instead (the layer's choice where every job is a short weight stream;
  // plan is then not called)
  template <class F>
  void run(bool guided, size_t n, F&& f) {
    if (guided) {
#pragma omp for schedule(guided, 2)
      for (size_t j = 0; j < n; ++j) f(j);
      return;
    }
    for (;;) {
      const size_t r = next.fetch_add(1, std::memory_order_relaxed);
      if (r + 1 >= start.size()) break;
      for (size_t j = start[r]; j < start[r + 1]; ++j) f(j);
    }
#pragma omp barrier
  }
};

// Row stride (elements) of an activation buffer with at least n columns: an odd number of 64-byte
// lines, so that the 12 rows a microkernel reads at once fall in different L1 sets (a stride that
// is a multiple of 4 KiB, e.g. 2048 bf16, maps them all to one set of the 8-way L1).
int act_ld(int n, ActFmt f) {
  const int es = f == ActFmt::kF32 ? 4 : f == ActFmt::kBF16 || f == ActFmt::kS16 ? 2 : 1;
  int lines = (n * es + 63) / 64;
  if (lines % 2 == 0) ++lines;
  return lines * 64 / es;
}

// One set of experts (the routed ones, or the shared expert as E = 1) prepared for the kernels.
struct ExpertSet {
  PackedProj w13, w2;
  int E = 0, H = 0, I = 0;
  DType act_dtype = DType::kBF16;
  ActQuant aq = ActQuant::kNone;
  RowQuant rq = RowQuant::kBF16;
  ActFmt fmt = ActFmt::kBF16;
  int block13 = 0, block2 = 0;  // kS16: the activation blocks of w13's / w2's inputs
  bool f32 = false;             // bf16 activations as fp32 rows (Kernels::f32_acts)
  std::string key;

  // kn: the ISA's kernels (which may take bf16 activations in 16-bit block fixed point, Kernels::act16);
  // QMOE_CPU_ACT16=0 keeps bf16 activations on every path (measurements, tests).
  void init(const ExpertWeights& w, const Kernels& kn) {
    E = w.num_experts;
    H = w.hidden;
    I = w.intermediate;
    act_dtype = w.act_dtype;
    aq = w.scheme.act;
    w13 = pack_proj(w, w.w13, true);
    w2 = pack_proj(w, w.w2, false);
    switch (aq) {
      case ActQuant::kNone:
        // 16-bit activations: bf16 values feed bf16 dot products exactly; fp16 / f32 stay fp32.
        rq = act_dtype == DType::kBF16 ? RowQuant::kBF16 : RowQuant::kF32;
        fmt = act_dtype == DType::kBF16 ? ActFmt::kBF16 : ActFmt::kF32;
        break;
      case ActQuant::kFP8Tensor: rq = RowQuant::kFp8Static; fmt = ActFmt::kBF16; break;
      case ActQuant::kFP8Token: rq = RowQuant::kFp8Token; fmt = ActFmt::kBF16; break;
      case ActQuant::kFP8Group128: rq = RowQuant::kFp8Group; fmt = ActFmt::kBF16; break;
      case ActQuant::kINT8Token: rq = RowQuant::kInt8Token; fmt = ActFmt::kS8; break;
      case ActQuant::kNVFP4: rq = RowQuant::kNVFP4; fmt = ActFmt::kBF16; break;
    }
    const char* env = std::getenv("QMOE_CPU_ACT16");
    const bool act16_on = env == nullptr || env[0] != '0';
    if ((rq == RowQuant::kBF16 || rq == RowQuant::kNVFP4) && kn.act16 && act16_on) {
      block13 = kn.act16(w13), block2 = kn.act16(w2);
      if (rq == RowQuant::kNVFP4 && (block13 != 16 || block2 != 16)) block13 = block2 = 0;  // NVFP4 blocks are 16
      if (block13 > 0 && block2 > 0) {
        rq = rq == RowQuant::kBF16 ? RowQuant::kS16 : RowQuant::kNVFP4S16;
        fmt = ActFmt::kS16;
      }
    }
    // bf16 weights: bf16 activations as fp32 rows where the kernels multiply them by fp32 FMAs
    if (rq == RowQuant::kBF16 && kn.f32_acts && act16_on && kn.f32_acts(w13) && kn.f32_acts(w2)) {
      rq = RowQuant::kF32;
      fmt = ActFmt::kF32;
      f32 = true;
    }
    key = w.scheme.key();
  }

  bool nvfp4() const { return rq == RowQuant::kNVFP4 || rq == RowQuant::kNVFP4S16; }

  // Static activation parameter of expert e for a projection: the larger shard scale (as the reference).
  static float static_of(const PackedProj& p, int e) {
    float s = 0.f;
    for (int i = 0; i < p.input_shards; ++i) s = std::max(s, p.input_scale[size_t(e) * p.input_shards + i]);
    return s;
  }

  QuantRowArgs row_args(const PackedProj& p, int e) const {
    QuantRowArgs q;
    q.q = rq;
    if (rq == RowQuant::kFp8Static) q.static_scale = static_of(p, e);
    if (nvfp4()) q.static_scale = 1.f / static_of(p, e);  // G = 1.f / A
    return q;
  }
  // NVFP4 W4A4 epilogue factor (1.f / G), else 1.
  float extra_of(const PackedProj& p, int e) const {
    if (!nvfp4()) return 1.f;
    const float G = 1.f / static_of(p, e);
    return 1.f / G;
  }

  void setup_act(ActBuf& a, const PackedProj& p, int rows, int ld) const {
    a.alloc(fmt, rows, ld);
    a.row_scale.assign(quantized_acts(aq) && !nvfp4() ? size_t(rows) : 0, 1.f);
    a.group_scale.clear();
    a.group_sum.clear();
    a.group = 0;
    a.num_groups = 0;
    if (rq == RowQuant::kFp8Group) {
      a.group = 128;
      a.num_groups = int((p.k + 127) / 128);
      a.group_scale.assign(size_t(rows) * a.num_groups, 1.f);
    } else if (rq == RowQuant::kInt8Token) {
      a.group = p.group > 0 && p.gidx.empty() ? p.group : ld;
      a.num_groups = int((ld + a.group - 1) / a.group);
      a.group_sum.assign(size_t(rows) * a.num_groups, 0);
    } else if (fmt == ActFmt::kS16) {
      a.group = &p == &w13 ? block13 : block2;
      a.num_groups = int((ld + a.group - 1) / a.group);
      a.group_scale.assign(size_t(rows) * a.num_groups, 0.f);
      a.group_sum.assign(size_t(rows) * a.num_groups, 0);
    }
  }
};

struct Job { int e, j; };  // (local expert, 32-row pair)

struct Routed {
  std::vector<int> off;       // [E + 1] position ranges per local expert
  std::vector<int> tok;       // [npos] token of each position
  std::vector<float> in_w;    // [npos] input multiplier (Llama 4) or empty
  int npos = 0;
};

class CpuLayer final : public MoeLayer {
 public:
  explicit CpuLayer(qmoe::detail::LayerArgs a) : cfg_(std::move(a.cfg)), router_bias_(std::move(a.router_bias)) {
    isa_ = cpu_isa();
    kn_ = &kernels_for(isa_);
    experts_.init(a.weights, *kn_);
    if (a.shared) {
      shared_ = std::make_unique<ExpertSet>();
      shared_->init(*a.shared, *kn_);
    }
    num_global_ = cfg_.num_experts > 0 ? cfg_.num_experts : experts_.E;
  }

  Tensor forward(const Tensor& x, const Tensor& router_logits) override {
    QMOE_CHECK(router_logits.defined() && router_logits.dim() == 2 && router_logits.size(1) == cfg_.num_experts &&
                   x.defined() && x.dim() == 2 && router_logits.size(0) == x.size(0),
               kBadInput, "cpu forward: router_logits must be [M, ", cfg_.num_experts, "] with M = rows of x, got ",
               router_logits.defined() ? shape_str(router_logits.shape()) : "absent");
    RoutingResult r = route(router_logits, cfg_.router, router_bias_);
    return forward_routed(x, r.topk_weights, r.topk_ids);
  }

  Tensor forward_routed(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids) override;
  Backend backend() const override { return Backend::kCpu; }
  // "/s16": the routed experts' activations enter the kernels as 16-bit integer codes (ActFmt::kS16:
  // bf16 as block fixed point, RowQuant::kS16; NVFP4 exactly, kNVFP4S16)
  std::string method_name() const override {
    return std::string("cpu/") + isa_name(isa_) + "/" + experts_.key + (experts_.fmt == ActFmt::kS16 ? "/s16" : experts_.f32 ? "/f32" : "");
  }

 private:
  // o [npos][rows_pad of w2] fp32 = expert outputs (unweighted) for the positions of `r`.
  void run_experts(ExpertSet& s, const Tensor& x, const Routed& r, std::vector<float>& o);

  MoeConfig cfg_;
  Tensor router_bias_;
  Isa isa_ = Isa::kScalar;
  const Kernels* kn_ = nullptr;
  ExpertSet experts_;
  std::unique_ptr<ExpertSet> shared_;
  int num_global_ = 0;
  // workspace, reused across calls (vectors keep their capacity: no allocation once warm)
  ActBuf a1_, a2_;
  std::vector<float> h_, o_, osh_;
  std::vector<int32_t> local_;
  std::vector<int> pos_of_, fill_, epos_;
  std::vector<Job> jobs13_, jobs2_;
  JobRuns runs13_, runs2_;
  Routed routed_, routed_shared_;
  Scratch scratch_;
};

void CpuLayer::run_experts(ExpertSet& s, const Tensor& x, const Routed& r, std::vector<float>& o) {
  const int H = s.H, I = s.I, npos = r.npos;
  const PackedProj &w13 = s.w13, &w2 = s.w2;
  // A2 columns >= padded I (>= w2.k_pad); both strides are odd multiples of 64 bytes (act_ld)
  const int ld1 = act_ld(w13.k_pad, s.fmt), ld2 = act_ld(w13.shard_pad, s.fmt);
  s.setup_act(a1_, w13, npos, ld1);
  s.setup_act(a2_, w2, npos, ld2);
  // h is not cleared: GEMM1 writes columns [0, I) of every row and the quantizer reads only those
  h_.resize(size_t(npos) * ld2);
  o.resize(size_t(npos) * w2.rows_pad);
  scratch_.ensure_threads();
  const int E = s.E;
  std::vector<int>& epos = epos_;
  epos.resize(size_t(npos));
  for (int e = 0; e < E; ++e)
    for (int p = r.off[e]; p < r.off[e + 1]; ++p) epos[size_t(p)] = e;
  int max_t = 0;
  for (int e = 0; e < E; ++e) max_t = std::max(max_t, r.off[e + 1] - r.off[e]);
  // jobs: GEMM1 (expert, pair j of gate rows, with the matching up rows), GEMM2 (expert, 32 rows of H)
  const int pairs13 = w13.shard_pad / kJobRows, pairs2 = w2.rows_pad / kJobRows;
  jobs13_.clear();
  jobs2_.clear();
  for (int e = 0; e < E; ++e)
    if (r.off[e + 1] > r.off[e]) {
      for (int j = 0; j < pairs13; ++j) jobs13_.push_back({e, j});
      for (int j = 0; j < pairs2; ++j) jobs2_.push_back({e, j});
    }
  // every expert with one row: all jobs are weight streams of equal cost, run guided (the schedule
  // measured at M = 1); else runs bounded by cost (JobRuns), a job costing its expert's rows plus
  // one, the weight stream's own share (only the balance of the runs depends on it)
  const bool streams = max_t <= 1;
  const int nthr = omp_get_max_threads();
  auto rows_of = [&r](int e) { return double(r.off[e + 1] - r.off[e] + 1); };
  if (!streams) {
    runs13_.plan(jobs13_.size(), nthr, [&](size_t j) { return rows_of(jobs13_[j].e); });
    runs2_.plan(jobs2_.size(), nthr, [&](size_t j) { return rows_of(jobs2_[j].e); });
  }
  const size_t scr13 = gemm_scratch_floats(w13, max_t) + size_t(max_t) * kJobRows * 2 + 64;
  const size_t scr2 = gemm_scratch_floats(w2, max_t);
  const Activation act = cfg_.activation;
  const DType xdt = x.dtype();
  const uint16_t* x16 = xdt == DType::kF32 ? nullptr : x.data<uint16_t>();
  const float* x32 = xdt == DType::kF32 ? x.data<float>() : nullptr;

  // The four phases share one team (a fork per phase cost more than the decode-size phases' work,
  // which therefore ran on one thread: ~30 µs per call at M = 1 with cold caches, qwen3-30b-a3b).
  // Each phase is a worksharing loop; its implicit barrier orders it before the next.
#pragma omp parallel
  {
    // 1. GEMM1 inputs (Llama 4: a = round_act(x * w)), quantized per the scheme; x converted here
    // (the quantizers take fp32 rows)
#pragma omp for schedule(static)
    for (int p = 0; p < npos; ++p) {
      float* xv = scratch_.get(size_t(H) * 2 + 64);
      const size_t base = size_t(r.tok[size_t(p)]) * H;
      if (x32) std::memcpy(xv, x32 + base, size_t(H) * 4);
      else if (xdt == DType::kBF16)
        for (int c = 0; c < H; ++c) xv[c] = codec::bf16_to_f32(x16[base + c]);
      else
        for (int c = 0; c < H; ++c) xv[c] = codec::f16_to_f32(x16[base + c]);
      if (!r.in_w.empty()) {
        const float wgt = r.in_w[size_t(p)];
        for (int c = 0; c < H; ++c) xv[c] = round_act(s.act_dtype, xv[c] * wgt);
      }
      QuantRowArgs q = s.row_args(w13, epos[size_t(p)]);
      q.scratch = xv + H + 16;
      kn_->quant_row(xv, H, q, a1_, p);
    }

    // 2. GEMM1 + activation
    runs13_.run(streams, jobs13_.size(), [&](size_t ji) {
      const auto [e, j] = jobs13_[ji];
      const int p0 = r.off[e], T = r.off[e + 1] - p0;
      float* scr = scratch_.get(scr13);
      float* g = scr + gemm_scratch_floats(w13, T);
      float* u = g + size_t(T) * kJobRows;
      GemmJob jb;
      jb.w = &w13; jb.e = e; jb.a = &a1_; jb.row0 = p0; jb.nrows = T; jb.ldo = kJobRows;
      jb.scratch = scr;
      jb.extra = s.extra_of(w13, e);
      // the next job in the list (this thread's next one if its run goes on): gate after gate, up after up
      const bool more = ji + 1 < jobs13_.size();
      jb.next_e = more ? jobs13_[ji + 1].e : -1;
      jb.pair = j; jb.out = g; jb.next_pair = more ? jobs13_[ji + 1].j : 0;
      kn_->gemm(jb);
      jb.pair = pairs13 + j; jb.out = u; jb.next_pair = more ? pairs13 + jobs13_[ji + 1].j : 0;
      kn_->gemm(jb);
      const int c_end = std::min(kJobRows, I - j * kJobRows);
      for (int t = 0; t < T; ++t) {
        float* hr = h_.data() + size_t(p0 + t) * ld2 + j * kJobRows;
        if (kn_->act_row) {
          kn_->act_row(act, g + t * kJobRows, u + t * kJobRows, c_end, hr);
          if (s.act_dtype != DType::kF32)
            for (int c = 0; c < c_end; ++c) hr[c] = round_act(s.act_dtype, hr[c]);
        } else {
          for (int c = 0; c < c_end; ++c)
            hr[c] = round_act(s.act_dtype, ref::apply_activation(act, g[t * kJobRows + c], u[t * kJobRows + c]));
        }
      }
    });

    // 3. GEMM2 inputs
#pragma omp for schedule(static)
    for (int p = 0; p < npos; ++p) {
      float* tmp = scratch_.get(size_t(ld2) + 64);
      QuantRowArgs q = s.row_args(w2, epos[size_t(p)]);
      q.scratch = tmp;
      kn_->quant_row(h_.data() + size_t(p) * ld2, I, q, a2_, p);
    }

    // 4. GEMM2
    runs2_.run(streams, jobs2_.size(), [&](size_t ji) {
      const auto [e, j] = jobs2_[ji];
      const int p0 = r.off[e], T = r.off[e + 1] - p0;
      GemmJob jb;
      jb.w = &w2; jb.e = e; jb.a = &a2_; jb.row0 = p0; jb.nrows = T;
      jb.pair = j; jb.out = o.data() + size_t(p0) * w2.rows_pad + j * kJobRows; jb.ldo = w2.rows_pad;
      jb.scratch = scratch_.get(scr2);
      jb.extra = s.extra_of(w2, e);
      if (ji + 1 < jobs2_.size()) jb.next_e = jobs2_[ji + 1].e, jb.next_pair = jobs2_[ji + 1].j;
      kn_->gemm(jb);
    });
  }
}

Tensor CpuLayer::forward_routed(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids) {
  const ExpertSet& s = experts_;
  const int H = s.H;
  QMOE_CHECK(x.defined() && x.dim() == 2 && x.size(1) == H && x.dtype() == s.act_dtype, kBadInput,
             "cpu forward: x must be ", dtype_name(s.act_dtype), " [M, ", H, "], got ",
             x.defined() ? dtype_name(x.dtype()) : "absent", " ", x.defined() ? shape_str(x.shape()) : "");
  const int M = int(x.size(0));
  QMOE_CHECK(topk_weights.defined() && topk_ids.defined() && topk_weights.dtype() == DType::kF32 &&
                 topk_ids.dtype() == DType::kI32 && topk_weights.dim() == 2 && topk_weights.shape() == topk_ids.shape() &&
                 topk_weights.size(0) == M,
             kBadInput, "cpu forward: expected topk_weights F32 [", M, ", k] and topk_ids I32 [", M, ", k]");
  const int K = int(topk_ids.size(1));
  const bool on_input = cfg_.router.apply_router_weight_on_input;
  const int32_t* ids = topk_ids.data<int32_t>();
  const float* tw = topk_weights.data<float>();

  // Group slots by local expert (stable: increasing flat index within an expert).
  std::vector<int32_t>& local = local_;
  local.resize(size_t(M) * K);
  Routed& r = routed_;
  r.off.assign(size_t(s.E) + 1, 0);
  for (int64_t i = 0; i < int64_t(M) * K; ++i) {
    const int32_t g = ids[i];
    QMOE_CHECK(g >= 0 && g < num_global_, kBadInput, "cpu forward: topk_ids[", i / K, ", ", i % K, "] = ", g,
               " outside [0, ", num_global_, ")");
    const int32_t l = cfg_.expert_map.empty() ? g : cfg_.expert_map[size_t(g)];
    QMOE_CHECK(l < s.E, kBadInput, "cpu forward: expert_map[", g, "] = ", l, " but only ", s.E, " local experts");
    local[size_t(i)] = l;
    if (l >= 0) r.off[size_t(l) + 1]++;
  }
  for (int e = 0; e < s.E; ++e) r.off[size_t(e) + 1] += r.off[size_t(e)];
  r.npos = r.off[size_t(s.E)];
  r.tok.resize(size_t(r.npos));
  r.in_w.resize(on_input ? size_t(r.npos) : 0);
  std::vector<int>& pos_of = pos_of_;
  pos_of.assign(size_t(M) * K, -1);
  {
    std::vector<int>& fill = fill_;
    fill.assign(r.off.begin(), r.off.end() - 1);
    for (int64_t i = 0; i < int64_t(M) * K; ++i) {
      const int l = local[size_t(i)];
      if (l < 0) continue;
      const int p = fill[size_t(l)]++;
      r.tok[size_t(p)] = int(i / K);
      if (on_input) r.in_w[size_t(p)] = tw[i];
      pos_of[size_t(i)] = p;
    }
  }

  if (r.npos > 0) run_experts(experts_, x, r, o_);
  const int ldo = experts_.w2.rows_pad;
  if (shared_) {
    Routed& rs = routed_shared_;
    rs.off = {0, M};
    rs.tok.resize(size_t(M));
    std::iota(rs.tok.begin(), rs.tok.end(), 0);
    rs.npos = M;
    run_experts(*shared_, x, rs, osh_);
  }
  const int ldsh = shared_ ? shared_->w2.rows_pad : 0;

  Tensor out(s.act_dtype, {M, H});
  uint16_t* o16 = s.act_dtype == DType::kF32 ? nullptr : out.data_mut<uint16_t>();
  float* o32 = s.act_dtype == DType::kF32 ? out.data_mut<float>() : nullptr;
  scratch_.ensure_threads();
  // Items of (token, column chunk): whole rows when there are tokens for every thread, else each
  // row split in chunks of 64 columns or more (at M = 1 one thread summed 8 rows of H alone).
  const int nthr = omp_get_max_threads();
  const int nch = M >= 2 * nthr ? 1 : std::max(1, std::min((2 * nthr + M - 1) / M, (H + 63) / 64));
  const int cw = (H + nch - 1) / nch;
#pragma omp parallel
  {
    // per-thread y [cw] and the token's (local expert, slot) pairs from the reused scratch
    float* yb = scratch_.get(size_t(cw) + size_t(K) * 2 + 16);
    float* y = yb;
    auto* slots = reinterpret_cast<std::pair<int, int>*>(yb + cw);
#pragma omp for schedule(static)
    for (int it = 0; it < M * nch; ++it) {
      const int t = it / nch, c0 = (it % nch) * cw, c1 = std::min(H, c0 + cw), n = c1 - c0;
      if (n <= 0) continue;
      std::fill(y, y + n, 0.f);
      // the reference adds experts in increasing local id
      int ns = 0;
      for (int j = 0; j < K; ++j) {
        const size_t i = size_t(t) * K + j;
        if (pos_of[i] >= 0) slots[size_t(ns++)] = {local[i], j};
      }
      std::sort(slots, slots + ns);
      for (int q = 0; q < ns; ++q) {
        const size_t i = size_t(t) * K + size_t(slots[size_t(q)].second);
        const float wt = on_input ? 1.f : tw[i];
        const float* orow = o_.data() + size_t(pos_of[i]) * ldo + c0;
        for (int c = 0; c < n; ++c) y[c] += wt * orow[c];
      }
      if (shared_) {
        const float* srow = osh_.data() + size_t(t) * ldsh + c0;
        for (int c = 0; c < n; ++c) y[c] += srow[c];
      }
      const size_t ob = size_t(t) * H + c0;
      if (o32) std::memcpy(o32 + ob, y, size_t(n) * 4);
      else if (s.act_dtype == DType::kBF16)
        for (int c = 0; c < n; ++c) o16[ob + c] = codec::f32_to_bf16(y[c]);
      else
        for (int c = 0; c < n; ++c) o16[ob + c] = codec::f32_to_f16(y[c]);
    }
  }
  return out;
}

// Why the CPU kernels cannot run one expert set ("" = they can).
std::string set_can_implement(const ExpertWeights& w, const char* what) {
  const SchemeKind k = w.scheme.kind;
  const bool s8 = k == SchemeKind::kINT8W8A8 || k == SchemeKind::kW4A8INT8;
  if ((s8 || k == SchemeKind::kW4A8FP8) && (w.w13.g_idx.defined() || w.w2.g_idx.defined()))
    return str(what, ": scheme ", w.scheme.key(), " with g_idx (actorder) has no exact integer product form");
  if (k == SchemeKind::kFP8W8A8 && w.scheme.act == ActQuant::kFP8Group128 &&
      w.scheme.weights.strat() == Strategy::kBlock && w.block[1] != 128)
    return str(what, ": fp8 1x128 activation groups need 128-wide weight blocks along K, got ", w.block[1]);
  if (s8 && !w.scheme.weights.symmetric)
    return str(what, ": int8-activation schemes need symmetric weights (got asymmetric ", w.scheme.key(), ")");
  return "";
}

}  // namespace

const Kernels& kernels_for(Isa isa) {
  static const Kernels k[3] = {{scalar::gemm, scalar::quant_row, "scalar"},
                               {avx2::gemm, avx2::quant_row, "avx2", avx2::act16, avx2::act_row},
                               {avx512::gemm, avx512::quant_row, "avx512", avx512::act16, avx512::act_row, avx512::f32_acts}};
  return k[static_cast<int>(isa)];
}

}  // namespace qmoe::cpu

namespace qmoe::detail {

std::string cpu_can_implement(const LayerArgs& a) {
  // The routing / EP / shared-expert contract is the reference's; the kernels add their own limits.
  std::string why = reference_can_implement(a);
  if (!why.empty()) return why;
  why = cpu::set_can_implement(a.weights, "routed experts");
  if (!why.empty()) return why;
  if (a.shared) why = cpu::set_can_implement(*a.shared, "shared expert");
  return why;
}

std::unique_ptr<MoeLayer> make_cpu_layer(LayerArgs a) { return std::make_unique<cpu::CpuLayer>(std::move(a)); }

}  // namespace qmoe::detail
