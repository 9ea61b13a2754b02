// Checkpoint packings <-> qmoe code tensors: compressed-tensors dense int32 bit packing (rows and
// dim 0), two nibbles per byte, GPTQ qweight / qzeros (v1, zero - 1), AWQ interleaved nibbles.
// Layout facts: formats.md §2a "Int packing order", §2c GPTQ / AWQ; see packing.h.
#include "formats/packing.h"

#include <string>
#include <vector>

#include "qmoe/error.h"

namespace qmoe::formats {

namespace {

void check_bits(int bits, const char* what) {
  QMOE_CHECK(bits >= 1 && bits <= 8, kBadInput, what, ": bit width ", bits, " is outside 1..8");
}

void check_dtype(const Tensor& t, DType want, const char* what) {
  QMOE_CHECK(t.defined(), kBadInput, what, ": tensor is absent");
  QMOE_CHECK(t.dtype() == want, kBadInput, what, ": expected dtype ", dtype_name(want), ", got ",
             dtype_name(t.dtype()), " ", shape_str(t.shape()));
}

void check_rank(const Tensor& t, int64_t rank, const char* what) {
  QMOE_CHECK(rank < 0 ? t.dim() >= 1 : t.dim() == rank, kBadInput, what, ": expected a ",
             rank < 0 ? std::string("tensor of rank >= 1") : str(rank, "-d tensor"), ", got ", shape_str(t.shape()));
}

// Every code < 2^bits.
void check_codes(const Tensor& codes, int bits, const char* what) {
  const uint8_t* c = codes.data<uint8_t>();
  const unsigned lim = 1u << bits;
  for (int64_t i = 0; i < codes.numel(); ++i)
    QMOE_CHECK(c[i] < lim, kBadInput, what, ": code ", int{c[i]}, " at flat index ", i, " does not fit in ", bits,
               " bits");
}

Shape with_last(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

uint32_t word_at(const Tensor& t, int64_t i) { return static_cast<uint32_t>(t.data<int32_t>()[i]); }

void check_gptq_bits(int bits, const char* what) {
  if (bits == 3) unsupported(what, ": 3-bit GPTQ packing (its codes straddle words) is not supported");
  QMOE_CHECK(bits == 2 || bits == 4 || bits == 8, kBadInput, what, ": GPTQ bit width ", bits,
             " must be 2, 4 or 8");
}

}  // namespace

// ---- compressed-tensors dense rows ----------------------------------------------------------------
void ct_pack_row(const uint8_t* codes, int64_t n, int bits, int32_t* words) {
  const int64_t nw = ct_packed_words(n, bits);
  // accumulate in uint64 so a code crossing a word boundary spills into the next word
  for (int64_t w = 0; w < nw; ++w) words[w] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits, w = bit >> 5, sh = bit & 31;
    const uint64_t v = static_cast<uint64_t>(codes[i]) << sh;
    words[w] = static_cast<int32_t>(static_cast<uint32_t>(words[w]) | static_cast<uint32_t>(v));
    if (sh + bits > 32) words[w + 1] = static_cast<int32_t>(static_cast<uint32_t>(words[w + 1]) | static_cast<uint32_t>(v >> 32));
  }
}

void ct_unpack_row(const int32_t* words, int64_t n, int bits, uint8_t* codes) {
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits, w = bit >> 5, sh = bit & 31;
    uint64_t v = static_cast<uint32_t>(words[w]);
    if (sh + bits > 32) v |= static_cast<uint64_t>(static_cast<uint32_t>(words[w + 1])) << 32;
    codes[i] = static_cast<uint8_t>((v >> sh) & mask);
  }
}

void pack_nibbles_row(const uint8_t* codes, int64_t n, uint8_t* packed) {
  for (int64_t j = 0; j < n / 2; ++j)
    packed[j] = static_cast<uint8_t>((codes[2 * j] & 0xf) | ((codes[2 * j + 1] & 0xf) << 4));
  if (n & 1) packed[n / 2] = codes[n - 1] & 0xf;
}

void unpack_nibbles_row(const uint8_t* packed, int64_t n, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = (i & 1) ? packed[i >> 1] >> 4 : packed[i >> 1] & 0xf;
}

// ---- tensors --------------------------------------------------------------------------------------
Tensor pack_nibbles(const Tensor& codes) {
  check_dtype(codes, DType::kU8, "pack_nibbles");
  check_rank(codes, -1, "pack_nibbles");
  check_codes(codes, 4, "pack_nibbles");
  const int64_t K = codes.size(-1), rows = K ? codes.numel() / K : 0, P = (K + 1) / 2;
  Tensor r(DType::kU8, with_last(codes.shape(), P));
  for (int64_t i = 0; i < rows; ++i) pack_nibbles_row(codes.data<uint8_t>() + i * K, K, r.data_mut<uint8_t>() + i * P);
  return r;
}

