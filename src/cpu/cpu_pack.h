// The CPU kernels' weight layout (built once by pack_proj, at layer creation) and the activation
// buffers the kernels read. Weights are cut into panels of 16 output rows (one AVX-512 register of
// fp32 outputs); rows are padded to a multiple of 32 (a kernel job is a pair of panels) and K to a
// multiple of 8. Inside a panel, codes are interleaved along K so that one vector load yields the
// operand of one dot-product instruction (element (r, k) of a panel):
//   kPair  (bf16 / f16 / f32 values, 8-bit codes): index (k/2)*32 + r*2 + k%2      (vdpbf16ps: 2 k per lane)
//   kWord4 (4-bit codes): 64-byte blocks of 16 rows x 8 k; word j = r*2 + k%2 of block k/8 holds
//          kpair q = (k/2)%4 in bits [4q, 4q+4), i.e. byte (k/8)*64 + (r*2 + k%2)*2 + (k/4)%2,
//          high nibble when (k/2) is odd. Shifting a block right by 4q bits (per 16-bit word) puts
//          kpair q's nibbles in the low bits of the words, already in vdpbf16ps pair order.
//   kVnni8 (8-bit codes): byte (k/4)*64 + r*4 + k%4                             (vpdpbusd: 4 k per lane)
//   kVnni4 (4-bit codes): byte (k/8)*64 + r*4 + k%4, low nibble when k%8 < 4 else high nibble
// Scales keep the checkpoint's dtype ([panel][group][16] per panel); per-row factors (channel,
// tensor or NVFP4 global scale) become fp32. Padded rows decode to exactly 0 (zero scales).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe::cpu {

constexpr int kPanelRows = 16;
constexpr int kJobRows = 32;  // rows per kernel job (two panels)
constexpr int kKAlign = 8;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// 64-byte aligned, uninitialised byte buffer. Buffers of 4 MiB and more are 2 MiB aligned and
// asked for transparent huge pages (madvise): weight streams then cost no TLB walk per 4 KiB.
// alloc is out of line (cpu_pack.cpp) so that no ISA-flagged translation unit instantiates it.
struct AlignedBytes {
  std::unique_ptr<uint8_t, void (*)(void*)> p{nullptr, std::free};
  size_t n = 0;
  void alloc(size_t bytes);
  uint8_t* data() const { return p.get(); }
};

enum class CodeKind : uint8_t {
  kBF16,   // bf16 values, kPair
  kF16,    // fp16 values, kPair
  kF32,    // fp32 values, kPair
  kInt8,   // unsigned int codes u, value u - z, kPair
  kInt4,   // unsigned int codes u, value u - z, kWord4
  kFp8,    // e4m3 bytes, kPair
  kFp4,    // e2m1 nibbles, kWord4
  kVnni8,  // unsigned int codes u (value u - z), kVnni8; paired with int8 activations
  kVnni4,  // unsigned int codes u (value u - z), kVnni4; paired with int8 activations
};
enum class ScaleKind : uint8_t { kNone, kF32, kBF16, kF16, kE4M3, kE8M0 };

size_t scale_kind_bytes(ScaleKind k);
float scale_to_f32(ScaleKind k, const uint8_t* p);  // one value

struct PackedProj {
  CodeKind code = CodeKind::kBF16;
  int num_experts = 0;
  int rows = 0;        // logical N (w13: 2*I)
  int rows_pad = 0;    // padded N, multiple of 32 (w13: 2 * round_up(I, 32))
  int shard_rows = 0;  // w13: I (gate rows [0, I), up rows [I, 2I)); w2: N
  int shard_pad = 0;   // w13: round_up(I, 32) (up rows start there); w2: rows_pad
  int k = 0, k_pad = 0;
  int num_panels = 0;  // per expert: rows_pad / 16
  size_t panel_bytes = 0;
  AlignedBytes codes;  // [E][num_panels][panel_bytes]

