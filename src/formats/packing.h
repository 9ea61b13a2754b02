// Integer / fp4 packings of published checkpoints, and their conversion to and from qmoe's code
// tensors (U8, one b-bit code per byte, "out x in" = [N, K]; qmoe's canonical int4 / e2m1 weight is
// two codes per byte, low nibble = even k, see include/qmoe/moe.h).
//  * compressed-tensors pack-quantized: I32 words, code i of a row at bit i*b of the row's
//    little-endian word concatenation, dense across word boundaries, b = 1..8 (formats.md §2a).
//    Codes are the offset values u = q + 2^(b-1) the compressor writes; weights pack along the
//    input dim ([N, ceil(K*b/32)]), zero points along dim 0 ([ceil(N*b/32), groups]).
//  * GPTQ: qweight I32 [K*b/32, N] (packed along in, code j of a word at bits b*j); qzeros I32
//    [groups, N*b/32] (packed along out) storing zero - 1 (format v1). b in {2, 4, 8}.
//  * AWQ: qweight I32 [K, N/8], qzeros I32 [groups, N/8], 4-bit, packed along out with logical
//    column j of each 8 at nibble kAwqNibble[j] = [0, 4, 1, 5, 2, 6, 3, 7][j].
// A checkpoint's int weight becomes qmoe's canonical one as codes_to_canonical(<fmt>_unpack_...(...),
// bits), and goes back (qmoe gen) as <fmt>_pack_...(canonical_to_codes(weight, bits, K), ...).
// Unpack functions validate dtype and shape and throw qmoe::Error (kBadInput) naming the problem;
// pack functions check that every code fits in b bits.
#pragma once
#include <cstdint>

#include "qmoe/tensor.h"

namespace qmoe::formats {

// ---- raw rows -----------------------------------------------------------------------------------
// Number of int32 words of a dense b-bit row of n codes: ceil(n*b/32).
constexpr int64_t ct_packed_words(int64_t n, int bits) { return (n * bits + 31) / 32; }
// codes[0, n) (each < 2^bits) -> words[0, ct_packed_words(n, bits)); unused high bits are zero.
void ct_pack_row(const uint8_t* codes, int64_t n, int bits, int32_t* words);
// words -> codes[0, n).
void ct_unpack_row(const int32_t* words, int64_t n, int bits, uint8_t* codes);

// compressed-tensors' signed <-> offset codes: u = q + 2^(b-1) (q in [-2^(b-1), 2^(b-1)) ).
inline uint8_t ct_offset_code(int q, int bits) { return static_cast<uint8_t>(q + (1 << (bits - 1))); }
inline int ct_signed_value(uint8_t u, int bits) { return static_cast<int>(u) - (1 << (bits - 1)); }

// Two 4-bit codes per byte, low nibble = even index. n odd: the last high nibble is zero.
void pack_nibbles_row(const uint8_t* codes, int64_t n, uint8_t* packed);
void unpack_nibbles_row(const uint8_t* packed, int64_t n, uint8_t* codes);

// AWQ: logical column j (of a group of 8) lives in nibble kAwqNibble[j] of the word.
inline constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// ---- tensors (rows = every leading dim; code tensors are U8) --------------------------------------
// U8 [..., K] (codes < 16) -> U8 [..., ceil(K/2)].
Tensor pack_nibbles(const Tensor& codes);
// U8 [..., ceil(K/2)] -> U8 [..., K].
Tensor unpack_nibbles(const Tensor& packed, int64_t K);

// U8 [..., K] codes < 2^bits -> I32 [..., ceil(K*bits/32)].
Tensor ct_pack_int32(const Tensor& codes, int bits);
// I32 [..., ceil(K*bits/32)] -> U8 [..., K].
Tensor ct_unpack_int32(const Tensor& packed, int bits, int64_t K);
// Along dim 0 (zero points): U8 [N, G] -> I32 [ceil(N*bits/32), G], and back.
Tensor ct_pack_int32_dim0(const Tensor& codes, int bits);
Tensor ct_unpack_int32_dim0(const Tensor& packed, int bits, int64_t N);

// GPTQ qweight: U8 [N, K] codes -> I32 [K*bits/32, N]; and back (K given).
Tensor gptq_pack_qweight(const Tensor& codes, int bits);
Tensor gptq_unpack_qweight(const Tensor& qweight, int bits, int64_t K);
// GPTQ qzeros: U8 [N, G] zero points -> I32 [G, N*bits/32]; and back. v1 (checkpoint_format gptq)
// stores zero - 1 (zeros 1 .. 2^bits; the +1 applied on reading: a stored 2^bits - 1 reads as
// 2^bits, which 8-bit U8 cannot hold: kBadInput), v2 (gptq_v2) the zero itself (0 .. 2^bits - 1).
Tensor gptq_pack_qzeros(const Tensor& zeros, int bits, bool v1 = true);
Tensor gptq_unpack_qzeros(const Tensor& qzeros, int bits, int64_t N, bool v1 = true);

// AWQ qweight: U8 [N, K] 4-bit codes -> I32 [K, N/8]; and back (N given).
Tensor awq_pack_qweight(const Tensor& codes);
Tensor awq_unpack_qweight(const Tensor& qweight, int64_t N);
// AWQ qzeros: U8 [N, G] -> I32 [G, N/8]; and back.
Tensor awq_pack_qzeros(const Tensor& zeros);
Tensor awq_unpack_qzeros(const Tensor& qzeros, int64_t N);

// qmoe's canonical int weight <-> one code per byte: bits 4 is [.., K/2] nibble pairs, bits 8 is
// [.., K] bytes (returned as is); other widths are kUnsupported.
Tensor canonical_to_codes(const Tensor& weight, int bits, int64_t K);
Tensor codes_to_canonical(const Tensor& codes, int bits);

}  // namespace qmoe::formats
