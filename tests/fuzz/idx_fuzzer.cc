// Fuzzes read_idx with whole files, plain or gzip. Contract under test: any byte string either
// reads into a tensor whose numel matches the dims, or throws kiln::Error; nothing else escapes.
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "data/idx.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::FuzzFile file;
  const std::string& path = file.write(data, size);
  try {
    kiln::Tensor t = kiln::data::read_idx(path);
    int64_t numel = 1;
    for (int64_t d : t.sizes()) numel *= d;
    if (t.numel() != numel) std::abort();
  } catch (const kiln::Error&) {
  }
  return 0;
}
