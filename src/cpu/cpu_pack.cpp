// pack_proj: canonical ExpertWeights projection -> the CPU kernels' panel layout (cpu_pack.h).
// Runs once per layer, in parallel over (expert, panel).
#include <algorithm>
#include <cstring>
#include <sys/mman.h>

#include "core/codecs.h"
#include "cpu/cpu_pack.h"

namespace qmoe::cpu {

size_t scale_kind_bytes(ScaleKind k) {
  switch (k) {
    case ScaleKind::kNone: return 0;
    case ScaleKind::kF32: return 4;
    case ScaleKind::kBF16: case ScaleKind::kF16: return 2;
    case ScaleKind::kE4M3: case ScaleKind::kE8M0: return 1;
  }
  return 0;
}

float scale_to_f32(ScaleKind k, const uint8_t* p) {
  uint16_t h;
  switch (k) {
    case ScaleKind::kNone: return 1.f;
    case ScaleKind::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case ScaleKind::kBF16: std::memcpy(&h, p, 2); return codec::bf16_to_f32(h);
    case ScaleKind::kF16: std::memcpy(&h, p, 2); return codec::f16_to_f32(h);
    case ScaleKind::kE4M3: return codec::e4m3_to_f32(*p);
    case ScaleKind::kE8M0: return codec::e8m0_to_f32(*p);
  }
  return 1.f;
}

void AlignedBytes::alloc(size_t bytes) {
  n = bytes;
  const size_t huge = size_t(2) << 20;
  const bool big = bytes >= 2 * huge;
  const size_t align = big ? huge : 64;
  const size_t len = size_t(round_up(int64_t(bytes ? bytes : 64), int64_t(align)));
  p.reset(static_cast<uint8_t*>(std::aligned_alloc(align, len)));
  if (!p) throw std::bad_alloc();
  if (big) madvise(p.get(), len, MADV_HUGEPAGE);  // advisory: failure only costs TLB misses
}

void ActBuf::alloc(ActFmt f, int r, int l) {
  fmt = f;
  rows = r;
  ld = l;
  size_t es = f == ActFmt::kF32 ? 4 : f == ActFmt::kBF16 || f == ActFmt::kS16 ? 2 : 1;
  size_t bytes = size_t(r) * l * es;
  if (data.n < bytes || !data.data()) data.alloc(bytes);
}

namespace {

ScaleKind scale_kind_of(const Tensor& t, const char* what) {
  switch (t.dtype()) {
    case DType::kF32: return ScaleKind::kF32;
    case DType::kBF16: return ScaleKind::kBF16;
    case DType::kF16: return ScaleKind::kF16;
    case DType::kF8E4M3: return ScaleKind::kE4M3;
    case DType::kE8M0: case DType::kU8: return ScaleKind::kE8M0;
    default: unsupported("CPU backend: ", what, " dtype ", dtype_name(t.dtype()), " is not a scale dtype");
  }
}

float tensor_f32(const Tensor& t, int64_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(t.raw()) + i * dtype_size(t.dtype());
  return scale_to_f32(scale_kind_of(t, "scale"), p);
}

// Byte offset of element (r, k) inside a panel, and the nibble (0 low, 1 high) for 4-bit layouts.
inline size_t elem_index(CodeKind c, int r, int k, int* nib) {
  *nib = 0;
  switch (c) {
    case CodeKind::kBF16: case CodeKind::kF16: case CodeKind::kF32: case CodeKind::kInt8: case CodeKind::kFp8:
      return size_t(k / 2) * 32 + r * 2 + (k & 1);  // element index (times element size by caller)
    case CodeKind::kInt4: case CodeKind::kFp4:  // kWord4
      *nib = (k >> 1) & 1;
      return size_t(k / 8) * 64 + size_t(r * 2 + (k & 1)) * 2 + ((k >> 2) & 1);
    case CodeKind::kVnni8: return size_t(k / 4) * 64 + r * 4 + (k & 3);
    case CodeKind::kVnni4:
      *nib = (k >> 2) & 1;
      return size_t(k / 8) * 64 + r * 4 + (k & 3);
  }
  return 0;
}

bool is_4bit(CodeKind c) { return c == CodeKind::kInt4 || c == CodeKind::kFp4 || c == CodeKind::kVnni4; }
size_t elem_size(CodeKind c) {
  return c == CodeKind::kBF16 || c == CodeKind::kF16 ? 2 : c == CodeKind::kF32 ? 4 : 1;
}

}  // namespace

PackedProj pack_proj(const ExpertWeights& w, const ProjWeights& p, bool is_w13) {
  const MoeScheme& s = w.scheme;
  const char* name = is_w13 ? "w13" : "w2";
  PackedProj o;
  const int E = w.num_experts, I = w.intermediate, H = w.hidden;
  const int N = is_w13 ? 2 * I : H, K = is_w13 ? H : I;
  o.num_experts = E;
  o.rows = N;
  o.shard_rows = is_w13 ? I : N;
  o.shard_pad = int(round_up(o.shard_rows, kJobRows));
  o.rows_pad = is_w13 ? 2 * o.shard_pad : o.shard_pad;
  o.k = K;
  o.k_pad = int(round_up(K, kKAlign));
  o.num_panels = o.rows_pad / kPanelRows;

  // ---- choose the code kind ------------------------------------------------------------------
  const Tensor& wt = p.weight;
  const int bits = s.weight_bits();
  switch (s.kind) {
    case SchemeKind::kUnquantized:
      o.code = wt.dtype() == DType::kBF16 ? CodeKind::kBF16 : wt.dtype() == DType::kF16 ? CodeKind::kF16 : CodeKind::kF32;
      if (wt.dtype() != DType::kBF16 && wt.dtype() != DType::kF16 && wt.dtype() != DType::kF32)
        unsupported("CPU backend: unquantized ", name, " weight dtype ", dtype_name(wt.dtype()));
      break;
    case SchemeKind::kWNA16: case SchemeKind::kW4A8FP8:
      o.code = bits == 4 ? CodeKind::kInt4 : CodeKind::kInt8;
      break;
    case SchemeKind::kINT8W8A8: case SchemeKind::kW4A8INT8:
      o.code = bits == 4 ? CodeKind::kVnni4 : CodeKind::kVnni8;
      break;
    case SchemeKind::kFP8W8A8: case SchemeKind::kFP8A16: o.code = CodeKind::kFp8; break;
    case SchemeKind::kNVFP4: case SchemeKind::kNVFP4A16: case SchemeKind::kMXFP4A16: o.code = CodeKind::kFp4; break;
  }
  const bool int_codes = o.code == CodeKind::kInt4 || o.code == CodeKind::kInt8 || o.code == CodeKind::kVnni4 ||
                         o.code == CodeKind::kVnni8;
  if (int_codes && bits != 4 && bits != 8) unsupported("CPU backend: ", bits, "-bit integer weights in ", name);
  const bool four = is_4bit(o.code);
  QMOE_CHECK(!four || K % 2 == 0, kBadInput, "CPU backend: ", name, ": 4-bit weights need an even K, got ", K);

  // ---- scales --------------------------------------------------------------------------------
  const Strategy strat = s.kind == SchemeKind::kUnquantized ? Strategy::kTensor : s.weights.strat();
  const bool has_gidx = p.g_idx.defined();
  int G = 0;            // group along K for group scales
  bool row_from_scale = false;  // channel / tensor scale -> rowscale
  if (s.kind != SchemeKind::kUnquantized) {
    QMOE_CHECK(p.scale.defined(), kBadInput, "CPU backend: ", name, " has no weight scale");
    if (strat == Strategy::kGroup || strat == Strategy::kTensorGroup) {
      G = s.kind == SchemeKind::kNVFP4 || s.kind == SchemeKind::kNVFP4A16 ? 16
          : s.kind == SchemeKind::kMXFP4A16                               ? 32
                                                                          : w.group_size;
      if (w.group_size > 0) G = w.group_size;
      QMOE_CHECK(G > 0, kBadInput, "CPU backend: ", name, ": group-quantized weights without a group size");
    } else if (strat == Strategy::kBlock) {
      G = w.block[1];
      QMOE_CHECK(w.block[0] > 0 && w.block[1] > 0, kBadInput, "CPU backend: ", name, ": block scales without block shape");
    } else {
      row_from_scale = true;  // channel or tensor
    }
  }
  o.zsym = int_codes ? (1 << (bits - 1)) : 0;
  o.has_zp = p.zero_point.defined();
  if (o.has_zp) QMOE_CHECK(int_codes, kBadInput, "CPU backend: ", name, ": zero point on non-integer weights");
  o.s8 = o.code == CodeKind::kInt8 && !o.has_zp;

  if (G > 0) {
    o.group = G;
    o.num_groups = int((K + G - 1) / G);
    o.gscale_kind = scale_kind_of(p.scale, "weight scale");
    if (has_gidx) {
      // groups are indexed by g_idx; the scale tensor's last dim is the number of groups
      o.num_groups = int(p.scale.size(-1));
    }
  }
  if (has_gidx) {
    QMOE_CHECK(G > 0, kBadInput, "CPU backend: ", name, ": g_idx without group scales");
    QMOE_CHECK(p.g_idx.dtype() == DType::kI32 && p.g_idx.numel() == int64_t(E) * K, kBadInput,
               "CPU backend: ", name, " g_idx must be I32 [E, K]");
    o.gidx.assign(p.g_idx.data<int32_t>(), p.g_idx.data<int32_t>() + int64_t(E) * K);
    for (int32_t g : o.gidx)
      QMOE_CHECK(g >= 0 && g < o.num_groups, kBadInput, "CPU backend: ", name, " g_idx value ", g,
                 " outside [0, ", o.num_groups, ")");
  }
  if (o.has_zp) {
    QMOE_CHECK(p.zero_point.dtype() == DType::kU8, kBadInput, "CPU backend: ", name, " zero_point must be U8");
    int zg = int(p.zero_point.size(-1));
    o.zp_groups = zg;
    o.zp_group = has_gidx ? 0 : (zg == 1 ? o.k_pad : G);
    QMOE_CHECK(has_gidx || zg == 1 || (G > 0 && zg == o.num_groups), kBadInput, "CPU backend: ", name,
               " zero_point groups ", zg, " do not match the scale groups");
  }

  // ---- codes ---------------------------------------------------------------------------------
  const size_t es = elem_size(o.code);
  o.panel_bytes = four ? size_t(o.k_pad) * 8 : size_t(o.k_pad) * 16 * es;
  // + 64: the AVX-512 4-bit decode reads one byte past a block (cpu_kernels_avx512.cpp dec4x)
  o.codes.alloc(o.panel_bytes * size_t(E) * o.num_panels + 64);
  std::memset(o.codes.data(), 0, o.codes.n);
  if (o.group > 0) {
    o.gscales.alloc(o.gscale_panel_bytes() * size_t(E) * o.num_panels);
    std::memset(o.gscales.data(), 0, o.gscales.n);
  }
  if (o.has_zp) {
    o.zp.alloc(size_t(o.zp_groups) * kPanelRows * size_t(E) * o.num_panels);
    std::memset(o.zp.data(), 0, o.zp.n);
  }
  if (row_from_scale || s.kind == SchemeKind::kNVFP4 || s.kind == SchemeKind::kNVFP4A16)
    o.rowscale.assign(size_t(E) * o.rows_pad, 0.f);

  const uint8_t* src = static_cast<const uint8_t*>(wt.raw());
  const size_t src_row = four ? size_t(K) / 2 : size_t(K) * dtype_size(wt.dtype());
  const size_t sbytes = scale_kind_bytes(o.gscale_kind);
  const int shards_scale = (p.scale.defined() && p.scale.dim() >= 2) ? int(p.scale.size(1)) : 1;
  auto shard_of = [&](int n, int S) { return (is_w13 && S == 2 && n >= I) ? 1 : 0; };

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t job = 0; job < int64_t(E) * o.num_panels; ++job) {
    const int e = int(job / o.num_panels), pn = int(job % o.num_panels);
    uint8_t* dst = o.codes.data() + size_t(job) * o.panel_bytes;
    for (int r = 0; r < kPanelRows; ++r) {
      const int prow = pn * kPanelRows + r;
      // logical row of this padded row, or -1
      int n = -1;
      if (prow < o.shard_pad) n = prow < o.shard_rows ? prow : -1;
      else if (prow - o.shard_pad < o.shard_rows) n = o.shard_rows + (prow - o.shard_pad);
      if (n < 0) continue;
      const uint8_t* srow = src + (size_t(e) * N + n) * src_row;
      for (int k = 0; k < K; ++k) {
        int nib;
        size_t idx = elem_index(o.code, r, k, &nib);
        if (four) {
          uint8_t c = codec::nibble_at(srow, k);
          dst[idx] |= static_cast<uint8_t>(nib ? c << 4 : c);
        } else if (o.s8) {
          dst[idx] = static_cast<uint8_t>(int(srow[k]) - o.zsym);  // u - 128 as a two's complement byte
        } else {
          std::memcpy(dst + idx * es, srow + size_t(k) * es, es);
        }
      }
      if (o.group > 0) {
        uint8_t* gdst = o.gscales.data() + size_t(job) * o.gscale_panel_bytes();
        for (int g = 0; g < o.num_groups; ++g) {
          int64_t si;
          if (strat == Strategy::kBlock) {
            const int nb = int(p.scale.size(1)), kb = int(p.scale.size(2));
            si = (int64_t(e) * nb + n / w.block[0]) * kb + g;
          } else {
            si = (int64_t(e) * N + n) * o.num_groups + g;
          }
          std::memcpy(gdst + (size_t(g) * kPanelRows + r) * sbytes,
                      static_cast<const uint8_t*>(p.scale.raw()) + si * sbytes, sbytes);
        }
      }
      if (o.has_zp) {
        uint8_t* zdst = o.zp.data() + size_t(job) * o.zp_groups * kPanelRows;
        for (int g = 0; g < o.zp_groups; ++g)
          zdst[g * kPanelRows + r] = p.zero_point.data<uint8_t>()[(int64_t(e) * N + n) * o.zp_groups + g];
      }
      if (!o.rowscale.empty()) {
        float f = 1.f;
        if (s.kind == SchemeKind::kNVFP4 || s.kind == SchemeKind::kNVFP4A16) {
          const int S = p.global_scale.dim() >= 2 ? int(p.global_scale.size(1)) : 1;
          f = p.global_scale.data<float>()[int64_t(e) * S + shard_of(n, S)];
        } else if (strat == Strategy::kChannel) {
          f = tensor_f32(p.scale, int64_t(e) * N + n);
        } else {  // tensor
          f = tensor_f32(p.scale, int64_t(e) * shards_scale + shard_of(n, shards_scale));
        }
        o.rowscale[size_t(e) * o.rows_pad + prow] = f;
      }
    }
  }

