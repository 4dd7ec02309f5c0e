// data::text::TokenWindows (see token_windows.h).
#include "data/token_windows.h"

#include "core/error.h"
#include "data/text_corpus.h"

namespace kiln::data::text {

TokenWindows::TokenWindows(std::shared_ptr<const std::vector<uint8_t>> tokens, std::vector<int64_t> ids, int64_t t,
                           int64_t size, WindowOrder order, uint64_t seed)
    : tokens_(std::move(tokens)), ids_(std::move(ids)), t_(t), size_(size), order_(order), seed_(seed) {
  KILN_CHECK(tokens_ != nullptr, "TokenWindows: the token stream is null");
  KILN_CHECK(ids_.size() == 256, "TokenWindows: the byte -> token id table has {} entries, not 256", ids_.size());
  KILN_CHECK(t_ >= 1 && size_ >= 0, "TokenWindows: window length {} and size {} must be >= 1 and >= 0", t_, size_);
  const auto n = static_cast<int64_t>(tokens_->size());
  KILN_CHECK(n > t_, "TokenWindows: a stream of {} tokens holds no window of {} + 1", n, t_);
  if (order_ == WindowOrder::sequential)
    KILN_CHECK(size_ <= (n - 1) / t_, "TokenWindows: a stream of {} tokens holds {} sequential windows of {}, not {}",
               n, (n - 1) / t_, t_, size_);
}

std::string TokenWindows::name() const {
  return order_ == WindowOrder::random ? "TokenWindows(random)" : "TokenWindows(sequential)";
}

int64_t TokenWindows::start(int64_t index) const {
  if (order_ == WindowOrder::sequential) return index * t_;
  const uint64_t range = tokens_->size() - static_cast<uint64_t>(t_);
  return static_cast<int64_t>(splitmix64(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index)) % range);
}

Example TokenWindows::get(int64_t index) const {
  Example b = get_batch({index});
  return {b.data.squeeze(0), b.target.squeeze(0)};
}

Example TokenWindows::get_batch(const std::vector<int64_t>& indices) const {
  const auto b = static_cast<int64_t>(indices.size());
  Tensor x = empty({b, t_}, TensorOptions().dtype(kInt64)), y = empty({b, t_}, TensorOptions().dtype(kInt64));
  int64_t* px = x.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  const std::vector<uint8_t>& tokens = *tokens_;
  for (int64_t r = 0; r < b; ++r) {
    check_index(indices[r]);
    const int64_t s = start(indices[r]);
    for (int64_t j = 0; j < t_; ++j) {
      px[r * t_ + j] = ids_[tokens[s + j]];
      py[r * t_ + j] = ids_[tokens[s + j + 1]];
    }
  }
  return {x, y};
}

}  // namespace kiln::data::text
