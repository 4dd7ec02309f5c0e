// A small synthetic data set in Fashion-MNIST's file layout (gzip IDX), learnable in a few
// steps: class c lights up row blocks c and c + 3 of the image. For trainer tests.
#pragma once

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::test {

namespace fs = std::filesystem;

inline void write_idx_gz(const fs::path& path, const std::vector<uint8_t>& header, const std::vector<uint8_t>& body) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, header.data(), static_cast<unsigned>(header.size()));
  gzwrite(f, body.data(), static_cast<unsigned>(body.size()));
  gzclose(f);
}

inline std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}

/// A learnable 10-class problem in MNIST layout: class c lights up row block c of the image.
inline void write_split(const fs::path& dir, const std::string& prefix, uint32_t n, uint32_t seed) {
  std::vector<uint8_t> images(n * 28 * 28), labels(n);
  uint32_t state = seed;
  auto next = [&] { state = state * 1664525u + 1013904223u; return state >> 24; };
  for (uint32_t i = 0; i < n; ++i) {
    labels[i] = static_cast<uint8_t>(i % 10);
    for (uint32_t p = 0; p < 28 * 28; ++p) {
      uint32_t row = p / 28;
      bool on = row / 2 == labels[i] || row / 2 == labels[i] + 3;
      images[i * 784 + p] = static_cast<uint8_t>((on ? 160 : 0) + next() % 64);
    }
  }
  std::vector<uint8_t> ih{0, 0, 8, 3}, lh{0, 0, 8, 1};
  for (uint32_t v : {n, 28u, 28u}) for (uint8_t b : be32(v)) ih.push_back(b);
  for (uint8_t b : be32(n)) lh.push_back(b);
  write_idx_gz(dir / (prefix + "-images-idx3-ubyte.gz"), ih, images);
  write_idx_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), lh, labels);
}

/// 640 training and 200 test images under TEST_TMPDIR.
inline fs::path make_data_dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(tmp ? tmp : "/tmp") / "synthetic-mnist";
  fs::create_directories(dir);
  write_split(dir, "train", 640, 1);
  write_split(dir, "t10k", 200, 2);
  return dir;
}

}  // namespace kiln::test
