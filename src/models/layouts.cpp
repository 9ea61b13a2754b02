// Checkpoint expert layouts <-> canonical encoding. Every fact used here is in formats.md §2
// (compressed-tensors, ModelOpt, GPTQ, AWQ, DeepSeek FP8, gpt-oss, Llama 4 fused tensors).
#include "models/layouts.h"

#include <cmath>
#include <cstring>

#include "core/codecs.h"
#include "formats/packing.h"
#include "models/slicing.h"

namespace qmoe::models {

const char* module_format_name(ModuleFormat f) {
  switch (f) {
    case ModuleFormat::kDense: return "dense";
    case ModuleFormat::kCtPacked: return "compressed-tensors pack-quantized";
    case ModuleFormat::kCtNaive: return "compressed-tensors int/float-quantized";
    case ModuleFormat::kCtNvfp4: return "compressed-tensors nvfp4-pack-quantized";
    case ModuleFormat::kCtMxfp4: return "compressed-tensors mxfp4-pack-quantized";
    case ModuleFormat::kModeloptFp8: return "modelopt fp8";
    case ModuleFormat::kModeloptNvfp4: return "modelopt nvfp4";
    case ModuleFormat::kGptq: return "gptq";
    case ModuleFormat::kGptqV2: return "gptq_v2";
    case ModuleFormat::kAwq: return "awq";
    case ModuleFormat::kDeepseekFp8: return "deepseek fp8 (weight_scale_inv)";
  }
  return "?";
}

namespace {

std::string dtype_list(std::initializer_list<DType> ds) {
  std::string r;
  for (DType d : ds) r += (r.empty() ? "" : " or ") + std::string(dtype_name(d));
  return r;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

const TensorInfo& need_info(const CheckpointDir& ck, const std::string& name, const std::string& what) {
  if (!ck.has(name)) bad_input(ck.dir(), ": missing tensor ", name, " (", what, ")");
  return ck.info(name);
}

void check_dtype(const TensorInfo& ti, std::initializer_list<DType> dtypes, const std::string& what) {
  for (DType d : dtypes)
    if (ti.dtype == d) return;
  bad_input(ti.file, ": tensor ", ti.name, " (", what, "): dtype ", dtype_name(ti.dtype), ", expected ",
            dtype_list(dtypes));
}

// A per-tensor scale stored as [], [1] (or [1, 1]): its value as fp32, checked finite and > 0.
float fetch_scalar(const CheckpointDir& ck, const std::string& name, std::initializer_list<DType> dtypes,
                   const std::string& what) {
  const TensorInfo& ti = need_info(ck, name, what);
  check_dtype(ti, dtypes, what);
  bool scalar = true;
  for (int64_t d : ti.shape) scalar = scalar && d == 1;
  if (!scalar) bad_input(ti.file, ": tensor ", ti.name, " (", what, "): shape ", shape_str(ti.shape), ", expected a scalar ([] or [1])");
  Tensor t = ck.get(name);
  float v = 0;
  switch (t.dtype()) {
    case DType::kF32: v = t.data<float>()[0]; break;
    case DType::kBF16: v = codec::bf16_to_f32(t.data<uint16_t>()[0]); break;
    case DType::kF16: v = codec::f16_to_f32(t.data<uint16_t>()[0]); break;
    default: bad_input(ti.file, ": tensor ", ti.name, ": unsupported scalar dtype ", dtype_name(t.dtype()));
  }
  if (!std::isfinite(v) || v <= 0)
    bad_input(ti.file, ": tensor ", ti.name, " (", what, "): value ", v, ", expected a finite positive scale");
  return v;
}

Tensor f32_tensor(Shape s, std::initializer_list<float> vals) {
  Tensor t(DType::kF32, std::move(s));
  float* p = t.data_mut<float>();
  for (float v : vals) *p++ = v;
  return t;
}

// The decoded expert range of a fused reference: [first, first + count) within E (checked).
std::pair<int64_t, int64_t> expert_range(const FusedRef& r, int E) {
  const int64_t n = r.count < 0 ? E : r.count;
  QMOE_CHECK(r.first >= 0 && n >= 0 && r.first + n <= E, kInternal, r.what, ": expert range [", r.first, ", ",
             r.first + n, ") outside [0, ", E, ")");
  return {r.first, n};
}

// Like fetch_scalar but for flat per-expert scales: [], [1] or [E]; returns E values.
std::vector<float> fetch_flat(const CheckpointDir& ck, const std::string& name, int E, const std::string& what) {
  const TensorInfo& ti = need_info(ck, name, what);
  check_dtype(ti, {DType::kF32, DType::kBF16, DType::kF16}, what);
  int64_t n = shape_numel(ti.shape);
  if (!(n == 1 || (ti.shape.size() == 1 && ti.shape[0] == E)))
    bad_input(ti.file, ": tensor ", ti.name, " (", what, "): shape ", shape_str(ti.shape), ", expected [], [1] or [", E, "]");
  Tensor t = ck.get(name);
  std::vector<float> v(E);
  for (int e = 0; e < E; ++e) {
    int64_t i = n == 1 ? 0 : e;
    float x = t.dtype() == DType::kF32 ? t.data<float>()[i]
              : t.dtype() == DType::kBF16 ? codec::bf16_to_f32(t.data<uint16_t>()[i])
                                          : codec::f16_to_f32(t.data<uint16_t>()[i]);
    if (!std::isfinite(x) || x <= 0)
      bad_input(ti.file, ": tensor ", ti.name, " (", what, "): value ", x, " at ", i, ", expected a finite positive scale");
    v[e] = x;
  }
  return v;
}

Tensor add_e(const Tensor& t) {  // [..] -> [1, ..]
  Shape s = t.shape();
  s.insert(s.begin(), 1);
  return t.reshape(s);
}

// int8 two's complement <-> canonical offset codes u = q + 128.
Tensor i8_to_u8(const Tensor& t) {
  Tensor r(DType::kU8, t.shape());
  const int8_t* s = t.data<int8_t>();
  uint8_t* d = r.data_mut<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<uint8_t>(s[i] + 128);
  return r;
}
Tensor u8_to_i8(const Tensor& t) {
  Tensor r(DType::kI8, t.shape());
  const uint8_t* s = t.data<uint8_t>();
  int8_t* d = r.data_mut<int8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<int8_t>(static_cast<int>(s[i]) - 128);
  return r;
}

// Canonical b-bit codes ([N, K] U8 for b = 8, [N, K/2] nibble pairs for b = 4) <-> one code per byte.
Tensor codes_from_canonical(const Tensor& w, int bits, int64_t K) {
  return bits == 4 ? formats::unpack_nibbles(w, K) : w;
}
Tensor codes_to_canonical(const Tensor& codes, int bits) {
  return bits == 4 ? formats::pack_nibbles(codes) : codes;
}

}  // namespace

Tensor transpose_last2(const Tensor& t) {
  QMOE_CHECK(t.dim() >= 2, kInternal, "transpose_last2 of ", shape_str(t.shape()));
  Shape s = t.shape();
  const int64_t A = s[s.size() - 2], B = s[s.size() - 1], outer = t.numel() / std::max<int64_t>(A * B, 1);
  std::swap(s[s.size() - 2], s[s.size() - 1]);
  Tensor r(t.dtype(), s);
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(r.raw_mut());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < B; ++b)
        memcpy(dst + ((o * B + b) * A + a) * es, src + ((o * A + a) * B + b) * es, es);
  return r;
}

Tensor fetch(const CheckpointDir& ck, const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
             const std::string& what, const char* orientation) {
  const TensorInfo& ti = need_info(ck, name, what);
  check_dtype(ti, dtypes, what);
  if (ti.shape != shape)
    bad_input(ti.file, ": tensor ", ti.name, " (", what, "): shape ", shape_str(ti.shape), ", expected ", shape_str(shape),
              orientation ? str(" (", orientation, ")") : std::string());
  return ck.get(name);
}

// ---------------------------------------------------------------------------------------------
ProjWeights decode_module(const ModuleRef& m, ModuleFormat f, const MoeScheme& scheme, const ModuleShape& s) {
  const CheckpointDir& ck = *m.ck;
  const std::string p = m.prefix + ".";
  const int64_t N = s.N, K = s.K;
  const int G = s.group_size;
  const int64_t ng = G > 0 ? cdiv(K, G) : 1;
  const std::initializer_list<DType> k16 = {DType::kBF16, DType::kF16, DType::kF32};
  ProjWeights r;
  auto ctx = [&](const char* t) { return str(m.what, " ", t); };
  switch (f) {
    case ModuleFormat::kDense: {
      r.weight = add_e(fetch(ck, p + "weight", k16, {N, K}, ctx("weight"), "out x in"));
      break;
    }
    case ModuleFormat::kCtPacked: {
      const int b = scheme.weights.num_bits;
      if (b != 4 && b != 8) unsupported(m.what, ": pack-quantized with ", b, "-bit weights (qmoe runs 4 and 8)");
      Tensor packed = fetch(ck, p + "weight_packed", {DType::kI32}, {N, cdiv(K * b, 32)}, ctx("weight_packed"), "out x in*bits/32");
      if (ck.has(p + "weight_shape")) {
        const TensorInfo& ti = ck.info(p + "weight_shape");
        check_dtype(ti, {DType::kI64, DType::kI32}, ctx("weight_shape"));
        Tensor ws = ck.get(p + "weight_shape");
        if (ws.numel() != 2) bad_input(ti.file, ": tensor ", ti.name, ": shape ", shape_str(ti.shape), ", expected [2]");
        int64_t a0 = ws.dtype() == DType::kI64 ? ws.data<int64_t>()[0] : ws.data<int32_t>()[0];
        int64_t a1 = ws.dtype() == DType::kI64 ? ws.data<int64_t>()[1] : ws.data<int32_t>()[1];
        if (a0 != N || a1 != K)
          bad_input(ti.file, ": tensor ", ti.name, " (", m.what, "): says [", a0, ", ", a1, "], expected [", N, ", ", K, "] (out x in)");
      }
      if (b == 4 && K % 2) unsupported(m.what, ": 4-bit weights with an odd input size ", K);
      r.weight = add_e(codes_to_canonical(formats::ct_unpack_int32(packed, b, K), b));
      r.scale = add_e(fetch(ck, p + "weight_scale", k16, {N, ng}, ctx("weight_scale"), G > 0 ? "out x in/group" : "out x 1"));
      if (!scheme.weights.symmetric) {
        Tensor zp = fetch(ck, p + "weight_zero_point", {DType::kI32}, {cdiv(N * b, 32), ng}, ctx("weight_zero_point"),
                          "packed along out");
        r.zero_point = add_e(formats::ct_unpack_int32_dim0(zp, b, N));
      }
      if (ck.has(p + "weight_g_idx"))
        r.g_idx = add_e(fetch(ck, p + "weight_g_idx", {DType::kI32}, {K}, ctx("weight_g_idx")));
      else if (scheme.weights.actorder == ActOrder::kGroup)
        bad_input(ck.dir(), ": missing tensor ", p, "weight_g_idx (", m.what, ", actorder group)");
      break;
    }
    case ModuleFormat::kCtNaive: {
      const TensorInfo& wi = need_info(ck, p + "weight", ctx("weight"));
      if (has_fp8_weights(scheme.kind)) {
        r.weight = add_e(fetch(ck, p + "weight", {DType::kF8E4M3}, {N, K}, ctx("weight"), "out x in"));
      } else if (scheme.weights.num_bits == 8 && scheme.weights.type == QuantType::kInt) {
        if (!scheme.weights.symmetric) unsupported(m.what, ": asymmetric int8 int-quantized weights");
        r.weight = add_e(i8_to_u8(fetch(ck, p + "weight", {DType::kI8}, {N, K}, ctx("weight"), "out x in")));
      } else {
        unsupported(wi.file, ": tensor ", wi.name, ": int/float-quantized weights for scheme ", scheme.key());
      }
      Strategy st = scheme.weights.strat();
      const char* sn = "weight_scale";
      if (st == Strategy::kTensor) {
        const TensorInfo& ti = need_info(ck, p + sn, ctx(sn));
        check_dtype(ti, k16, ctx(sn));
        // Canonical tensor-wise scales are F32 [E, S]; bf16 / fp16 -> f32 is exact.
        r.scale = f32_tensor({1, 1}, {fetch_scalar(ck, p + sn, k16, ctx(sn))});
      } else if (st == Strategy::kChannel) {
        r.scale = add_e(fetch(ck, p + sn, k16, {N, 1}, ctx(sn), "out x 1"));
      } else if (st == Strategy::kBlock) {
        r.scale = add_e(fetch(ck, p + sn, k16, {cdiv(N, s.block[0]), cdiv(K, s.block[1])}, ctx(sn), "out blocks x in blocks"));
      } else if (st == Strategy::kGroup) {
        r.scale = add_e(fetch(ck, p + sn, k16, {N, ng}, ctx(sn), "out x in/group"));
      } else {
        unsupported(m.what, ": weight strategy ", strategy_name(st));
      }
      if (scheme.act == ActQuant::kFP8Tensor)
        r.input_scale = f32_tensor({1, 1}, {fetch_scalar(ck, p + "input_scale", k16, ctx("input_scale"))});
      break;
    }
    case ModuleFormat::kCtNvfp4:
    case ModuleFormat::kModeloptNvfp4: {
      const bool ct = f == ModuleFormat::kCtNvfp4;
      if (K % 16) bad_input(m.what, ": NVFP4 input size ", K, " is not a multiple of 16");
      r.weight = add_e(fetch(ck, p + (ct ? "weight_packed" : "weight"), {DType::kU8}, {N, K / 2},
                             ctx(ct ? "weight_packed" : "weight"), "out x in/2, e2m1 pairs"));
      r.scale = add_e(fetch(ck, p + "weight_scale", {DType::kF8E4M3}, {N, K / 16}, ctx("weight_scale"), "out x in/16"));
      if (ct) {
        // compressed-tensors divides by weight_global_scale (= 448*6/amax): store its reciprocal.
        float g = fetch_scalar(ck, p + "weight_global_scale", {DType::kF32}, ctx("weight_global_scale"));
        r.global_scale = f32_tensor({1, 1}, {1.0f / g});
        if (scheme.kind == SchemeKind::kNVFP4)
          r.input_scale = f32_tensor({1, 1}, {1.0f / fetch_scalar(ck, p + "input_global_scale", {DType::kF32}, ctx("input_global_scale"))});
      } else {
        r.global_scale = f32_tensor({1, 1}, {fetch_scalar(ck, p + "weight_scale_2", {DType::kF32}, ctx("weight_scale_2"))});
        if (scheme.kind == SchemeKind::kNVFP4)
          r.input_scale = f32_tensor({1, 1}, {fetch_scalar(ck, p + "input_scale", {DType::kF32}, ctx("input_scale"))});
      }
      break;
    }
    case ModuleFormat::kCtMxfp4: {
      if (K % 32) bad_input(m.what, ": MXFP4 input size ", K, " is not a multiple of 32");
      r.weight = add_e(fetch(ck, p + "weight_packed", {DType::kU8}, {N, K / 2}, ctx("weight_packed"), "out x in/2, e2m1 pairs"));
      r.scale = add_e(fetch(ck, p + "weight_scale", {DType::kU8, DType::kE8M0}, {N, K / 32}, ctx("weight_scale"), "out x in/32"));
      break;
    }
    case ModuleFormat::kModeloptFp8: {
      r.weight = add_e(fetch(ck, p + "weight", {DType::kF8E4M3}, {N, K}, ctx("weight"), "out x in"));
      Strategy st = scheme.weights.strat();
      const std::string sn = p + "weight_scale";
      if (st == Strategy::kTensor) {
        r.scale = f32_tensor({1, 1}, {fetch_scalar(ck, sn, {DType::kF32}, ctx("weight_scale"))});
      } else if (st == Strategy::kChannel) {
        const TensorInfo& ti = need_info(ck, sn, ctx("weight_scale"));
        Shape want = ti.shape.size() == 2 ? Shape{N, 1} : Shape{N};
        r.scale = add_e(fetch(ck, sn, {DType::kF32}, want, ctx("weight_scale"), "out").reshape({N, 1}));
      } else if (st == Strategy::kBlock) {
        const int64_t nb = cdiv(N, s.block[0]), kb = cdiv(K, s.block[1]);
        const TensorInfo& ti = need_info(ck, sn, ctx("weight_scale"));
        Shape want = ti.shape.size() == 4 ? Shape{nb, 1, kb, 1} : Shape{nb, kb};
        r.scale = add_e(fetch(ck, sn, {DType::kF32}, want, ctx("weight_scale"), "out blocks x in blocks").reshape({nb, kb}));
      } else {
        unsupported(m.what, ": ModelOpt FP8 weight strategy ", strategy_name(st));
      }
      if (scheme.act == ActQuant::kFP8Tensor)
        r.input_scale = f32_tensor({1, 1}, {fetch_scalar(ck, p + "input_scale", {DType::kF32}, ctx("input_scale"))});
      break;
    }
    case ModuleFormat::kGptq:
    case ModuleFormat::kGptqV2:
    case ModuleFormat::kAwq: {
      const int b = scheme.weights.num_bits;
      const bool gptq = f != ModuleFormat::kAwq;
      if (!gptq && b != 4) unsupported(m.what, ": AWQ with ", b, "-bit weights (AWQ is 4-bit)");
      if (b != 4 && b != 8) unsupported(m.what, ": GPTQ with ", b, "-bit weights (qmoe runs 4 and 8)");
      const int64_t per = 32 / b;
      const std::initializer_list<DType> sd = {DType::kF16, DType::kBF16, DType::kF32};
      Tensor codes;
      if (gptq) {
        if (K % per) bad_input(m.what, ": GPTQ input size ", K, " is not a multiple of ", per);
        Tensor qw = fetch(ck, p + "qweight", {DType::kI32}, {K / per, N}, ctx("qweight"), "in*bits/32 x out");
        codes = formats::gptq_unpack_qweight(qw, b, K);  // U8 [N, K]
      } else {
        if (N % per) bad_input(m.what, ": AWQ output size ", N, " is not a multiple of ", per);
        Tensor qw = fetch(ck, p + "qweight", {DType::kI32}, {K, N / per}, ctx("qweight"), "in x out/8");
        codes = formats::awq_unpack_qweight(qw, N);  // U8 [N, K]
      }
      r.weight = add_e(codes_to_canonical(codes, b));
      Tensor sc = fetch(ck, p + "scales", sd, {ng, N}, ctx("scales"), "groups x out");
      r.scale = add_e(transpose_last2(sc));  // [N, ng], dtype as stored
      if (N % per) bad_input(m.what, ": output size ", N, " is not a multiple of ", per, " (qzeros packing)");
      Tensor qz = fetch(ck, p + "qzeros", {DType::kI32}, {ng, N / per}, ctx("qzeros"), "groups x out*bits/32");
      Tensor z = gptq ? formats::gptq_unpack_qzeros(qz, b, N, f == ModuleFormat::kGptq)
                      : formats::awq_unpack_qzeros(qz, N);  // U8 [N, ng]
      if (!scheme.weights.symmetric) {
        r.zero_point = add_e(z);
      } else {
        // symmetric: the kernels take the zero 2^(b-1) (Marlin's uint4b8 / uint8b128) and never read
        // qzeros, so a file whose qzeros say otherwise would run with zeros it does not hold
        const int zs = 1 << (b - 1);
        const uint8_t* zd = z.data<uint8_t>();
        for (int64_t i = 0; i < N * ng; ++i)
          if (zd[i] != zs)
            bad_input(ck.info(p + "qzeros").file, ": tensor ", p, "qzeros (", m.what, "): zero point ", int(zd[i]),
                      " at column ", i / ng, ", group ", i % ng, ", but the quantization config says symmetric (zero ", zs,
                      gptq ? (f == ModuleFormat::kGptq ? ", stored as zero - 1 in GPTQ v1" : ", stored as is in GPTQ v2") : "",
                      ")");
      }
      if (gptq && ck.has(p + "g_idx")) {
        Tensor gi = fetch(ck, p + "g_idx", {DType::kI32}, {K}, ctx("g_idx"));
        bool trivial = true;  // desc_act = false checkpoints still carry g_idx = k / G
        for (int64_t k = 0; k < K; ++k) {
          int32_t g = gi.data<int32_t>()[k];
          if (g < 0 || g >= ng) bad_input(ck.info(p + "g_idx").file, ": tensor ", p, "g_idx: group ", g, " at column ", k, " outside [0, ", ng, ")");
          trivial = trivial && G > 0 && g == k / G;
        }
        if (!trivial || scheme.weights.actorder != ActOrder::kNone) r.g_idx = add_e(gi);
      }
      break;
    }
    case ModuleFormat::kDeepseekFp8: {
      r.weight = add_e(fetch(ck, p + "weight", {DType::kF8E4M3}, {N, K}, ctx("weight"), "out x in"));
      r.scale = add_e(fetch(ck, p + "weight_scale_inv", {DType::kF32}, {cdiv(N, s.block[0]), cdiv(K, s.block[1])},
                            ctx("weight_scale_inv"), "out blocks x in blocks"));
      break;
    }
  }
  return r;
}

ProjWeights merge_gate_up(const ProjWeights& g, const ProjWeights& u, const std::string& what) {
  ProjWeights r;
  auto cat = [](const Tensor& a, const Tensor& b) { return a.defined() ? concat_dim({a, b}, 1) : a; };
  r.weight = cat(g.weight, u.weight);
  r.scale = cat(g.scale, u.scale);
  r.zero_point = cat(g.zero_point, u.zero_point);
  r.global_scale = cat(g.global_scale, u.global_scale);
  r.input_scale = cat(g.input_scale, u.input_scale);
  r.bias = cat(g.bias, u.bias);
  if (g.g_idx.defined() != u.g_idx.defined() ||
      (g.g_idx.defined() && (g.g_idx.nbytes() != u.g_idx.nbytes() || memcmp(g.g_idx.raw(), u.g_idx.raw(), g.g_idx.nbytes()))))
    bad_input(what, ": gate_proj and up_proj have different g_idx (they read the same input, so the column order must agree)");
  r.g_idx = g.g_idx;
  return r;
}

ProjWeights stack_experts(const std::vector<ProjWeights>& v) {
  ProjWeights r;
  auto stack = [&](Tensor ProjWeights::*f) {
    if (!(v[0].*f).defined()) return Tensor();
    std::vector<Tensor> ts;
    for (const ProjWeights& p : v) ts.push_back(p.*f);
    return concat_dim(ts, 0);
  };
  r.weight = stack(&ProjWeights::weight);
  r.scale = stack(&ProjWeights::scale);
  r.zero_point = stack(&ProjWeights::zero_point);
  r.g_idx = stack(&ProjWeights::g_idx);
  r.global_scale = stack(&ProjWeights::global_scale);
  r.input_scale = stack(&ProjWeights::input_scale);
  r.bias = stack(&ProjWeights::bias);
  return r;
}

// ---------------------------------------------------------------------------------------------
namespace {

// Rows [r0, r1) of expert e of a canonical [E, N, ...] tensor as [r1 - r0, ...].
Tensor rows_of(const Tensor& t, int e, int64_t r0, int64_t r1) {
  Tensor x = slice_dim(t.slice0(e, e + 1), 1, r0, r1);
  Shape s(x.shape().begin() + 1, x.shape().end());
  return x.reshape(s);
}

// Element (e, shard) of a [E, S] per-tensor tensor as a fresh tensor of shape `shape` (same dtype).
Tensor scalar_of(const Tensor& t, int e, int shard, Shape shape) {
  Tensor r(t.dtype(), std::move(shape));
  const size_t es = dtype_size(t.dtype());
  memcpy(r.raw_mut(), static_cast<const uint8_t*>(t.raw()) + (e * t.size(1) + shard) * es, es);
  return r;
}

float f32_at(const Tensor& t, int e, int shard) { return t.data<float>()[e * t.size(1) + shard]; }

}  // namespace

void encode_module(const TensorSink& out, const std::string& prefix, ModuleFormat f, const ExpertWeights& w,
                   bool is_w13, int e, int shard) {
  const ProjWeights& pw = is_w13 ? w.w13 : w.w2;
  const int64_t N = is_w13 ? w.intermediate : w.hidden, K = is_w13 ? w.hidden : w.intermediate;
  const int64_t r0 = shard * N, r1 = r0 + N;
  const int b = w.scheme.weight_bits();
  const std::string p = prefix + ".";
  const int G = w.group_size;
  auto tensor_scale = [&](const Tensor& t, Shape s) { return scalar_of(t, e, t.size(1) == 1 ? 0 : shard, std::move(s)); };
  auto block_rows = [&](const Tensor& t) { return rows_of(t, e, r0 / w.block[0], r1 / w.block[0]); };
  switch (f) {
    case ModuleFormat::kDense:
      out(p + "weight", rows_of(pw.weight, e, r0, r1));
      break;
    case ModuleFormat::kCtPacked: {
      Tensor codes = codes_from_canonical(rows_of(pw.weight, e, r0, r1), b, K);
      out(p + "weight_packed", formats::ct_pack_int32(codes, b));
      out(p + "weight_scale", rows_of(pw.scale, e, r0, r1));
      Tensor ws(DType::kI64, {2});
      ws.data_mut<int64_t>()[0] = N, ws.data_mut<int64_t>()[1] = K;
      out(p + "weight_shape", ws);
      if (pw.zero_point.defined()) out(p + "weight_zero_point", formats::ct_pack_int32_dim0(rows_of(pw.zero_point, e, r0, r1), b));
      if (pw.g_idx.defined()) out(p + "weight_g_idx", pw.g_idx.slice0(e, e + 1).reshape({K}).clone());
      break;
    }
    case ModuleFormat::kCtNaive: {
      Tensor wt = rows_of(pw.weight, e, r0, r1);
      out(p + "weight", w.scheme.kind == SchemeKind::kINT8W8A8 ? u8_to_i8(wt) : wt);
      Strategy st = w.scheme.weights.strat();
      if (st == Strategy::kTensor) out(p + "weight_scale", tensor_scale(pw.scale, {1}));
      else if (st == Strategy::kBlock) out(p + "weight_scale", block_rows(pw.scale));
      else out(p + "weight_scale", rows_of(pw.scale, e, r0, r1));
      if (pw.input_scale.defined()) out(p + "input_scale", tensor_scale(pw.input_scale, {1}));
      break;
    }
    case ModuleFormat::kCtNvfp4:
    case ModuleFormat::kModeloptNvfp4: {
      const bool ct = f == ModuleFormat::kCtNvfp4;
      out(p + (ct ? "weight_packed" : "weight"), rows_of(pw.weight, e, r0, r1));
      out(p + "weight_scale", rows_of(pw.scale, e, r0, r1));
      float g = f32_at(pw.global_scale, e, pw.global_scale.size(1) == 1 ? 0 : shard);
      if (ct) out(p + "weight_global_scale", f32_tensor({1}, {1.0f / g}));
      else out(p + "weight_scale_2", f32_tensor({}, {g}));
      if (pw.input_scale.defined()) {
        float a = f32_at(pw.input_scale, e, pw.input_scale.size(1) == 1 ? 0 : shard);
        if (ct) out(p + "input_global_scale", f32_tensor({1}, {1.0f / a}));
        else out(p + "input_scale", f32_tensor({}, {a}));
      }
      break;
    }
    case ModuleFormat::kCtMxfp4:
      out(p + "weight_packed", rows_of(pw.weight, e, r0, r1));
      out(p + "weight_scale", rows_of(pw.scale, e, r0, r1));
      break;
    case ModuleFormat::kModeloptFp8: {
      out(p + "weight", rows_of(pw.weight, e, r0, r1));
      Strategy st = w.scheme.weights.strat();
      if (st == Strategy::kTensor) out(p + "weight_scale", tensor_scale(pw.scale, {}));
      else if (st == Strategy::kChannel) out(p + "weight_scale", rows_of(pw.scale, e, r0, r1).reshape({N}));
      else {
        Tensor bs = block_rows(pw.scale);
        out(p + "weight_scale", bs.reshape({bs.size(0), 1, bs.size(1), 1}));
      }
      if (pw.input_scale.defined()) out(p + "input_scale", tensor_scale(pw.input_scale, {}));
      break;
    }
    case ModuleFormat::kGptq:
    case ModuleFormat::kGptqV2:
    case ModuleFormat::kAwq: {
      Tensor codes = codes_from_canonical(rows_of(pw.weight, e, r0, r1), b, K);  // [N, K]
      const int64_t ng = G > 0 ? (K + G - 1) / G : 1;
      Tensor zp;
      if (pw.zero_point.defined()) {
        zp = rows_of(pw.zero_point, e, r0, r1);
      } else {  // symmetric: the implied zero point 2^(b-1)
        zp = Tensor(DType::kU8, {N, ng});
        memset(zp.raw_mut(), 1 << (b - 1), zp.nbytes());
      }
      out(p + "scales", transpose_last2(rows_of(pw.scale, e, r0, r1)));
      if (f != ModuleFormat::kAwq) {
        out(p + "qweight", formats::gptq_pack_qweight(codes, b));
        out(p + "qzeros", formats::gptq_pack_qzeros(zp, b, f == ModuleFormat::kGptq));
        Tensor gi(DType::kI32, {K});
        for (int64_t k = 0; k < K; ++k)
          gi.data_mut<int32_t>()[k] = pw.g_idx.defined() ? pw.g_idx.data<int32_t>()[e * K + k]
                                                          : static_cast<int32_t>(G > 0 ? k / G : 0);
        out(p + "g_idx", gi);
      } else {
        out(p + "qweight", formats::awq_pack_qweight(codes));
        out(p + "qzeros", formats::awq_pack_qzeros(zp));
      }
      break;
    }
    case ModuleFormat::kDeepseekFp8:
      out(p + "weight", rows_of(pw.weight, e, r0, r1));
      out(p + "weight_scale_inv", block_rows(pw.scale));
      break;
  }
}

// ---------------------------------------------------------------------------------------------
namespace {

// Per-tensor [E, S] F32 from flat values (one per expert, same for each shard).
Tensor flat_to_es(const std::vector<float>& v, int S) {
  Tensor t(DType::kF32, {static_cast<int64_t>(v.size()), S});
  for (size_t e = 0; e < v.size(); ++e)
    for (int s = 0; s < S; ++s) t.data_mut<float>()[e * S + s] = v[e];
  return t;
}

// The single value a flat tensor can hold for all experts and shards of `t` [E, S] F32: all must agree.
float single_value(const Tensor& t, const char* what) {
  const float* p = t.data<float>();
  for (int64_t i = 1; i < t.numel(); ++i)
    if (p[i] != p[0]) bad_input("encode: ", what, " differs between experts / shards; the fused layout stores one value");
  return p[0];
}

// Interleaved rows (gate0, up0, gate1, up1, ...) <-> gate rows then up rows, along dim 1 of [E, 2I, ...].
// File row n (interleaved) is split row (n even: gate) n / 2, (n odd: up) I + n / 2.
Tensor permute_gate_up_rows(const Tensor& t, bool to_split) {
  const int64_t E = t.size(0), N = t.size(1), row = t.nbytes() / std::max<int64_t>(E * N, 1), I = N / 2;
  Tensor r(t.dtype(), t.shape());
  const auto* s = static_cast<const uint8_t*>(t.raw());
  auto* d = static_cast<uint8_t*>(r.raw_mut());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t split = (n % 2 == 0) ? n / 2 : I + n / 2;
      const int64_t src = to_split ? n : split, dst = to_split ? split : n;
      memcpy(d + (e * N + dst) * row, s + (e * N + src) * row, row);
    }
  return r;
}
Tensor deinterleave_rows(const Tensor& t) { return permute_gate_up_rows(t, true); }
Tensor interleave_rows(const Tensor& t) { return permute_gate_up_rows(t, false); }

}  // namespace

