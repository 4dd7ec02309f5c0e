// The GPT trainer's data: a byte-level corpus read from a file or a directory of text files (by
// default Debian's `fortunes` package, /usr/share/games/fortunes: about 2.5 MB of English
// quotations, poems and jokes), split into training and validation bytes, and batches drawn at
// positions that are a pure function of (seed, step, row), so a resumed run reads exactly the
// batches the uninterrupted run would have (bench/gpt_vs_pytorch.py draws the same ones).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::data::text {

/// The bytes of `path`: a file, or every regular file of a directory (not symbolic links, not
/// fortune's "*.dat" indexes) in name order. Throws naming the path when missing or empty.
std::string read_corpus(const std::string& path);

struct Splits {
  std::vector<uint8_t> train, val;
};
/// Every 10th segment of 10 KiB goes to validation, the rest to training (so both sample every
/// part of the corpus). Throws when either side would be shorter than `min_tokens`.
Splits split_corpus(const std::string& text, int64_t min_tokens);

/// Token id of each byte: the byte itself (vocab 256), or with `gpt2_bytes` the id GPT-2's BPE
/// vocabulary gives that single byte (its bytes_to_unicode order), so Hugging Face weights see
/// their own byte tokens.
std::vector<int64_t> byte_token_ids(bool gpt2_bytes);
/// The inverse, for decoding samples: token id -> byte, or -1 for ids that are not single bytes.
int64_t token_byte(int64_t id, bool gpt2_bytes);

/// splitmix64 of x: the position generator, easy to reproduce in Python.
uint64_t splitmix64(uint64_t x);

struct Batch {
  Tensor x, y;  // [B, T] i64: inputs and next-token targets
};
/// `b` windows of `t + 1` bytes; row r starts at splitmix64(seed * 0x9E3779B97F4A7C15 + first_row
/// + r) mod (n - t). `first_row` numbers the rows over the whole run (step, micro-batch, rank).
Batch random_batch(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& ids, int64_t b, int64_t t,
                   uint64_t seed, uint64_t first_row);
/// The validation batch `index`: windows taken in order from the start, `b` per batch.
Batch sequential_batch(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& ids, int64_t b, int64_t t,
                       int64_t index);
/// How many sequential batches fit in `tokens`.
int64_t sequential_batches(const std::vector<uint8_t>& tokens, int64_t b, int64_t t);

}  // namespace kiln::data::text