Tensor unpack_nibbles(const Tensor& packed, int64_t K) {
  check_dtype(packed, DType::kU8, "unpack_nibbles");
  check_rank(packed, -1, "unpack_nibbles");
  const int64_t P = (K + 1) / 2;
  QMOE_CHECK(K >= 0 && packed.size(-1) == P, kBadInput, "unpack_nibbles: ", K, " codes need ", P,
             " bytes per row, got ", shape_str(packed.shape()));
  const int64_t rows = P ? packed.numel() / P : 0;
  Tensor r(DType::kU8, with_last(packed.shape(), K));
  for (int64_t i = 0; i < rows; ++i)
    unpack_nibbles_row(packed.data<uint8_t>() + i * P, K, r.data_mut<uint8_t>() + i * K);
  return r;
}

Tensor ct_pack_int32(const Tensor& codes, int bits) {
  check_bits(bits, "ct_pack_int32");
  check_dtype(codes, DType::kU8, "ct_pack_int32");
  check_rank(codes, -1, "ct_pack_int32");
  check_codes(codes, bits, "ct_pack_int32");
  const int64_t K = codes.size(-1), W = ct_packed_words(K, bits), rows = K ? codes.numel() / K : 0;
  Tensor r(DType::kI32, with_last(codes.shape(), W));
  for (int64_t i = 0; i < rows; ++i) ct_pack_row(codes.data<uint8_t>() + i * K, K, bits, r.data_mut<int32_t>() + i * W);
  return r;
}

Tensor ct_unpack_int32(const Tensor& packed, int bits, int64_t K) {
  check_bits(bits, "ct_unpack_int32");
  check_dtype(packed, DType::kI32, "ct_unpack_int32");
  check_rank(packed, -1, "ct_unpack_int32");
  const int64_t W = ct_packed_words(K, bits);
  QMOE_CHECK(K >= 0 && packed.size(-1) == W, kBadInput, "ct_unpack_int32: ", K, " ", bits, "-bit codes per row need ",
             W, " int32 words, got ", shape_str(packed.shape()));
  const int64_t rows = W ? packed.numel() / W : 0;
  Tensor r(DType::kU8, with_last(packed.shape(), K));
  for (int64_t i = 0; i < rows; ++i) ct_unpack_row(packed.data<int32_t>() + i * W, K, bits, r.data_mut<uint8_t>() + i * K);
  return r;
}

Tensor ct_pack_int32_dim0(const Tensor& codes, int bits) {
  check_bits(bits, "ct_pack_int32_dim0");
  check_dtype(codes, DType::kU8, "ct_pack_int32_dim0");
  check_rank(codes, 2, "ct_pack_int32_dim0");
  check_codes(codes, bits, "ct_pack_int32_dim0");
  const int64_t N = codes.size(0), G = codes.size(1), W = ct_packed_words(N, bits);
  Tensor r(DType::kI32, {W, G});
  std::vector<uint8_t> col(N);
  std::vector<int32_t> words(W);
  for (int64_t g = 0; g < G; ++g) {  // each column is one dense row along dim 0
    for (int64_t n = 0; n < N; ++n) col[n] = codes.data<uint8_t>()[n * G + g];
    ct_pack_row(col.data(), N, bits, words.data());
    for (int64_t w = 0; w < W; ++w) r.data_mut<int32_t>()[w * G + g] = words[w];
  }
  return r;
}

Tensor ct_unpack_int32_dim0(const Tensor& packed, int bits, int64_t N) {
  check_bits(bits, "ct_unpack_int32_dim0");
  check_dtype(packed, DType::kI32, "ct_unpack_int32_dim0");
  check_rank(packed, 2, "ct_unpack_int32_dim0");
  const int64_t W = ct_packed_words(N, bits), G = packed.size(1);
  QMOE_CHECK(N >= 0 && packed.size(0) == W, kBadInput, "ct_unpack_int32_dim0: ", N, " ", bits,
             "-bit codes along dim 0 need ", W, " int32 rows, got ", shape_str(packed.shape()));
  Tensor r(DType::kU8, {N, G});
  std::vector<int32_t> words(W);
  std::vector<uint8_t> col(N);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t w = 0; w < W; ++w) words[w] = packed.data<int32_t>()[w * G + g];
    ct_unpack_row(words.data(), N, bits, col.data());
    for (int64_t n = 0; n < N; ++n) r.data_mut<uint8_t>()[n * G + g] = col[n];
  }
  return r;
}

