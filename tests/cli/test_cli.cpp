// The qmoe binary end to end: gen -> inspect -> verify exit 0; corruptions that load (swapped
// gate/up, scales relabeled with another 16-bit dtype) are flagged by verify (exit 1); bad inputs
// (truncated file, header past the end, overlapping offsets, transposed tensor, broken index,
// TP size that does not divide, unknown format) give exactly one line "qmoe: error: ..." naming
// the file / tensor / layer, and exit 2.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/model_edit.h"

namespace qmoe {
namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Result qmoe_cmd(const std::string& args, const std::string& tag) {
  const std::string err_path = std::string(QMOE_BINARY_DIR) + "/test_cli_" + tag + ".err";
  std::string cmd = std::string(QMOE_BINARY_DIR) + "/qmoe " + args + " 2>" + err_path;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

// Exit 2 and exactly one stderr line starting "qmoe: error: " that contains every fragment.
void expect_error_line(const Result& r, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(r.code, 2) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("qmoe: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in " << r.err;
}

// Raw safetensors header edit: f(header json) then rewrite with the same data section.
void edit_header(const std::string& path, const std::function<void(nlohmann::json&)>& f) {
  std::ifstream in(path, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  uint64_t n = 0;
  memcpy(&n, raw.data(), 8);
  nlohmann::json h = nlohmann::json::parse(raw.substr(8, n));
  f(h);
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  uint64_t m = hs.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&m), 8);
  out << hs << raw.substr(8 + n);
}

TEST(Cli, GenInspectVerifyRoundTrip) {
  test::ModelScratch s("cli_ok");
  for (const char* pair : {"mixtral ct-w4a16-asym", "llama4 modelopt-fp8", "gpt_oss gpt-oss-mxfp4", "deepseek_v3 awq"}) {
    std::string arch(pair, strchr(pair, ' ')), fmt(strchr(pair, ' ') + 1);
    std::string dir = s / (arch + "-" + fmt);
    Result g = qmoe_cmd("gen --arch " + arch + " --format " + fmt + " --out " + dir + " --layers 1", "gen");
    ASSERT_EQ(g.code, 0) << g.err;
    Result i = qmoe_cmd("inspect " + dir + " --json", "inspect");
    ASSERT_EQ(i.code, 0) << i.err;
    nlohmann::json j = nlohmann::json::parse(i.out);
    EXPECT_EQ(j["arch"], arch);
    ASSERT_EQ(j["layers"].size(), 1u);
    EXPECT_TRUE(j["layers"][0]["methods"]["reference"].contains("method")) << i.out;
    Result v = qmoe_cmd("verify " + dir + " --reference " + dir + "/bf16 --tokens 4", "verify");
    EXPECT_EQ(v.code, 0) << v.out << v.err;
    EXPECT_NE(v.out.find("all checks passed"), std::string::npos) << v.out;
  }
  Result l = qmoe_cmd("gen --list-formats", "list");
  EXPECT_EQ(l.code, 0);
  EXPECT_NE(l.out.find("modelopt-w4a16-nvfp4"), std::string::npos);
}

TEST(Cli, VerifyFlagsSwappedGateUpAndWrongScaleDtype) {
  test::ModelScratch s("cli_flag");
  std::string dir = s / "m";
  ASSERT_EQ(qmoe_cmd("gen --arch qwen3_moe --format ct-w4a16 --out " + dir + " --reference-out " + s / "ref", "g").code, 0);
  std::string st = dir + "/model.safetensors";
  std::string orig;
  {
    std::ifstream in(st, std::ios::binary);
    orig.assign((std::istreambuf_iterator<char>(in)), {});
  }
  // gate and up of one expert swapped (a wrong name map): loads, but the weights are wrong.
  edit_header(st, [](nlohmann::json& h) {
    const std::string a = "model.layers.1.mlp.experts.2.gate_proj.", b = "model.layers.1.mlp.experts.2.up_proj.";
    for (const char* t : {"weight_packed", "weight_scale", "weight_shape"}) std::swap(h[a + t], h[b + t]);
  });
  Result v = qmoe_cmd("verify " + dir + " --reference " + s / "ref" + " --tokens 4", "swap");
  EXPECT_EQ(v.code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("FLAGGED layer 1 w13"), std::string::npos) << v.out;
  EXPECT_EQ(v.err.rfind("qmoe: error: verify:", 0), 0u) << v.err;
  // bf16 scales relabeled as fp16 (the seed bug, the other way round): same bytes, other values.
  std::ofstream(st, std::ios::binary | std::ios::trunc) << orig;
  edit_header(st, [](nlohmann::json& h) {
    for (auto& [k, v] : h.items())
      if (k.find("layers.0.mlp.experts.") != std::string::npos && k.find("weight_scale") != std::string::npos) v["dtype"] = "F16";
  });
  v = qmoe_cmd("verify " + dir + " --reference " + s / "ref" + " --tokens 4", "dtype");
  EXPECT_EQ(v.code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("FLAGGED layer 0"), std::string::npos) << v.out;
}

TEST(Cli, BadInputsGiveOneErrorLineAndExit2) {
  test::ModelScratch s("cli_bad");
  auto fresh = [&](const std::string& name, const std::string& arch = "mixtral", const std::string& fmt = "ct-fp8",
                   const std::string& extra = "") {
    std::string dir = s / name;
    Result g = qmoe_cmd("gen --arch " + arch + " --format " + fmt + " --out " + dir + " --reference-out - " + extra, "g");
    EXPECT_EQ(g.code, 0) << g.err;
    return dir;
  };
  std::string dir = fresh("trunc");
  std::string st = dir + "/model.safetensors";
  std::filesystem::resize_file(st, std::filesystem::file_size(st) / 2);
  expect_error_line(qmoe_cmd("inspect " + dir, "trunc"), {"model.safetensors"});

  dir = fresh("hdr");
  st = dir + "/model.safetensors";
  {
    std::fstream f(st, std::ios::binary | std::ios::in | std::ios::out);
    uint64_t huge = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&huge), 8);
  }
  expect_error_line(qmoe_cmd("verify " + dir, "hdr"), {"model.safetensors"});

