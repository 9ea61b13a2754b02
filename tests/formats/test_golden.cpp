// Golden tests against the real compressed-tensors library (fixtures from scripts/make_golden.py:
// seeded weights compressed and decompressed by the library itself). Two checks per case:
//  1. format level: qmoe's unpacking (formats/packing.h) + scalar codecs + the library's own
//     formula reproduce the library's decompressed weight bit for bit;
//  2. loader level: the checkpoint adapter (models::decode_module) + the reference dequantizer
//     (ref::dequantize_proj, exact fp32) give values whose rounding to the library's output dtype
//     equals the library bit for bit. For NVFP4 the loader keeps the multiplier 1/G while the
//     library divides by G: the two may differ by one rounding, bounded below and counted.
// The scheme metadata goes through formats::parse_quant_args and formats::moe_scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "checkpoint/ckpt_test_util.h"
#include "checkpoint/json_strict.h"
#include "core/codecs.h"
#include "cpu/ref/quantize.h"
#include "formats/packing.h"
#include "formats/quant_args.h"
#include "formats/quant_config.h"
#include "models/layouts.h"
#include "qmoe/checkpoint.h"

namespace qmoe {
namespace {
using json = nlohmann::json;

const std::string kGoldenDir = std::string(QMOE_SOURCE_DIR) + "/tests/golden/";

// ct_golden.safetensors: compressed-tensors 0.20; ct_golden_actorder.safetensors: 0.16 (the last
// versions with actorder="group" / weight_g_idx).
struct Fixture {
  const char* file;
  std::vector<std::string> cases;
};
const Fixture kFixtures[] = {
    {"ct_golden.safetensors",
     {"w4a16_sym_g128", "w4a16_asym_g64", "w4a16_sym_g32_actorder_weight", "w8a16_channel", "int8_w8a8", "fp8_tensor",
      "fp8_channel", "fp8_block", "nvfp4", "mxfp4"}},
    {"ct_golden_actorder.safetensors", {"w4a16_asym_g64_actorder_group", "w4a16_sym_g32_actorder_group"}},
};

struct Case {
  std::string name, format;
  int64_t N = 0, K = 0;
  formats::ModuleQuant mq;
};

Case load_case(const SafetensorsFile& f, const std::string& name) {
  Case c;
  c.name = name;
  json m = parse_json_strict(f.metadata().at("scheme." + name), "scheme." + name);
  c.format = m.at("format").get<std::string>();
  c.N = m.at("N").get<int64_t>();
  c.K = m.at("K").get<int64_t>();
  c.mq.weights = formats::parse_quant_args(m.at("weights"), name + ".weights");
  if (m.contains("input_activations"))
    c.mq.input_activations = formats::parse_quant_args(m.at("input_activations"), name + ".input_activations");
  c.mq.format = c.format;
  c.mq.source = formats::QuantSource::kCompressedTensors;
  return c;
}

// Element i of a bf16 / f16 / f32 tensor as float.
float elem(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBF16: return codec::bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF16: return codec::f16_to_f32(t.data<uint16_t>()[i]);
    case DType::kF32: return t.data<float>()[i];
    case DType::kF8E4M3: return codec::e4m3_to_f32(t.data<uint8_t>()[i]);
    default: ADD_FAILURE() << "unexpected dtype " << dtype_name(t.dtype()); return NAN;
  }
}

// Rounds an fp32 value to `dt` and returns the bit pattern (as the library's tensor stores it).
uint32_t round_bits(float v, DType dt) {
  switch (dt) {
    case DType::kBF16: return codec::f32_to_bf16(v);
    case DType::kF16: return codec::f32_to_f16(v);
    case DType::kF32: return codec::f32_bits(v);
    default: ADD_FAILURE() << "unexpected dtype"; return 0;
  }
}
uint32_t stored_bits(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? codec::f32_bits(t.data<float>()[i]) : t.data<uint16_t>()[i];
}

// The library's dequantization of element (n, k), computed from the compressed tensors with
// qmoe's unpacking and codecs, in fp32 before the final rounding to the output dtype.
class LibraryFormula {
 public:
  LibraryFormula(const SafetensorsFile& f, const Case& c) : c_(c) {
    const std::string p = c.name + ".";
    const QuantArgs& w = *c.mq.weights;
    scale_ = f.get(p + "weight_scale");
    if (c.format == "pack-quantized") {
      Tensor shape = f.get(p + "weight_shape");
      EXPECT_EQ(shape.dtype(), DType::kI64);
      EXPECT_EQ(shape.data<int64_t>()[0], c.N);
      EXPECT_EQ(shape.data<int64_t>()[1], c.K);
      codes_ = formats::ct_unpack_int32(f.get(p + "weight_packed"), w.num_bits, c.K);
      if (!w.symmetric) zp_ = formats::ct_unpack_int32_dim0(f.get(p + "weight_zero_point"), w.num_bits, c.N);
      if (w.actorder == ActOrder::kGroup) {
        g_idx_ = f.get(p + "weight_g_idx");
        EXPECT_EQ(g_idx_.dtype(), DType::kI32);
        EXPECT_EQ(g_idx_.numel(), c.K);
      }
    } else if (c.format == "int-quantized" || c.format == "float-quantized") {
      q_ = f.get(p + "weight");
    } else {  // nvfp4 / mxfp4
      codes_ = formats::unpack_nibbles(f.get(p + "weight_packed"), c.K);
      if (c.format == "nvfp4-pack-quantized") global_ = f.get(p + "weight_global_scale").data<float>()[0];
    }
  }

