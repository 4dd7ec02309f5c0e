// Corpus reading, splitting and batch drawing for the GPT trainer (see gpt_data.h).
#include "data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/ops.h"

namespace kiln::data::text {
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  KILN_CHECK(in.good(), "--data: cannot open '{}'", p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Rows [first, first + b) of windows of t + 1 tokens starting at `starts`.
Batch gather(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& ids, const std::vector<int64_t>& starts,
             int64_t t) {
  const int64_t b = static_cast<int64_t>(starts.size());
  Tensor x = empty({b, t}, TensorOptions().dtype(kInt64)), y = empty({b, t}, TensorOptions().dtype(kInt64));
  int64_t* px = x.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r)
    for (int64_t j = 0; j < t; ++j) {
      px[r * t + j] = ids[tokens[starts[r] + j]];
      py[r * t + j] = ids[tokens[starts[r] + j + 1]];
    }
  return {x, y};
}

}  // namespace

std::string read_corpus(const std::string& path) {
  KILN_CHECK(fs::exists(path), "--data: '{}' does not exist (Debian's `fortunes` package ships the default corpus)",
             path);
  std::string text;
  if (fs::is_directory(path)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) text += read_file(f);
  } else {
    text = read_file(path);
  }
  KILN_CHECK(!text.empty(), "--data: '{}' holds no text", path);
  return text;
}

Splits split_corpus(const std::string& text, int64_t min_tokens) {
  constexpr size_t kSegment = 10 * 1024;
  Splits s;
  for (size_t i = 0; i < text.size(); i += kSegment) {
    auto& side = (i / kSegment) % 10 == 9 ? s.val : s.train;
    const size_t end = std::min(text.size(), i + kSegment);
    side.insert(side.end(), text.begin() + static_cast<ptrdiff_t>(i), text.begin() + static_cast<ptrdiff_t>(end));
  }
  KILN_CHECK(static_cast<int64_t>(s.val.size()) >= min_tokens && static_cast<int64_t>(s.train.size()) >= min_tokens,
             "--data: corpus of {} bytes is too small: the validation split ({} bytes) needs at least {} "
             "(block size + 1)",
             text.size(), s.val.size(), min_tokens);
  return s;
}

std::vector<int64_t> byte_token_ids(bool gpt2_bytes) {
  std::vector<int64_t> ids(256);
  if (!gpt2_bytes) {
    for (int b = 0; b < 256; ++b) ids[b] = b;
    return ids;
  }
  // GPT-2's bytes_to_unicode(): printable bytes first, in order, then the rest in order.
  auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
  int64_t next = 0;
  for (int b = 0; b < 256; ++b)
    if (printable(b)) ids[b] = next++;
  for (int b = 0; b < 256; ++b)
    if (!printable(b)) ids[b] = next++;
  return ids;
}

int64_t token_byte(int64_t id, bool gpt2_bytes) {
  static const std::vector<int64_t> gpt2 = byte_token_ids(true);
  if (!gpt2_bytes) return id >= 0 && id < 256 ? id : -1;
  auto it = std::find(gpt2.begin(), gpt2.end(), id);
  return it == gpt2.end() ? -1 : it - gpt2.begin();
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Batch random_batch(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& ids, int64_t b, int64_t t,
                   uint64_t seed, uint64_t first_row) {
  const uint64_t range = tokens.size() - static_cast<uint64_t>(t);
  std::vector<int64_t> starts(b);
  for (int64_t r = 0; r < b; ++r)
    starts[r] = static_cast<int64_t>(splitmix64(seed * 0x9E3779B97F4A7C15ull + first_row + r) % range);
  return gather(tokens, ids, starts, t);
}

int64_t sequential_batches(const std::vector<uint8_t>& tokens, int64_t b, int64_t t) {
  return (static_cast<int64_t>(tokens.size()) - 1) / t / b;
}

Batch sequential_batch(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& ids, int64_t b, int64_t t,
                       int64_t index) {
  std::vector<int64_t> starts(b);
  for (int64_t r = 0; r < b; ++r) starts[r] = (index * b + r) * t;
  return gather(tokens, ids, starts, t);
}

}  // namespace kiln::data::text
