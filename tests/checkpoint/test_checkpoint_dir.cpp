// CheckpointDir: single-file and sharded model directories, hf_quant_config.json, and every
// broken-index case (missing shard, tensor missing from its shard, tensor in two shards, tensor
// not listed, non-file shard names, malformed index / config).
#include <gtest/gtest.h>

#include "checkpoint/ckpt_test_util.h"
#include "qmoe/checkpoint.h"

namespace qmoe {
namespace {
using test::expect_error;

Tensor iota_tensor(DType dt, Shape shape, uint8_t start) {
  Tensor t(dt, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw_mut());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(start + i * 7);
  return t;
}

void write_shard(const std::string& path, const std::vector<std::string>& names, uint8_t seed) {
  SafetensorsWriter w;
  for (size_t i = 0; i < names.size(); ++i)
    w.add(names[i], iota_tensor(DType::kBF16, {3, static_cast<int64_t>(5 + i)}, static_cast<uint8_t>(seed + i)));
  w.write(path);
}

const char* kConfig = R"({"architectures":["MixtralForCausalLM"],"hidden_size":64})";

TEST(CheckpointDir, SingleFile) {
  test::ScratchDir d("ck_single");
  test::write_text(d / "config.json", kConfig);
  write_shard(d / "model.safetensors", {"b.weight", "a.weight"}, 3);
  auto c = CheckpointDir::open(d.path.string());
  EXPECT_EQ(c->config().at("hidden_size"), 64);
  EXPECT_EQ(c->hf_quant_config(), nullptr);
  EXPECT_EQ(c->names(), (std::vector<std::string>{"a.weight", "b.weight"}));
  EXPECT_TRUE(c->has("a.weight"));
  EXPECT_FALSE(c->has("c.weight"));
  Tensor b = c->get("b.weight");
  EXPECT_EQ(b.shape(), (Shape{3, 5}));
  EXPECT_EQ(static_cast<const uint8_t*>(b.raw())[1], 3 + 7);
  EXPECT_EQ(c->info("a.weight").shape, (Shape{3, 6}));
  EXPECT_EQ(c->info("a.weight").file, d / "model.safetensors");
  expect_error([&] { c->get("c.weight"); }, ErrorKind::kBadInput, {"'c.weight'", "ck_single"});
  expect_error([&] { c->info("c.weight"); }, ErrorKind::kBadInput, {"'c.weight'"});
}

TEST(CheckpointDir, ShardedWithHfQuantConfig) {
  test::ScratchDir d("ck_sharded");
  test::write_text(d / "config.json", kConfig);
  test::write_text(d / "hf_quant_config.json", R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"FP8"}})");
  write_shard(d / "model-00001-of-00002.safetensors", {"x.0", "x.1"}, 1);
  write_shard(d / "model-00002-of-00002.safetensors", {"y.0"}, 9);
  test::write_text(d / "model.safetensors.index.json", R"({"metadata":{"total_size":100},"weight_map":{
    "x.0":"model-00001-of-00002.safetensors","x.1":"model-00001-of-00002.safetensors",
    "y.0":"model-00002-of-00002.safetensors"}})");
  auto c = CheckpointDir::open(d.path.string());
  ASSERT_NE(c->hf_quant_config(), nullptr);
  EXPECT_EQ(c->hf_quant_config()->at("quantization").at("quant_algo"), "FP8");
  EXPECT_EQ(c->names(), (std::vector<std::string>{"x.0", "x.1", "y.0"}));
  EXPECT_EQ(c->info("y.0").file, d / "model-00002-of-00002.safetensors");
  EXPECT_EQ(static_cast<const uint8_t*>(c->get("y.0").raw())[0], 9);
  EXPECT_EQ(static_cast<const uint8_t*>(c->get("x.1").raw())[0], 2);
}

struct IndexCase {
  const char* what;
  std::string index;
  std::vector<std::string> needles;
};

