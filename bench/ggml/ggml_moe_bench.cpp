// ggml MUL_MAT_ID anchor benchmark (CPU backend): re-measures the "ggml (llama.cpp's engine)
// MUL_MAT_ID" table of shared/docs/anchors.md on the machine it runs on.
//
// One projection (one ggml_mul_mat_id op) at a time:
//   weights  [K, N, E]  (ggml ne order; "up": K = H, N = I; "down": K = I, N = H), quantized with
//            ggml_quantize_chunk from random values, placed in the CPU device's first extra buffer
//            type that supports the op (CPU_REPACK on x86: q4_0 -> 8x8, q4_K -> 8x8, mxfp4 -> 8x8),
//            as llama.cpp's model loader does; otherwise the plain CPU buffer.
//   acts     f32 [K, 1, M] for "up" (one row per token, broadcast over its experts) and
//            [K, top_k, M] for "down" (one row per token and expert), as llama.cpp's MoE FFN.
//   ids      i32 [top_k, M], top_k random distinct experts per token, fresh for every run.
// Weights are cold: a --flush-mb buffer is stream-read between timed runs. Time is that of
// ggml_backend_graph_compute (incl. ggml's activation quantization), median over runs.
// Also measures, in the same process, 2-thread streaming read bandwidth (best of 3 passes over
// 1 GiB) before every row, and reports the share of it the touched expert weights used.
//
// Built by bench/ggml/run.sh against a ggml from a PyPI sdist (llama-cpp-python).
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifndef QMOE_GGML_PKG
#define QMOE_GGML_PKG "unknown package"
#endif

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t q = s.find(sep, pos);
    out.push_back(s.substr(pos, q == std::string::npos ? std::string::npos : q - pos));
    if (q == std::string::npos) break;
    pos = q + 1;
  }
  return out;
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  for (auto& t : split(s, ',')) {
    if (t.empty()) continue;
    v.push_back(std::atoi(t.c_str()));
    if (v.back() <= 0) die("bad integer list: " + s);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// streaming read: 2 threads (omp), each reads its half with 64-byte loads, 4 xor chains

volatile uint64_t g_sink;

uint64_t read_block(const uint8_t* p, size_t n) {
#if defined(__AVX512F__)
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  return _mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
#else
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a = 0;
  for (size_t i = 0; i < n / 8; ++i) a ^= q[i];
  return a;
#endif
}

void read_pass(const uint8_t* p, size_t n, int nth) {  // n: multiple of 256
  uint64_t acc = 0;
#pragma omp parallel num_threads(nth) reduction(^ : acc)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t chunk = (n / nt) & ~size_t(255);
    const size_t len = t + 1 == nt ? n - t * chunk : chunk;
    acc ^= read_block(p + t * chunk, len);
  }
  g_sink = g_sink + acc;
}

struct ReadBuf {
  uint8_t* p = nullptr;
  size_t n = 0;
  explicit ReadBuf(size_t bytes) : n(bytes) {
    p = static_cast<uint8_t*>(std::aligned_alloc(size_t(2) << 20, n));
    if (!p) die("cannot allocate the read buffer");
    madvise(p, n, MADV_HUGEPAGE);
    std::memset(p, 1, n);
  }
  ~ReadBuf() { std::free(p); }
  double gbps(int nth, int passes) const {
    double best = 0;
    for (int i = 0; i < passes; ++i) {
      double t0 = now_s();
      read_pass(p, n, nth);
      double dt = now_s() - t0;
      best = std::max(best, n / dt / 1e9);
    }
    return best;
  }
  void flush(size_t bytes, int nth) const { read_pass(p, std::min(bytes, n) & ~size_t(255), nth); }
};

// ---------------------------------------------------------------------------------------------
// other processes' CPU use (cores), sampled over `window` s while this process sleeps: busy
// jiffies of the whole machine (incl. steal) minus this process's own

bool read_jiffies(unsigned long long& busy, unsigned long long& own) {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[10] = {0};
  int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                      &v[6], &v[7]);
  std::fclose(f);
  if (n < 8) return false;
  busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
  f = std::fopen("/proc/self/stat", "r");
  if (!f) return false;
  char buf[2048];
  size_t len = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[len] = 0;
  const char* p = std::strrchr(buf, ')');
  if (!p) return false;
  unsigned long long ut = 0, st = 0;
  // after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return false;
  own = ut + st;
  return true;
}

