// IDX reading: round trips through files written here (plain and gzip), and every malformed
// file refused with an error naming the path and the problem.
#include "data/idx.h"

#include "tests/data/data_test_util.h"

using namespace kiln;
using namespace kiln::data;
using kiln::test::idx_bytes;
using kiln::test::write_bytes;

namespace {

std::vector<uint8_t> pixels(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return v;
}

}  // namespace

TEST_CASE("read_idx round-trips u8 images, plain and gzip") {
  std::string dir = test::scratch_dir("idx_roundtrip");
  auto data = pixels(3 * 4 * 5);
  auto bytes = idx_bytes(0x08, {3, 4, 5}, data);
  write_bytes(dir + "/plain-idx3-ubyte", bytes);
  write_bytes(dir + "/packed-idx3-ubyte.gz", test::gzip_bytes(bytes));
  for (std::string name : {"/plain-idx3-ubyte", "/packed-idx3-ubyte.gz"}) {
    CAPTURE(name);
    Tensor t = read_idx(dir + name);
    CHECK(t.dtype() == kInt32);
    CHECK(t.sizes() == Shape{3, 4, 5});
    auto v = t.to_vector<int32_t>();
    REQUIRE(v.size() == data.size());
    for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == data[i]);

    IdxArray raw = read_idx_raw(dir + name);
    CHECK(raw.type == IdxType::u8);
    CHECK(raw.dims == Shape{3, 4, 5});
    CHECK(raw.bytes == data);
  }
}

TEST_CASE("read_idx decodes big-endian signed and floating element types") {
  std::string dir = test::scratch_dir("idx_types");
  // i16: -2, 300; i32: -70000, 5; f32: 1.5f (0x3fc00000)
  write_bytes(dir + "/a", idx_bytes(0x0B, {2}, {0xff, 0xfe, 0x01, 0x2c}));
  write_bytes(dir + "/b", idx_bytes(0x0C, {2}, {0xff, 0xfe, 0xee, 0x90, 0, 0, 0, 5}));
  write_bytes(dir + "/c", idx_bytes(0x0D, {1}, {0x3f, 0xc0, 0, 0}));
  write_bytes(dir + "/d", idx_bytes(0x09, {2}, {0x80, 0x7f}));
  CHECK(read_idx(dir + "/a").to_vector<int32_t>() == std::vector<int32_t>{-2, 300});
  CHECK(read_idx(dir + "/b").to_vector<int32_t>() == std::vector<int32_t>{-70000, 5});
  Tensor c = read_idx(dir + "/c");
  CHECK(c.dtype() == kFloat32);
  CHECK(c.to_vector<float>() == std::vector<float>{1.5f});
  CHECK(read_idx(dir + "/d").to_vector<int32_t>() == std::vector<int32_t>{-128, 127});
}

TEST_CASE("read_idx accepts empty arrays and concatenated gzip members") {
  std::string dir = test::scratch_dir("idx_edge");
  write_bytes(dir + "/empty", idx_bytes(0x08, {0, 28, 28}, {}));
  CHECK(read_idx(dir + "/empty").sizes() == Shape{0, 28, 28});

  auto bytes = idx_bytes(0x08, {6}, {1, 2, 3, 4, 5, 6});
  std::vector<uint8_t> first(bytes.begin(), bytes.begin() + 7), second(bytes.begin() + 7, bytes.end());
  auto gz = test::gzip_bytes(first), gz2 = test::gzip_bytes(second);
  gz.insert(gz.end(), gz2.begin(), gz2.end());
  write_bytes(dir + "/multi.gz", gz);
  CHECK(read_idx(dir + "/multi.gz").to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("read_idx refuses truncated files, naming the path") {
  std::string dir = test::scratch_dir("idx_truncated");
  auto bytes = idx_bytes(0x08, {10, 7}, pixels(70));
  // Cut inside the data, inside the dims, and inside the magic.
  for (size_t keep : {size_t(80), size_t(16), size_t(10), size_t(3), size_t(0)}) {
    CAPTURE(keep);
    std::string path = dir + "/cut" + std::to_string(keep);
    write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + keep));
    CHECK_ERROR_HAS(read_idx(path), path);
    if (keep == 80) CHECK_ERROR_HAS(read_idx(path), "truncated", "70 bytes");
    if (keep <= 3) CHECK_ERROR_HAS(read_idx(path), "too short");
  }
  // A truncated gzip stream, and a complete stream holding too little data.
  auto gz = test::gzip_bytes(bytes);
  for (size_t keep : {gz.size() - 4, gz.size() / 2, size_t(12)}) {
    CAPTURE(keep);
    std::string path = dir + "/cut" + std::to_string(keep) + ".gz";
    write_bytes(path, std::vector<uint8_t>(gz.begin(), gz.begin() + keep));
    CHECK_ERROR_HAS(read_idx(path), path, "truncated");
  }
  std::string short_gz = dir + "/short.gz";
  write_bytes(short_gz, test::gzip_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end() - 5)));
  CHECK_ERROR_HAS(read_idx(short_gz), short_gz, "truncated", "found 65");
}