  // Group scales along K (group > 0): [E][num_panels][num_groups][16] in `gscale_kind`.
  int group = 0, num_groups = 1;
  ScaleKind gscale_kind = ScaleKind::kNone;
  AlignedBytes gscales;
  // Integer zero point: `zsym` for symmetric codes; asym: [E][num_panels][zp_groups][16] U8,
  // group of k = k / zp_group (zp_group = k_pad for channel).
  int zsym = 0;
  // kInt8 without zero points: the codes are stored as the signed value u - zsym (a two's
  // complement byte), so the kernels sign-extend instead of subtracting the zero point.
  bool s8 = false;
  // kFp8: some code is an e4m3 NaN (S.1111.111); the avx2 kernel's fp16 decode (cpu_kernels_avx2.cpp)
  // does not carry NaN, such weights take its exact e4m3 decode
  bool fp8_nan = false;
  bool has_zp = false;
  int zp_group = 0, zp_groups = 1;
  AlignedBytes zp;
  // g_idx (actorder): [E][k] group ids; then gscales has num_groups entries indexed by g_idx.
  std::vector<int32_t> gidx;
  // Per-row fp32 factor (channel / tensor / NVFP4 global), [E][rows_pad]; empty = 1.
  std::vector<float> rowscale;
  std::vector<float> bias;            // [E][rows_pad] or empty
  std::vector<float> input_scale;     // [E][shards] static activation scale (fp8 tensor, NVFP4 A) or empty
  int input_shards = 0;

  const uint8_t* panel(int e, int p) const { return codes.data() + (size_t(e) * num_panels + p) * panel_bytes; }
  size_t gscale_panel_bytes() const { return size_t(num_groups) * kPanelRows * scale_kind_bytes(gscale_kind); }
  const uint8_t* gscale_panel(int e, int p) const {
    return gscales.data() + (size_t(e) * num_panels + p) * gscale_panel_bytes();
  }
  const uint8_t* zp_panel(int e, int p) const {
    return zp.data() + (size_t(e) * num_panels + p) * size_t(zp_groups) * kPanelRows;
  }
  // Padded row of logical row n.
  int pad_row(int n) const { return n < shard_rows ? n : shard_pad + (n - shard_rows); }
  // Bytes per expert as stored by the checkpoint (codes + scales), for bandwidth accounting.
  double source_bytes_per_expert = 0;
};

// Repacks one projection (w13 when is_w13, else w2) of canonical, validated weights.
// Throws kUnsupported for encodings the CPU kernels do not run.
PackedProj pack_proj(const ExpertWeights& w, const ProjWeights& p, bool is_w13);
// The activation block (32 columns, 16 for NVFP4's 16-wide groups) with which the 16-bit integer
// kernels (Kernels::act16) can take this projection's bf16 activations, or 0: int4 / e2m1 / int8
// codes without g_idx whose groups and zero-point groups hold whole blocks (or all of K).
int act16_block(const PackedProj& w);

// Which activation format the kernels consume for a projection of this scheme.
// kS16: 16-bit block fixed point (the avx2 kernels' bf16 activations for int / fp4 codes, RowQuant::kS16):
// int16 codes q with one power-of-two factor per `group` columns (group_scale) and the codes' sum per
// block (group_sum); value q * group_scale.
enum class ActFmt : uint8_t { kBF16, kF32, kS8, kS16 };

// Activation rows for one projection (rows = (token, expert) pairs in expert order).
struct ActBuf {
  ActFmt fmt = ActFmt::kBF16;
  int rows = 0;
  int ld = 0;                     // elements per row (>= k_pad, padding zero)
  AlignedBytes data;              // [rows][ld] of bf16 / f32 / s8 / s16
  std::vector<float> row_scale;   // [rows] per-token factor, empty = 1
  int num_groups = 0, group = 0;  // per-token-group factor (fp8 1x128, kS16 blocks) and int8 / int16 group sums
  std::vector<float> group_scale;    // [rows][num_groups] or empty
  std::vector<int32_t> group_sum;    // [rows][num_groups] sum of the int8 / int16 codes per group (kS8, kS16)
  void alloc(ActFmt f, int r, int l);
  template <class T> T* row(int i) { return reinterpret_cast<T*>(data.data()) + size_t(i) * ld; }
  template <class T> const T* row(int i) const { return reinterpret_cast<const T*>(data.data()) + size_t(i) * ld; }
};

}  // namespace qmoe::cpu
