// Tests of QuantArgs::validate (every compressed-tensors rule, valid and invalid), QuantArgs::str,
// MoeScheme::key and the enum names (src/core/quant.cpp), and of parse_quant_args
// (src/formats/quant_args.cpp): presets as llm-compressor writes them, aliases, legacy block
// strings, torch dtype names, extra = "forbid", and the error kind / message of every rejection.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "formats/quant_args.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "qmoe/quant.h"
#include "qmoe/routing.h"

namespace {

using namespace qmoe;
using json = nlohmann::json;
using formats::parse_quant_args;

const std::string kWhere = "config.json: config_groups.group_0.weights";

// Expects a kBadInput (or `kind`) error whose message names `where` and contains `needle`.
template <class F>
void expect_error(F f, const std::string& needle, ErrorKind kind = ErrorKind::kBadInput) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(kWhere), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

QuantArgs validated(QuantArgs a) {
  a.validate(kWhere);
  return a;
}
QuantArgs parse(const char* text) { return parse_quant_args(json::parse(text), kWhere); }

// ---- QuantArgs::validate ------------------------------------------------------------------------------
TEST(QuantArgsValidate, InfersStrategyFromGroupSize) {
  QuantArgs a;
  EXPECT_EQ(validated(a).strategy, Strategy::kTensor);
  a.group_size = 128;
  EXPECT_EQ(validated(a).strategy, Strategy::kGroup);
  a.group_size = -1;
  EXPECT_EQ(validated(a).strategy, Strategy::kChannel);
  a.group_size = 0;
  expect_error([&] { validated(a); }, "invalid group_size 0");
  a.group_size = -2;
  expect_error([&] { validated(a); }, "invalid group_size -2");
}

TEST(QuantArgsValidate, TokenNeedsDynamic) {
  QuantArgs a;
  a.strategy = Strategy::kToken;
  expect_error([&] { validated(a); }, "dynamic: true");
  a.dynamic = Dynamic::kDynamic;
  EXPECT_EQ(validated(a).strat(), Strategy::kToken);
}

TEST(QuantArgsValidate, GroupRules) {
  QuantArgs a;
  a.strategy = Strategy::kGroup;
  expect_error([&] { validated(a); }, "positive group_size");
  a.group_size = -1;
  expect_error([&] { validated(a); }, "positive group_size");
  a.strategy = Strategy::kTensorGroup;
  a.group_size = 16;
  EXPECT_NO_THROW(validated(a));
  a.strategy = Strategy::kChannel;
  a.group_size = 128;
  expect_error([&] { validated(a); }, "needs strategy 'group' or 'tensor_group'");
  a.strategy = Strategy::kTensor;  // compressed-tensors only rejects a positive group_size elsewhere
  a.group_size = -1;
  EXPECT_NO_THROW(validated(a));
}

TEST(QuantArgsValidate, BlockRules) {
  QuantArgs a;
  a.type = QuantType::kFloat;
  a.strategy = Strategy::kBlock;
  expect_error([&] { validated(a); }, "needs block_structure");
  a.block_structure = std::array<int, 2>{128, 128};
  EXPECT_NO_THROW(validated(a));
  a.strategy = Strategy::kChannel;
  expect_error([&] { validated(a); }, "block_structure needs strategy 'block'");
  a.strategy = Strategy::kBlock;
  a.block_structure = std::array<int, 2>{0, 128};
  expect_error([&] { validated(a); }, "two positive ints");
}

TEST(QuantArgsValidate, ActorderRules) {
  QuantArgs a;
  a.num_bits = 4;
  a.group_size = -1;
  a.actorder = ActOrder::kGroup;
  expect_error([&] { validated(a); }, "actorder 'group'");
  a.actorder = ActOrder::kWeight;
  EXPECT_NO_THROW(validated(a));
  a.group_size = 128;
  a.actorder = ActOrder::kGroup;
  EXPECT_NO_THROW(validated(a));
}

TEST(QuantArgsValidate, DynamicRules) {
  for (Strategy s : {Strategy::kToken, Strategy::kTensor, Strategy::kTensorGroup, Strategy::kGroup}) {
    QuantArgs a;
    a.strategy = s;
    if (s == Strategy::kGroup || s == Strategy::kTensorGroup) a.group_size = 16;
    a.dynamic = Dynamic::kDynamic;
    EXPECT_NO_THROW(validated(a)) << strategy_name(s);
  }
  for (Strategy s : {Strategy::kChannel, Strategy::kBlock, Strategy::kAttnHead}) {
    QuantArgs a;
    a.strategy = s;
    if (s == Strategy::kBlock) a.block_structure = std::array<int, 2>{1, 128};
    a.dynamic = Dynamic::kDynamic;
    expect_error([&] { validated(a); }, "dynamic quantization needs strategy");
  }
  QuantArgs l;
  l.type = QuantType::kFloat, l.num_bits = 4, l.strategy = Strategy::kGroup, l.group_size = 16;
  l.dynamic = Dynamic::kLocal;
  expect_error([&] { validated(l); }, "'local' needs strategy 'tensor_group'");
  l.strategy = Strategy::kTensorGroup;
  EXPECT_NO_THROW(validated(l));
}

TEST(QuantArgsValidate, NumBitsAndZeroPointDtype) {
  QuantArgs a;
  a.type = QuantType::kFloat;
  a.num_bits = 6;
  expect_error([&] { validated(a); }, "num_bits 4 or 8");
  a.num_bits = 4;
  EXPECT_EQ(validated(a).zp_dtype, DType::kF8E4M3);
  a.num_bits = 8;
  EXPECT_EQ(validated(a).zp_dtype, DType::kF8E4M3);
  QuantArgs i;
  i.num_bits = 4;
  EXPECT_EQ(validated(i).zp_dtype, DType::kI8);
  i.num_bits = 16;
  EXPECT_EQ(validated(i).zp_dtype, DType::kI16);
  i.num_bits = 0;
  expect_error([&] { validated(i); }, "num_bits in [1, 32]");
  i.num_bits = 4;
  i.zp_dtype = DType::kBF16;  // an explicit zp_dtype is kept
  EXPECT_EQ(validated(i).zp_dtype, DType::kBF16);
}

// ---- names, str, key --------------------------------------------------------------------------------
TEST(QuantNames, StrExamples) {
  QuantArgs w4;
  w4.num_bits = 4, w4.group_size = 128;
  EXPECT_EQ(validated(w4).str(), "int4 sym group128");
  QuantArgs w8a;
  w8a.symmetric = false, w8a.group_size = -1, w8a.actorder = ActOrder::kWeight;
  EXPECT_EQ(validated(w8a).str(), "int8 asym channel actorder=weight");
  QuantArgs fp8;
  fp8.type = QuantType::kFloat, fp8.strategy = Strategy::kToken, fp8.dynamic = Dynamic::kDynamic;
  EXPECT_EQ(validated(fp8).str(), "float8 token dynamic");
  QuantArgs blk;
  blk.type = QuantType::kFloat, blk.strategy = Strategy::kBlock, blk.block_structure = std::array<int, 2>{128, 64};
  EXPECT_EQ(validated(blk).str(), "float8 block128x64");
  QuantArgs nv;
  nv.type = QuantType::kFloat, nv.num_bits = 4, nv.strategy = Strategy::kTensorGroup, nv.group_size = 16;
  nv.dynamic = Dynamic::kLocal;
  EXPECT_EQ(validated(nv).str(), "float4 tensor_group16 local");
  QuantArgs ag;
  ag.num_bits = 4, ag.group_size = 32, ag.actorder = ActOrder::kGroup, ag.symmetric = false;
  EXPECT_EQ(validated(ag).str(), "int4 asym group32 actorder=group");
}

TEST(QuantNames, SchemeKeys) {
  MoeScheme s;
  EXPECT_EQ(s.key(), "unquantized");
  s.kind = SchemeKind::kWNA16;
  s.weights.num_bits = 4, s.weights.group_size = 128;
  s.weights.validate(kWhere);
  EXPECT_EQ(s.key(), "wna16/int4/g128/sym");
  s.weights.symmetric = false, s.weights.actorder = ActOrder::kGroup;
  EXPECT_EQ(s.key(), "wna16/int4/g128/asym/actorder");
  s.weights = QuantArgs{};
  s.weights.group_size = -1;
  s.weights.validate(kWhere);
  EXPECT_EQ(s.key(), "wna16/int8/channel/sym");

  MoeScheme f;
  f.kind = SchemeKind::kFP8W8A8;
  f.weights.type = QuantType::kFloat, f.weights.strategy = Strategy::kChannel;
  f.act = ActQuant::kFP8Token;
  EXPECT_EQ(f.key(), "fp8/channel/token");
  f.weights.strategy = Strategy::kTensor, f.act = ActQuant::kFP8Tensor;
  EXPECT_EQ(f.key(), "fp8/tensor/tensor");
  f.weights.strategy = Strategy::kBlock, f.weights.block_structure = std::array<int, 2>{128, 128};
  f.act = ActQuant::kFP8Group128;
  EXPECT_EQ(f.key(), "fp8/block128x128/group128");
  f.kind = SchemeKind::kFP8A16, f.act = ActQuant::kNone;
  EXPECT_EQ(f.key(), "fp8/block128x128/a16");

  MoeScheme i8;
  i8.kind = SchemeKind::kINT8W8A8, i8.weights.strategy = Strategy::kChannel, i8.act = ActQuant::kINT8Token;
  EXPECT_EQ(i8.key(), "int8/channel/token");
  MoeScheme w4a8;
  w4a8.kind = SchemeKind::kW4A8FP8, w4a8.weights.num_bits = 4, w4a8.weights.strategy = Strategy::kGroup;
  w4a8.weights.group_size = 128;
  EXPECT_EQ(w4a8.key(), "w4a8/fp8/g128/sym");
  w4a8.kind = SchemeKind::kW4A8INT8;
  EXPECT_EQ(w4a8.key(), "w4a8/int8/g128/sym");
  MoeScheme nv;
  nv.kind = SchemeKind::kNVFP4;
  EXPECT_EQ(nv.key(), "nvfp4/w4a4");
  nv.kind = SchemeKind::kNVFP4A16;
  EXPECT_EQ(nv.key(), "nvfp4/w4a16");
  nv.kind = SchemeKind::kMXFP4A16;
  EXPECT_EQ(nv.key(), "mxfp4/w4a16");
}

template <class E, class F>
void expect_distinct_names(std::initializer_list<E> values, F name) {
  std::set<std::string> seen;
  for (E v : values) {
    std::string n = name(v);
    EXPECT_NE(n, "?");
    EXPECT_TRUE(seen.insert(n).second) << "duplicate name " << n;
  }
}

TEST(QuantNames, EveryEnumHasADistinctName) {
  expect_distinct_names({Strategy::kTensor, Strategy::kChannel, Strategy::kGroup, Strategy::kBlock, Strategy::kToken,
                         Strategy::kTensorGroup, Strategy::kAttnHead},
                        strategy_name);
  expect_distinct_names({SchemeKind::kUnquantized, SchemeKind::kWNA16, SchemeKind::kFP8W8A8, SchemeKind::kFP8A16,
                         SchemeKind::kINT8W8A8, SchemeKind::kW4A8FP8, SchemeKind::kW4A8INT8, SchemeKind::kNVFP4,
                         SchemeKind::kNVFP4A16, SchemeKind::kMXFP4A16},
                        scheme_kind_name);
  expect_distinct_names({ActQuant::kNone, ActQuant::kFP8Tensor, ActQuant::kFP8Token, ActQuant::kFP8Group128,
                         ActQuant::kINT8Token, ActQuant::kNVFP4},
                        act_quant_name);
  expect_distinct_names({RouterKind::kSoftmaxTopK, RouterKind::kSigmoidTopK, RouterKind::kTopKSoftmax,
                         RouterKind::kLlama4, RouterKind::kGrouped},
                        router_kind_name);
  expect_distinct_names({Activation::kSiluMul, Activation::kGeluMul, Activation::kSwigluOai}, activation_name);
  EXPECT_STREQ(strategy_name(Strategy::kTensorGroup), "tensor_group");
  EXPECT_STREQ(router_kind_name(RouterKind::kGrouped), "grouped_topk");
  EXPECT_STREQ(activation_name(Activation::kSwigluOai), "swigluoai");
}

// ---- parse_quant_args ------------------------------------------------------------------------------------
TEST(ParseQuantArgs, PresetsAsWritten) {
  QuantArgs w4 = parse(R"({"num_bits": 4, "type": "int", "symmetric": true, "group_size": 128,
      "strategy": "group", "block_structure": null, "dynamic": false, "actorder": null,
      "observer": "minmax", "observer_kwargs": {}})");
  EXPECT_EQ(w4.num_bits, 4);
  EXPECT_EQ(w4.type, QuantType::kInt);
  EXPECT_EQ(w4.strat(), Strategy::kGroup);
  EXPECT_EQ(w4.group_size, 128);
  EXPECT_EQ(w4.actorder, ActOrder::kNone);
  EXPECT_EQ(w4.zp_dtype, DType::kI8);