double other_cpu_cores(double window) {
  unsigned long long b0, o0, b1, o1;
  if (!read_jiffies(b0, o0)) return -1;
  std::this_thread::sleep_for(std::chrono::duration<double>(window));
  if (!read_jiffies(b1, o1)) return -1;
  const double hz = double(sysconf(_SC_CLK_TCK));
  return std::max(0.0, double((b1 - b0) - (o1 - o0)) / hz / window);
}

// ---------------------------------------------------------------------------------------------
// ggml helpers

ggml_type parse_type(const std::string& s) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* name = ggml_type_name(ggml_type(t));
    if (name && s == name && ggml_blck_size(ggml_type(t)) > 0) return ggml_type(t);
  }
  die("unknown ggml type: " + s);
}

double bytes_per_weight(ggml_type t) { return double(ggml_type_size(t)) / ggml_blck_size(t); }

struct Env {
  ggml_backend_dev_t dev = nullptr;
  ggml_backend_t backend = nullptr;
  std::vector<ggml_backend_buffer_type_t> extra;  // the device's extra buffer types, in order
  ggml_backend_buffer_type_t plain = nullptr;
};

// as llama.cpp's weight_buft_supported: put w (no data) in a zero-size buffer of buft and ask the
// device whether it runs MUL_MAT_ID on it
bool buft_supports_mmid(const Env& env, ggml_backend_buffer_type_t buft, ggml_tensor* w, int n_used) {
  ggml_init_params ip = {ggml_tensor_overhead() * 8, nullptr, true};
  ggml_context* c = ggml_init(ip);
  ggml_tensor* b = ggml_new_tensor_3d(c, GGML_TYPE_F32, w->ne[0], n_used, 512);
  ggml_tensor* ids = ggml_new_tensor_2d(c, GGML_TYPE_I32, n_used, 512);
  ggml_tensor* op = ggml_mul_mat_id(c, w, b, ids);
  ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
  w->buffer = dummy;
  bool ok = ggml_backend_dev_supports_op(env.dev, op);
  w->buffer = nullptr;
  ggml_backend_buffer_free(dummy);
  ggml_free(c);
  return ok;
}

struct Weights {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buf = nullptr;
  ggml_tensor* w = nullptr;
  std::string buft;
  std::vector<uint8_t> host;  // ggml-layout quantized data (kept only when asked)
  ~Weights() {
    if (buf) ggml_backend_buffer_free(buf);
    if (ctx) ggml_free(ctx);
  }
};

