// Per-tensor checksums of safetensors files: XXH3-64 (Debian's libxxhash) of each tensor's raw
// bytes, kept in the header's __metadata__ as "kiln.checksum.<tensor>": "xxh3_64:<16 hex digits>",
// so other tools still read the file and Kiln notices a flipped bit in any tensor's data.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::nn {

/// The metadata key of tensor `name`'s checksum.
std::string checksum_key(const std::string& name);
/// Whether a metadata key is a checksum key; sets `tensor` to the tensor it covers.
bool parse_checksum_key(const std::string& key, std::string& tensor);
/// "xxh3_64:" followed by the 16 lowercase hex digits of XXH3-64 of the bytes.
std::string tensor_checksum(const void* data, size_t nbytes);

}  // namespace kiln::nn