  QuantArgs tok = parse(R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "token",
      "dynamic": true, "observer": null})");
  EXPECT_EQ(tok.strat(), Strategy::kToken);
  EXPECT_EQ(tok.dynamic, Dynamic::kDynamic);

  QuantArgs nv = parse(R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group",
      "group_size": 16, "dynamic": "local", "scale_dtype": "torch.float8_e4m3fn", "zp_dtype": "torch.float8_e4m3fn"})");
  EXPECT_EQ(nv.dynamic, Dynamic::kLocal);
  EXPECT_EQ(nv.scale_dtype, DType::kF8E4M3);
  EXPECT_EQ(nv.zp_dtype, DType::kF8E4M3);

  QuantArgs blk = parse(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]})");
  EXPECT_EQ(blk.strat(), Strategy::kBlock);
  EXPECT_EQ(blk.block_structure, (std::array<int, 2>{128, 128}));

  QuantArgs mx = parse(R"({"num_bits": 4, "type": "float", "group_size": 32, "scale_dtype": "uint8"})");
  EXPECT_EQ(mx.strat(), Strategy::kGroup);  // inferred
  EXPECT_EQ(mx.scale_dtype, DType::kU8);

  QuantArgs defaults = parse("{}");
  EXPECT_EQ(defaults.num_bits, 8);
  EXPECT_EQ(defaults.type, QuantType::kInt);
  EXPECT_TRUE(defaults.symmetric);
  EXPECT_EQ(defaults.strat(), Strategy::kTensor);
}