// ---- GPTQ -----------------------------------------------------------------------------------------
Tensor gptq_pack_qweight(const Tensor& codes, int bits) {
  check_gptq_bits(bits, "gptq_pack_qweight");
  check_dtype(codes, DType::kU8, "gptq_pack_qweight");
  check_rank(codes, 2, "gptq_pack_qweight");
  check_codes(codes, bits, "gptq_pack_qweight");
  const int64_t N = codes.size(0), K = codes.size(1), per = 32 / bits;
  QMOE_CHECK(K % per == 0, kBadInput, "gptq_pack_qweight: input size ", K, " is not a multiple of ", per);
  Tensor r(DType::kI32, {K / per, N});
  for (int64_t w = 0; w < K / per; ++w)
    for (int64_t n = 0; n < N; ++n) {
      uint32_t v = 0;
      for (int64_t j = 0; j < per; ++j) v |= static_cast<uint32_t>(codes.data<uint8_t>()[n * K + w * per + j]) << (bits * j);
      r.data_mut<int32_t>()[w * N + n] = static_cast<int32_t>(v);
    }
  return r;
}

Tensor gptq_unpack_qweight(const Tensor& qweight, int bits, int64_t K) {
  check_gptq_bits(bits, "gptq_unpack_qweight");
  check_dtype(qweight, DType::kI32, "gptq_unpack_qweight");
  check_rank(qweight, 2, "gptq_unpack_qweight");
  const int64_t per = 32 / bits, N = qweight.size(1);
  QMOE_CHECK(K >= 0 && K % per == 0 && qweight.size(0) == K / per, kBadInput, "gptq_unpack_qweight: input size ", K,
             " needs qweight [", K / per, ", N] with K a multiple of ", per, ", got ", shape_str(qweight.shape()));
  Tensor r(DType::kU8, {N, K});
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      r.data_mut<uint8_t>()[n * K + k] = static_cast<uint8_t>((word_at(qweight, (k / per) * N + n) >> (bits * (k % per))) & mask);
  return r;
}

Tensor gptq_pack_qzeros(const Tensor& zeros, int bits, bool v1) {
  check_gptq_bits(bits, "gptq_pack_qzeros");
  check_dtype(zeros, DType::kU8, "gptq_pack_qzeros");
  check_rank(zeros, 2, "gptq_pack_qzeros");
  const int64_t N = zeros.size(0), G = zeros.size(1), per = 32 / bits;
  QMOE_CHECK(N % per == 0, kBadInput, "gptq_pack_qzeros: output size ", N, " is not a multiple of ", per);
  Tensor r(DType::kI32, {G, N / per});
  for (int64_t g = 0; g < G; ++g)
    for (int64_t w = 0; w < N / per; ++w) {
      uint32_t v = 0;
      for (int64_t j = 0; j < per; ++j) {
        const int64_t n = w * per + j;
        const int z = zeros.data<uint8_t>()[n * G + g];
        if (v1)
          QMOE_CHECK(z >= 1 && z <= (1 << bits), kBadInput, "gptq_pack_qzeros: zero point ", z, " at [", n, ", ", g,
                     "] cannot be stored as zero - 1 in ", bits, " bits (GPTQ v1 needs 1 .. ", 1 << bits, ")");
        else
          QMOE_CHECK(z < (1 << bits), kBadInput, "gptq_pack_qzeros: zero point ", z, " at [", n, ", ", g,
                     "] does not fit ", bits, " bits (GPTQ v2 stores 0 .. ", (1 << bits) - 1, ")");
        v |= static_cast<uint32_t>(v1 ? z - 1 : z) << (bits * j);
      }
      r.data_mut<int32_t>()[g * (N / per) + w] = static_cast<int32_t>(v);
    }
  return r;
}

Tensor gptq_unpack_qzeros(const Tensor& qzeros, int bits, int64_t N, bool v1) {
  check_gptq_bits(bits, "gptq_unpack_qzeros");
  check_dtype(qzeros, DType::kI32, "gptq_unpack_qzeros");
  check_rank(qzeros, 2, "gptq_unpack_qzeros");
  const int64_t per = 32 / bits, G = qzeros.size(0);
  QMOE_CHECK(N >= 0 && N % per == 0 && qzeros.size(1) == N / per, kBadInput, "gptq_unpack_qzeros: output size ", N,
             " needs qzeros [groups, ", N / per, "] with N a multiple of ", per, ", got ", shape_str(qzeros.shape()));
  Tensor r(DType::kU8, {N, G});
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t stored = (word_at(qzeros, g * (N / per) + n / per) >> (bits * (n % per))) & mask;
      const uint32_t z = stored + (v1 ? 1u : 0u);  // v1: zero - 1 stored
      QMOE_CHECK(z <= 255u, kBadInput, "gptq_unpack_qzeros: stored zero ", stored, " at group ", g, ", column ", n,
                 " reads as ", z, ", which does not fit the U8 zero point");
      r.data_mut<uint8_t>()[n * G + g] = static_cast<uint8_t>(z);
    }
  return r;
}

