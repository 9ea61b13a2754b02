// `qmoe bench`: times whole MoE layers on anchors.md's shapes x M x scheme, with routing given
// (uniform random distinct expert ids per token), and reports µs, TB/s, TFLOP/s, the hardware
// floor (max(bytes / read bandwidth, FLOPs / dot peak), anchors.md's definition), % of floor and
// the ratio to the anchors' peer (CPU: ggml 2 x up + down at equal bits; CUDA: vLLM).
// CPU: the read bandwidth and the bf16 / int8 dot peaks are measured in the same run (printed);
// weights are cold (caches flushed before every timed call); only the touched experts' weights
// are generated (ids are relabelled onto them), rows that do not fit in memory are skipped.
// CUDA: through dispatch/bench_hooks.h (src/cuda implements it). Markdown on stdout, JSON rows,
// and a PNG of % of floor per row (written by bench_plot.cpp, no library).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bench_anchors.h"
#include "bench_plot.h"
#include "bench_weights.h"
#include "commands.h"
#include "cpu/cpu_probe.h"
#include "dispatch/bench_hooks.h"
#include "qmoe/moe.h"

#if defined(QMOE_HAVE_CUDA)
// Weak references: the CLI still links in a CUDA build whose src/cuda does not (yet) provide the
// bench hooks; --backend cuda then says so instead of failing at link time.
namespace qmoe::detail {
bool cuda_device_available(std::string* why) __attribute__((weak));
DeviceCeilings cuda_measure_ceilings(double settle_ms) __attribute__((weak));
BenchResult cuda_bench(const BenchProblem& p, int warmup, int iters, double settle_ms) __attribute__((weak));
}  // namespace qmoe::detail
#endif

namespace qmoe::cli {
namespace {

struct Row {
  std::string shape, scheme, backend, note;
  int m = 0;
  double us = 0, us_min = 0, tbps = 0, tflops = 0, floor_us = 0, pct_floor = 0;
  double read_gbps = 0;  // streaming read measured for this row (CPU: just before its timed calls)
  double load_avg = -1;  // CPU: 1-minute load average after the row (other processes on the machine)
  double peer_us = -1, ratio = -1;  // peer / qmoe (> 1: qmoe faster)
  std::string peer;
};

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  std::string p;
  while (std::getline(ss, p, c))
    if (!p.empty()) r.push_back(p);
  return r;
}

// ggml's whole-layer time (2 x up + down) at equal bits per weight, or -1.
double ggml_layer_us(const std::string& shape, const std::string& scheme, int m, std::string* which) {
  int mi = -1;
  for (int i = 0; i < 5; ++i)
    if (kGgmlM[i] == m) mi = i;
  if (mi < 0) return -1;
  std::vector<std::string> types;
  if (scheme == "int4-g32") types = {"q4_0", "q4_K"};
  else if (scheme == "int8") types = {"q8_0"};
  else if (scheme == "mxfp4") types = {"mxfp4"};
  else if (scheme == "bf16") types = {"bf16"};
  double best = -1;
  for (const std::string& t : types) {
    double up = -1, down = -1;
    for (const GgmlAnchor& a : kGgmlAnchors)
      if (shape == a.shape && t == a.type) (std::string(a.op) == "up" ? up : down) = a.us[mi];
    if (up > 0 && down > 0 && (best < 0 || 2 * up + down < best)) best = 2 * up + down, *which = "ggml " + t;
  }
  return best;
}

double vllm_us(const std::string& shape, const std::string& scheme, int m, std::string* which) {
  for (const GpuAnchor& a : kGpuAnchors)
    if (shape == a.shape && m == a.m) {
      if (scheme == "bf16") return *which = "vLLM bf16", a.bf16_vllm;
      if (scheme == "fp8") return *which = "vLLM fp8 tuned", a.fp8_vllm;
      if (scheme == "int4") return *which = "vLLM-Triton int4", a.int4_vllm;
    }
  return -1;
}

// k distinct uniform ids per token, relabelled densely in order of first use; returns #touched.
int make_routing(const BenchShape& s, int m, uint64_t seed, Tensor& tw, Tensor& ids) {
  tw = Tensor(DType::kF32, {m, s.top_k});
  ids = Tensor(DType::kI32, {m, s.top_k});
  std::mt19937_64 rng(seed);
  std::map<int, int> local;
  for (int t = 0; t < m; ++t) {
    std::set<int> chosen;
    while (int(chosen.size()) < s.top_k) chosen.insert(int(rng() % uint64_t(s.num_experts)));
    int j = 0;
    for (int g : chosen) {
      auto it = local.emplace(g, int(local.size())).first;
      ids.data_mut<int32_t>()[t * s.top_k + j] = it->second;
      tw.data_mut<float>()[t * s.top_k + j] = 0.2f + 0.6f * float(rng() % 1000) / 1000.f;
      ++j;
    }
  }
  return int(local.size());
}

double mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string k;
  double v = 0;
  std::string unit;
  while (f >> k >> v >> unit)
    if (k == "MemAvailable:") return v * 1024;
  return 8e9;
}

