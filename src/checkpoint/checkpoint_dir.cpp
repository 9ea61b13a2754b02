// A Hugging Face model directory: config.json (required), hf_quant_config.json (optional,
// ModelOpt's legacy file), and the weights as model.safetensors or as shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
// Like transformers, a single model.safetensors wins over an index. The index is checked both
// ways: every listed tensor must be in the shard it names, every tensor of every shard must be
// listed there, no tensor may appear in two shards, and shard names are plain file names.
#include <filesystem>
#include <set>

#include "checkpoint/json_strict.h"
#include "qmoe/checkpoint.h"

namespace qmoe {
namespace fs = std::filesystem;

std::shared_ptr<CheckpointDir> CheckpointDir::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) bad_input(dir, ": not a directory");
  auto c = std::shared_ptr<CheckpointDir>(new CheckpointDir());
  c->dir_ = dir;
  const fs::path root(dir);

  const fs::path cfg = root / "config.json";
  if (!fs::exists(cfg, ec)) bad_input(dir, ": no config.json");
  c->config_ = read_json_file(cfg.string());
  if (!c->config_.is_object()) bad_input(cfg.string(), ": must be a JSON object");

  const fs::path hfq = root / "hf_quant_config.json";
  if (fs::exists(hfq, ec)) {
    c->hf_quant_config_ = read_json_file(hfq.string());
    if (!c->hf_quant_config_.is_object()) bad_input(hfq.string(), ": must be a JSON object");
  }

  const fs::path single = root / "model.safetensors";
  const fs::path index = root / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    auto f = SafetensorsFile::open(single.string());
    for (const auto& t : f->tensors()) c->where_[t.name] = 0;
    c->files_.push_back(std::move(f));
    return c;
  }
  if (!fs::exists(index, ec)) bad_input(dir, ": no model.safetensors and no model.safetensors.index.json");

  const std::string ipath = index.string();
  nlohmann::json ij = read_json_file(ipath);
  if (!ij.is_object()) bad_input(ipath, ": must be a JSON object");
  auto wm = ij.find("weight_map");
  if (wm == ij.end() || !wm->is_object() || wm->empty())
    bad_input(ipath, ": needs a non-empty \"weight_map\" object {tensor: shard file}");
  if (auto md = ij.find("metadata"); md != ij.end() && !md->is_object())
    bad_input(ipath, ": \"metadata\" must be an object");

  std::map<std::string, size_t> shard_index;  // shard file name -> index into files_
  std::map<std::string, std::string> listed;  // tensor -> shard, from weight_map
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      bad_input(ipath, ": weight_map entry for tensor ", qname(it.key()), " must be a file name string");
    const std::string& shard = it.value().get_ref<const std::string&>();
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\\') != std::string::npos || shard.find('\0') != std::string::npos)
      bad_input(ipath, ": tensor ", qname(it.key()), " maps to ", qname(shard), ", not a file name in ", dir);
    listed[it.key()] = shard;
    if (!shard_index.count(shard)) {
      const fs::path sp = root / shard;
      if (!fs::exists(sp, ec))
        bad_input(ipath, ": tensor ", qname(it.key()), " is in shard ", qname(shard), ", which does not exist");
      shard_index[shard] = c->files_.size();
      c->files_.push_back(SafetensorsFile::open(sp.string()));
    }
  }
  // Every tensor of every shard: listed, listed for this shard, and in no other shard.
  for (const auto& [shard, fi] : shard_index) {
    for (const auto& t : c->files_[fi]->tensors()) {
      auto prev = c->where_.find(t.name);
      if (prev != c->where_.end())
        bad_input(ipath, ": tensor ", qname(t.name), " is in two shards, ", qname(c->files_[prev->second]->path()),
                  " and ", qname(c->files_[fi]->path()));
      auto l = listed.find(t.name);
      if (l == listed.end())
        bad_input(ipath, ": tensor ", qname(t.name), " of shard ", qname(shard), " is not in weight_map");
      if (l->second != shard)
        bad_input(ipath, ": tensor ", qname(t.name), " is listed in shard ", qname(l->second), " but stored in ",
                  qname(shard));
      c->where_[t.name] = fi;
    }
  }
  for (const auto& [name, shard] : listed)
    if (!c->where_.count(name))
      bad_input(ipath, ": tensor ", qname(name), " is listed in shard ", qname(shard), " but missing from it");
  return c;
}

bool CheckpointDir::has(const std::string& name) const { return where_.count(name) != 0; }

const TensorInfo& CheckpointDir::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) bad_input(dir_, ": no tensor ", qname(name));
  return *files_[it->second]->find(name);
}

Tensor CheckpointDir::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) bad_input(dir_, ": no tensor ", qname(name));
  return files_[it->second]->get(name);
}

std::vector<std::string> CheckpointDir::names() const {
  std::vector<std::string> r;
  r.reserve(where_.size());
  for (const auto& [n, _] : where_) r.push_back(n);
  return r;
}

}  // namespace qmoe