ExpertWeights decode_llama4_fused(const FusedRef& r, const std::string& kind, const MoeScheme& scheme, int E, int H, int I,
                                  DType act_dtype) {
  const CheckpointDir& ck = *r.ck;
  const std::string gu = r.experts + ".gate_up_proj", dn = r.experts + ".down_proj";
  const std::string wg = r.what + " experts.gate_up_proj", wd = r.what + " experts.down_proj";
  const auto [e0, n] = expert_range(r, E);
  // Shapes are checked on the whole tensor; only this rank's experts are read (mmap'ed, zero copy
  // until transposed). Flat scales: the range's values.
  auto mine = [&, e0 = e0, n = n](const Tensor& t) { return t.slice0(e0, e0 + n); };
  auto flat = [&, e0 = e0, n = n](const std::string& name, const std::string& what, int S) {
    std::vector<float> v = fetch_flat(ck, name, E, what);
    return flat_to_es(std::vector<float>(v.begin() + e0, v.begin() + e0 + n), S);
  };
  ExpertWeights w;
  w.scheme = scheme;
  w.num_experts = static_cast<int>(n), w.hidden = H, w.intermediate = I, w.act_dtype = act_dtype;
  if (kind == "bf16") {
    w.w13.weight = transpose_last2(mine(fetch(ck, gu, {DType::kBF16, DType::kF16, DType::kF32}, {E, H, 2LL * I}, wg, "E x in x out")));
    w.w2.weight = transpose_last2(mine(fetch(ck, dn, {DType::kBF16, DType::kF16, DType::kF32}, {E, I, H}, wd, "E x in x out")));
  } else if (kind == "fp8") {
    w.w13.weight = transpose_last2(mine(fetch(ck, gu, {DType::kF8E4M3}, {E, H, 2LL * I}, wg, "E x in x out")));
    w.w2.weight = transpose_last2(mine(fetch(ck, dn, {DType::kF8E4M3}, {E, I, H}, wd, "E x in x out")));
    w.w13.scale = flat(gu + "_weight_scale", wg + "_weight_scale", 2);
    w.w2.scale = flat(dn + "_weight_scale", wd + "_weight_scale", 1);
    if (scheme.act == ActQuant::kFP8Tensor) {
      w.w13.input_scale = flat(gu + "_input_scale", wg + "_input_scale", 2);
      w.w2.input_scale = flat(dn + "_input_scale", wd + "_input_scale", 1);
    }
  } else if (kind == "nvfp4") {
    w.group_size = 16;
    if (H % 16 || I % 16) bad_input(r.what, ": NVFP4 sizes H=", H, " I=", I, " are not multiples of 16");
    // Packed along the input dim: byte (e, k/2, n) holds columns k, k+1 of output n; transposing the
    // bytes gives the canonical [E, N, K/2] pairs (low nibble = even k) unchanged.
    w.w13.weight = transpose_last2(mine(fetch(ck, gu, {DType::kU8}, {E, H / 2, 2LL * I}, wg, "E x in/2 x out, e2m1 pairs")));
    w.w2.weight = transpose_last2(mine(fetch(ck, dn, {DType::kU8}, {E, I / 2, H}, wd, "E x in/2 x out, e2m1 pairs")));
    w.w13.scale = transpose_last2(mine(fetch(ck, gu + "_weight_scale", {DType::kF8E4M3}, {E, H / 16, 2LL * I}, wg + "_weight_scale", "E x in/16 x out")));
    w.w2.scale = transpose_last2(mine(fetch(ck, dn + "_weight_scale", {DType::kF8E4M3}, {E, I / 16, H}, wd + "_weight_scale", "E x in/16 x out")));
    w.w13.global_scale = flat(gu + "_weight_scale_2", wg + "_weight_scale_2", 2);
    w.w2.global_scale = flat(dn + "_weight_scale_2", wd + "_weight_scale_2", 1);
    if (scheme.kind == SchemeKind::kNVFP4) {
      w.w13.input_scale = flat(gu + "_input_scale", wg + "_input_scale", 2);
      w.w2.input_scale = flat(dn + "_input_scale", wd + "_input_scale", 1);
    }
  } else {
    unsupported(r.what, ": fused Llama 4 experts in format ", kind);
  }
  return w;
}