TEST(ParseQuantArgs, CaseInsensitiveEnumsAndAliases) {
  EXPECT_EQ(parse(R"({"type": "FLOAT", "strategy": "CHANNEL"})").strat(), Strategy::kChannel);
  EXPECT_EQ(parse(R"({"group_size": 64, "actorder": "dynamic"})").actorder, ActOrder::kGroup);
  EXPECT_EQ(parse(R"({"group_size": 64, "actorder": "Group"})").actorder, ActOrder::kGroup);
  EXPECT_EQ(parse(R"({"group_size": 64, "actorder": "static"})").actorder, ActOrder::kWeight);
  EXPECT_EQ(parse(R"({"group_size": 64, "actorder": "weight"})").actorder, ActOrder::kWeight);
  EXPECT_EQ(parse(R"({"group_size": 64, "actorder": true})").actorder, ActOrder::kGroup);
  EXPECT_EQ(parse(R"({"group_size": 64, "actorder": false})").actorder, ActOrder::kNone);
  EXPECT_EQ(parse(R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
      "dynamic": "LOCAL"})").dynamic, Dynamic::kLocal);
  EXPECT_EQ(parse(R"({"num_bits": 8.0, "group_size": 32.0})").group_size, 32);
}

TEST(ParseQuantArgs, LegacyBlockStrings) {
  EXPECT_EQ(parse(R"({"type": "float", "strategy": "block", "block_structure": "128x64"})").block_structure,
            (std::array<int, 2>{128, 64}));
  EXPECT_EQ(parse(R"({"type": "float", "strategy": "block", "block_structure": " 2x 4"})").block_structure,
            (std::array<int, 2>{2, 4}));
  for (const char* bad : {R"("128X128")", R"("128x")", R"("axb")", R"("1x2x3")", "[128]", "[128, 128.5]",
                          "[128, 128, 1]", R"(["128", "128"])", "7"})
    expect_error([&] { parse_quant_args(json::parse(str(R"({"strategy": "block", "block_structure": )", bad, "}")), kWhere); },
                 "block_structure");
}

