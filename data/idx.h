// Reader for the IDX format of (Fashion-)MNIST: a big-endian header (0x00 0x00 type ndim, then
// ndim u32 dims) followed by exactly prod(dims) elements, optionally gzip-compressed (detected by
// the 0x1f 0x8b magic). Every malformed file — missing, bad magic, unknown type, truncated,
// trailing data, corrupt gzip — throws kiln::Error naming the path and the problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::data {

/// IDX element type codes (the third byte of the magic).
enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

/// "u8", "i16", ...
const char* idx_type_name(IdxType t);
/// Bytes per element.
size_t idx_type_size(IdxType t);

/// A validated IDX file as stored: element type, dims, and the raw (big-endian) element bytes.
struct IdxArray {
  IdxType type = IdxType::u8;
  Shape dims;
  std::vector<uint8_t> bytes;  // prod(dims) * idx_type_size(type) bytes
  int64_t numel() const { return shape_numel(dims); }
};

/// Reads and validates an IDX file, plain or gzip-compressed.
IdxArray read_idx_raw(const std::string& path);

/// Reads an IDX file into a CPU tensor of shape dims: integer element types (u8, i8, i16, i32)
/// become i32 holding the raw values (Kiln has no u8 dtype), f32/f64 keep their type. Datasets
/// turn these into model inputs (MnistDataset scales u8 pixels to f32 in [0, 1]).
Tensor read_idx(const std::string& path);

}  // namespace kiln::data