void encode_llama4_fused(const TensorSink& out, const std::string& experts, const std::string& kind, const ExpertWeights& w) {
  const std::string gu = experts + ".gate_up_proj", dn = experts + ".down_proj";
  out(gu, transpose_last2(w.w13.weight));
  out(dn, transpose_last2(w.w2.weight));
  if (kind == "fp8") {
    // Flat scales: one value per expert ([E]); gate and up share it.
    auto flat = [&](const Tensor& t, const char* what) {
      Tensor r(DType::kF32, {t.size(0)});
      for (int64_t e = 0; e < t.size(0); ++e) {
        const float* row = t.data<float>() + e * t.size(1);
        for (int64_t s = 1; s < t.size(1); ++s)
          if (row[s] != row[0]) bad_input("encode: ", what, " differs between gate and up of expert ", e);
        r.data_mut<float>()[e] = row[0];
      }
      return r;
    };
    out(gu + "_weight_scale", flat(w.w13.scale, "gate_up_proj_weight_scale"));
    out(dn + "_weight_scale", flat(w.w2.scale, "down_proj_weight_scale"));
    if (w.w13.input_scale.defined()) {
      out(gu + "_input_scale", f32_tensor({}, {single_value(w.w13.input_scale, "gate_up_proj_input_scale")}));
      out(dn + "_input_scale", f32_tensor({}, {single_value(w.w2.input_scale, "down_proj_input_scale")}));
    }
  } else if (kind == "nvfp4") {
    out(gu + "_weight_scale", transpose_last2(w.w13.scale));
    out(dn + "_weight_scale", transpose_last2(w.w2.scale));
    out(gu + "_weight_scale_2", f32_tensor({}, {single_value(w.w13.global_scale, "gate_up_proj_weight_scale_2")}));
    out(dn + "_weight_scale_2", f32_tensor({}, {single_value(w.w2.global_scale, "down_proj_weight_scale_2")}));
    if (w.w13.input_scale.defined()) {
      out(gu + "_input_scale", f32_tensor({}, {single_value(w.w13.input_scale, "gate_up_proj_input_scale")}));
      out(dn + "_input_scale", f32_tensor({}, {single_value(w.w2.input_scale, "down_proj_input_scale")}));
    }
  }
}

