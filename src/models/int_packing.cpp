// Integer packings of GPTQ / AWQ / compressed-tensors; see int_packing.h.
#include "models/int_packing.h"

namespace qmoe::models::packing {
namespace {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble j holds logical column kAwqOrder[j]

// Bit-dense little-endian packing of `n` codes of `bits` each, read with stride `in_stride`.
void pack_run(const uint8_t* in, int64_t in_stride, int64_t n, int bits, uint32_t* out, int64_t out_stride,
              int64_t words) {
  for (int64_t w = 0; w < words; ++w) out[w * out_stride] = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bit = static_cast<uint64_t>(i) * bits;
    uint64_t v = in[i * in_stride] & ((1u << bits) - 1u);
    int64_t w = static_cast<int64_t>(bit / 32);
    int sh = static_cast<int>(bit % 32);
    out[w * out_stride] |= static_cast<uint32_t>(v << sh);
    if (sh + bits > 32) out[(w + 1) * out_stride] |= static_cast<uint32_t>(v >> (32 - sh));  // straddles two words
  }
}
void unpack_run(const uint32_t* in, int64_t in_stride, int64_t n, int bits, uint8_t* out, int64_t out_stride) {
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bit = static_cast<uint64_t>(i) * bits;
    int64_t w = static_cast<int64_t>(bit / 32);
    int sh = static_cast<int>(bit % 32);
    uint64_t v = in[w * in_stride] >> sh;
    if (sh + bits > 32) v |= static_cast<uint64_t>(in[(w + 1) * in_stride]) << (32 - sh);
    out[i * out_stride] = static_cast<uint8_t>(v & ((1u << bits) - 1u));
  }
}

void check(const Tensor& t, DType d, int dims, const char* what) {
  QMOE_CHECK(t.dtype() == d && t.dim() == dims, kInternal, what, ": unexpected tensor ", dtype_name(t.dtype()), " ",
             shape_str(t.shape()));
}

}  // namespace

Tensor unpack_nibbles(const Tensor& pairs, int64_t K) {
  Shape s = pairs.shape();
  QMOE_CHECK(!s.empty() && s.back() * 2 == K, kInternal, "unpack_nibbles: ", shape_str(s), " vs K=", K);
  s.back() = K;
  Tensor r(DType::kU8, s);
  const uint8_t* p = pairs.data<uint8_t>();
  uint8_t* d = r.data_mut<uint8_t>();
  for (int64_t i = 0; i < r.numel(); ++i) d[i] = (i & 1) ? p[i >> 1] >> 4 : p[i >> 1] & 0xf;
  return r;
}

Tensor pack_nibbles(const Tensor& codes) {
  Shape s = codes.shape();
  QMOE_CHECK(!s.empty() && s.back() % 2 == 0, kInternal, "pack_nibbles: odd last dim ", shape_str(s));
  s.back() /= 2;
  Tensor r(DType::kU8, s);
  const uint8_t* c = codes.data<uint8_t>();
  uint8_t* d = r.data_mut<uint8_t>();
  for (int64_t i = 0; i < r.numel(); ++i) d[i] = static_cast<uint8_t>((c[2 * i] & 0xf) | ((c[2 * i + 1] & 0xf) << 4));
  return r;
}

Tensor ct_pack_int32(const Tensor& codes, int bits) {
  check(codes, DType::kU8, 2, "ct_pack_int32");
  const int64_t N = codes.size(0), K = codes.size(1), W = (K * bits + 31) / 32;
  Tensor r(DType::kI32, {N, W});
  for (int64_t n = 0; n < N; ++n)
    pack_run(codes.data<uint8_t>() + n * K, 1, K, bits, reinterpret_cast<uint32_t*>(r.data_mut<int32_t>()) + n * W, 1, W);
  return r;
}