TEST(CheckpointDir, BrokenIndex) {
  const std::string s1 = "s1.safetensors", s2 = "s2.safetensors";
  std::vector<IndexCase> cases = {
      {"missing shard", R"({"weight_map":{"x.0":"s1.safetensors","x.1":"s1.safetensors","y.0":"s3.safetensors"}})",
       {"'y.0'", "'s3.safetensors'", "does not exist"}},
      {"listed tensor missing", R"({"weight_map":{"x.0":"s1.safetensors","x.1":"s1.safetensors","y.0":"s2.safetensors","z":"s2.safetensors"}})",
       {"'z'", "missing"}},
      {"tensor not listed", R"({"weight_map":{"x.0":"s1.safetensors","y.0":"s2.safetensors"}})", {"'x.1'", "not in weight_map"}},
      {"listed in wrong shard", R"({"weight_map":{"x.0":"s1.safetensors","x.1":"s2.safetensors","y.0":"s2.safetensors"}})",
       {"'x.1'", "listed in shard 's2.safetensors'", "stored in 's1.safetensors'"}},
      {"path traversal", R"({"weight_map":{"x.0":"../s1.safetensors"}})", {"'x.0'", "not a file name"}},
      {"shard not a string", R"({"weight_map":{"x.0":1}})", {"'x.0'", "file name"}},
      {"no weight_map", R"({"metadata":{}})", {"weight_map"}},
      {"empty weight_map", R"({"weight_map":{}})", {"weight_map"}},
      {"weight_map array", R"({"weight_map":["s1.safetensors"]})", {"weight_map"}},
      {"metadata not object", R"({"metadata":3,"weight_map":{"x.0":"s1.safetensors"}})", {"metadata"}},
      {"invalid JSON", R"({"weight_map":{"x.0":"s1.safetensors",}})", {"invalid JSON"}},
      {"duplicate key", R"({"weight_map":{"x.0":"s1.safetensors","x.0":"s2.safetensors"}})", {"duplicate key 'x.0'"}},
      {"not object", R"(["s1.safetensors"])", {"JSON object"}},
  };
  for (const auto& ic : cases) {
    SCOPED_TRACE(ic.what);
    test::ScratchDir d("ck_badindex");
    test::write_text(d / "config.json", kConfig);
    write_shard(d / s1, {"x.0", "x.1"}, 1);
    write_shard(d / s2, {"y.0"}, 9);
    test::write_text(d / "model.safetensors.index.json", ic.index);
    std::vector<std::string> needles = ic.needles;
    needles.push_back("model.safetensors.index.json");
    expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, needles);
  }
}

TEST(CheckpointDir, TensorInTwoShards) {
  test::ScratchDir d("ck_twice");
  test::write_text(d / "config.json", kConfig);
  write_shard(d / "s1.safetensors", {"x.0", "dup"}, 1);
  write_shard(d / "s2.safetensors", {"dup", "y.0"}, 9);
  test::write_text(d / "model.safetensors.index.json",
                   R"({"weight_map":{"x.0":"s1.safetensors","dup":"s1.safetensors","y.0":"s2.safetensors"}})");
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput,
               {"'dup'", "two shards", "s1.safetensors", "s2.safetensors"});
}

TEST(CheckpointDir, BadShardContentNamesTheShard) {
  test::ScratchDir d("ck_badshard");
  test::write_text(d / "config.json", kConfig);
  write_shard(d / "s1.safetensors", {"x.0"}, 1);
  test::write_bytes(d / "s2.safetensors", test::st_bytes("{}", "", 99));
  test::write_text(d / "model.safetensors.index.json",
                   R"({"weight_map":{"x.0":"s1.safetensors","y.0":"s2.safetensors"}})");
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, {"s2.safetensors", "past the end"});
}

TEST(CheckpointDir, DirectoryErrors) {
  test::ScratchDir d("ck_direrr");
  expect_error([&] { CheckpointDir::open(d / "absent"); }, ErrorKind::kBadInput, {"absent", "not a directory"});
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, {"no config.json"});
  test::write_text(d / "config.json", "{\"a\":1,}");
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, {"config.json", "invalid JSON"});
  test::write_text(d / "config.json", "[1]");
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, {"config.json", "JSON object"});
  test::write_text(d / "config.json", kConfig);
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, {"no model.safetensors"});
  test::write_text(d / "hf_quant_config.json", "\"FP8\"");
  write_shard(d / "model.safetensors", {"a"}, 1);
  expect_error([&] { CheckpointDir::open(d.path.string()); }, ErrorKind::kBadInput, {"hf_quant_config.json", "JSON object"});
}

}  // namespace
}  // namespace qmoe