// Random values in [-1, 1), quantized with ggml_quantize_chunk. To keep set-up cheap for the big
// shapes, `tile_rows` rows are quantized and repeated over all N*E rows (0: all rows distinct).
// Contents do not affect speed; they are checked to dequantize to finite values.
void make_weights(Weights& W, const Env& env, ggml_type type, int K, int N, int E, int n_used,
                  bool allow_extra, int64_t tile_rows, bool keep_host, std::mt19937_64& rng) {
  ggml_init_params ip = {ggml_tensor_overhead() * 2, nullptr, true};
  W.ctx = ggml_init(ip);
  W.w = ggml_new_tensor_3d(W.ctx, type, K, N, E);
  ggml_set_name(W.w, "experts");
  ggml_backend_buffer_type_t buft = env.plain;
  if (allow_extra) {
    for (auto* eb : env.extra) {
      if (buft_supports_mmid(env, eb, W.w, n_used)) {
        buft = eb;
        break;
      }
    }
  }
  W.buf = ggml_backend_alloc_ctx_tensors_from_buft(W.ctx, buft);
  if (!W.buf) die("cannot allocate the weight tensor");
  ggml_backend_buffer_set_usage(W.buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  W.buft = ggml_backend_buft_name(ggml_backend_buffer_get_type(W.buf));

  const int64_t rows = int64_t(N) * E;
  const size_t row_bytes = ggml_row_size(type, K);
  int64_t R = tile_rows <= 0 ? rows : std::min<int64_t>(rows, tile_rows);
  std::vector<float> src(size_t(R) * K);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  for (auto& x : src) x = U(rng);
  std::vector<uint8_t> tile(size_t(R) * row_bytes);
  ggml_quantize_init(type);
  size_t q = ggml_quantize_chunk(type, src.data(), tile.data(), 0, R, K, nullptr);
  if (q != tile.size()) die("ggml_quantize_chunk wrote an unexpected size");
  {  // validity: dequantizes to finite values
    const auto* tt = ggml_get_type_traits(type);
    std::vector<float> deq(K);
    for (int64_t r = 0; r < R; ++r) {
      tt->to_float(tile.data() + r * row_bytes, deq.data(), K);
      for (float v : deq)
        if (!std::isfinite(v)) die(std::string("non-finite weight after quantizing to ") + ggml_type_name(type));
    }
  }
  W.host.resize(size_t(rows) * row_bytes);
  for (int64_t r = 0; r < rows; r += R) {
    int64_t n = std::min(R, rows - r);
    std::memcpy(W.host.data() + r * row_bytes, tile.data(), n * row_bytes);
  }
  // repack buffers take the whole tensor at once (offset 0, full size) and convert it here
  ggml_backend_tensor_set(W.w, W.host.data(), 0, W.host.size());
  if (!keep_host) std::vector<uint8_t>().swap(W.host);
}

struct OpGraph {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buf = nullptr;
  ggml_tensor *b = nullptr, *ids = nullptr, *out = nullptr;
  ggml_cgraph* gf = nullptr;
  ~OpGraph() {
    if (buf) ggml_backend_buffer_free(buf);
    if (ctx) ggml_free(ctx);
  }
};

void make_graph(OpGraph& G, const Env& env, ggml_tensor* w, int M, int top_k, int b_cols,
                std::mt19937_64& rng) {
  ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
  G.ctx = ggml_init(ip);
  const int K = int(w->ne[0]);
  G.b = ggml_new_tensor_3d(G.ctx, GGML_TYPE_F32, K, b_cols, M);
  G.ids = ggml_new_tensor_2d(G.ctx, GGML_TYPE_I32, top_k, M);
  G.out = ggml_mul_mat_id(G.ctx, w, G.b, G.ids);
  G.gf = ggml_new_graph(G.ctx);
  ggml_build_forward_expand(G.gf, G.out);
  G.buf = ggml_backend_alloc_ctx_tensors(G.ctx, env.backend);
  if (!G.buf) die("cannot allocate activations");
  std::vector<float> a(size_t(K) * b_cols * M);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  for (auto& x : a) x = U(rng);
  ggml_backend_tensor_set(G.b, a.data(), 0, a.size() * sizeof(float));
}

// top_k distinct random experts per token; returns the number of distinct experts touched
int fill_ids(std::vector<int32_t>& ids, int M, int top_k, int E, std::mt19937_64& rng) {
  ids.resize(size_t(M) * top_k);
  std::vector<int32_t> perm(E);
  std::vector<char> seen(E, 0);
  for (int t = 0; t < M; ++t) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    for (int j = 0; j < top_k; ++j) {  // partial Fisher-Yates
      int r = j + int(rng() % uint64_t(E - j));
      std::swap(perm[j], perm[r]);
      ids[size_t(t) * top_k + j] = perm[j];
      seen[perm[j]] = 1;
    }
  }
  int n = 0;
  for (char s : seen) n += s;
  return n;
}

void compute(const Env& env, ggml_cgraph* gf) {
  if (ggml_backend_graph_compute(env.backend, gf) != GGML_STATUS_SUCCESS) die("graph compute failed");
}

// ---------------------------------------------------------------------------------------------
// correctness: one small case per type, against a double reference on ggml's dequantized weights

