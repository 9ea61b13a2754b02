// Checkpoint access: safetensors files (mmap'ed, strictly validated) and model directories
// (config.json, single or sharded safetensors via model.safetensors.index.json,
// hf_quant_config.json). Tensors returned alias the mapping (zero copy) and keep it alive.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qmoe/tensor.h"

namespace qmoe {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section
  std::string file;             // path of the file holding it
};

class SafetensorsFile {
 public:
  // Opens and validates the whole header (see safetensors.cpp for every rule). Throws kBadInput
  // naming the file and the offending tensor.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  // Parses and validates a header from memory (used by the fuzzer and by open()). `bytes` is the
  // whole file (8-byte length, JSON header, data section) and `size` its size; offsets are checked
  // against the data section, which is never read. `path` names the file in errors.
  static std::vector<TensorInfo> parse_header(const uint8_t* bytes, size_t size, const std::string& path,
                                              std::map<std::string, std::string>* metadata = nullptr);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return infos_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(const std::string& name) const;
  Tensor get(const std::string& name) const;  // throws kBadInput if absent

  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  size_t data_offset_ = 0;
  std::weak_ptr<SafetensorsFile> self_;
};

// Writes a safetensors file (used by `qmoe gen`, tests and fixtures). Tensors are written in the
// order added; metadata goes under "__metadata__".
class SafetensorsWriter {
 public:
  void add(const std::string& name, const Tensor& t);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const;  // throws kBadInput on I/O failure

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A model directory: config.json + safetensors (single file or sharded) + optional
// hf_quant_config.json. Tensor names are resolved across shards.
class CheckpointDir {
 public:
  static std::shared_ptr<CheckpointDir> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }            // config.json
  const nlohmann::json* hf_quant_config() const {                     // hf_quant_config.json or null
    return hf_quant_config_.is_null() ? nullptr : &hf_quant_config_;
  }
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws kBadInput naming dir + tensor
  Tensor get(const std::string& name) const;
  std::vector<std::string> names() const;                  // sorted

 private:
  std::string dir_;
  nlohmann::json config_;
  nlohmann::json hf_quant_config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

}  // namespace qmoe
