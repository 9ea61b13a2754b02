// SafetensorsFile / SafetensorsWriter: round trips over every dtype (odd shapes, scalars, empty
// tensors, misaligned offsets), files written by the Python safetensors package, and every
// malformed-header rule (each error one line naming the file and the tensor).
#include <gtest/gtest.h>

#include <cstdlib>

#include "checkpoint/ckpt_test_util.h"
#include "qmoe/checkpoint.h"

namespace qmoe {
namespace {
using test::expect_error;
using test::st_bytes;

Tensor random_tensor(DType dt, Shape shape, uint32_t seed) {
  Tensor t(dt, std::move(shape));
  std::string b = test::random_bytes(t.nbytes(), seed);
  if (t.nbytes()) memcpy(t.raw_mut(), b.data(), t.nbytes());
  return t;
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(0, a.nbytes() ? memcmp(a.raw(), b.raw(), a.nbytes()) : 0);
}

TEST(Safetensors, WriterRoundTripEveryDtype) {
  test::ScratchDir d("st_roundtrip");
  const DType all[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
                       DType::kE8M0, DType::kI8, DType::kU8, DType::kI16, DType::kU16, DType::kI32,
                       DType::kU32, DType::kI64, DType::kU64, DType::kBool};
  SafetensorsWriter w;
  std::vector<std::pair<std::string, Tensor>> ts;
  uint32_t seed = 1;
  for (DType dt : all) {
    ts.emplace_back(std::string("t.") + dtype_name(dt), random_tensor(dt, {3, 5, 7}, seed++));
    ts.emplace_back(std::string("odd.") + dtype_name(dt), random_tensor(dt, {13}, seed++));
  }
  ts.emplace_back("scalar", random_tensor(DType::kF32, {}, seed++));
  ts.emplace_back("empty", random_tensor(DType::kBF16, {0, 4}, seed++));
  ts.emplace_back("empty2", random_tensor(DType::kI32, {7, 0}, seed++));
  for (auto& [n, t] : ts) w.add(n, t);
  w.set_metadata("format", "pt");
  w.set_metadata("note", "qmoe test");
  w.write(d / "a.safetensors");

  auto f = SafetensorsFile::open(d / "a.safetensors");
  EXPECT_EQ(f->tensors().size(), ts.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "qmoe test");
  for (auto& [n, t] : ts) {
    const TensorInfo* ti = f->find(n);
    ASSERT_NE(ti, nullptr) << n;
    EXPECT_EQ(ti->file, d / "a.safetensors");
    Tensor g = f->get(n);
    expect_same(g, t);
    // Views must be aligned for their element type (misaligned offsets come back as copies).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(g.raw()) % dtype_size(g.dtype()), 0u) << n;
  }
  EXPECT_EQ(f->find("nope"), nullptr);
  expect_error([&] { f->get("nope"); }, ErrorKind::kBadInput, {"a.safetensors", "'nope'"});
}

TEST(Safetensors, TensorOutlivesFileHandle) {
  test::ScratchDir d("st_lifetime");
  Tensor t = random_tensor(DType::kF32, {17, 3}, 7);
  SafetensorsWriter w;
  w.add("x", t);
  w.write(d / "x.safetensors");
  Tensor g;
  {
    auto f = SafetensorsFile::open(d / "x.safetensors");
    g = f->get("x");
  }  // the mapping stays alive through g's owner
  expect_same(g, t);
}

TEST(Safetensors, MisalignedOffsetsGiveAlignedCopies) {
  test::ScratchDir d("st_misaligned");
  // U8[3] at 0, then F32[2] at byte 3: valid, but the float view would be misaligned.
  std::string hdr = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  hdr.append((8 - hdr.size() % 8) % 8, ' ');
  float vals[2] = {1.5f, -2.25f};
  std::string data = "xyz" + std::string(reinterpret_cast<const char*>(vals), 8);
  test::write_bytes(d / "m.safetensors", st_bytes(hdr, data));
  auto f = SafetensorsFile::open(d / "m.safetensors");
  Tensor b = f->get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 4, 0u);
  EXPECT_EQ(b.data<float>()[0], 1.5f);
  EXPECT_EQ(b.data<float>()[1], -2.25f);
  EXPECT_EQ(std::string(f->get("a").data<char>(), 3), "xyz");
}

// Files written by the reference implementation (Python safetensors + numpy), when available.
TEST(Safetensors, ReadsPythonSafetensors) {
  if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with safetensors + numpy not available (scripts/deps.sh installs them)";
  test::ScratchDir d("st_python");
  std::string script = d / "w.py";
  test::write_text(script, R"(import sys, numpy as np
from safetensors.numpy import save_file
r = np.random.default_rng(5)
t = {"w.f32": r.standard_normal((5, 3)).astype(np.float32),
     "w.f16": r.standard_normal((7,)).astype(np.float16),
     "w.i32": r.integers(-2**31, 2**31 - 1, (3, 1, 2), dtype=np.int32),
     "w.i64": r.integers(-2**62, 2**62, (4,), dtype=np.int64),
     "w.u8": r.integers(0, 255, (9, 2), dtype=np.uint8),
     "w.bool": r.integers(0, 2, (5,)).astype(np.bool_),
     "w.scalar": np.array(3.5, dtype=np.float64)}
save_file(t, sys.argv[1], metadata={"format": "np"})
for k in sorted(t):
    open(sys.argv[1] + "." + k, "wb").write(np.ascontiguousarray(t[k]).tobytes())
)");
  std::string out = d / "py.safetensors";
  ASSERT_EQ(std::system(("python3 " + script + " " + out).c_str()), 0);
  auto f = SafetensorsFile::open(out);
  EXPECT_EQ(f->metadata().at("format"), "np");
  struct Want {
    const char* name;
    DType dt;
    Shape shape;
  } want[] = {{"w.f32", DType::kF32, {5, 3}},   {"w.f16", DType::kF16, {7}},    {"w.i32", DType::kI32, {3, 1, 2}},
              {"w.i64", DType::kI64, {4}},      {"w.u8", DType::kU8, {9, 2}},   {"w.bool", DType::kBool, {5}},
              {"w.scalar", DType::kF64, {}}};
  ASSERT_EQ(f->tensors().size(), std::size(want));
  for (const auto& w : want) {
    Tensor t = f->get(w.name);
    EXPECT_EQ(t.dtype(), w.dt) << w.name;
    EXPECT_EQ(t.shape(), w.shape) << w.name;
    std::string raw = test::read_bytes(out + "." + w.name);
    ASSERT_EQ(raw.size(), t.nbytes()) << w.name;
    EXPECT_EQ(0, memcmp(raw.data(), t.raw(), raw.size())) << w.name;
  }
}

// ---- malformed files ------------------------------------------------------------------------

struct BadCase {
  const char* what;
  std::string bytes;
  ErrorKind kind;
  std::vector<std::string> needles;
};

std::string hdr1(const std::string& entry) { return "{\"w\":" + entry + "}"; }

std::vector<BadCase> bad_cases() {
  const std::string d16(16, 'x');
  std::vector<BadCase> c;
  c.push_back({"empty file", "", ErrorKind::kBadInput, {"truncated"}});
  c.push_back({"7 bytes", std::string(7, '\0'), ErrorKind::kBadInput, {"truncated"}});
  c.push_back({"length past end", st_bytes("{}", "", 1000), ErrorKind::kBadInput, {"past the end"}});
  c.push_back({"length huge", st_bytes("{}", "", int64_t(1) << 40), ErrorKind::kBadInput, {"limit"}});
  c.push_back({"length max", st_bytes("{}", "", INT64_MAX), ErrorKind::kBadInput, {"limit"}});
  c.push_back({"length 0", st_bytes("", ""), ErrorKind::kBadInput, {"too short"}});
  c.push_back({"invalid JSON", st_bytes("{\"w\":", ""), ErrorKind::kBadInput, {"invalid JSON"}});
  c.push_back({"not an object", st_bytes("[1,2]", ""), ErrorKind::kBadInput, {"not a JSON object"}});
  c.push_back({"object then junk", st_bytes("{} x", ""), ErrorKind::kBadInput, {"invalid JSON"}});
  c.push_back({"duplicate key",
               st_bytes(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"w":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})", d16),
               ErrorKind::kBadInput, {"duplicate key 'w'"}});
  c.push_back({"duplicate field", st_bytes(hdr1(R"({"dtype":"U8","dtype":"U8","shape":[16],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"duplicate key 'dtype'"}});
  c.push_back({"deep nesting", st_bytes("{\"m\":" + std::string(100, '[') + std::string(100, ']') + "}", ""),
               ErrorKind::kBadInput, {"nesting"}});
  c.push_back({"entry not object", st_bytes(hdr1("[]"), ""), ErrorKind::kBadInput, {"'w'", "must be an object"}});
  c.push_back({"missing offsets", st_bytes(hdr1(R"({"dtype":"U8","shape":[16]})"), d16), ErrorKind::kBadInput,
               {"'w'", "data_offsets"}});
  c.push_back({"extra field", st_bytes(hdr1(R"({"dtype":"U8","shape":[16],"data_offsets":[0,16],"x":1})"), d16),
               ErrorKind::kBadInput, {"'w'", "unknown field 'x'"}});
  c.push_back({"unknown dtype", st_bytes(hdr1(R"({"dtype":"F12","shape":[16],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "unknown dtype 'F12'"}});
  c.push_back({"dtype not string", st_bytes(hdr1(R"({"dtype":4,"shape":[16],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "dtype"}});
  c.push_back({"F4 unsupported", st_bytes(hdr1(R"({"dtype":"F4","shape":[32],"data_offsets":[0,16]})"), d16),
               ErrorKind::kUnsupported, {"'w'", "F4"}});
  c.push_back({"dtype/shape mismatch", st_bytes(hdr1(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "needs 12 bytes", "hold 16"}});
  c.push_back({"negative dim", st_bytes(hdr1(R"({"dtype":"U8","shape":[-16],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "non-negative"}});
  c.push_back({"float dim", st_bytes(hdr1(R"({"dtype":"U8","shape":[16.0],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "non-negative integer"}});
  c.push_back({"shape overflow",
               st_bytes(hdr1(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "overflows"}});
  c.push_back({"bytes overflow", st_bytes(hdr1(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "overflows"}});
  c.push_back({"huge offsets",
               st_bytes(hdr1(R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]})"), d16),
               ErrorKind::kBadInput, {"'w'", "past the data section"}});
  c.push_back({"offsets too big for u64",
               st_bytes(hdr1(R"({"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]})"), d16),
               ErrorKind::kBadInput, {"'w'", "data_offsets[1]"}});
  c.push_back({"begin > end", st_bytes(hdr1(R"({"dtype":"U8","shape":[0],"data_offsets":[16,0]})"), d16),
               ErrorKind::kBadInput, {"'w'", "begin > end"}});
  c.push_back({"offsets past data", st_bytes(hdr1(R"({"dtype":"U8","shape":[16],"data_offsets":[0,16]})"), "short"),
               ErrorKind::kBadInput, {"'w'", "past the data section"}});
  c.push_back({"three offsets", st_bytes(hdr1(R"({"dtype":"U8","shape":[16],"data_offsets":[0,8,16]})"), d16),
               ErrorKind::kBadInput, {"'w'", "[begin, end]"}});
  c.push_back({"overlap",
               st_bytes(R"({"a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},"b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})", d16),
               ErrorKind::kBadInput, {"'b'", "overlap", "'a'"}});
  c.push_back({"same range twice",
               st_bytes(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"b":{"dtype":"I16","shape":[8],"data_offsets":[0,16]}})", d16),
               ErrorKind::kBadInput, {"overlap"}});
  c.push_back({"gap",
               st_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})", d16),
               ErrorKind::kBadInput, {"'b'", "gap of 4 bytes"}});
  c.push_back({"trailing bytes", st_bytes(hdr1(R"({"dtype":"U8","shape":[8],"data_offsets":[0,8]})"), d16),
               ErrorKind::kBadInput, {"8 of the 16", "'w'"}});
  c.push_back({"metadata not object", st_bytes(R"({"__metadata__":[1]})", ""), ErrorKind::kBadInput, {"__metadata__"}});
  c.push_back({"metadata value not string", st_bytes(R"({"__metadata__":{"format":1}})", ""), ErrorKind::kBadInput,
               {"__metadata__", "'format'"}});
  c.push_back({"invalid UTF-8", st_bytes("{\"\xff\":1}", ""), ErrorKind::kBadInput, {"invalid JSON", "\\xff"}});
  // a length that runs into the data section: the parser's "last read" quotes the binary bytes,
  // which the message escapes (a raw 0xd7 made Python raise UnicodeDecodeError instead)
  const std::string h4 = hdr1(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})");
  c.push_back({"length into binary data", st_bytes(h4, "\xd7\x01\xfe\x80", int64_t(h4.size()) + 4), ErrorKind::kBadInput,
               {"invalid JSON", "\\xd7"}});
  c.push_back({"control char in name",
               st_bytes("{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", d16), ErrorKind::kBadInput,
               {"'a\\x0ab'"}});
  return c;
}

TEST(Safetensors, RejectsEveryMalformedHeader) {
  test::ScratchDir d("st_bad");
  for (const auto& bc : bad_cases()) {
    SCOPED_TRACE(bc.what);
    std::string path = d / "bad.safetensors";
    test::write_bytes(path, bc.bytes);
    std::vector<std::string> needles = bc.needles;
    needles.push_back(path);
    expect_error([&] { SafetensorsFile::open(path); }, bc.kind, needles);
    // parse_header from memory gives the same verdict (this is what the fuzzer drives).
    auto* p = reinterpret_cast<const uint8_t*>(bc.bytes.data());
    expect_error([&] { SafetensorsFile::parse_header(p, bc.bytes.size(), "mem"); }, bc.kind, {"mem"});
  }
}

// Every strict prefix of a valid file is rejected (never read past the end, never accepted).
TEST(Safetensors, EveryTruncationIsAnError) {
  test::ScratchDir d("st_trunc");
  SafetensorsWriter w;
  w.add("a", random_tensor(DType::kBF16, {3, 5}, 11));
  w.add("b", random_tensor(DType::kF8E4M3, {7}, 12));
  w.set_metadata("k", "v");
  w.write(d / "full.safetensors");
  std::string full = test::read_bytes(d / "full.safetensors");
  ASSERT_NO_THROW(SafetensorsFile::open(d / "full.safetensors"));
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    std::string cut = full.substr(0, n);
    std::string path = d / "cut.safetensors";
    test::write_bytes(path, cut);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::kBadInput, {path});
  }
  // Appending a byte is also an error (trailing data).
  test::write_bytes(d / "long.safetensors", full + "z");
  expect_error([&] { SafetensorsFile::open(d / "long.safetensors"); }, ErrorKind::kBadInput, {"trailing"});
}

TEST(Safetensors, MissingFileAndDirectory) {
  test::ScratchDir d("st_missing");
  expect_error([&] { SafetensorsFile::open(d / "nope.safetensors"); }, ErrorKind::kBadInput,
               {"nope.safetensors", "cannot open"});
  expect_error([&] { SafetensorsFile::open(d.path.string()); }, ErrorKind::kBadInput, {"not a regular file"});
}

}  // namespace
}  // namespace qmoe
