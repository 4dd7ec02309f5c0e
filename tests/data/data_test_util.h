// Helpers for data tests: a scratch directory, raw file writing (plain and gzip) and IDX bytes.
#pragma once

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace kiln::test {

/// A fresh directory under TEST_TMPDIR (Bazel) or the system temp dir.
inline std::string scratch_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) /
                              ("kiln_data_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// One gzip member holding `bytes`.
inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& bytes) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, bytes.size()) + 32);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

/// IDX bytes: magic 00 00 type ndim, big-endian u32 dims, then `data` as given.
inline std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

/// The message of the kiln::Error `f` throws ("" when it throws nothing).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

#define CHECK_ERROR_HAS(expr, ...)                                                    \
  do {                                                                                \
    std::string msg_ = ::kiln::test::error_of([&] { (void)(expr); });                 \
    CHECK_MESSAGE(!msg_.empty(), "expected a kiln::Error from " #expr);               \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})            \
      CHECK_MESSAGE(msg_.find(part_) != std::string::npos, "'", part_, "' not in: ", msg_); \
  } while (0)

}  // namespace kiln::test
