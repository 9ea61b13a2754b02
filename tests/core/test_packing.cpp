// Tests of src/formats/packing: hand-worked words for every packing (compressed-tensors dense
// int32 rows and dim 0 for several bit widths, nibble pairs, GPTQ qweight / qzeros v1, AWQ
// interleave), a bit-by-bit reference for the dense packing over b = 1..8 and odd sizes, round
// trips of every packing on random codes, and the errors for malformed inputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/error_check.h"
#include "core/codecs.h"
#include "formats/packing.h"
#include "qmoe/error.h"

namespace {

using namespace qmoe;
using namespace qmoe::formats;

Tensor u8(Shape s, const std::vector<int>& v) {
  Tensor t(DType::kU8, std::move(s));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size(); ++i) t.data_mut<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
  return t;
}
Tensor i32(Shape s, const std::vector<uint32_t>& v) {
  Tensor t(DType::kI32, std::move(s));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size(); ++i) t.data_mut<int32_t>()[i] = static_cast<int32_t>(v[i]);
  return t;
}
Tensor random_codes(Shape s, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t(DType::kU8, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_mut<uint8_t>()[i] = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
  return t;
}
void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  const auto* x = static_cast<const uint8_t*>(a.raw());
  const auto* y = static_cast<const uint8_t*>(b.raw());
  for (size_t i = 0; i < a.nbytes(); ++i) ASSERT_EQ(x[i], y[i]) << "byte " << i;
}
void expect_words(const Tensor& t, const std::vector<uint32_t>& want) {
  ASSERT_EQ(t.dtype(), DType::kI32);
  ASSERT_EQ(static_cast<size_t>(t.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(static_cast<uint32_t>(t.data<int32_t>()[i]), want[i]) << "word " << i << " of " << shape_str(t.shape());
}
using qmoe::test::expect_bad_input;

// ---- compressed-tensors dense packing: hand-worked words ------------------------------------------
TEST(CtPacking, HandWorked3Bit) {
  // 11 codes x 3 bits = 33 bits. From bit 31 down: code 10's low two bits "11", then codes 9..0
  // = 010 001 000 111 110 101 100 011 010 001 -> 0b11010001000111110101100011010001 = 0xd11f58d1;
  // code 10's high bit (7 = 0b111) spills into bit 0 of word 1.
  Tensor c = u8({1, 11}, {1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 7});
  Tensor p = ct_pack_int32(c, 3);
  EXPECT_EQ(p.shape(), (Shape{1, 2}));
  expect_words(p, {0xd11f58d1u, 0x1u});
  expect_same(ct_unpack_int32(p, 3, 11), c);
}
TEST(CtPacking, HandWorked4Bit) {
  // element j of word w is bits [4j, 4j+4): codes 0..7 -> 0x76543210, code 8 alone in word 1
  Tensor c = u8({1, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  expect_words(ct_pack_int32(c, 4), {0x76543210u, 0x8u});
  expect_same(ct_unpack_int32(ct_pack_int32(c, 4), 4, 9), c);
}
TEST(CtPacking, HandWorked5And8Bit) {
  // 5 bits: 7 codes = 35 bits; code 6 = 12 = 0b01100 puts "00" at bits 30..31 and "011" in word 1
  // (12 >> 2 = 3); word 0 = 00|11111|00000|01001|11110|00011|10001 = 0x3e04f871.
  expect_words(ct_pack_int32(u8({1, 7}, {17, 3, 30, 9, 0, 31, 12}), 5), {0x3e04f871u, 0x3u});
  // 8 bits: bytes little-endian within the word
  expect_words(ct_pack_int32(u8({1, 5}, {0x11, 0x22, 0x33, 0x44, 0x55}), 8), {0x44332211u, 0x55u});
  // 1 bit: element i at bit i; ones at 0, 2, 3, 31 and 32
  std::vector<int> ones(33, 0);
  for (int i : {0, 2, 3, 31, 32}) ones[i] = 1;
  expect_words(ct_pack_int32(u8({1, 33}, ones), 1), {0x8000000du, 0x1u});
}
TEST(CtPacking, SignedOffset) {
  EXPECT_EQ(ct_offset_code(-8, 4), 0);
  EXPECT_EQ(ct_offset_code(7, 4), 15);
  EXPECT_EQ(ct_offset_code(0, 4), 8);
  EXPECT_EQ(ct_offset_code(-128, 8), 0);
  EXPECT_EQ(ct_offset_code(127, 8), 255);
  EXPECT_EQ(ct_offset_code(-1, 1), 0);
  EXPECT_EQ(ct_signed_value(0, 4), -8);
  EXPECT_EQ(ct_signed_value(200, 8), 72);
  for (int b = 1; b <= 8; ++b)
    for (int q = -(1 << (b - 1)); q < (1 << (b - 1)); ++q) EXPECT_EQ(ct_signed_value(ct_offset_code(q, b), b), q);
}
TEST(CtPacking, HandWorkedDim0) {
  // zero points [N = 9, G = 2] packed along N: column 0 = 0..8, column 1 = 15 - (0..8).
  std::vector<int> v;
  for (int n = 0; n < 9; ++n) v.push_back(n), v.push_back(15 - n);
  Tensor z = u8({9, 2}, v);
  Tensor p = ct_pack_int32_dim0(z, 4);
  EXPECT_EQ(p.shape(), (Shape{2, 2}));
  // row 0: [col0 = 0x76543210, col1 = 0x89abcdef]; row 1: [8, 7]
  expect_words(p, {0x76543210u, 0x89abcdefu, 0x8u, 0x7u});
  expect_same(ct_unpack_int32_dim0(p, 4, 9), z);
}

// Bit-by-bit reference: a std::vector<bool> stream where code i occupies bits [i*b, i*b+b).
std::vector<uint32_t> reference_pack(const std::vector<uint8_t>& c, int b) {
  std::vector<bool> bits(((c.size() * b + 31) / 32) * 32, false);
  for (size_t i = 0; i < c.size(); ++i)
    for (int j = 0; j < b; ++j) bits[i * b + j] = (c[i] >> j) & 1;
  std::vector<uint32_t> w(bits.size() / 32, 0);
  for (size_t i = 0; i < bits.size(); ++i)
    if (bits[i]) w[i / 32] |= 1u << (i % 32);
  return w;
}

TEST(CtPacking, MatchesBitStreamAllWidthsOddSizes) {
  for (int b = 1; b <= 8; ++b)
    for (int64_t K : {1, 3, 31, 32, 33, 67, 129, 257}) {
      Tensor c = random_codes({3, 5, K}, b, static_cast<uint32_t>(b * 1000 + K));  // 3-D: [E, N, K]
      Tensor p = ct_pack_int32(c, b);
      ASSERT_EQ(p.shape(), (Shape{3, 5, (K * b + 31) / 32}));
      const int64_t W = p.size(2);
      for (int64_t r = 0; r < 15; ++r) {
        std::vector<uint8_t> row(c.data<uint8_t>() + r * K, c.data<uint8_t>() + (r + 1) * K);
        std::vector<uint32_t> want = reference_pack(row, b);
        for (int64_t w = 0; w < W; ++w)
          ASSERT_EQ(static_cast<uint32_t>(p.data<int32_t>()[r * W + w]), want[w]) << "b=" << b << " K=" << K;
      }
      expect_same(ct_unpack_int32(p, b, K), c);
      Tensor z = random_codes({K, 7}, b, static_cast<uint32_t>(b * 77 + K));
      expect_same(ct_unpack_int32_dim0(ct_pack_int32_dim0(z, b), b, K), z);
      // dim 0 packing = row packing of the transpose
      Tensor pz = ct_pack_int32_dim0(z, b);
      for (int64_t g = 0; g < 7; ++g) {
        std::vector<uint8_t> col;
        for (int64_t n = 0; n < K; ++n) col.push_back(z.data<uint8_t>()[n * 7 + g]);
        std::vector<uint32_t> want = reference_pack(col, b);
        for (int64_t w = 0; w < pz.size(0); ++w)
          ASSERT_EQ(static_cast<uint32_t>(pz.data<int32_t>()[w * 7 + g]), want[w]) << "dim0 b=" << b << " K=" << K;
      }
    }
}

TEST(CtPacking, Errors) {
  expect_bad_input([] { ct_pack_int32(u8({1, 2}, {3, 4}), 2); });        // 4 does not fit in 2 bits
  expect_bad_input([] { ct_pack_int32(u8({1, 2}, {3, 4}), 9); });        // width outside 1..8
  EXPECT_EQ(ct_unpack_int32(i32({1, 2}, {0, 0}), 4, 9).numel(), 9);      // 9 nibbles need 2 words...
  expect_bad_input([] { ct_unpack_int32(i32({1, 1}, {0}), 4, 9); });     // ... not 1
  expect_bad_input([] { ct_unpack_int32(u8({1, 2}, {0, 0}), 4, 9); });   // wrong dtype
  expect_bad_input([] { ct_unpack_int32_dim0(i32({1, 3}, {0, 0, 0}), 4, 9); });
  expect_bad_input([] { ct_pack_int32_dim0(u8({2, 2, 1}, {0, 0, 0, 0}), 4); });  // dim 0 packing is 2-D
}

// ---- nibbles -------------------------------------------------------------------------------------
TEST(Nibbles, HandWorkedAndRoundTrip) {
  Tensor c = u8({2, 5}, {1, 2, 3, 4, 5, 15, 14, 0, 9, 7});
  Tensor p = pack_nibbles(c);
  ASSERT_EQ(p.shape(), (Shape{2, 3}));
  const int want[] = {0x21, 0x43, 0x05, 0xef, 0x90, 0x07};  // low nibble = even index
  for (int i = 0; i < 6; ++i) EXPECT_EQ(p.data<uint8_t>()[i], want[i]) << i;
  expect_same(unpack_nibbles(p, 5), c);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(codec::nibble_at(p.data<uint8_t>() + 3, i), c.data<uint8_t>()[5 + i]);
  Tensor r = random_codes({3, 4, 129}, 4, 5);
  expect_same(unpack_nibbles(pack_nibbles(r), 129), r);
  Tensor r2 = random_codes({7, 64}, 4, 6);
  expect_same(canonical_to_codes(codes_to_canonical(r2, 4), 4, 64), r2);
  expect_same(codes_to_canonical(r2, 8), r2);
  expect_bad_input([] { pack_nibbles(u8({1, 2}, {16, 0})); });
  expect_bad_input([] { unpack_nibbles(u8({1, 2}, {0, 0}), 5); });
  try {
    codes_to_canonical(u8({1, 2}, {0, 0}), 3);
    ADD_FAILURE() << "3-bit canonical accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

// ---- GPTQ ------------------------------------------------------------------------------------------
TEST(Gptq, HandWorkedQweight) {
  // codes[n][k] = (k + n) % 16, N = 2, K = 8: qweight [1, 2], column n packs k = 0..7 at bits 4k.
  std::vector<int> v;
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 8; ++k) v.push_back((k + n) % 16);
  Tensor c = u8({2, 8}, v);
  Tensor q = gptq_pack_qweight(c, 4);
  ASSERT_EQ(q.shape(), (Shape{1, 2}));
  expect_words(q, {0x76543210u, 0x87654321u});
  expect_same(gptq_unpack_qweight(q, 4, 8), c);
  // 8 bits: four per word
  Tensor c8 = u8({1, 4}, {0x10, 0x20, 0x30, 0xff});
  expect_words(gptq_pack_qweight(c8, 8), {0xff302010u});
}
TEST(Gptq, HandWorkedQzerosStoredMinusOne) {
  // zeros 1..8 of 8 output columns, one group: stored 0..7 -> 0x76543210; symmetric 8 -> 7s
  Tensor z = u8({8, 1}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor q = gptq_pack_qzeros(z, 4);
  ASSERT_EQ(q.shape(), (Shape{1, 1}));
  expect_words(q, {0x76543210u});
  expect_same(gptq_unpack_qzeros(q, 4, 8), z);
  expect_words(gptq_pack_qzeros(u8({8, 1}, {8, 8, 8, 8, 8, 8, 8, 8}), 4), {0x77777777u});
  // a stored 15 reads as zero point 16 (representable as a U8 zero point)
  Tensor z16 = gptq_unpack_qzeros(i32({1, 1}, {0xf0000000u}), 4, 8);
  EXPECT_EQ(z16.data<uint8_t>()[7], 16);
  EXPECT_EQ(z16.data<uint8_t>()[0], 1);
}
TEST(Gptq, RoundTripsAndErrors) {
  for (int b : {2, 4, 8}) {
    const int64_t per = 32 / b, N = 3 * per, K = 5 * per, G = 3;
    Tensor c = random_codes({N, K}, b, 11 + b);
    Tensor q = gptq_pack_qweight(c, b);
    ASSERT_EQ(q.shape(), (Shape{K / per, N}));
    expect_same(gptq_unpack_qweight(q, b, K), c);
    Tensor z = random_codes({N, G}, b, 21 + b);
    for (int64_t i = 0; i < z.numel(); ++i)  // v1 stores z - 1: zero points 1 .. 2^b - 1 (U8)
      z.data_mut<uint8_t>()[i] = static_cast<uint8_t>(std::max<int>(1, z.data<uint8_t>()[i]));
    Tensor qz = gptq_pack_qzeros(z, b);
    ASSERT_EQ(qz.shape(), (Shape{G, N / per}));
    expect_same(gptq_unpack_qzeros(qz, b, N), z);
  }
  expect_bad_input([] { gptq_pack_qzeros(u8({8, 1}, {0, 1, 1, 1, 1, 1, 1, 1}), 4); });  // zero 0 unstorable
  expect_bad_input([] { gptq_unpack_qzeros(i32({1, 1}, {0xffu}), 8, 4); });             // 255 + 1 > U8
  expect_bad_input([] { gptq_pack_qweight(u8({1, 7}, {0, 0, 0, 0, 0, 0, 0}), 4); });    // K % 8
  expect_bad_input([] { gptq_unpack_qweight(i32({2, 1}, {0, 0}), 4, 8); });             // K/8 rows
  try {
    gptq_pack_qweight(u8({1, 32}, std::vector<int>(32, 0)), 3);
    ADD_FAILURE() << "3-bit GPTQ accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

// ---- AWQ -------------------------------------------------------------------------------------------
TEST(Awq, HandWorkedInterleave) {
  // logical columns 0..7 of one input row: nibble i holds column [0, 2, 4, 6, 1, 3, 5, 7][i]
  // (AutoAWQ's order_map), so the word reads 7 5 3 1 6 4 2 0 from the top nibble: 0x75316420.
  Tensor c = u8({8, 1}, {0, 1, 2, 3, 4, 5, 6, 7});  // [N = 8, K = 1]
  Tensor q = awq_pack_qweight(c);
  ASSERT_EQ(q.shape(), (Shape{1, 1}));
  expect_words(q, {0x75316420u});
  expect_same(awq_unpack_qweight(q, 8), c);
  // unpack = vLLM's reverse_awq_order: shifts 0,4,..,28 give physical nibbles, logical j = physical [0,4,1,5,2,6,3,7][j]
  Tensor u = awq_unpack_qweight(i32({1, 1}, {0xfedcba98u}), 8);  // physical nibble p holds 8 + p
  const int want[] = {8, 12, 9, 13, 10, 14, 11, 15};
  for (int n = 0; n < 8; ++n) EXPECT_EQ(u.data<uint8_t>()[n], want[n]) << n;
  expect_words(awq_pack_qzeros(u8({8, 1}, {0, 1, 2, 3, 4, 5, 6, 7})), {0x75316420u});
}
TEST(Awq, RoundTripsTransposedAndErrors) {
  const int64_t N = 24, K = 13, G = 5;
  Tensor c = random_codes({N, K}, 4, 31);
  Tensor q = awq_pack_qweight(c);
  ASSERT_EQ(q.shape(), (Shape{K, N / 8}));  // in x out/8: the transpose of qmoe's [N, K]
  // element check: code (n, k) is nibble kAwqNibble[n % 8] of word [k, n / 8]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ((static_cast<uint32_t>(q.data<int32_t>()[k * (N / 8) + n / 8]) >> (4 * kAwqNibble[n % 8])) & 0xf,
                c.data<uint8_t>()[n * K + k]);
  expect_same(awq_unpack_qweight(q, N), c);
  Tensor z = random_codes({N, G}, 4, 32);
  Tensor qz = awq_pack_qzeros(z);
  ASSERT_EQ(qz.shape(), (Shape{G, N / 8}));
  expect_same(awq_unpack_qzeros(qz, N), z);
  expect_bad_input([] { awq_pack_qweight(u8({4, 1}, {0, 0, 0, 0})); });   // N % 8
  expect_bad_input([] { awq_unpack_qweight(i32({1, 2}, {0, 0}), 8); });   // N/8 words
  expect_bad_input([] { awq_pack_qzeros(u8({8, 1}, {0, 0, 0, 0, 0, 0, 0, 16})); });
}

}  // namespace