bool check_type(const Env& env, ggml_type type, bool allow_extra, bool down_style, std::mt19937_64& rng) {
  const int E = 6, top_k = 3, K = 512, N = 16, M = 16;  // ~8 rows per expert: gemm and gemv paths
  Weights W;
  make_weights(W, env, type, K, N, E, top_k, allow_extra, 0, true, rng);
  const int b_cols = down_style ? top_k : 1;
  OpGraph G;
  make_graph(G, env, W.w, M, top_k, b_cols, rng);
  std::vector<int32_t> ids;
  fill_ids(ids, M, top_k, E, rng);
  ggml_backend_tensor_set(G.ids, ids.data(), 0, ids.size() * sizeof(int32_t));
  compute(env, G.gf);
  std::vector<float> out(size_t(N) * top_k * M), act(size_t(K) * b_cols * M);
  ggml_backend_tensor_get(G.out, out.data(), 0, out.size() * sizeof(float));
  ggml_backend_tensor_get(G.b, act.data(), 0, act.size() * sizeof(float));
  const auto* tt = ggml_get_type_traits(type);
  const size_t row_bytes = ggml_row_size(type, K);
  std::vector<float> wf(size_t(E) * N * K);
  for (int64_t r = 0; r < int64_t(E) * N; ++r) tt->to_float(W.host.data() + r * row_bytes, wf.data() + r * K, K);
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0, wrong2 = 0;  // wrong2: vs the next expert's weights
  for (int t = 0; t < M; ++t)
    for (int j = 0; j < top_k; ++j) {
      const int e = ids[size_t(t) * top_k + j];
      const float* x = act.data() + (size_t(t) * b_cols + (down_style ? j : 0)) * K;
      for (int n = 0; n < N; ++n) {
        const float* wr = wf.data() + (size_t(e) * N + n) * K;
        const float* wx = wf.data() + (size_t((e + 1) % E) * N + n) * K;
        double ref = 0, alt = 0;
        for (int k = 0; k < K; ++k) ref += double(wr[k]) * x[k], alt += double(wx[k]) * x[k];
        const double got = out[(size_t(t) * top_k + j) * N + n];
        wrong2 += (got - alt) * (got - alt);
        err2 += (got - ref) * (got - ref);
        ref2 += ref * ref;
        max_err = std::max(max_err, std::fabs(got - ref));
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
  const double rel = std::sqrt(err2 / ref2);
  const bool ok = rel < 2e-2 && std::isfinite(rel);  // activations are quantized to q8 (bf16 for bf16)
  std::printf("check %-6s %-4s buft=%-10s E=%d top_k=%d K=%d N=%d M=%d: rel L2 err %.2e, max|err|/max|ref| %.2e (vs a wrong expert: %.2f)  %s\n",
              ggml_type_name(type), down_style ? "down" : "up", W.buft.c_str(), E, top_k, K, N, M, rel,
              max_err / max_ref, std::sqrt(wrong2 / ref2), ok ? "OK" : "FAIL");
  return ok;
}

// ---------------------------------------------------------------------------------------------

struct ShapeDef {
  std::string name;
  int E, top_k, H, I;
};

struct Row {
  std::string shape, proj, type, buft;
  int m, E, top_k, K, N, reps;
  double us, us_min, read_gbps, touched_experts, touched_mb, pct_read, other_cpu;
};

std::string json_rows(const std::vector<Row>& rows, const std::string& ver) {
  std::string s = "[\n";
  char buf[1024];
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::snprintf(buf, sizeof buf,
                  "  {\"shape\": \"%s\", \"proj\": \"%s\", \"type\": \"%s\", \"m\": %d, \"us\": %.1f, \"us_min\": %.1f, "
                  "\"read_gbps\": %.2f, \"buft\": \"%s\", \"ggml_version\": \"%s\", \"E\": %d, \"top_k\": %d, \"K\": %d, "
                  "\"N\": %d, \"reps\": %d, \"experts_touched\": %.2f, \"touched_mb\": %.3f, \"pct_read\": %.1f, "
                  "\"other_cpu\": %.2f}%s\n",
                  r.shape.c_str(), r.proj.c_str(), r.type.c_str(), r.m, r.us, r.us_min, r.read_gbps, r.buft.c_str(),
                  ver.c_str(), r.E, r.top_k, r.K, r.N, r.reps, r.touched_experts, r.touched_mb, r.pct_read,
                  r.other_cpu, i + 1 < rows.size() ? "," : "");
    s += buf;
  }
  return s + "]\n";
}

void write_json(const std::string& path, const std::vector<Row>& rows, const std::string& ver) {
  if (path.empty()) return;
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) die("cannot write " + path);
  std::string s = json_rows(rows, ver);
  std::fwrite(s.data(), 1, s.size(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

void usage() {
  std::printf(
      "ggml_moe_bench [options]\n"
      "  --shapes LIST     qwen3-30b-a3b,mixtral-8x7b,llama4-scout (default: all three)\n"
      "  --shape-def N:E:TOPK:H:I   add/override a shape (repeatable)\n"
      "  --projs LIST      up,down (default both)\n"
      "  --types LIST      ggml type names (default q4_0,q4_K,q8_0,mxfp4,bf16)\n"
      "  --m LIST          tokens per op (default 1,8,32,128,512)\n"
      "  --m-for SHAPE[:PROJ]=LIST   M list for one shape / projection (repeatable)\n"
      "  --m-max-for SHAPE[:PROJ]=MAX  skip M > MAX for one shape / projection (repeatable)\n"
      "  --threads N       (default 2)\n"
      "  --reps N          most timed runs per row (default 9); --min-reps N (default 3)\n"
      "  --budget S        stop adding runs to a row after S seconds once min-reps are done (default 3)\n"
      "  --flush-mb N      MiB stream-read between timed runs to make weights cold (default 512)\n"
      "  --bw-mb N         MiB of the read-bandwidth buffer (default 1024)\n"
      "  --tile-rows N     weight rows quantized and then repeated (default 4096; 0 = all)\n"
      "  --no-repack       plain CPU buffer only (no extra buffer types)\n"
      "  --no-check        skip the correctness checks; --check-only: run them and exit\n"
      "  --json PATH       write rows as JSON (rewritten after every row)\n"
      "  --wait-quiet S    before each row, wait up to S s (default 0) until other processes use < 0.1 core\n"
      "                    (their use, sampled over 0.5 s before the row, is recorded as other_cpu either way)\n"
      "  --seed N\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<ShapeDef> shapes_all = {
      {"qwen3-30b-a3b", 128, 8, 2048, 768}, {"mixtral-8x7b", 8, 2, 4096, 14336}, {"llama4-scout", 16, 1, 5120, 8192}};
  std::vector<std::string> shapes_sel, projs = {"up", "down"}, types_s = {"q4_0", "q4_K", "q8_0", "mxfp4", "bf16"};
  std::vector<int> ms = {1, 8, 32, 128, 512};
  std::map<std::string, std::vector<int>> m_for;
  std::map<std::string, int> m_max_for;
  int threads = 2, reps = 9, min_reps = 3;
  double budget = 3.0, wait_quiet = 0;
  size_t flush_mb = 512, bw_mb = 1024;
  int64_t tile_rows = 4096;
  bool repack = true, check = true, check_only = false;
  std::string json;
  uint64_t seed = 1234;

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--shapes") shapes_sel = split(next(), ',');
    else if (a == "--shape-def") {
      auto f = split(next(), ':');
      if (f.size() != 5) die("--shape-def NAME:E:TOPK:H:I");
      ShapeDef d{f[0], std::atoi(f[1].c_str()), std::atoi(f[2].c_str()), std::atoi(f[3].c_str()), std::atoi(f[4].c_str())};
      auto it = std::find_if(shapes_all.begin(), shapes_all.end(), [&](const ShapeDef& s) { return s.name == d.name; });
      if (it != shapes_all.end()) *it = d; else shapes_all.push_back(d);
    } else if (a == "--projs") projs = split(next(), ',');
    else if (a == "--types") types_s = split(next(), ',');
    else if (a == "--m") ms = parse_ints(next());
    else if (a == "--m-for") {
      std::string v = next();
      size_t eq = v.find('=');
      if (eq == std::string::npos) die("--m-for SHAPE[:PROJ]=LIST");
      m_for[v.substr(0, eq)] = parse_ints(v.substr(eq + 1));
    } else if (a == "--m-max-for") {
      std::string v = next();
      size_t eq = v.find('=');
      if (eq == std::string::npos) die("--m-max-for SHAPE[:PROJ]=MAX");
      m_max_for[v.substr(0, eq)] = std::atoi(v.substr(eq + 1).c_str());
    } else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--min-reps") min_reps = std::atoi(next().c_str());
    else if (a == "--budget") budget = std::atof(next().c_str());
    else if (a == "--flush-mb") flush_mb = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--bw-mb") bw_mb = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--tile-rows") tile_rows = std::strtoll(next().c_str(), nullptr, 10);
    else if (a == "--wait-quiet") wait_quiet = std::atof(next().c_str());
    else if (a == "--no-repack") repack = false;
    else if (a == "--no-check") check = false;
    else if (a == "--check-only") check_only = true;
    else if (a == "--json") json = next();
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else die("unknown option " + a + " (--help)");
  }
  if (shapes_sel.empty())
    for (auto& s : shapes_all) shapes_sel.push_back(s.name);
  min_reps = std::max(1, std::min(min_reps, reps));

  ggml_cpu_init();
  Env env;
  env.dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!env.dev) die("no CPU device");
  env.backend = ggml_backend_dev_init(env.dev, nullptr);
  if (!env.backend) die("cannot init the CPU backend");
  ggml_backend_cpu_set_n_threads(env.backend, threads);
  env.plain = ggml_backend_dev_buffer_type(env.dev);
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(env.dev);
  auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
  if (get_extra)
    for (auto* p = get_extra(env.dev); p && *p; ++p) env.extra.push_back(*p);

  const std::string ver = std::string("ggml ") + ggml_version() + " commit " + ggml_commit() + ", " + QMOE_GGML_PKG;
  std::printf("# %s; CPU device: %s; threads %d; extra buffer types:", ver.c_str(),
              ggml_backend_dev_description(env.dev), threads);
  for (auto* b : env.extra) std::printf(" %s", ggml_backend_buft_name(b));
  std::printf("%s\n", env.extra.empty() ? " none" : "");
  std::printf("# cpu features: AVX512 %d, AVX512_VNNI %d, AVX512_BF16 %d, AMX_INT8 %d, llamafile %d\n",
              ggml_cpu_has_avx512(), ggml_cpu_has_avx512_vnni(), ggml_cpu_has_avx512_bf16(), ggml_cpu_has_amx_int8(),
              ggml_cpu_has_llamafile());

  std::vector<ggml_type> types;
  for (auto& t : types_s) types.push_back(parse_type(t));
  std::mt19937_64 rng(seed);

  if (check || check_only) {
    bool all = true;
    for (auto t : types)
      for (bool down : {false, true}) all = check_type(env, t, repack, down, rng) && all;
    if (!all) die("correctness check failed");
    if (check_only) return 0;
  }

  ReadBuf rb(bw_mb << 20);
  const size_t flush_bytes = flush_mb << 20;
  std::vector<Row> rows;
  std::fprintf(stderr, "%-14s %-4s %-6s %-10s %5s %11s %11s %5s %8s %7s %6s %6s\n", "shape", "proj", "type", "buft", "M",
               "us(median)", "us(min)", "reps", "touchMB", "GB/s", "%read", "other");
  const double t_start = now_s();

  for (auto& sn : shapes_sel) {
    auto it = std::find_if(shapes_all.begin(), shapes_all.end(), [&](const ShapeDef& s) { return s.name == sn; });
    if (it == shapes_all.end()) die("unknown shape " + sn);
    const ShapeDef sh = *it;
    for (auto& proj : projs) {
      if (proj != "up" && proj != "down") die("proj must be up or down");
      const int K = proj == "up" ? sh.H : sh.I, N = proj == "up" ? sh.I : sh.H;
      const int b_cols = proj == "up" ? 1 : sh.top_k;
      std::vector<int> mlist = ms;
      if (m_for.count(sh.name)) mlist = m_for[sh.name];
      if (m_for.count(sh.name + ":" + proj)) mlist = m_for[sh.name + ":" + proj];
      for (const std::string key : {sh.name, sh.name + ":" + proj})
        if (m_max_for.count(key))
          mlist.erase(std::remove_if(mlist.begin(), mlist.end(), [&](int m) { return m > m_max_for[key]; }), mlist.end());
      for (auto type : types) {
        Weights W;
        const double t0 = now_s();
        make_weights(W, env, type, K, N, sh.E, sh.top_k, repack, tile_rows, false, rng);
        const double expert_mb = double(ggml_row_size(type, K)) * N / 1e6;
        std::fprintf(stderr, "# %s %s %s: weights %.1f MB in %s (set-up %.1f s)\n", sh.name.c_str(), proj.c_str(),
                     ggml_type_name(type), expert_mb * sh.E, W.buft.c_str(), now_s() - t0);
        for (int M : mlist) {
          OpGraph G;
          make_graph(G, env, W.w, M, sh.top_k, b_cols, rng);
          double other = other_cpu_cores(0.5);
          for (double waited = 0; other >= 0.1 && waited < wait_quiet; waited += 1.5) {
            std::this_thread::sleep_for(std::chrono::seconds(1));
            other = other_cpu_cores(0.5);
          }
          const double gbps = rb.gbps(threads, 3);
          std::vector<int32_t> ids;
          std::vector<double> us;
          double touched = 0, t_row = now_s();
          for (int r = -1; r < reps; ++r) {  // r = -1: untimed warm-up (allocates the work buffer)
            const int nt = fill_ids(ids, M, sh.top_k, sh.E, rng);
            ggml_backend_tensor_set(G.ids, ids.data(), 0, ids.size() * sizeof(int32_t));
            rb.flush(flush_bytes, threads);
            const double a = now_s();
            compute(env, G.gf);
            const double dt = now_s() - a;
            if (r < 0) {
              t_row = now_s();
              continue;
            }
            us.push_back(dt * 1e6);
            touched += nt;
            if (int(us.size()) >= min_reps && now_s() - t_row > budget) break;
          }
          Row row;
          row.shape = sh.name;
          row.proj = proj;
          row.type = ggml_type_name(type);
          row.buft = W.buft;
          row.m = M;
          row.E = sh.E;
          row.top_k = sh.top_k;
          row.K = K;
          row.N = N;
          row.reps = int(us.size());
          std::vector<double> s = us;
          std::sort(s.begin(), s.end());
          row.us = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
          row.us_min = s.front();
          row.read_gbps = gbps;
          row.touched_experts = touched / us.size();
          row.touched_mb = row.touched_experts * expert_mb;
          row.pct_read = 100.0 * (row.touched_mb * 1e6) / (row.us * 1e-6) / (gbps * 1e9);
          row.other_cpu = other;
          rows.push_back(row);
          std::fprintf(stderr, "%-14s %-4s %-6s %-10s %5d %11.1f %11.1f %5d %8.2f %7.1f %6.1f %6.2f\n", row.shape.c_str(),
                       row.proj.c_str(), row.type.c_str(), row.buft.c_str(), M, row.us, row.us_min, row.reps,
                       row.touched_mb, gbps, row.pct_read, other);
          write_json(json, rows, ver);
        }
      }
    }
  }
  std::fprintf(stderr, "# measurement wall time %.1f s\n", now_s() - t_start);

  // markdown: full rows, then the anchors.md layout (us and share of read bandwidth)
  std::printf("\n| shape | proj | type | buft | M | µs (median) | µs (min) | runs | touched MB | read GB/s | %% of read | other cores |\n");
  std::printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (auto& r : rows)
    std::printf("| %s | %s | %s | %s | %d | %.0f | %.0f | %d | %.2f | %.1f | %.0f%% | %.2f |\n", r.shape.c_str(),
                r.proj.c_str(), r.type.c_str(), r.buft.c_str(), r.m, r.us, r.us_min, r.reps, r.touched_mb,
                r.read_gbps, r.pct_read, r.other_cpu);
  std::vector<int> all_m;
  for (auto& r : rows)
    if (std::find(all_m.begin(), all_m.end(), r.m) == all_m.end()) all_m.push_back(r.m);
  std::sort(all_m.begin(), all_m.end());
  std::printf("\n| op | ggml type (bits/weight) |");
  for (int m : all_m) std::printf(" M=%d |", m);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < all_m.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    while (j < rows.size() && rows[j].shape == rows[i].shape && rows[j].proj == rows[i].proj &&
           rows[j].type == rows[i].type)
      ++j;
    const Row& r0 = rows[i];
    const double bpw = bytes_per_weight(parse_type(r0.type)) * 8;
    std::printf("| %s %s | %s%s (%.4g) |", r0.shape.c_str(), r0.proj.c_str(), r0.type.c_str(),
                r0.buft == "CPU" ? "" : (" " + r0.buft).c_str(), bpw);
    for (int m : all_m) {
      const Row* hit = nullptr;
      for (size_t k = i; k < j; ++k)
        if (rows[k].m == m) hit = &rows[k];
      if (hit) std::printf(" %.0f (%.0f%%)%s |", hit->us, hit->pct_read, hit->other_cpu >= 0.1 ? " *" : "");
      else std::printf(" — |");
    }
    std::printf("\n");
    i = j;
  }
  double lo = 1e30, hi = 0;
  int busy_rows = 0;
  for (auto& r : rows) lo = std::min(lo, r.read_gbps), hi = std::max(hi, r.read_gbps), busy_rows += r.other_cpu >= 0.1;
  if (busy_rows)
    std::printf("\nWARNING: other processes used >= 0.1 core just before %d of %d rows (other_cpu in the JSON); ggml's "
                "OpenMP threads slow down badly when they share a core. Re-run those rows (marked *) when quiet.\n",
                busy_rows, int(rows.size()));
  if (!rows.empty())
    std::printf("\n%% = touched expert weight bytes / median time / read bandwidth measured just before the row "
                "(%.1f-%.1f GB/s over this run, %d threads). %s\n", lo, hi, threads, ver.c_str());

  ggml_backend_free(env.backend);
  return 0;
}