Tensor ct_unpack_int32(const Tensor& packed, int bits, int64_t K) {
  check(packed, DType::kI32, 2, "ct_unpack_int32");
  const int64_t N = packed.size(0), W = packed.size(1);
  QMOE_CHECK(W == (K * bits + 31) / 32, kInternal, "ct_unpack_int32: ", W, " words for K=", K);
  Tensor r(DType::kU8, {N, K});
  for (int64_t n = 0; n < N; ++n)
    unpack_run(reinterpret_cast<const uint32_t*>(packed.data<int32_t>()) + n * W, 1, K, bits, r.data_mut<uint8_t>() + n * K, 1);
  return r;
}

Tensor ct_pack_int32_dim0(const Tensor& codes, int bits) {
  check(codes, DType::kU8, 2, "ct_pack_int32_dim0");
  const int64_t N = codes.size(0), G = codes.size(1), W = (N * bits + 31) / 32;
  Tensor r(DType::kI32, {W, G});
  for (int64_t g = 0; g < G; ++g)
    pack_run(codes.data<uint8_t>() + g, G, N, bits, reinterpret_cast<uint32_t*>(r.data_mut<int32_t>()) + g, G, W);
  return r;
}

Tensor ct_unpack_int32_dim0(const Tensor& packed, int bits, int64_t N) {
  check(packed, DType::kI32, 2, "ct_unpack_int32_dim0");
  const int64_t W = packed.size(0), G = packed.size(1);
  QMOE_CHECK(W == (N * bits + 31) / 32, kInternal, "ct_unpack_int32_dim0: ", W, " words for N=", N);
  Tensor r(DType::kU8, {N, G});
  for (int64_t g = 0; g < G; ++g)
    unpack_run(reinterpret_cast<const uint32_t*>(packed.data<int32_t>()) + g, G, N, bits, r.data_mut<uint8_t>() + g, G);
  return r;
}

Tensor gptq_pack_qweight(const Tensor& codes, int bits) {
  check(codes, DType::kU8, 2, "gptq_pack_qweight");
  const int64_t N = codes.size(0), K = codes.size(1), W = K * bits / 32;
  QMOE_CHECK(K * bits % 32 == 0, kInternal, "gptq_pack_qweight: K=", K, " not a multiple of ", 32 / bits);
  Tensor r(DType::kI32, {W, N});
  for (int64_t n = 0; n < N; ++n)  // column n of qweight packs row n of the codes along K
    pack_run(codes.data<uint8_t>() + n * K, 1, K, bits, reinterpret_cast<uint32_t*>(r.data_mut<int32_t>()) + n, N, W);
  return r;
}

Tensor gptq_unpack_qweight(const Tensor& qweight, int bits, int64_t K) {
  check(qweight, DType::kI32, 2, "gptq_unpack_qweight");
  const int64_t W = qweight.size(0), N = qweight.size(1);
  QMOE_CHECK(W * 32 == K * bits, kInternal, "gptq_unpack_qweight: ", W, " words for K=", K);
  Tensor r(DType::kU8, {N, K});
  for (int64_t n = 0; n < N; ++n)
    unpack_run(reinterpret_cast<const uint32_t*>(qweight.data<int32_t>()) + n, N, K, bits, r.data_mut<uint8_t>() + n * K, 1);
  return r;
}

Tensor gptq_pack_qzeros(const Tensor& zeros, int bits) {
  check(zeros, DType::kU8, 2, "gptq_pack_qzeros");
  const int64_t N = zeros.size(0), G = zeros.size(1), W = N * bits / 32;
  QMOE_CHECK(N * bits % 32 == 0, kInternal, "gptq_pack_qzeros: N=", N, " not a multiple of ", 32 / bits);
  Tensor minus1(DType::kU8, {G, N});  // GPTQ v1 stores zero - 1 (mod 2^b)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g)
      minus1.data_mut<uint8_t>()[g * N + n] = static_cast<uint8_t>((zeros.data<uint8_t>()[n * G + g] - 1) & ((1 << bits) - 1));
  Tensor r(DType::kI32, {G, W});
  for (int64_t g = 0; g < G; ++g)
    pack_run(minus1.data<uint8_t>() + g * N, 1, N, bits, reinterpret_cast<uint32_t*>(r.data_mut<int32_t>()) + g * W, 1, W);
  return r;
}