// ---- AWQ ------------------------------------------------------------------------------------------
namespace {
// [R, N] codes (row-major, view of `src` with strides) -> I32 [R, N/8] AWQ words. get(r, n) reads.
template <class Get>
Tensor awq_pack_rows(int64_t R, int64_t N, Get get) {
  Tensor t(DType::kI32, {R, N / 8});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t w = 0; w < N / 8; ++w) {
      uint32_t v = 0;
      for (int j = 0; j < 8; ++j) v |= static_cast<uint32_t>(get(r, w * 8 + j)) << (4 * kAwqNibble[j]);
      t.data_mut<int32_t>()[r * (N / 8) + w] = static_cast<int32_t>(v);
    }
  return t;
}
uint8_t awq_code(const Tensor& q, int64_t r, int64_t n, int64_t N) {
  return static_cast<uint8_t>((word_at(q, r * (N / 8) + n / 8) >> (4 * kAwqNibble[n % 8])) & 0xfu);
}
void check_awq_packed(const Tensor& q, int64_t N, const char* what) {
  check_dtype(q, DType::kI32, what);
  check_rank(q, 2, what);
  QMOE_CHECK(N >= 0 && N % 8 == 0 && q.size(1) == N / 8, kBadInput, what, ": output size ", N,
             " needs [rows, ", N / 8, "] words with N a multiple of 8, got ", shape_str(q.shape()));
}
}  // namespace

Tensor awq_pack_qweight(const Tensor& codes) {
  check_dtype(codes, DType::kU8, "awq_pack_qweight");
  check_rank(codes, 2, "awq_pack_qweight");
  check_codes(codes, 4, "awq_pack_qweight");
  const int64_t N = codes.size(0), K = codes.size(1);
  QMOE_CHECK(N % 8 == 0, kBadInput, "awq_pack_qweight: output size ", N, " is not a multiple of 8");
  const uint8_t* c = codes.data<uint8_t>();
  return awq_pack_rows(K, N, [&](int64_t k, int64_t n) { return c[n * K + k]; });  // [K, N/8]: transposed
}

Tensor awq_unpack_qweight(const Tensor& qweight, int64_t N) {
  check_awq_packed(qweight, N, "awq_unpack_qweight");
  const int64_t K = qweight.size(0);
  Tensor r(DType::kU8, {N, K});
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) r.data_mut<uint8_t>()[n * K + k] = awq_code(qweight, k, n, N);
  return r;
}

Tensor awq_pack_qzeros(const Tensor& zeros) {
  check_dtype(zeros, DType::kU8, "awq_pack_qzeros");
  check_rank(zeros, 2, "awq_pack_qzeros");
  check_codes(zeros, 4, "awq_pack_qzeros");
  const int64_t N = zeros.size(0), G = zeros.size(1);
  QMOE_CHECK(N % 8 == 0, kBadInput, "awq_pack_qzeros: output size ", N, " is not a multiple of 8");
  const uint8_t* z = zeros.data<uint8_t>();
  return awq_pack_rows(G, N, [&](int64_t g, int64_t n) { return z[n * G + g]; });
}

Tensor awq_unpack_qzeros(const Tensor& qzeros, int64_t N) {
  check_awq_packed(qzeros, N, "awq_unpack_qzeros");
  const int64_t G = qzeros.size(0);
  Tensor r(DType::kU8, {N, G});
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) r.data_mut<uint8_t>()[n * G + g] = awq_code(qzeros, g, n, N);
  return r;
}

// ---- canonical ------------------------------------------------------------------------------------
Tensor canonical_to_codes(const Tensor& weight, int bits, int64_t K) {
  if (bits == 4) return unpack_nibbles(weight, K);
  if (bits != 8) unsupported("canonical int weights are 4- or 8-bit, got ", bits, " bits");
  check_dtype(weight, DType::kU8, "canonical_to_codes");
  QMOE_CHECK(weight.dim() >= 1 && weight.size(-1) == K, kBadInput, "canonical_to_codes: 8-bit weight ",
             shape_str(weight.shape()), " does not end in K = ", K);
  return weight;
}

Tensor codes_to_canonical(const Tensor& codes, int bits) {
  if (bits == 4) return pack_nibbles(codes);
  if (bits != 8) unsupported("canonical int weights are 4- or 8-bit, got ", bits, " bits");
  check_dtype(codes, DType::kU8, "codes_to_canonical");
  return codes;
}

}  // namespace qmoe::formats
