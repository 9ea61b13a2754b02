/* The C ABI used from plain C99 (this file is compiled as C, not C++): version, statuses and
 * messages, routing and align against oracles written here, a BF16 MoE layer built from raw
 * tensors on the reference backend against a float64 oracle with a per-element bound, the three
 * ways to run it (router logits, routing given, fused_experts) bit-identical, and argument errors.
 * Prints "N passed, N failed" and exits non-zero on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/c_api.h"

static int g_pass = 0, g_fail = 0;

#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (cond) {                                               \
      ++g_pass;                                               \
    } else {                                                  \
      ++g_fail;                                               \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
    }                                                         \
  } while (0)

/* ---- deterministic random numbers and bf16 ----------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) from xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
/* Random magnitude in [lo, hi] with a random sign: never zero. */
static double signed_rand(double lo, double hi) {
  double v = lo + (hi - lo) * urand();
  return urand() < 0.5 ? -v : v;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f32_to_bf16(float f) { /* RNE; inputs here are finite */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static double bf16_to_f64(uint16_t h) { return (double)bits_f32((uint32_t)h << 16); }
static double round_bf16(double v) { return bf16_to_f64(f32_to_bf16((float)v)); }
/* One bf16 unit in the last place at |v| (8 significand bits). */
static double ulp_bf16(double v) {
  int e;
  if (v == 0) return ldexp(1.0, -133);
  frexp(fabs(v), &e);
  return ldexp(1.0, e - 8);
}

static qmoe_tensor_t host(void* data, qmoe_dtype_t dt, int32_t ndim, int64_t d0, int64_t d1, int64_t d2) {
  qmoe_tensor_t t;
  int64_t shape[3];
  shape[0] = d0;
  shape[1] = d1;
  shape[2] = d2;
  qmoe_tensor_init(&t, data, dt, ndim, shape);
  return t;
}

/* ---- version and errors --------------------------------------------------------------------- */

static void test_version_and_errors(void) {
  char buf[8];
  size_t n;
  qmoe_status_t s;
  CHECK(qmoe_c_api_version() == QMOE_C_API_VERSION, "library %d vs header %d", (int)qmoe_c_api_version(),
        QMOE_C_API_VERSION);
  CHECK(qmoe_version() != NULL && strlen(qmoe_version()) > 0, "empty version");
  CHECK(strcmp(qmoe_status_name(QMOE_ERR_UNSUPPORTED), "unsupported") == 0, "%s",
        qmoe_status_name(QMOE_ERR_UNSUPPORTED));

  s = qmoe_route(NULL, NULL, NULL, NULL, NULL, NULL);
  CHECK(s == QMOE_ERR_BAD_INPUT, "status %d", (int)s);
  CHECK(strstr(qmoe_last_error(), "cfg") != NULL, "message '%s'", qmoe_last_error());
  n = qmoe_last_error_copy(buf, sizeof buf);
  CHECK(n == strlen(qmoe_last_error()) && strlen(buf) == sizeof buf - 1 &&
            strncmp(buf, qmoe_last_error(), sizeof buf - 1) == 0,
        "copy '%s' of '%s'", buf, qmoe_last_error());

  /* A successful call clears the message. */
  {
    int64_t cap = 0, blocks = 0;
    s = qmoe_align_block_size_sizes(10, 4, 8, &cap, &blocks);
    CHECK(s == QMOE_OK && qmoe_last_error()[0] == '\0', "status %d message '%s'", (int)s, qmoe_last_error());
    CHECK(cap == 40 && blocks == 5, "10 ids, E 4, B 8: capacity %lld blocks %lld", (long long)cap,
          (long long)blocks);
    s = qmoe_align_block_size_sizes(10, 0, 8, &cap, &blocks);
    CHECK(s == QMOE_ERR_BAD_INPUT, "status %d", (int)s);
  }
  {
    qmoe_checkpoint_t* ck = (qmoe_checkpoint_t*)&g_rng; /* must be reset to NULL on failure */
    s = qmoe_checkpoint_load("/nonexistent/qmoe-c-test", NULL, &ck);
    CHECK(s == QMOE_ERR_BAD_INPUT && ck == NULL, "status %d", (int)s);
    CHECK(strstr(qmoe_last_error(), "/nonexistent/qmoe-c-test") != NULL, "message '%s'", qmoe_last_error());
  }
}

/* ---- routing -------------------------------------------------------------------------------- */

enum { RM = 7, RE = 5, RK = 2 };

static void test_route(void) {
  float logits[RM * RE], w[RM * RK];
  int32_t ids[RM * RK];
  qmoe_router_config_t cfg;
  qmoe_tensor_t lt, wt, it;
  qmoe_status_t s;
  int t, j, e;
  for (t = 0; t < RM * RE; ++t) logits[t] = (float)signed_rand(0.1, 3.0);
  logits[2 * RE + 1] = logits[2 * RE + 3] = 5.0f; /* a tie: the lower expert index comes first */
  qmoe_router_config_init(&cfg);
  cfg.top_k = RK;
  cfg.renormalize = 1;
  lt = host(logits, QMOE_DTYPE_F32, 2, RM, RE, 0);
  wt = host(w, QMOE_DTYPE_F32, 2, RM, RK, 0);
  it = host(ids, QMOE_DTYPE_I32, 2, RM, RK, 0);
  s = qmoe_route(&lt, &cfg, NULL, &wt, &it, NULL);
  CHECK(s == QMOE_OK, "route: %s", qmoe_last_error());
  for (t = 0; t < RM; ++t) {
    /* Oracle: top-2 by logit (softmax is monotone), ties to the lower index, renormalized softmax. */
    int best[RK];
    double z = 0, p[RK];
    for (j = 0; j < RK; ++j) {
      best[j] = -1;
      for (e = 0; e < RE; ++e) {
        if (j == 1 && e == best[0]) continue;
        if (best[j] < 0 || logits[t * RE + e] > logits[t * RE + best[j]]) best[j] = e;
      }
    }
    for (j = 0; j < RK; ++j) z += exp((double)logits[t * RE + best[j]]);
    for (j = 0; j < RK; ++j) p[j] = exp((double)logits[t * RE + best[j]]) / z;
    for (j = 0; j < RK; ++j) {
      CHECK(ids[t * RK + j] == best[j], "token %d slot %d: expert %d, expected %d", t, j, ids[t * RK + j], best[j]);
      /* fp32 softmax: a few ulps of 1 */
      CHECK(fabs(w[t * RK + j] - p[j]) <= 4e-7, "token %d slot %d: weight %.9g, expected %.9g", t, j,
            w[t * RK + j], p[j]);
    }
  }
  /* Wrong output shape: a bad-input status naming the tensor. */
  wt.shape[1] = RK + 1;
  s = qmoe_route(&lt, &cfg, NULL, &wt, &it, NULL);
  CHECK(s == QMOE_ERR_BAD_INPUT && strstr(qmoe_last_error(), "topk_weights") != NULL, "status %d '%s'", (int)s,
        qmoe_last_error());
}

/* ---- align ---------------------------------------------------------------------------------- */

enum { AN = 23, AE = 6, AB = 4 };

static void check_align(const int32_t* ids, const int32_t* map, const char* name) {
  int64_t cap = 0, blocks = 0, b, i;
  int32_t *sorted, *experts, ntp = -1;
  int32_t expect_sorted[AN + AE * AB], expect_experts[AN + AE * AB];
  int64_t used = 0;
  int e;
  qmoe_tensor_t it, mt, st, et, nt;
  qmoe_status_t s = qmoe_align_block_size_sizes(AN, AE, AB, &cap, &blocks);
  CHECK(s == QMOE_OK && cap == (AN + AE * (AB - 1) + AB - 1) / AB * AB && blocks == cap / AB, "%s: sizes", name);
  sorted = (int32_t*)malloc(sizeof(int32_t) * (size_t)cap);
  experts = (int32_t*)malloc(sizeof(int32_t) * (size_t)blocks);
  for (i = 0; i < cap; ++i) sorted[i] = -7; /* poison */
  for (i = 0; i < blocks; ++i) experts[i] = -7;
  it = host((void*)ids, QMOE_DTYPE_I32, 1, AN, 0, 0);
  mt = host((void*)map, QMOE_DTYPE_I32, 1, AE, 0, 0);
  st = host(sorted, QMOE_DTYPE_I32, 1, cap, 0, 0);
  et = host(experts, QMOE_DTYPE_I32, 1, blocks, 0, 0);
  nt = host(&ntp, QMOE_DTYPE_I32, 1, 1, 0, 0);
  s = qmoe_align_block_size(&it, AE, AB, map ? &mt : NULL, &st, &et, &nt, NULL);
  CHECK(s == QMOE_OK, "%s: %s", name, qmoe_last_error());
  /* Oracle: experts in order, each one's flat indices ascending, padded to B with the sentinel. */
  for (e = 0; e < AE; ++e) {
    int64_t start = used;
    for (i = 0; i < AN; ++i)
      if (ids[i] == e) expect_sorted[used++] = (int32_t)i;
    while ((used - start) % AB != 0) expect_sorted[used++] = AN;
    for (b = start / AB; b < used / AB; ++b) expect_experts[b] = map ? map[e] : e;
  }
  CHECK(ntp == used, "%s: num_tokens_post_padded %d, expected %lld", name, ntp, (long long)used);
  for (i = 0; i < used && i < cap; ++i)
    CHECK(sorted[i] == expect_sorted[i], "%s: sorted_token_ids[%lld] = %d, expected %d", name, (long long)i,
          sorted[i], expect_sorted[i]);
  for (i = used; i < cap; ++i)
    CHECK(sorted[i] == AN, "%s: padding sorted_token_ids[%lld] = %d", name, (long long)i, sorted[i]);
  for (b = 0; b < used / AB; ++b)
    CHECK(experts[b] == expect_experts[b], "%s: expert_ids[%lld] = %d, expected %d", name, (long long)b,
          experts[b], expect_experts[b]);
  free(sorted);
  free(experts);
}

static void test_align(void) {
  int32_t ids[AN], map[AE] = {-1, 0, 1, -1, 2, 3};
  int i;
  for (i = 0; i < AN; ++i) ids[i] = (int32_t)(urand() * (AE - 1)); /* expert AE-1 gets no token */
  ids[0] = 2;
  check_align(ids, NULL, "identity map");
  check_align(ids, map, "expert map");
}

/* ---- a BF16 layer ----------------------------------------------------------------------------- */

enum { LE = 5, LH = 40, LI = 24, LM = 9, LK = 2 };

static uint16_t g_w13[LE * 2 * LI * LH], g_w2[LE * LH * LI], g_x[LM * LH];

static void fill_bf16(uint16_t* p, int n, double lo, double hi) {
  int i;
  for (i = 0; i < n; ++i) p[i] = f32_to_bf16((float)signed_rand(lo, hi));
}

static void make_desc(qmoe_layer_desc_t* d, qmoe_backend_t backend) {
  qmoe_layer_desc_init(d);
  d->experts.scheme = QMOE_SCHEME_UNQUANTIZED;
  d->experts.num_experts = LE;
  d->experts.hidden = LH;
  d->experts.intermediate = LI;
  d->experts.act_dtype = QMOE_DTYPE_BF16;
  d->experts.w13.weight = host(g_w13, QMOE_DTYPE_BF16, 3, LE, 2 * LI, LH);
  d->experts.w2.weight = host(g_w2, QMOE_DTYPE_BF16, 3, LE, LH, LI);
  d->router.top_k = LK;
  d->router.renormalize = 1;
  d->activation = QMOE_ACTIVATION_SILU_MUL;
  d->backend = backend;
}

/* y[t, :] for the numerics contract (docs/numerics.md) in float64 with h rounded to bf16, and a
 * per-element bound: one bf16 ulp of every h (the kernel's fp32 sums may round h the other way),
 * fp32 accumulation (2^-20 of the sum of |terms|), and one bf16 ulp of y for the final rounding. */
static void oracle(const float* w, const int32_t* ids, double* y, double* bound) {
  int t, j, i, h, k;
  for (t = 0; t < LM; ++t) {
    for (h = 0; h < LH; ++h) y[t * LH + h] = bound[t * LH + h] = 0;
    for (j = 0; j < LK; ++j) {
      int e = ids[t * LK + j];
      double hv[LI];
      for (i = 0; i < LI; ++i) {
        double g = 0, u = 0;
        for (k = 0; k < LH; ++k) {
          g += bf16_to_f64(g_x[t * LH + k]) * bf16_to_f64(g_w13[(e * 2 * LI + i) * LH + k]);
          u += bf16_to_f64(g_x[t * LH + k]) * bf16_to_f64(g_w13[(e * 2 * LI + LI + i) * LH + k]);
        }
        hv[i] = round_bf16(g / (1.0 + exp(-g)) * u);
      }
      for (h = 0; h < LH; ++h) {
        double o = 0, mag = 0, hslack = 0;
        for (i = 0; i < LI; ++i) {
          double wv = bf16_to_f64(g_w2[(e * LH + h) * LI + i]);
          o += hv[i] * wv;
          mag += fabs(hv[i] * wv);
          hslack += fabs(wv) * ulp_bf16(hv[i]);
        }
        y[t * LH + h] += w[t * LK + j] * o;
        bound[t * LH + h] += w[t * LK + j] * (hslack + mag * ldexp(1.0, -20));
      }
    }
    for (h = 0; h < LH; ++h) bound[t * LH + h] += ulp_bf16(y[t * LH + h]);
  }
}

static void test_layer(void) {
  qmoe_layer_desc_t d;
  qmoe_layer_t* layer = NULL;
  qmoe_layer_props_t props;
  float logits[LM * LE], w[LM * LK];
  int32_t ids[LM * LK];
  uint16_t y1[LM * LH], y2[LM * LH], y3[LM * LH];
  double yref[LM * LH], bound[LM * LH];
  qmoe_tensor_t xt, lt, wt, it, yt;
  qmoe_status_t s;
  int i, worst = 0;
  double worst_ratio = 0;

  fill_bf16(g_w13, LE * 2 * LI * LH, 0.02, 0.3);
  fill_bf16(g_w2, LE * LH * LI, 0.02, 0.3);
  fill_bf16(g_x, LM * LH, 0.1, 1.5);
  for (i = 0; i < LM * LE; ++i) logits[i] = (float)signed_rand(0.1, 2.0);
  make_desc(&d, QMOE_BACKEND_REFERENCE);
  s = qmoe_layer_create(&d, &layer);
  CHECK(s == QMOE_OK && layer != NULL, "layer_create: %s", qmoe_last_error());
  if (layer == NULL) return;

  s = qmoe_layer_get_props(layer, &props);
  CHECK(s == QMOE_OK && props.backend == QMOE_BACKEND_REFERENCE && props.num_experts == LE &&
            props.num_experts_global == LE && props.hidden == LH && props.intermediate == LI && props.top_k == LK &&
            props.act_dtype == QMOE_DTYPE_BF16 && props.scheme == QMOE_SCHEME_UNQUANTIZED &&
            strlen(props.method_name) > 0 && strlen(props.scheme_key) > 0,
        "props: %s", qmoe_last_error());

  xt = host(g_x, QMOE_DTYPE_BF16, 2, LM, LH, 0);
  lt = host(logits, QMOE_DTYPE_F32, 2, LM, LE, 0);
  wt = host(w, QMOE_DTYPE_F32, 2, LM, LK, 0);
  it = host(ids, QMOE_DTYPE_I32, 2, LM, LK, 0);
  memset(y1, 0xff, sizeof y1); /* NaN poison */
  yt = host(y1, QMOE_DTYPE_BF16, 2, LM, LH, 0);
  s = qmoe_layer_forward(layer, &xt, &lt, &yt, NULL);
  CHECK(s == QMOE_OK, "forward: %s", qmoe_last_error());

  s = qmoe_route(&lt, &d.router, NULL, &wt, &it, NULL);
  CHECK(s == QMOE_OK, "route: %s", qmoe_last_error());
  memset(y2, 0xff, sizeof y2);
  yt.data = y2;
  s = qmoe_layer_forward_routed(layer, &xt, &wt, &it, &yt, NULL);
  CHECK(s == QMOE_OK, "forward_routed: %s", qmoe_last_error());
  memset(y3, 0xff, sizeof y3);
  yt.data = y3;
  s = qmoe_fused_experts(&d, &xt, &wt, &it, &yt, NULL);
  CHECK(s == QMOE_OK, "fused_experts: %s", qmoe_last_error());
  CHECK(memcmp(y1, y2, sizeof y1) == 0, "forward and route + forward_routed differ");
  CHECK(memcmp(y1, y3, sizeof y1) == 0, "forward and fused_experts differ");

  oracle(w, ids, yref, bound);
  for (i = 0; i < LM * LH; ++i) {
    double err = fabs(bf16_to_f64(y1[i]) - yref[i]);
    if (!(err <= bound[i])) {
      CHECK(err <= bound[i], "y[%d, %d] = %.6g, oracle %.6g, bound %.3g", i / LH, i % LH, bf16_to_f64(y1[i]),
            yref[i], bound[i]);
    } else if (err / bound[i] > worst_ratio) {
      worst_ratio = err / bound[i];
      worst = i;
    }
  }
  CHECK(worst_ratio <= 1.0, "worst element %d", worst);

  /* Argument errors come back as statuses naming the tensor. */
  yt.data = y1;
  xt.dtype = QMOE_DTYPE_F16;
  s = qmoe_layer_forward(layer, &xt, &lt, &yt, NULL);
  CHECK(s == QMOE_ERR_BAD_INPUT && strstr(qmoe_last_error(), "x") != NULL, "status %d '%s'", (int)s,
        qmoe_last_error());
  xt.dtype = QMOE_DTYPE_BF16;
  xt.device = QMOE_DEVICE_CUDA;
  s = qmoe_layer_forward(layer, &xt, &lt, &yt, NULL);
  CHECK(s == QMOE_ERR_BAD_INPUT && strstr(qmoe_last_error(), "cuda") != NULL, "status %d '%s'", (int)s,
        qmoe_last_error());
  xt.device = QMOE_DEVICE_CPU;
  lt.shape[1] = LE + 1;
  s = qmoe_layer_forward(layer, &xt, &lt, &yt, NULL);
  CHECK(s == QMOE_ERR_BAD_INPUT && strstr(qmoe_last_error(), "router_logits") != NULL, "status %d '%s'", (int)s,
        qmoe_last_error());
  qmoe_layer_free(layer);

  /* A bad weight shape is refused at creation, naming the tensor. */
  make_desc(&d, QMOE_BACKEND_REFERENCE);
  d.experts.w2.weight.shape[2] = LI - 1;
  layer = (qmoe_layer_t*)&g_rng;
  s = qmoe_layer_create(&d, &layer);
  CHECK(s == QMOE_ERR_BAD_INPUT && layer == NULL && strstr(qmoe_last_error(), "w2") != NULL, "status %d '%s'",
        (int)s, qmoe_last_error());
  /* An unknown scheme code. */
  make_desc(&d, QMOE_BACKEND_REFERENCE);
  d.experts.scheme = 42;
  s = qmoe_layer_create(&d, &layer);
  CHECK(s == QMOE_ERR_BAD_INPUT && strstr(qmoe_last_error(), "scheme") != NULL, "status %d '%s'", (int)s,
        qmoe_last_error());
  qmoe_layer_free(NULL);
  qmoe_checkpoint_free(NULL);
}

int main(void) {
  test_version_and_errors();
  test_route();
  test_align();
  test_layer();
  printf("c_api_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
