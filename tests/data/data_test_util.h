// Helpers for data tests: gzip and IDX bytes (file helpers come from tests/file_util.h).
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
#include "tests/file_util.h"

namespace kiln::test {

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


#define CHECK_ERROR_HAS(expr, ...)                                                    \
  do {                                                                                \
    std::string msg_ = ::kiln::test::error_of([&] { (void)(expr); });                 \
    CHECK_MESSAGE(!msg_.empty(), "expected a kiln::Error from " #expr);               \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})            \
      CHECK_MESSAGE(msg_.find(part_) != std::string::npos, "'", part_, "' not in: ", msg_); \
  } while (0)

}  // namespace kiln::test