  dir = fresh("overlap");
  edit_header(dir + "/model.safetensors", [](nlohmann::json& h) {
    auto& a = h["model.layers.0.block_sparse_moe.experts.1.w1.weight"]["data_offsets"];
    auto& b = h["model.layers.0.block_sparse_moe.experts.1.w3.weight"]["data_offsets"];
    b = a;  // two tensors on the same bytes
  });
  expect_error_line(qmoe_cmd("inspect " + dir, "overlap"), {"model.safetensors"});

  dir = fresh("transposed", "mixtral", "bf16");
  edit_header(dir + "/model.safetensors", [](nlohmann::json& h) {
    h["model.layers.1.block_sparse_moe.experts.5.w2.weight"]["shape"] = {128, 256};
  });
  expect_error_line(qmoe_cmd("inspect " + dir, "transposed"),
                    {"model.layers.1.block_sparse_moe.experts.5.w2.weight", "layer 1 expert 5 w2",
                     "shape [128, 256], expected [256, 128] (out x in)"});

  dir = fresh("index", "qwen3_moe", "ct-w8a16", "--shards 3");
  {
    std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\": {\"model.norm.weight\": \"model-00009-of-00003.safetensors\"";
  }
  expect_error_line(qmoe_cmd("inspect " + dir, "index"), {"model.safetensors.index.json"});

  dir = fresh("tp", "qwen3_moe", "ct-nvfp4", "--intermediate 48");
  expect_error_line(qmoe_cmd("verify " + dir + " --tp 2", "tp"), {"layer 0", "TP size 2", "TP sizes that work: 1, 3"});

  dir = fresh("nan", "qwen3_moe", "ct-fp8-dynamic");
  test::edit_checkpoint(dir, [](std::vector<test::EditTensor>& ts) {
    auto* t = test::find_tensor(ts, "model.layers.1.mlp.experts.6.down_proj.weight_scale");
    t->bytes[0] = 0xc0, t->bytes[1] = 0x7f;  // NaN
  });
  expect_error_line(qmoe_cmd("inspect " + dir, "nan"), {"layer 1", "NaN", "w2.scale"});

  // A backend named explicitly must run every layer: where it cannot (no GPU, or a scheme it
  // refuses) verify fails loudly instead of reporting "all checks passed" over skipped layers.
  {
    Result r = qmoe_cmd("verify " + fresh("cuda", "qwen3_moe", "ct-nvfp4") + " --backend cuda", "cuda");
    if (r.code == 0)
      EXPECT_EQ(r.out.find("skipped"), std::string::npos) << r.out;
    else
      expect_error_line(r, {"--backend cuda cannot run layer 0"});
  }

  expect_error_line(qmoe_cmd("gen --arch gpt_oss --format gptq --out " + s / "x", "fmt"),
                    {"format 'gptq' does not apply to arch gpt_oss", "gpt-oss-mxfp4"});
  expect_error_line(qmoe_cmd("gen --arch mixtral --format int3 --out " + s / "y", "fmt2"), {"unknown format 'int3'"});
  expect_error_line(qmoe_cmd("inspect " + s / "does-not-exist", "nodir"), {"does-not-exist"});
}

