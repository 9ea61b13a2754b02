// The C ABI on the CUDA backend with device pointers and a caller's stream: for several schemes the
// layer run on device tensors gives the bits of MoeLayer's CUDA backend run on host tensors (same
// kernels, so any difference is a marshalling, routing or stream-ordering bug); host tensors on a
// C ABI CUDA layer give the same bits too; device routing and align agree with the host ones.
// Built only with the CUDA backend; every test skips when no CUDA device is present.
#if defined(QMOE_HAVE_CUDA)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/c_api_views.h"
#include "common/tensor_check.h"
#include "cpu/ref/quantize.h"
#include "qmoe/c_api.h"

namespace qmoe {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU()                    \
  do {                                        \
    if (!have_device()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// A device copy of a host tensor, freed with the object.
struct DevTensor {
  void* ptr = nullptr;
  size_t bytes = 0;
  qmoe_tensor_t t{};
  DevTensor(const Tensor& h, cudaStream_t s) : bytes(h.nbytes()) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess);
    if (bytes) {
      EXPECT_EQ(cudaMemcpyAsync(ptr, h.raw(), bytes, cudaMemcpyHostToDevice, s), cudaSuccess);
    }
    t.data = ptr;
    t.dtype = static_cast<int32_t>(h.dtype());
    t.ndim = static_cast<int32_t>(h.dim());
    for (int64_t i = 0; i < h.dim(); ++i) t.shape[i] = h.size(i);
    t.device = QMOE_DEVICE_CUDA;
    cudaGetDevice(&t.device_id);
  }
  DevTensor(DType dt, Shape shape, cudaStream_t s) : DevTensor(Tensor(dt, std::move(shape)), s) {}
  ~DevTensor() { cudaFree(ptr); }
  Tensor to_host(DType dt, Shape shape, cudaStream_t s) const {
    Tensor h(dt, std::move(shape));
    EXPECT_EQ(cudaMemcpyAsync(h.raw_mut(), ptr, h.nbytes(), cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    return h;
  }
};

using test::experts_view;
using test::host_view;
using test::same_bits;

class CApiCuda : public ::testing::TestWithParam<int> {};

TEST_P(CApiCuda, DevicePointersOnACallerStreamMatchTheCudaLayer) {
  SKIP_WITHOUT_GPU();
  ref::SchemeSpec spec;
  switch (GetParam()) {
    case 0: spec.kind = SchemeKind::kUnquantized; break;
    case 1: spec.kind = SchemeKind::kWNA16; spec.group_size = 128; break;
    case 2: spec.kind = SchemeKind::kFP8W8A8; spec.fp8_strategy = Strategy::kChannel; spec.act = ActQuant::kFP8Token; break;
  }
  ref::RandomWeightsSpec rs;
  rs.scheme = spec;
  rs.num_experts = 8;
  rs.hidden = 256;
  rs.intermediate = 128;
  rs.seed = 21;
  ExpertWeights w = ref::make_random_expert_weights(rs);
  MoeConfig cfg;
  cfg.num_experts = 8;
  cfg.router.top_k = 2;
  cfg.router.renormalize = true;
  std::unique_ptr<MoeLayer> cuda_layer;
  try {
    cuda_layer = MoeLayer::create(w, cfg, Backend::kCuda);
  } catch (const Error& e) {
    // bf16, int4 g128 and fp8 channel/token are all CUDA schemes: a refusal is a regression.
    FAIL() << "the CUDA backend refused a scheme it supports: " << e.what();
  }
  qmoe_layer_desc_t d;
  qmoe_layer_desc_init(&d);
  d.experts = experts_view(w);
  d.router.top_k = 2;
  d.router.renormalize = 1;
  d.backend = QMOE_BACKEND_CUDA;
  qmoe_layer_t* layer = nullptr;
  ASSERT_EQ(qmoe_layer_create(&d, &layer), QMOE_OK) << qmoe_last_error();
  qmoe_layer_props_t p;
  ASSERT_EQ(qmoe_layer_get_props(layer, &p), QMOE_OK);
  EXPECT_EQ(std::string(p.method_name), cuda_layer->method_name());

  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (int64_t m : {1, 5, 64, 257}) {
    SCOPED_TRACE(m);
    Tensor x = test::random_tensor(DType::kBF16, {m, 256}, 100 + m, 0.05, 2.0);
    Tensor logits = test::random_tensor(DType::kF32, {m, 8}, 200 + m, 0.05, 3.0);
    Tensor expect = cuda_layer->forward(x, logits);
    // Inputs uploaded, forward and download all queued on the non-blocking stream `s`: only a
    // layer that runs on `s` sees the uploaded x and finishes before the download.
    DevTensor dx(x, s), dl(logits, s), dy(DType::kBF16, {m, 256}, s);
    ASSERT_EQ(qmoe_layer_forward(layer, &dx.t, &dl.t, &dy.t, s), QMOE_OK) << qmoe_last_error();
    EXPECT_TRUE(same_bits(dy.to_host(DType::kBF16, {m, 256}, s), expect)) << "device pointers, M " << m;

    RoutingResult r = route(logits, cfg.router);
    DevTensor dw(r.topk_weights, s), di(r.topk_ids, s), dy2(DType::kBF16, {m, 256}, s);
    ASSERT_EQ(qmoe_layer_forward_routed(layer, &dx.t, &dw.t, &di.t, &dy2.t, s), QMOE_OK) << qmoe_last_error();
    Tensor expect_routed = cuda_layer->forward_routed(x, r.topk_weights, r.topk_ids);
    EXPECT_TRUE(same_bits(dy2.to_host(DType::kBF16, {m, 256}, s), expect_routed)) << "routed, M " << m;

    // Host tensors on the C ABI's CUDA layer: staged on the stream, same bits.
    Tensor y(DType::kBF16, {m, 256});
    qmoe_tensor_t xt = host_view(x), lt = host_view(logits), yt = host_view(y);
    yt.data = y.raw_mut();
    ASSERT_EQ(qmoe_layer_forward(layer, &xt, &lt, &yt, s), QMOE_OK) << qmoe_last_error();
    EXPECT_TRUE(same_bits(y, expect)) << "host tensors, M " << m;
  }
  // A device tensor handed to the host-only reference backend is refused, not silently copied.
  d.backend = QMOE_BACKEND_REFERENCE;
  qmoe_layer_t* ref_layer = nullptr;
  ASSERT_EQ(qmoe_layer_create(&d, &ref_layer), QMOE_OK) << qmoe_last_error();
  DevTensor dx(DType::kBF16, {3, 256}, s), dl(DType::kF32, {3, 8}, s), dy(DType::kBF16, {3, 256}, s);
  EXPECT_EQ(qmoe_layer_forward(ref_layer, &dx.t, &dl.t, &dy.t, s), QMOE_ERR_BAD_INPUT);
  EXPECT_NE(std::string(qmoe_last_error()).find("runs on host tensors"), std::string::npos) << qmoe_last_error();
  qmoe_layer_free(ref_layer);
  qmoe_layer_free(layer);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Schemes, CApiCuda, ::testing::Values(0, 1, 2));

TEST(CApiCudaRouting, DeviceRouteAndAlignAgreeWithTheHost) {
  SKIP_WITHOUT_GPU();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int64_t m = 45;
  const int e = 16, k = 4, block = 16;
  Tensor logits = test::random_tensor(DType::kF32, {m, e}, 7, 0.05, 3.0);
  qmoe_router_config_t cfg;
  qmoe_router_config_init(&cfg);
  cfg.top_k = k;
  cfg.renormalize = 1;
  DevTensor dl(logits, s), dw(DType::kF32, {m, k}, s), di(DType::kI32, {m, k}, s);
  ASSERT_EQ(qmoe_route(&dl.t, &cfg, nullptr, &dw.t, &di.t, s), QMOE_OK) << qmoe_last_error();
  RouterConfig rc;
  rc.top_k = k;
  rc.renormalize = true;
  RoutingResult r = route(logits, rc);
  Tensor ids = di.to_host(DType::kI32, {m, k}, s);
  Tensor wts = dw.to_host(DType::kF32, {m, k}, s);
  for (int64_t i = 0; i < m * k; ++i) {
    ASSERT_EQ(ids.data<int32_t>()[i], r.topk_ids.data<int32_t>()[i]) << "slot " << i;
    EXPECT_NEAR(wts.data<float>()[i], r.topk_weights.data<float>()[i], 1e-6) << "slot " << i;  // device expf
  }
  int64_t cap = 0, blocks = 0;
  ASSERT_EQ(qmoe_align_block_size_sizes(m * k, e, block, &cap, &blocks), QMOE_OK);
  DevTensor ds(DType::kI32, {cap}, s), de(DType::kI32, {blocks}, s), dn(DType::kI32, {1}, s);
  ASSERT_EQ(qmoe_align_block_size(&di.t, e, block, nullptr, &ds.t, &de.t, &dn.t, s), QMOE_OK) << qmoe_last_error();
  AlignResult a = align_block_size(r.topk_ids.data<int32_t>(), m * k, e, block);
  Tensor sorted = ds.to_host(DType::kI32, {cap}, s), experts = de.to_host(DType::kI32, {blocks}, s),
         ntp = dn.to_host(DType::kI32, {1}, s);
  ASSERT_EQ(ntp.data<int32_t>()[0], a.num_tokens_post_padded);
  for (int64_t i = 0; i < a.num_tokens_post_padded; ++i)
    ASSERT_EQ(sorted.data<int32_t>()[i], a.sorted_token_ids[i]) << i;
  for (int64_t b = 0; b < a.num_tokens_post_padded / block; ++b)
    ASSERT_EQ(experts.data<int32_t>()[b], a.expert_ids[b]) << b;
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace qmoe
#endif  // QMOE_HAVE_CUDA
