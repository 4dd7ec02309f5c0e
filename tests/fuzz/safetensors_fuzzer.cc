// Fuzzes load_safetensors with whole files. Contract under test: any byte string either loads
// into tensors that tile the file's data section, or throws kiln::Error; nothing else escapes
// (a crash, a sanitizer report, another exception type, or an allocation beyond the file).
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "nn/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::FuzzFile file;
  const std::string& path = file.write(data, size);
  try {
    kiln::nn::SafetensorsContents c = kiln::nn::load_safetensors(path);
    // Accepted: every tensor's bytes come from the file, so together they cannot exceed it.
    size_t bytes = 0;
    for (const auto& [name, t] : c.tensors) bytes += static_cast<size_t>(t.numel()) * t.element_size();
    if (bytes + 8 > size) std::abort();
  } catch (const kiln::Error&) {
  }
  return 0;
}