// Process CPU time (all threads), µs: with one OpenMP thread, a timing of the kernels that time
// slices given to other processes on a shared machine do not inflate (--cpu-time).
double cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// anchors.md's floor, µs: max(bytes / read bandwidth, FLOPs / dot peak); a peak <= 0 (not measured:
// the scalar CPU path) leaves the bandwidth term alone. (Until the fifteenth session an unmeasured
// peak was taken as 1 GFLOP/s, which made the FLOP term the floor on every CPU without AVX-512:
// floors of tens of ms and "% of floor" in the thousands.)
double bench_floor_us(double bytes, double read_gbps, double flops, double peak_gflops) {
  const double mem = bytes / (read_gbps * 1e3);
  return peak_gflops > 0 ? std::max(mem, flops / (peak_gflops * 1e3)) : mem;
}

struct Opts {
  std::string backend = "cpu";
  std::vector<std::string> shapes;
  std::string ms, schemes, json, plot;
  int iters = 5, warmup = 1;
  double settle_ms = 300;
  double max_mem_gb = 0;
  bool warm = false, cpu_time = false;
};

int run_bench(const Opts& o) {
  const bool cpu = o.backend == "cpu";
  if (!cpu && o.backend != "cuda") bad_input("bench: --backend must be cpu or cuda, got '", o.backend, "'");
  std::vector<BenchShape> shapes;
  for (const std::string& arg : o.shapes.empty() ? std::vector<std::string>{"all"} : o.shapes) {
    if (arg == "all") {
      shapes.insert(shapes.end(), anchor_shapes().begin(), anchor_shapes().end());
      continue;
    }
    std::vector<std::string> parts = (!arg.empty() && std::isdigit(static_cast<unsigned char>(arg[0])))
                                         ? std::vector<std::string>{arg}
                                         : split(arg, ',');
    for (const std::string& p : parts) {
      auto s = bench_shape(p);
      if (!s) bad_input("bench: unknown shape '", p, "' (anchor names or E,topk,H,I)");
      shapes.push_back(*s);
    }
  }
  std::vector<int> ms;
  for (const std::string& m : split(o.ms.empty() ? (cpu ? "1,8,32,128,512" : "1,16,64,256,1024,4096") : o.ms, ',')) {
    int v = std::atoi(m.c_str());
    if (v <= 0) bad_input("bench: --m values must be positive integers, got '", m, "'");
    ms.push_back(v);
  }
  std::vector<BenchScheme> schemes;
  for (const std::string& n : split(o.schemes.empty() ? (cpu ? "bf16,int4-g32,int8,mxfp4" : "bf16,fp8,int4") : o.schemes, ',')) {
    auto s = bench_scheme(n);
    if (!s) bad_input("bench: unknown scheme '", n, "'; one of: ", bench_scheme_names());
    schemes.push_back(*s);
  }

  // ---- ceilings ---------------------------------------------------------------------------------
  double read_gbps = 0, bf16_gflops = 0, int8_gops = 0, int16_gops = 0, fma_gflops = 0, fp8_gflops = 0;
  std::string device;
  if (cpu) {
    device = cpu::cpu_description();
    read_gbps = cpu::measure_read_gbps();
    bf16_gflops = cpu::measure_bf16_dot_gflops();
    int8_gops = cpu::measure_int8_dot_gops();
    int16_gops = cpu::measure_int16_dot_gops();
    fma_gflops = cpu::measure_fma_gflops();
    std::printf("device: %s\nstreaming read: %.1f GB/s (best of 5 x 1 GiB, all threads; each row re-probes 5 x 256 MiB)\n"
                "bf16 dot peak (%s): %.0f GFLOP/s; int8 dot peak (%s): %.0f GOP/s; int16 dot peak (%s; \"/s16\" rows): "
                "%.0f GOP/s; fp32 FMA peak (vfmadd231ps; \"/f32\" rows): %.0f GFLOP/s%s\n\n",
                device.c_str(), read_gbps, cpu::bf16_dot_instruction(), bf16_gflops, cpu::int8_dot_instruction(),
                int8_gops, cpu::int16_dot_instruction(), int16_gops, fma_gflops,
                bf16_gflops > 0 ? "" : " (scalar kernels: no peak, the floor is the bandwidth term alone)");
  } else {
#if defined(QMOE_HAVE_CUDA)
    std::string why;
    if (!detail::cuda_device_available || !detail::cuda_measure_ceilings || !detail::cuda_bench)
      unsupported("bench --backend cuda: this build's CUDA backend has no bench hooks (dispatch/bench_hooks.h)");
    if (!detail::cuda_device_available(&why)) unsupported("bench --backend cuda: ", why);
    detail::DeviceCeilings c = detail::cuda_measure_ceilings(o.settle_ms);
    device = c.device;
    read_gbps = c.read_tbps * 1e3;
    bf16_gflops = c.bf16_tflops * 1e3;
    fp8_gflops = c.fp8_tflops * 1e3;
    int8_gops = c.int8_tops * 1e3;
    std::printf("device: %s\nstreaming read: %.2f TB/s; copy %.2f TB/s; bf16 %.0f TFLOP/s; fp8 %.0f TFLOP/s; int8 %.0f TOP/s\n"
                "(ceilings and rows timed after %.0f ms of untimed calls each: the card's sustained state)\n\n",
                device.c_str(), c.read_tbps, c.copy_tbps, c.bf16_tflops, c.fp8_tflops, c.int8_tops, o.settle_ms);
#else
    unsupported("bench --backend cuda: this build of qmoe has no CUDA backend (nvcc was not found at configure time)");
#endif
  }

  const double mem_budget = o.max_mem_gb > 0 ? o.max_mem_gb * 1e9 : 0.6 * mem_available_bytes();
  std::vector<Row> rows;
  for (const BenchShape& sh : shapes) {
    for (const BenchScheme& sc : schemes) {
      // routing per M first: the layer is built once with the most experts any fitting row touches
      std::vector<Tensor> tws(ms.size()), idss(ms.size());
      std::vector<int> touched(ms.size());
      const double per_expert = bench_expert_bytes(sc, sh.hidden, sh.intermediate);
      int build_e = 0;
      for (size_t i = 0; i < ms.size(); ++i) {
        touched[i] = make_routing(sh, ms[i], 1000 + uint64_t(ms[i]), tws[i], idss[i]);
        // canonical + packed copy while the layer is built
        if (!cpu || 2.1 * touched[i] * per_expert < mem_budget) build_e = std::max(build_e, touched[i]);
      }
      std::unique_ptr<MoeLayer> layer;
      if (cpu && build_e > 0) {
        ExpertWeights w = bench_weights(sc, build_e, sh.hidden, sh.intermediate, 7);
        MoeConfig cfg;
        cfg.num_experts = build_e;
        cfg.router.top_k = sh.top_k;
        cfg.router.apply_router_weight_on_input = sh.weight_on_input;
        cfg.activation = sh.activation;
        layer = MoeLayer::create(std::move(w), cfg, Backend::kCpu);
      }
      for (size_t i = 0; i < ms.size(); ++i) {
        const int m = ms[i];
        Row r;
        r.shape = sh.name, r.scheme = sc.name, r.backend = o.backend, r.m = m;
        const double wbytes = touched[i] * per_expert, io = 2.0 * 2 * m * sh.hidden;
        const double flops = 6.0 * m * sh.top_k * double(sh.hidden) * sh.intermediate;
        if (cpu) {
          if (touched[i] > build_e || !layer) {
            std::fprintf(stderr, "bench: skip %s m=%d %s: %d experts x %.0f MB do not fit in %.1f GB\n", sh.name.c_str(),
                         m, sc.name.c_str(), touched[i], per_expert / 1e6, mem_budget / 1e9);
            continue;
          }
          Tensor x(DType::kBF16, {m, sh.hidden});
          std::mt19937 rng{static_cast<uint32_t>(m)};
          for (int64_t j = 0; j < x.numel(); ++j)
            x.data_mut<uint16_t>()[j] = uint16_t((rng() & 0x807f) | 0x3f00);  // |x| in [0.5, 1)
          for (int wu = 0; wu < o.warmup; ++wu) layer->forward_routed(x, tws[i], idss[i]);
          // The VM's memory bandwidth drifts by tens of percent within minutes (other tenants):
          // each row's floor uses a read probe taken right before its timed calls.
          r.read_gbps = o.warm ? read_gbps : cpu::measure_read_gbps(size_t(256) << 20, 5);
          std::vector<double> t;
          for (int it = 0; it < o.iters; ++it) {
            if (!o.warm) cpu::flush_caches();
            const double t0 = o.cpu_time ? cpu_us() : now_us();
            Tensor y = layer->forward_routed(x, tws[i], idss[i]);
            t.push_back((o.cpu_time ? cpu_us() : now_us()) - t0);
          }
          std::sort(t.begin(), t.end());
          r.us = t[t.size() / 2];
          r.us_min = t[0];
          r.note = layer->method_name();
        } else {
#if defined(QMOE_HAVE_CUDA)
          detail::BenchProblem p;
          p.shape = sh.name, p.num_experts = sh.num_experts, p.top_k = sh.top_k, p.hidden = sh.hidden;
          p.intermediate = sh.intermediate, p.m = m, p.activation = sh.activation;
          p.apply_router_weight_on_input = sh.weight_on_input;
          ExpertWeights probe = bench_weights(sc, 1, 32, 32, 1);
          p.scheme = probe.scheme, p.group_size = probe.group_size, p.block = probe.block;
          detail::BenchResult b = detail::cuda_bench(p, o.warmup, o.iters, o.settle_ms);
          r.us = b.us, r.us_min = b.us_min, r.note = b.kernel;
#endif
        }
        const double bytes = wbytes + io;
        // CPU layers whose activations enter as 16-bit integer codes (method "/s16") multiply on the
        // 16-bit integer instruction, bf16-weight layers on fp32 activations ("/f32") on fp32 FMAs
        const bool s16 = cpu && std::string_view(r.note).ends_with("/s16");
        const bool f32 = cpu && std::string_view(r.note).ends_with("/f32");
        const double peak = s16 ? int16_gops : f32 ? fma_gflops : sc.int8_acts ? int8_gops : (!cpu && sc.fp8 && fp8_gflops > 0) ? fp8_gflops : bf16_gflops;
        if (r.read_gbps <= 0) r.read_gbps = read_gbps;
        if (cpu) {
          std::ifstream la("/proc/loadavg");
          if (!(la >> r.load_avg)) r.load_avg = -1;
        }
        r.floor_us = bench_floor_us(bytes, r.read_gbps, flops, peak);
        r.pct_floor = 100 * r.floor_us / r.us;
        r.tbps = bytes / r.us * 1e-6;
        r.tflops = flops / r.us * 1e-6;
        r.peer_us = cpu ? ggml_layer_us(sh.name, sc.name, m, &r.peer) : vllm_us(sh.name, sc.name, m, &r.peer);
        if (r.peer_us > 0) r.ratio = r.peer_us / r.us;
        rows.push_back(r);
        std::fprintf(stderr, "bench: %s m=%d %s: %.1f us (%.0f%% of floor), min %.1f us (%.0f%%), read %.1f GB/s, load %.2f\n",
                     sh.name.c_str(), m, sc.name.c_str(), r.us, r.pct_floor, r.us_min, 100 * r.floor_us / r.us_min,
                     r.read_gbps, r.load_avg);
      }
    }
  }

  // ---- report -------------------------------------------------------------------------------------
  std::printf("| shape | m | scheme | backend | us | TB/s | TFLOP/s | read GB/s | floor_us | %% of floor | peer | peer us | peer/qmoe |\n");
  std::printf("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n");
  std::map<std::string, std::vector<double>> geo;  // scheme -> log ratios (CPU M in 8..512)
  for (const Row& r : rows) {
    char peer_us[32] = "-", ratio[32] = "-";
    if (r.peer_us > 0) std::snprintf(peer_us, sizeof peer_us, "%.0f", r.peer_us);
    if (r.ratio > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", r.ratio);
    std::printf("| %s | %d | %s | %s | %.1f | %.4f | %.4f | %.1f | %.1f | %.0f%% | %s | %s | %s |\n", r.shape.c_str(), r.m,
                r.scheme.c_str(), r.backend.c_str(), r.us, r.tbps, r.tflops, r.read_gbps, r.floor_us, r.pct_floor,
                r.peer.empty() ? "-" : r.peer.c_str(), peer_us, ratio);
    if (r.ratio > 0 && r.m >= 8) geo[r.scheme].push_back(std::log(r.ratio));
  }
  for (auto& [s, v] : geo) {
    double sum = 0;
    for (double l : v) sum += l;
    std::printf("\ngeomean peer/qmoe for %s over %zu rows with m >= 8: %.2fx", s.c_str(), v.size(), std::exp(sum / v.size()));
  }
  std::printf("\n");
  if (!o.json.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows)
      j.push_back({{"shape", r.shape}, {"m", r.m}, {"scheme", r.scheme}, {"backend", r.backend}, {"us", r.us},
                   {"us_min", r.us_min}, {"tbps", r.tbps}, {"tflops", r.tflops}, {"floor_us", r.floor_us},
                   {"pct_floor", r.pct_floor}, {"peer", r.peer}, {"peer_us", r.peer_us}, {"ratio_peer", r.ratio},
                   {"kernel", r.note}, {"device", device}, {"read_gbps", r.read_gbps}, {"read_gbps_start", read_gbps}, {"load_avg", r.load_avg}, {"bf16_gflops", bf16_gflops},
                   {"int8_gops", int8_gops}, {"int16_gops", int16_gops}, {"fma_gflops", fma_gflops}});
    std::ofstream f(o.json);
    if (!f) bad_input("bench: cannot write ", o.json);
    f << j.dump(1) << "\n";
  }
  if (!o.plot.empty()) {
    std::vector<PlotBar> bars;
    for (const Row& r : rows) {
      int si = 0;
      for (size_t i = 0; i < schemes.size(); ++i)
        if (schemes[i].name == r.scheme) si = int(i);
      bars.push_back({r.shape, si, r.pct_floor});
    }
    write_bar_png(o.plot, bars, int(schemes.size()));
    std::printf("plot: %s (bars = rows in table order, %% of floor, red line = 100%%; colors in scheme order:", o.plot.c_str());
    for (const BenchScheme& s : schemes) std::printf(" %s", s.name.c_str());
    std::printf(")\n");
  }
  return 0;
}

