// libFuzzer target: SafetensorsFile::parse_header on arbitrary bytes (the whole file image: length
// prefix, JSON header, data section). Every input must either parse into tensors that lie inside
// the data section and tile it exactly, or throw qmoe::Error; anything else (a crash, a sanitizer
// report, another exception type) is a finding.
#include <cstdint>
#include <cstdlib>

#include "qmoe/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    std::map<std::string, std::string> md;
    auto infos = qmoe::SafetensorsFile::parse_header(data, size, "fuzz", &md);
    uint64_t hdr = 0;
    for (int i = 7; i >= 0; --i) hdr = (hdr << 8) | data[i];
    const uint64_t data_size = size - 8 - hdr;
    uint64_t pos = 0;
    for (const auto& t : infos) {
      // Accepted headers must satisfy the invariants the loader relies on.
      if (t.begin != pos || t.end < t.begin || t.end > data_size) abort();
      if (static_cast<uint64_t>(qmoe::shape_numel(t.shape)) * qmoe::dtype_size(t.dtype) != t.end - t.begin) abort();
      pos = t.end;
    }
    if (pos != data_size) abort();
  } catch (const qmoe::Error&) {
  }
  return 0;
}