TEST(ParseQuantArgs, TorchDtypeNames) {
  EXPECT_EQ(parse(R"({"scale_dtype": "torch.bfloat16"})").scale_dtype, DType::kBF16);
  EXPECT_EQ(parse(R"({"scale_dtype": "bfloat16"})").scale_dtype, DType::kBF16);
  EXPECT_EQ(parse(R"({"scale_dtype": "torch.half"})").scale_dtype, DType::kF16);
  EXPECT_EQ(parse(R"({"scale_dtype": "torch.float"})").scale_dtype, DType::kF32);
  EXPECT_EQ(parse(R"({"scale_dtype": "torch.float8_e8m0fnu"})").scale_dtype, DType::kE8M0);
  EXPECT_EQ(parse(R"({"zp_dtype": "torch.int32"})").zp_dtype, DType::kI32);
  EXPECT_FALSE(parse(R"({"scale_dtype": null})").scale_dtype.has_value());
  expect_error([] { parse(R"({"scale_dtype": "torch.banana"})"); }, "no such torch dtype");
  expect_error([] { parse(R"({"scale_dtype": 5})"); }, "scale_dtype");
  expect_error([] { parse(R"({"zp_dtype": "torch.complex64"})"); }, "torch.complex64", ErrorKind::kUnsupported);
}