  float operator()(int64_t n, int64_t k) const {
    const QuantArgs& w = *c_.mq.weights;
    const int64_t ng = scale_.dim() >= 2 ? scale_.size(-1) : 1;
    // With activation order the library sorts columns by g_idx and groups them contiguously; for
    // GPTQ-style g_idx (every group exactly group_size columns) that is group g_idx[k].
    const int64_t grp = g_idx_.defined() ? g_idx_.data<int32_t>()[k] : k / w.group_size.value_or(1);
    float s;
    switch (w.strat()) {
      case Strategy::kGroup:
      case Strategy::kTensorGroup: s = scale_elem(n * ng + grp); break;
      case Strategy::kChannel: s = scale_elem(n); break;
      case Strategy::kBlock: s = scale_elem((n / (*w.block_structure)[0]) * ng + k / (*w.block_structure)[1]); break;
      default: s = scale_elem(0); break;
    }
    if (c_.format == "pack-quantized") {
      const int off = 1 << (w.num_bits - 1);
      float z = zp_.defined() ? static_cast<float>(zp_.data<uint8_t>()[n * zp_.size(1) + grp]) : off;
      // library: (x_q - zp) in the scale dtype (exact small integers), times the scale.
      return (static_cast<float>(codes_.data<uint8_t>()[n * c_.K + k]) - z) * s;
    }
    if (c_.format == "int-quantized") return static_cast<float>(q_.data<int8_t>()[n * c_.K + k]) * s;
    if (c_.format == "float-quantized") return codec::e4m3_to_f32(q_.data<uint8_t>()[n * c_.K + k]) * s;
    const float e = codec::e2m1_to_f32(codes_.data<uint8_t>()[n * c_.K + k]);
    if (c_.format == "nvfp4-pack-quantized") return e * (s / global_);  // library: scale / global_scale in fp32
    return e * s;                                                      // mxfp4: s = 2^(e - 127)
  }

 private:
  float scale_elem(int64_t i) const {
    if (scale_.dtype() == DType::kU8) return codec::e8m0_to_f32(scale_.data<uint8_t>()[i]);
    return elem(scale_, i);
  }
  const Case& c_;
  Tensor scale_, codes_, zp_, q_, g_idx_;
  float global_ = 1.f;
};

models::ModuleFormat module_format(const std::string& f) {
  if (f == "pack-quantized") return models::ModuleFormat::kCtPacked;
  if (f == "nvfp4-pack-quantized") return models::ModuleFormat::kCtNvfp4;
  if (f == "mxfp4-pack-quantized") return models::ModuleFormat::kCtMxfp4;
  return models::ModuleFormat::kCtNaive;
}

// Runs `body(file, case)` for every case of every fixture present; skips when none is.
void for_each_case(const std::function<void(const SafetensorsFile&, const std::string&)>& body) {
  int present = 0;
  for (const auto& fx : kFixtures) {
    const std::string path = kGoldenDir + fx.file;
    if (!std::filesystem::exists(path)) continue;
    ++present;
    auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f->metadata().at("generator"), "scripts/make_golden.py");
    for (const auto& name : fx.cases) {
      SCOPED_TRACE(std::string(fx.file) + ": " + name);
      ASSERT_TRUE(f->metadata().count("scheme." + name));
      body(*f, name);
    }
  }
  if (!present) GTEST_SKIP() << "no fixtures in " << kGoldenDir << ": run scripts/make_golden.py (needs torch + compressed-tensors)";
}

