// A language model's training data as a data::Dataset: example i is a window of `t` tokens of a
// byte-token stream (data/text_corpus.h) and, as its target, the `t` tokens that follow each one
// (both i64 [t]; batches [B, t]). Random windows start where data::text::random_batch's rows do,
// a pure function of (seed, i), so a DataLoader over them in order reads the batches the GPT
// trainers draw and a run resumed at batch b reads what the uninterrupted run would have;
// sequential windows tile the stream from its start, as the validation batches do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace kiln::data::text {

enum class WindowOrder {
  /// Window i starts at splitmix64(seed * 0x9E3779B97F4A7C15 + i) mod (n - t).
  random,
  /// Window i starts at i * t.
  sequential,
};

class TokenWindows : public Dataset {
 public:
  /// `size` windows of `t` tokens (plus the target's one more) over `tokens`, each byte b read as
  /// token id ids[b] (data::text::byte_token_ids). Throws naming the numbers when the stream is
  /// too short for one window, or for `size` sequential ones.
  TokenWindows(std::shared_ptr<const std::vector<uint8_t>> tokens, std::vector<int64_t> ids, int64_t t, int64_t size,
               WindowOrder order, uint64_t seed = 0);

  Example get(int64_t index) const override;
  /// The windows gathered straight into [B, t] tensors.
  Example get_batch(const std::vector<int64_t>& indices) const override;
  int64_t size() const override { return size_; }
  std::string name() const override;

  /// Where window `index` starts in the stream.
  int64_t start(int64_t index) const;

 private:
  std::shared_ptr<const std::vector<uint8_t>> tokens_;
  std::vector<int64_t> ids_;
  int64_t t_, size_;
  WindowOrder order_;
  uint64_t seed_;
};

}  // namespace kiln::data::text