Tensor gptq_unpack_qzeros(const Tensor& qzeros, int bits, int64_t N) {
  check(qzeros, DType::kI32, 2, "gptq_unpack_qzeros");
  const int64_t G = qzeros.size(0), W = qzeros.size(1);
  QMOE_CHECK(W * 32 == N * bits, kInternal, "gptq_unpack_qzeros: ", W, " words for N=", N);
  Tensor r(DType::kU8, {N, G});
  std::vector<uint8_t> row(N);
  for (int64_t g = 0; g < G; ++g) {
    unpack_run(reinterpret_cast<const uint32_t*>(qzeros.data<int32_t>()) + g * W, 1, N, bits, row.data(), 1);
    for (int64_t n = 0; n < N; ++n) r.data_mut<uint8_t>()[n * G + g] = static_cast<uint8_t>((row[n] + 1) & ((1 << bits) - 1));
  }
  return r;
}

namespace {
// AWQ: [R, N] codes (row r, column n) <-> I32 [R, N/8] with the interleaved nibble order.
Tensor awq_pack(const uint8_t* at, int64_t R, int64_t N, int64_t rs, int64_t ns) {
  QMOE_CHECK(N % 8 == 0, kInternal, "awq pack: N=", N, " not a multiple of 8");
  Tensor r(DType::kI32, {R, N / 8});
  uint32_t* d = reinterpret_cast<uint32_t*>(r.data_mut<int32_t>());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t w = 0; w < N / 8; ++w) {
      uint32_t v = 0;
      for (int j = 0; j < 8; ++j) v |= static_cast<uint32_t>(at[i * rs + (w * 8 + kAwqOrder[j]) * ns] & 0xf) << (4 * j);
      d[i * (N / 8) + w] = v;
    }
  return r;
}
void awq_unpack(const Tensor& q, int64_t N, uint8_t* at, int64_t rs, int64_t ns) {
  const int64_t R = q.size(0);
  QMOE_CHECK(q.size(1) * 8 == N, kInternal, "awq unpack: ", q.size(1), " words for N=", N);
  const uint32_t* s = reinterpret_cast<const uint32_t*>(q.data<int32_t>());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t w = 0; w < N / 8; ++w)
      for (int j = 0; j < 8; ++j) at[i * rs + (w * 8 + kAwqOrder[j]) * ns] = (s[i * (N / 8) + w] >> (4 * j)) & 0xf;
}
}  // namespace

Tensor awq_pack_qweight(const Tensor& codes) {
  check(codes, DType::kU8, 2, "awq_pack_qweight");
  const int64_t N = codes.size(0), K = codes.size(1);
  return awq_pack(codes.data<uint8_t>(), K, N, 1, K);  // row k, column n of the [K, N] view
}
Tensor awq_unpack_qweight(const Tensor& qweight, int64_t N) {
  check(qweight, DType::kI32, 2, "awq_unpack_qweight");
  const int64_t K = qweight.size(0);
  Tensor r(DType::kU8, {N, K});
  awq_unpack(qweight, N, r.data_mut<uint8_t>(), 1, K);
  return r;
}
Tensor awq_pack_qzeros(const Tensor& zeros) {
  check(zeros, DType::kU8, 2, "awq_pack_qzeros");
  const int64_t N = zeros.size(0), G = zeros.size(1);
  return awq_pack(zeros.data<uint8_t>(), G, N, 1, G);
}
Tensor awq_unpack_qzeros(const Tensor& qzeros, int64_t N) {
  check(qzeros, DType::kI32, 2, "awq_unpack_qzeros");
  const int64_t G = qzeros.size(0);
  Tensor r(DType::kU8, {N, G});
  awq_unpack(qzeros, N, r.data_mut<uint8_t>(), 1, G);
  return r;
}

}  // namespace qmoe::models::packing