TEST_CASE("read_idx refuses trailing data, plain and gzip") {
  std::string dir = test::scratch_dir("idx_trailing");
  auto bytes = idx_bytes(0x08, {4}, {1, 2, 3, 4});
  auto longer = bytes;
  longer.push_back(9);
  longer.push_back(9);
  write_bytes(dir + "/plain", longer);
  CHECK_ERROR_HAS(read_idx(dir + "/plain"), dir + "/plain", "2 trailing bytes");
  write_bytes(dir + "/inner.gz", test::gzip_bytes(longer));
  CHECK_ERROR_HAS(read_idx(dir + "/inner.gz"), dir + "/inner.gz", "trailing");
  auto gz = test::gzip_bytes(bytes);
  gz.push_back('x');
  gz.push_back('y');
  gz.push_back('z');
  write_bytes(dir + "/outer.gz", gz);
  CHECK_ERROR_HAS(read_idx(dir + "/outer.gz"), dir + "/outer.gz", "trailing bytes after the end of the gzip stream");
}

TEST_CASE("read_idx refuses corrupt gzip, bad magic, unknown types and missing files") {
  std::string dir = test::scratch_dir("idx_corrupt");
  auto bytes = idx_bytes(0x08, {64, 64}, pixels(64 * 64));
  auto gz = test::gzip_bytes(bytes);
  // Flip bytes inside the deflate data: either the inflater or the CRC check must notice.
  for (size_t at : {size_t(12), gz.size() / 2, gz.size() - 6}) {
    CAPTURE(at);
    auto bad = gz;
    bad[at] ^= 0x5a;
    bad[at + 1] ^= 0xa5;
    std::string path = dir + "/flip" + std::to_string(at) + ".gz";
    write_bytes(path, bad);
    std::string msg = test::error_of([&] { read_idx(path); });
    CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("gzip") != std::string::npos, msg);
  }

  write_bytes(dir + "/magic", {0x01, 0x00, 0x08, 0x01, 0, 0, 0, 1, 7});
  CHECK_ERROR_HAS(read_idx(dir + "/magic"), dir + "/magic", "bad magic");
  write_bytes(dir + "/type", idx_bytes(0x07, {1}, {7}));
  CHECK_ERROR_HAS(read_idx(dir + "/type"), dir + "/type", "unknown element type 0x07");
  write_bytes(dir + "/ndim0", {0, 0, 0x08, 0});
  CHECK_ERROR_HAS(read_idx(dir + "/ndim0"), dir + "/ndim0", "0 dims");
  write_bytes(dir + "/huge", idx_bytes(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  CHECK_ERROR_HAS(read_idx(dir + "/huge"), dir + "/huge", "implausibly large");
  // Found by //tests/fuzz:idx_fuzz_test: a zero dim makes numel 0, but the other dims still
  // make the strides, which overflowed int64.
  write_bytes(dir + "/zero_then_huge", idx_bytes(0x08, {0, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  CHECK_ERROR_HAS(read_idx(dir + "/zero_then_huge"), dir + "/zero_then_huge", "implausibly large");
  write_bytes(dir + "/huge.gz", test::gzip_bytes(idx_bytes(0x08, {100000, 100000}, {1, 2, 3})));
  CHECK_ERROR_HAS(read_idx(dir + "/huge.gz"), dir + "/huge.gz", "truncated");

  CHECK_ERROR_HAS(read_idx(dir + "/does-not-exist"), dir + "/does-not-exist", "cannot open");
  CHECK_ERROR_HAS(read_idx(dir), dir, "directory");
}
