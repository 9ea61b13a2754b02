// Integer packings of GPTQ, AWQ and compressed-tensors pack-quantized checkpoints, as used by the
// expert layouts (layouts.cpp). Codes are unsigned b-bit values, one per U8 element, "out x in"
// ([N, K]) on the canonical side. Facts from formats.md §2:
//   compressed-tensors: element i of a row at bit i*b of the row's little-endian int32 words
//     (dense across words); zero points packed the same way along dim 0 (out).
//   GPTQ: qweight I32 [K*b/32, N] packed along in; qzeros I32 [G, N*b/32] along out, stored zero - 1.
//   AWQ (4-bit): qweight I32 [K, N/8] and qzeros [G, N/8] packed along out with nibble order
//     0,2,4,6,1,3,5,7 (nibble j of a word holds logical column kAwqOrder[j]).
#pragma once
#include "qmoe/tensor.h"

namespace qmoe::models::packing {

// Canonical 4-bit pairs [.., K/2] (low nibble = even k) <-> one code per byte [.., K].
Tensor unpack_nibbles(const Tensor& pairs, int64_t K);
Tensor pack_nibbles(const Tensor& codes);

Tensor ct_pack_int32(const Tensor& codes, int bits);                  // U8 [N, K] -> I32 [N, ceil(K*b/32)]
Tensor ct_unpack_int32(const Tensor& packed, int bits, int64_t K);    // inverse
Tensor ct_pack_int32_dim0(const Tensor& codes, int bits);             // U8 [N, G] -> I32 [ceil(N*b/32), G]
Tensor ct_unpack_int32_dim0(const Tensor& packed, int bits, int64_t N);

Tensor gptq_pack_qweight(const Tensor& codes, int bits);              // U8 [N, K] -> I32 [K*b/32, N]
Tensor gptq_unpack_qweight(const Tensor& qweight, int bits, int64_t K);
Tensor gptq_pack_qzeros(const Tensor& zeros, int bits);               // U8 [N, G] -> I32 [G, N*b/32], zero - 1
Tensor gptq_unpack_qzeros(const Tensor& qzeros, int bits, int64_t N); // -> U8 [N, G], + 1

Tensor awq_pack_qweight(const Tensor& codes);                         // U8 [N, K] -> I32 [K, N/8]
Tensor awq_unpack_qweight(const Tensor& qweight, int64_t N);
Tensor awq_pack_qzeros(const Tensor& zeros);                          // U8 [N, G] -> I32 [G, N/8]
Tensor awq_unpack_qzeros(const Tensor& qzeros, int64_t N);

}  // namespace qmoe::models::packing