TEST(ParseQuantArgs, ForbidsExtraKeysButIgnoresObserver) {
  EXPECT_NO_THROW(parse(R"({"observer": "mse", "observer_kwargs": {"maxshrink": 0.2}})"));
  expect_error([] { parse(R"({"num_bits": 4, "group_size": 128, "foo": 1})"); }, "unknown key \"foo\"");
  expect_error([] { parse(R"({"groupsize": 128})"); }, "unknown key \"groupsize\"");
  expect_error([] { parse_quant_args(json::parse("[1, 2]"), kWhere); }, "must be a JSON object");
}

TEST(ParseQuantArgs, FieldTypeErrors) {
  expect_error([] { parse(R"({"num_bits": "8"})"); }, "num_bits");
  expect_error([] { parse(R"({"num_bits": 8.5})"); }, "num_bits");
  expect_error([] { parse(R"({"num_bits": null})"); }, "num_bits");
  expect_error([] { parse(R"({"num_bits": true})"); }, "num_bits");
  expect_error([] { parse(R"({"type": "uint"})"); }, "type");
  expect_error([] { parse(R"({"symmetric": "true"})"); }, "symmetric");
  expect_error([] { parse(R"({"strategy": "row"})"); }, "strategy");
  expect_error([] { parse(R"({"dynamic": "true"})"); }, "dynamic");
  expect_error([] { parse(R"({"dynamic": null})"); }, "dynamic");
  expect_error([] { parse(R"({"group_size": 128, "actorder": "foo"})"); }, "actorder");
  expect_error([] { parse(R"({"group_size": 128, "actorder": 1})"); }, "actorder");
  expect_error([] { parse(R"({"group_size": -2})"); }, "invalid group_size -2");
}

TEST(ParseQuantArgs, ModelRulesApplyAfterParsing) {
  expect_error([] { parse(R"({"type": "float", "strategy": "token"})"); }, "dynamic: true");
  expect_error([] { parse(R"({"strategy": "channel", "group_size": 128})"); }, "group_size 128");
  expect_error([] { parse(R"({"strategy": "block"})"); }, "needs block_structure");
  expect_error([] { parse(R"({"block_structure": [128, 128]})"); }, "needs strategy 'block'");
  expect_error([] { parse(R"({"group_size": -1, "actorder": "group"})"); }, "actorder 'group'");
  expect_error([] { parse(R"({"strategy": "channel", "dynamic": true})"); }, "dynamic quantization");
  expect_error([] { parse(R"({"group_size": 16, "dynamic": "local"})"); }, "'local'");
  expect_error([] { parse(R"({"type": "float", "num_bits": 16})"); }, "num_bits 4 or 8");
}

}  // namespace
