// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header {"name": {"dtype", "shape", "data_offsets"},
// "__metadata__": {str: str}}, then the tensors' raw little-endian bytes packed back to back.
// Files written here open with Python's `safetensors` package (and torch's loaders built on it);
// files from there load here. Writes are atomic (temp file, fsync, rename); reads validate the
// whole header against the file before allocating anything, verify per-tensor checksums where
// present, and every problem throws kiln::Error naming the file.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace kiln::nn {

/// Tensors and string metadata of one safetensors file.
struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` (any device, layout or dtype Kiln has; copied to contiguous CPU memory) and
/// `metadata` to `path`: first to `path + ".tmp.<pid>"`, fsync'd, then renamed over `path`, so a
/// crash or a failed save leaves any previous file at `path` untouched. Names must be non-empty
/// valid UTF-8 and not "__metadata__". Each tensor's XXH3-64 checksum is added to the metadata as
/// "kiln.checksum.<name>" (nn/checksum.h); those keys are reserved.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file into CPU tensors. Validates the header length against the file
/// size, the header as strict JSON, dtypes (F32 F64 F16 BF16 I32 I64 BOOL), shapes, and that
/// the tensors' data_offsets tile the data section exactly (in bounds, no overlap, no gap, no
/// trailing bytes) with byte lengths of numel * element size. When the metadata holds checksums
/// (files Kiln wrote) every tensor must have one and match it: a flipped bit in any tensor's data
/// throws naming the tensor. Files without checksums (other writers) load unchecked. The returned
/// metadata omits the checksum keys.
SafetensorsContents load_safetensors(const std::string& path);

/// "F32", "BF16", "BOOL", ... (safetensors' names for Kiln's dtypes).
const char* safetensors_dtype_name(DType dtype);

}  // namespace kiln::nn