ExpertWeights decode_gpt_oss(const FusedRef& r, const std::string& kind, const MoeScheme& scheme, int E, int H, int I,
                             DType act_dtype) {
  const CheckpointDir& ck = *r.ck;
  const std::string gu = r.experts + ".gate_up_proj", dn = r.experts + ".down_proj";
  const std::string wg = r.what + " experts.gate_up_proj", wd = r.what + " experts.down_proj";
  const auto [e0, n] = expert_range(r, E);
  auto mine = [e0 = e0, n = n](const Tensor& t) { return t.slice0(e0, e0 + n); };  // this rank's experts
  ExpertWeights w;
  w.scheme = scheme;
  w.num_experts = static_cast<int>(n), w.hidden = H, w.intermediate = I, w.act_dtype = act_dtype;
  const std::initializer_list<DType> bd = {DType::kBF16, DType::kF16, DType::kF32};
  if (kind == "mxfp4") {
    if (H % 32 || I % 32) bad_input(r.what, ": MXFP4 sizes H=", H, " I=", I, " are not multiples of 32");
    w.group_size = 32;
    Tensor gb = fetch(ck, gu + "_blocks", {DType::kU8}, {E, 2LL * I, H / 32, 16}, wg + "_blocks", "E x 2I (gate/up interleaved) x in/32 x 16");
    w.w13.weight = deinterleave_rows(mine(gb).reshape({n, 2LL * I, H / 2}));
    w.w13.scale = deinterleave_rows(mine(fetch(ck, gu + "_scales", {DType::kU8, DType::kE8M0}, {E, 2LL * I, H / 32}, wg + "_scales")));
    Tensor db = fetch(ck, dn + "_blocks", {DType::kU8}, {E, H, I / 32, 16}, wd + "_blocks", "E x out x in/32 x 16");
    w.w2.weight = mine(db).reshape({n, H, I / 2});
    w.w2.scale = mine(fetch(ck, dn + "_scales", {DType::kU8, DType::kE8M0}, {E, H, I / 32}, wd + "_scales"));
  } else if (kind == "bf16") {
    w.w13.weight = deinterleave_rows(transpose_last2(mine(fetch(ck, gu, bd, {E, H, 2LL * I}, wg, "E x in x 2I (gate/up interleaved)"))));
    w.w2.weight = transpose_last2(mine(fetch(ck, dn, bd, {E, I, H}, wd, "E x in x out")));
  } else {
    unsupported(r.what, ": gpt-oss experts in format ", kind);
  }
  w.w13.bias = deinterleave_rows(mine(fetch(ck, gu + "_bias", bd, {E, 2LL * I}, wg + "_bias")));
  w.w2.bias = mine(fetch(ck, dn + "_bias", bd, {E, H}, wd + "_bias"));
  return w;
}

void encode_gpt_oss(const TensorSink& out, const std::string& experts, const std::string& kind, const ExpertWeights& w) {
  const std::string gu = experts + ".gate_up_proj", dn = experts + ".down_proj";
  const int64_t E = w.num_experts, H = w.hidden, I = w.intermediate;
  if (kind == "mxfp4") {
    out(gu + "_blocks", interleave_rows(w.w13.weight).reshape({E, 2 * I, H / 32, 16}));
    out(gu + "_scales", interleave_rows(w.w13.scale));
    out(dn + "_blocks", w.w2.weight.reshape({E, H, I / 32, 16}));
    out(dn + "_scales", w.w2.scale);
  } else {
    out(gu, transpose_last2(interleave_rows(w.w13.weight)));
    out(dn, transpose_last2(w.w2.weight));
  }
  out(gu + "_bias", interleave_rows(w.w13.bias));
  out(dn + "_bias", w.w2.bias);
}

}  // namespace qmoe::models
