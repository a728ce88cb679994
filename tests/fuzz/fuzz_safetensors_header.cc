// Fuzzes what `ckptctl import` reads from an untrusted safetensors file: its
// header. Whatever the bytes, the parser returns an error or tensors that
// lie inside the file, in order, not overlapping, their bytes matching
// their shapes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "proto/lib/dtype.h"
#include "tools/ckptctl/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  auto tensors = ckpt::ctl::ParseSafetensorsHeader(file, file.size(), "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  uint64_t last_end = 0;
  for (const auto& t : *tensors) {
    if (t.begin < 8 || t.begin > t.end || t.end > file.size() || t.begin < last_end) std::abort();
    uint64_t bytes = static_cast<uint64_t>(*ckpt::DTypeSize(t.dtype));
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (bytes != t.end - t.begin) std::abort();
    last_end = t.end;
  }
  return 0;
}
