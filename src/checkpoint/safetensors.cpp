// safetensors reader (mmap, zero copy) and writer. File layout: an 8-byte little-endian header
// length N, N bytes of UTF-8 JSON (an object: tensor name -> {dtype, shape, data_offsets}, plus an
// optional "__metadata__" map of strings), then the data section. Validation mirrors the reference
// Rust implementation and is stricter where it is silent:
//   * N >= 2, N <= kMaxHeaderBytes (100 MB), 8 + N <= file size;
//   * the header is a JSON object without duplicate keys, nested at most kMaxJsonDepth deep;
//   * every entry is an object with exactly dtype (a known name), shape (non-negative integers)
//     and data_offsets ([begin, end], begin <= end); numel * size computed without overflow and
//     equal to end - begin;
//   * sorted by begin, the tensors tile the data section exactly: no overlap, no gap, no trailing
//     bytes (zero-sized tensors may share an offset);
//   * __metadata__ maps strings to strings.
// No byte outside [0, file size) is ever read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "checkpoint/json_strict.h"
#include "qmoe/checkpoint.h"

namespace qmoe {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// safetensors dtypes qmoe does not represent (sub-byte floats and complex): valid files, but a
// tensor of these types cannot be read here.
bool is_foreign_safetensors_dtype(const std::string& s) {
  return s == "F4" || s == "F6_E2M3" || s == "F6_E3M2" || s == "C64";
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON integer >= 0 that fits in uint64; `what` names the field for the message.
uint64_t get_u64(const nlohmann::json& v, const std::string& path, const std::string& tensor, const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  bad_input(path, ": tensor ", qname(tensor), ": ", what, " must be a non-negative integer, got ", v.dump());
}

}  // namespace

std::vector<TensorInfo> SafetensorsFile::parse_header(const uint8_t* bytes, size_t size, const std::string& path,
                                                      std::map<std::string, std::string>* metadata) {
  if (size < 8) bad_input(path, ": truncated: ", size, " bytes, a safetensors file starts with an 8-byte header length");
  const uint64_t n = read_u64_le(bytes);
  if (n > kMaxHeaderBytes) bad_input(path, ": header length ", n, " exceeds the ", kMaxHeaderBytes, "-byte limit");
  if (n > size - 8) bad_input(path, ": header length ", n, " runs past the end of the file (", size, " bytes)");
  if (n < 2) bad_input(path, ": header length ", n, " is too short for a JSON object");
  const uint64_t data_size = size - 8 - n;
  const auto* hdr = reinterpret_cast<const char*>(bytes + 8);
  if (hdr[0] != '{') bad_input(path, ": header is not a JSON object (first byte 0x", std::hex, int(bytes[8]), ")");

  nlohmann::json j = parse_json_strict(std::string_view(hdr, n), path + ": header");
  if (!j.is_object()) bad_input(path, ": header is not a JSON object");

  std::vector<TensorInfo> infos;
  infos.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) bad_input(path, ": __metadata__ must be an object of strings, got ", e.type_name());
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string())
          bad_input(path, ": __metadata__ key ", qname(m.key()), " must be a string, got ", m.value().type_name());
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!e.is_object()) bad_input(path, ": tensor ", qname(name), ": entry must be an object, got ", e.type_name());
    for (auto f = e.begin(); f != e.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        bad_input(path, ": tensor ", qname(name), ": unknown field ", qname(f.key()));
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || sh == e.end() || off == e.end())
      bad_input(path, ": tensor ", qname(name), ": needs dtype, shape and data_offsets");
    if (!dt->is_string()) bad_input(path, ": tensor ", qname(name), ": dtype must be a string");
    const std::string& dts = dt->get_ref<const std::string&>();
    auto dtype = dtype_from_name(dts);
    if (!dtype) {
      if (is_foreign_safetensors_dtype(dts))
        unsupported(path, ": tensor ", qname(name), ": safetensors dtype ", dts, " is not read by qmoe");
      bad_input(path, ": tensor ", qname(name), ": unknown dtype ", qname(dts));
    }
    if (!sh->is_array()) bad_input(path, ": tensor ", qname(name), ": shape must be an array");
    if (!off->is_array() || off->size() != 2)
      bad_input(path, ": tensor ", qname(name), ": data_offsets must be [begin, end]");

    TensorInfo ti;
    ti.name = name;
    ti.dtype = *dtype;
    ti.file = path;
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      uint64_t v = get_u64(d, path, name, "a shape dimension");
      if (v > static_cast<uint64_t>(INT64_MAX) || (v != 0 && numel > UINT64_MAX / v))
        bad_input(path, ": tensor ", qname(name), ": shape ", sh->dump(), " overflows");
      numel *= v;
      ti.shape.push_back(static_cast<int64_t>(v));
    }
    const uint64_t esize = dtype_size(*dtype);
    if (numel > UINT64_MAX / esize || numel > static_cast<uint64_t>(INT64_MAX))
      bad_input(path, ": tensor ", qname(name), ": shape ", sh->dump(), " overflows");
    const uint64_t nbytes = numel * esize;
    ti.begin = get_u64((*off)[0], path, name, "data_offsets[0]");
    ti.end = get_u64((*off)[1], path, name, "data_offsets[1]");
    if (ti.begin > ti.end)
      bad_input(path, ": tensor ", qname(name), ": data_offsets [", ti.begin, ", ", ti.end, "] has begin > end");
    if (ti.end > data_size)
      bad_input(path, ": tensor ", qname(name), ": data_offsets [", ti.begin, ", ", ti.end,
                "] run past the data section (", data_size, " bytes); file truncated?");
    if (ti.end - ti.begin != nbytes)
      bad_input(path, ": tensor ", qname(name), ": ", dts, " ", shape_str(ti.shape), " needs ", nbytes,
                " bytes but data_offsets [", ti.begin, ", ", ti.end, "] hold ", ti.end - ti.begin);
    infos.push_back(std::move(ti));
  }

  // Sorted by (begin, end): each tensor must start exactly where the previous one ended.
  std::stable_sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : infos) {
    if (t.begin < pos)
      bad_input(path, ": tensor ", qname(t.name), ": data_offsets [", t.begin, ", ", t.end, "] overlap tensor ",
                qname(prev->name), " [", prev->begin, ", ", prev->end, "]");
    if (t.begin > pos)
      bad_input(path, ": tensor ", qname(t.name), ": gap of ", t.begin - pos, " bytes before its data_offsets [",
                t.begin, ", ", t.end, "]");
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size)
    bad_input(path, ": tensors cover ", pos, " of the ", data_size, " data bytes (trailing bytes after ",
              prev ? qname(prev->name) : std::string("the header"), ")");
  return infos;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad_input(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad_input(path, ": not a regular file");
  }
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = path;
  f->map_size_ = static_cast<size_t>(st.st_size);
  if (f->map_size_ > 0) {
    void* m = mmap(nullptr, f->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) bad_input(path, ": mmap failed: ", std::strerror(errno));
    f->map_ = static_cast<const uint8_t*>(m);
  } else {
    ::close(fd);
  }
  // From here the destructor unmaps on any throw.
  static const uint8_t kEmpty[1] = {0};
  f->infos_ = parse_header(f->map_ ? f->map_ : kEmpty, f->map_size_, path, &f->metadata_);
  f->data_offset_ = 8 + static_cast<size_t>(read_u64_le(f->map_));
  for (size_t i = 0; i < f->infos_.size(); ++i) f->index_[f->infos_[i].name] = i;
  f->self_ = f;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), map_size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo* ti = find(name);
  if (!ti) bad_input(path_, ": no tensor ", qname(name));
  const uint8_t* p = map_ + data_offset_ + ti->begin;
  Tensor t(ti->dtype, ti->shape, p, std::shared_ptr<const void>(self_.lock(), p));
  // Offsets in a valid file need not be aligned to the element size; hand out an aligned copy
  // rather than a misaligned view (reading it through T* would be undefined behaviour).
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(ti->dtype) != 0) return t.clone();
  return t;
}

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  QMOE_CHECK(t.defined(), kInternal, "SafetensorsWriter: tensor ", qname(name), " is undefined");
  QMOE_CHECK(name != "__metadata__" && !name.empty(), kInternal, "SafetensorsWriter: bad tensor name ", qname(name));
  for (const auto& [n, _] : tensors_)
    QMOE_CHECK(n != name, kInternal, "SafetensorsWriter: tensor ", qname(name), " added twice");
  tensors_.emplace_back(name, t);
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  uint64_t off = 0;
  for (const auto& [name, t] : tensors_) {
    h[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {off, off + t.nbytes()}}};
    off += t.nbytes();
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) bad_input(path, ": cannot create");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors_)
    if (t.nbytes()) f.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  f.close();
  if (!f) bad_input(path, ": write failed");
}

}  // namespace qmoe
