// XXH3-64 over a tensor's bytes, formatted for the safetensors metadata (see checksum.h).
#include "nn/checksum.h"

#include <fmt/format.h>
#include <xxhash.h>

namespace kiln::nn {
namespace {
constexpr const char* kPrefix = "kiln.checksum.";
}

std::string checksum_key(const std::string& name) { return kPrefix + name; }

bool parse_checksum_key(const std::string& key, std::string& tensor) {
  if (key.rfind(kPrefix, 0) != 0) return false;
  tensor = key.substr(std::char_traits<char>::length(kPrefix));
  return true;
}

std::string tensor_checksum(const void* data, size_t nbytes) {
  return fmt::format("xxh3_64:{:016x}", static_cast<unsigned long long>(XXH3_64bits(data, nbytes)));
}

}  // namespace kiln::nn
