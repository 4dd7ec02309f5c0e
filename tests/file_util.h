// Test helpers for file formats: a scratch directory, whole-file byte I/O, the message of the
// kiln::Error a call throws, and byte-exact tensor comparison for round trips.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace kiln::test {

/// A fresh, empty directory under TEST_TMPDIR (Bazel) or the system temp dir.
inline std::string scratch_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) /
                              ("kiln_test_" + name);
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

/// The message of the kiln::Error `f` throws ("" when it throws nothing).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Same dtype, shape and bytes.
inline bool identical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  const size_t nbytes = static_cast<size_t>(x.numel()) * x.element_size();
  return nbytes == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), nbytes) == 0;
}

}  // namespace kiln::test