  if (p.bias.defined()) {
    o.bias.assign(size_t(E) * o.rows_pad, 0.f);
    for (int e = 0; e < E; ++e)
      for (int n = 0; n < N; ++n) {
        int64_t i = int64_t(e) * N + n;
        o.bias[size_t(e) * o.rows_pad + o.pad_row(n)] =
            p.bias.dtype() == DType::kF32 ? p.bias.data<float>()[i] : tensor_f32(p.bias, i);
      }
  }
  if (p.input_scale.defined()) {
    o.input_shards = p.input_scale.dim() >= 2 ? int(p.input_scale.size(1)) : 1;
    o.input_scale.resize(size_t(E) * o.input_shards);
    for (size_t i = 0; i < o.input_scale.size(); ++i) o.input_scale[i] = tensor_f32(p.input_scale, int64_t(i));
  }
  o.source_bytes_per_expert = double(wt.nbytes() + (p.scale.defined() ? p.scale.nbytes() : 0) +
                                     (p.zero_point.defined() ? p.zero_point.nbytes() : 0)) / E;
  if (o.code == CodeKind::kFp8) {
    const uint8_t* c = o.codes.data();
    const size_t n = size_t(E) * o.num_panels * o.panel_bytes;
    for (size_t i = 0; i < n && !o.fp8_nan; ++i) o.fp8_nan = (c[i] & 0x7F) == 0x7F;
  }
  return o;
}

int act16_block(const PackedProj& w) {
  if (!w.gidx.empty() || (w.code != CodeKind::kInt4 && w.code != CodeKind::kFp4 && w.code != CodeKind::kInt8)) return 0;
  const int B = w.group == 16 ? 16 : 32;
  if (w.group > 0 && w.group % B != 0) return 0;
  if (w.has_zp && (w.zp_group <= 0 || (w.zp_group % B != 0 && w.zp_group < w.k_pad))) return 0;
  return B;
}

}  // namespace qmoe::cpu