Registrar reg("bench", "time whole MoE layers on anchor shapes: us, TB/s, TFLOP/s, % of the hardware floor", [](CLI::App& sub) {
  auto o = std::make_shared<Opts>();
  sub.add_option("--backend", o->backend, "cpu or cuda")->capture_default_str();
  sub.add_option("--shape", o->shapes, "anchor shape name(s) (comma list or repeated), 'all', or E,topk,H,I");
  sub.add_option("--m", o->ms, "comma list of token counts (default cpu 1,8,32,128,512; cuda 1,16,64,256,1024,4096)");
  sub.add_option("--scheme", o->schemes, "comma list: " + bench_scheme_names());
  sub.add_option("--json", o->json, "write the rows as JSON");
  sub.add_option("--plot", o->plot, "write a PNG of % of floor per row");
  sub.add_option("--iters", o->iters, "timed calls per row (median reported)")->capture_default_str();
  sub.add_option("--warmup", o->warmup, "untimed calls per row")->capture_default_str();
  sub.add_option("--settle-ms", o->settle_ms,
                 "CUDA: untimed replays after --warmup until this much GPU time has passed, so the timed replays see "
                 "the card's sustained state (clocks throttled under matrix load, the memory system's fast phase; "
                 "docs/perf.md)")
      ->capture_default_str();
  sub.add_flag("--warm", o->warm, "CPU: do not flush the caches before timed calls (kernel compute rate when the weights fit in cache)");
  sub.add_flag("--cpu-time", o->cpu_time, "CPU: time with the process CPU clock (meaningful with OMP_NUM_THREADS=1 on a busy machine)");
  sub.add_option("--max-mem-gb", o->max_mem_gb, "CPU: skip rows whose weights need more (default 60% of MemAvailable)");
  return [o] { return run_bench(*o); };
});

}  // namespace
}  // namespace qmoe::cli