TEST(Golden, LibraryFormulaBitExact) {
  for_each_case([](const SafetensorsFile& file, const std::string& name) {
    Case c = load_case(file, name);
    Tensor lib = file.get(c.name + ".decompressed");
    ASSERT_EQ(lib.shape(), (Shape{c.N, c.K}));
    LibraryFormula ours(file, c);
    int64_t bad = 0;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k) {
        const int64_t i = n * c.K + k;
        if (round_bits(ours(n, k), lib.dtype()) != stored_bits(lib, i) && bad++ < 5)
          ADD_FAILURE() << "(" << n << ", " << k << "): qmoe " << ours(n, k) << " library " << elem(lib, i);
      }
    EXPECT_EQ(bad, 0);
  });
}

TEST(Golden, LoaderAndReferenceMatchLibrary) {
  for_each_case([](const SafetensorsFile& file, const std::string& name) {
    // The case's tensors become one module of a model directory, read back through CheckpointDir.
    test::ScratchDir dir("golden_loader");
    test::write_text(dir / "config.json", "{}");
    SafetensorsWriter wr;
    for (const auto& t : file.tensors())
      if (t.name.rfind(name + ".", 0) == 0) wr.add(t.name, file.get(t.name));
    wr.write(dir / "model.safetensors");
    auto ck = CheckpointDir::open(dir.path.string());

    Case c = load_case(file, name);
    MoeScheme scheme = formats::moe_scheme(name, c.mq, c.mq, c.mq);
    ExpertWeights ew;
    ew.scheme = scheme;
    ew.num_experts = 1;
    ew.hidden = static_cast<int>(c.N);  // w2 is [E, H, I]: N rows = H, K columns = I
    ew.intermediate = static_cast<int>(c.K);
    const QuantArgs& w = *c.mq.weights;
    models::ModuleShape ms;
    ms.N = c.N;
    ms.K = c.K;
    if (w.strat() == Strategy::kGroup || w.strat() == Strategy::kTensorGroup) ms.group_size = ew.group_size = *w.group_size;
    if (w.strat() == Strategy::kBlock) ms.block = ew.block = *w.block_structure;
    ew.w2 = models::decode_module({ck.get(), c.name, name}, module_format(c.format), scheme, ms);
    EXPECT_EQ(ew.w2.g_idx.defined(), w.actorder == ActOrder::kGroup);
    Tensor deq = ref::dequantize_proj(ew, /*is_w13=*/false);  // F32 [1, N, K], exact
    Tensor lib = file.get(c.name + ".decompressed");
    ASSERT_EQ(deq.numel(), lib.numel());
    LibraryFormula formula(file, c);
    int64_t differ = 0;
    for (int64_t i = 0; i < lib.numel(); ++i) {
      const float q = deq.data<float>()[i];
      if (round_bits(q, lib.dtype()) == stored_bits(lib, i)) continue;
      ++differ;
      if (c.format != "nvfp4-pack-quantized") {
        if (differ <= 5) ADD_FAILURE() << "element " << i << ": qmoe " << q << " library " << elem(lib, i);
        continue;
      }
      // NVFP4: qmoe computes e2m1 * s * fl(1/G), the library e2m1 * fl(s / G). Each side is within
      // 2^-24 relative of the exact e2m1 * s / G, so they are within 2^-23 relative of each other
      // before the final bf16 rounding, which can then split them by at most one bf16 ulp.
      const float exact = formula(i / c.K, i % c.K);
      EXPECT_LE(std::fabs(q - exact), std::ldexp(std::fabs(exact), -22)) << "element " << i;
      const float lb = elem(lib, i);
      EXPECT_LE(std::fabs(codec::round_bf16(q) - lb), std::ldexp(std::fabs(lb), -7)) << "element " << i;
    }
    if (c.format == "nvfp4-pack-quantized") {
      ::testing::Test::RecordProperty("nvfp4_one_ulp_differences", static_cast<int>(differ));
      EXPECT_LE(differ, lib.numel() / 50) << "NVFP4 reciprocal-vs-division differences should be rare";
    } else {
      EXPECT_EQ(differ, 0);
    }
  });
}

}  // namespace
}  // namespace qmoe