// Well-formed sharded checkpoints whose index does not match the shards: each gives one line naming
// the index, the tensor and the shard file, exit 2, from inspect and verify alike.
TEST(Cli, ShardIndexThatDoesNotMatchTheShards) {
  test::ModelScratch s("cli_index");
  auto sharded = [&](const std::string& name) {
    std::string dir = s / name;
    Result g = qmoe_cmd("gen --arch qwen3_moe --format ct-w4a16 --shards 3 --reference-out - --out " + dir, "g");
    EXPECT_EQ(g.code, 0) << g.err;
    return dir;
  };
  auto edit_index = [](const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j;
    std::ifstream(dir + "/model.safetensors.index.json") >> j;
    f(j["weight_map"]);
    std::ofstream(dir + "/model.safetensors.index.json") << j.dump(2);
  };
  // The first expert tensor the index maps to the given shard (there is one in each of the 3).
  auto first_in = [](const nlohmann::json& wm, const std::string& shard) {
    for (auto it = wm.begin(); it != wm.end(); ++it)
      if (it.value() == shard && it.key().find(".experts.") != std::string::npos) return it.key();
    ADD_FAILURE() << "no expert tensor in " << shard;
    return std::string();
  };
  const std::string s1 = "model-00001-of-00003.safetensors", s2 = "model-00002-of-00003.safetensors",
                    s3 = "model-00003-of-00003.safetensors";

  // A shard the index names is missing from the directory.
  std::string dir = sharded("missing_shard");
  std::string t2;
  edit_index(dir, [&](nlohmann::json& wm) { t2 = first_in(wm, s2); });
  std::filesystem::remove(dir + "/" + s2);
  for (const char* cmd : {"inspect ", "verify "})
    expect_error_line(qmoe_cmd(cmd + dir, "missing_shard"), {"model.safetensors.index.json", t2, s2, "does not exist"});

  // A tensor listed in a shard that does not hold it (it is stored in another one).
  dir = sharded("wrong_shard");
  std::string moved;
  edit_index(dir, [&](nlohmann::json& wm) {
    moved = first_in(wm, s2);
    wm[moved] = s1;
  });
  expect_error_line(qmoe_cmd("inspect " + dir, "wrong_shard"),
                    {"model.safetensors.index.json", moved, "listed in shard '" + s1 + "'", "stored in '" + s2 + "'"});

  // A tensor listed in a shard but stored in none.
  dir = sharded("absent_tensor");
  const std::string ghost = "model.layers.1.mlp.experts.3.down_proj.weight_zero_point";
  edit_index(dir, [&](nlohmann::json& wm) { wm[ghost] = s3; });
  expect_error_line(qmoe_cmd("verify " + dir, "absent_tensor"),
                    {"model.safetensors.index.json", ghost, "listed in shard '" + s3 + "'", "missing from it"});
}

// ---- `qmoe bench --backend cpu`: the floor is max(bytes / read, FLOPs / dot peak), and where the
//      kernels have no dot peak to measure (the scalar path, forced here) the bandwidth term alone.
//      Until the fifteenth session an unmeasured peak counted as 1 GFLOP/s, which put the floor of
//      every row of a CPU without AVX-512 at FLOPs / 1 GFLOP/s (here 128 µs against ~1 µs of bytes).
//      The JSON row carries what the check needs: tbps x us = bytes, read_gbps, tflops x us = FLOPs,
//      bf16_gflops. On the machine's own ISA (not forced) a SIMD path reports a positive peak. ----
TEST(Cli, CpuBenchFloorUsesTheMeasuredPeakOrBandwidthAlone) {
  const std::string dir = std::string(QMOE_BINARY_DIR) + "/test_cli_bench";
  std::filesystem::create_directories(dir);
  for (int forced = 1; forced >= 0; --forced) {
    if (forced) setenv("QMOE_CPU_ISA", "scalar", 1);
    const std::string json = dir + (forced ? "/scalar.json" : "/native.json");
    Result r = qmoe_cmd("bench --backend cpu --shape 4,2,256,128 --m 1,8 --scheme bf16,int8 --iters 1 --warmup 0 --json " +
                            json, forced ? "bench_scalar" : "bench_native");
    if (forced) unsetenv("QMOE_CPU_ISA");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream f(json);
    nlohmann::json rows = nlohmann::json::parse(f);
    ASSERT_EQ(rows.size(), 4u) << rows.dump();
    for (const auto& row : rows) {
      const double us = row["us"], bytes = double(row["tbps"]) * us * 1e6, flops = double(row["tflops"]) * us * 1e6;
      const double mem_us = bytes / (double(row["read_gbps"]) * 1e3);
      // layers whose activations enter as 16-bit integer codes multiply on the 16-bit integer instruction
      const std::string kernel = row["kernel"];
      const bool s16 = std::string_view(kernel).ends_with("/s16");
      const bool f32 = std::string_view(kernel).ends_with("/f32");  // bf16 weights on fp32 FMAs
      const double peak = s16 ? row["int16_gops"] : f32 ? row["fma_gflops"] : row["bf16_gflops"];
      const std::string what = row.dump();
      if (forced) {
        EXPECT_EQ(peak, 0.0) << what;
        EXPECT_NEAR(double(row["floor_us"]), mem_us, 1e-6 * mem_us + 1e-9) << what;
      } else {
        const bool simd = r.out.find("dot peak (-)") == std::string::npos;
        if (simd) EXPECT_GT(peak, 0.0) << what;
        const double want = peak > 0 ? std::max(mem_us, flops / (peak * 1e3)) : mem_us;
        EXPECT_NEAR(double(row["floor_us"]), want, 1e-6 * want + 1e-9) << what;
      }
      EXPECT_LT(double(row["floor_us"]), 1e3) << what;  // a 4-expert 256 x 128 layer: far below a millisecond
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qmoe
