// safetensors: exact format, round trips of every dtype and of metadata, atomic saves, and
// truncated or corrupted files refused with errors naming the file.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/ops.h"
#include "nn/safetensors.h"
#include "tests/file_util.h"

using namespace kiln;
using namespace kiln::nn;

using namespace kiln::test;

namespace {

std::vector<uint8_t> file_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b;
  b.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i)));
  for (char c : header) b.push_back(static_cast<uint8_t>(c));
  for (uint8_t c : data) b.push_back(c);
  return b;
}

std::map<std::string, Tensor> every_dtype() {
  std::map<std::string, Tensor> t;
  t["f32"] = randn({3, 4});
  t["f64"] = randn({2, 3, 2}, kFloat64);
  t["f16"] = randn({5}).to(kFloat16);
  t["bf16"] = randn({2, 2}).to(kBFloat16);
  t["i32"] = tensor<int32_t>({-7, 0, 2147483647, -2147483647 - 1});
  t["i64"] = tensor<int64_t>({int64_t{1} << 40, -3}, {2, 1});
  t["bool"] = tensor<bool>({true, false, true});
  t["scalar"] = scalar_tensor(2.5, kFloat64);
  t["empty"] = zeros({0, 3});
  t["transposed"] = randn({3, 5}).t();  // not contiguous: saved in logical order
  return t;
}

}  // namespace

TEST_CASE("safetensors headers are strict JSON: duplicate keys, deep nesting and sloppy syntax are refused") {
  std::string dir = scratch_dir("st_strict");
  std::string path = dir + "/s.safetensors";
  auto message = [&](const std::string& header) {
    write_bytes(path, file_bytes(header, {}));
    return error_of([&] { load_safetensors(path); });
  };
  // Duplicate keys, at the top and inside a tensor and the metadata, name the key.
  const std::string entry = R"({"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  for (const auto& [header, key] : std::vector<std::pair<std::string, std::string>>{
           {"{\"a\":" + entry + ",\"a\":" + entry + "}", "\"a\""},
           {R"({"a":{"dtype":"F32","dtype":"F64","shape":[0],"data_offsets":[0,0]}})", "\"dtype\""},
           {R"({"__metadata__":{"k":"1","k":"2"}})", "\"k\""}}) {
    CAPTURE(header);
    std::string msg = message(header);
    CHECK_MESSAGE(contains(msg, path), msg);
    CHECK_MESSAGE(contains(msg, "duplicate key " + key), msg);
  }
  // Nesting beyond 64 levels, however it is spelled.
  std::string deep = R"({"__metadata__":)" + std::string(70, '[') + std::string(70, ']') + "}";
  std::string msg = message(deep);
  CHECK_MESSAGE(contains(msg, "nesting deeper than 64 levels"), msg);
  CHECK_MESSAGE(contains(msg, path), msg);
  // 63 levels of metadata nesting parse (and are refused only as non-string metadata).
  msg = message(R"({"__metadata__":{"k":)" + std::string(62, '[') + std::string(62, ']') + "}}");
  CHECK_MESSAGE(contains(msg, "expected a string"), msg);
  // Not JSON, or JSON's sloppier cousins: each refused as invalid JSON, naming the file.
  for (const char* bad : {R"({"a":1,})", R"({"a":1 "b":2})", R"({"a":[01]})", "{'a':1}", R"({"a":tru})",
                          "{\"a\":\"\x01\"}", "{\"\xff\":1}", "{\"\xc0\xaf\":1}", R"({"\ud800":1})", R"({"a":NaN})",
                          R"({} x)", R"({"a":1 /* c */})", R"({"a":[1,2})", R"({"abc)"}) {
    CAPTURE(bad);
    msg = message(bad);
    CHECK_MESSAGE(contains(msg, "not valid JSON"), msg);
    CHECK_MESSAGE(contains(msg, path), msg);
  }
}

TEST_CASE("safetensors round-trips every dtype and the metadata") {
  std::string dir = scratch_dir("st_roundtrip");
  auto tensors = every_dtype();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" backslash \\ newline \n é"}};
  save_safetensors(dir + "/all.safetensors", tensors, meta);
  SafetensorsContents back = load_safetensors(dir + "/all.safetensors");
  CHECK(back.metadata == meta);
  REQUIRE(back.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    REQUIRE(back.tensors.count(name));
    CHECK(identical(back.tensors.at(name), t));
  }
  // Names with JSON-special characters survive too.
  save_safetensors(dir + "/names.safetensors", {{"a.b\"c\\d", ones({1})}, {"ünï", zeros({2})}});
  auto names = load_safetensors(dir + "/names.safetensors");
  CHECK(names.tensors.count("a.b\"c\\d") == 1);
  CHECK(names.tensors.count("ünï") == 1);
  CHECK(names.metadata.empty());
}

// Kiln adds each tensor's XXH3-64 (of its little-endian bytes) to the metadata.
TEST_CASE("safetensors files follow the format byte for byte") {
  std::string dir = scratch_dir("st_format");
  std::string path = dir + "/x.safetensors";
  save_safetensors(path, {{"b", tensor<int32_t>({1, 2})}, {"a", tensor<float>({1.0f})}}, {{"k", "v"}});
  auto bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  REQUIRE(8 + n + 12 == bytes.size());
  CHECK((8 + n) % 8 == 0);  // data 8-byte aligned, header padded with spaces
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  std::string expected =
      R"({"__metadata__":{"k":"v","kiln.checksum.a":"xxh3_64:f87b05471331b3ae",)"
      R"("kiln.checksum.b":"xxh3_64:0389e2c8892d5450"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})";
  CHECK(header.substr(0, expected.size()) == expected);
  CHECK(header.find_first_not_of(' ', expected.size()) == std::string::npos);
  // Little-endian data: 1.0f then int32 1 and 2.
  std::vector<uint8_t> data(bytes.begin() + 8 + static_cast<long>(n), bytes.end());
  CHECK(data == std::vector<uint8_t>{0, 0, 0x80, 0x3f, 1, 0, 0, 0, 2, 0, 0, 0});
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) (void)e, ++files;
  CHECK(files == 1);
}

TEST_CASE("safetensors reads files as other writers lay them out") {
  std::string dir = scratch_dir("st_foreign");
  // Tensors stored out of name order, metadata last, whitespace in the JSON.
  std::string header = R"({ "w": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},
                            "v": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},
                            "__metadata__": {"format": "pt"} }   )";
  std::vector<uint8_t> data = {42, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x3c, 0x00, 0xc0};  // 42; f16 1.0, -2.0
  write_bytes(dir + "/f.safetensors", file_bytes(header, data));
  auto f = load_safetensors(dir + "/f.safetensors");
  CHECK(f.tensors.at("v").dim() == 0);
  CHECK(f.tensors.at("v").item<int64_t>() == 42);
  CHECK(f.tensors.at("w").to_vector<float>() == std::vector<float>{1.0f, -2.0f});
  CHECK(f.metadata.at("format") == "pt");
}

TEST_CASE("safetensors refuses malformed headers, naming the file and the problem") {
  std::string dir = scratch_dir("st_malformed");
  std::string path = dir + "/m.safetensors";
  auto expect = [&](const std::string& header, const std::vector<uint8_t>& data, const std::string& part) {
    CAPTURE(header);
    write_bytes(path, file_bytes(header, data));
    std::string msg = error_of([&] { load_safetensors(path); });
    CHECK_MESSAGE(contains(msg, path), msg);
    CHECK_MESSAGE(contains(msg, part), msg);
  };
  std::vector<uint8_t> eight(8, 0);
  expect(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", eight, "not valid JSON");
  expect(R"({"a":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", eight, "unknown dtype");
  expect(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight, "does not support");
  expect(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight, "span 8 bytes");
  expect(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight, "invalid shape");
  expect(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight, "past the end");
  expect(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight, "end before they begin");
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
         eight, "overlap");
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight, "unused bytes");
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight, "4 trailing bytes");
  expect(R"({"a":{"dtype":"F32","shape":[2]}})", eight, "lacks");
  expect(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight, "unknown field");
  expect(R"({"__metadata__":{"k":1}})", {}, "expected a string");
  expect(R"([1,2])", {}, "does not start with '{'");
  expect(R"({"a":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", {0, 1, 2, 0, 0, 0, 0, 0}, "only 0 and 1");

  write_bytes(path, {1, 2, 3});
  CHECK(contains(error_of([&] { load_safetensors(path); }), "too short"));
  write_bytes(path, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'});
  CHECK(contains(error_of([&] { load_safetensors(path); }), "exceeds"));
  std::string missing = dir + "/missing.safetensors";
  std::string msg = error_of([&] { load_safetensors(missing); });
  CHECK(contains(msg, missing));
  CHECK(contains(msg, "cannot open"));
}

TEST_CASE("safetensors refuses truncated files and flipped header bytes") {
  std::string dir = scratch_dir("st_damage");
  std::string good = dir + "/good.safetensors";
  auto tensors = every_dtype();
  save_safetensors(good, tensors, {{"step", "12"}});
  const auto bytes = read_bytes(good);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];

  std::string path = dir + "/bad.safetensors";
  for (size_t keep : {size_t(0), size_t(5), size_t(8), size_t(8 + n / 2), size_t(8 + n), size_t(8 + n + 7),
                      bytes.size() - 1}) {
    CAPTURE(keep);
    write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(keep)));
    std::string msg = error_of([&] { load_safetensors(path); });
    CHECK_MESSAGE(contains(msg, path), msg);
  }
  auto longer = bytes;
  longer.push_back(0);
  write_bytes(path, longer);
  CHECK(contains(error_of([&] { load_safetensors(path); }), "trailing bytes"));

  // Every single-byte corruption of the length or header is refused, or (where it only renames
  // a tensor or edits metadata text) yields the same tensor contents.
  int refused = 0, harmless = 0;
  for (size_t at = 0; at < 8 + n; ++at) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0x24)}) {
      auto bad = bytes;
      bad[at] ^= mask;
      write_bytes(path, bad);
      SafetensorsContents got;
      std::string msg = error_of([&] { got = load_safetensors(path); });
      if (!msg.empty()) {
        CHECK_MESSAGE(contains(msg, path), msg);
        ++refused;
        continue;
      }
      ++harmless;
      REQUIRE(got.tensors.size() == tensors.size());
      for (const auto& [name, t] : tensors) {
        // Renames may reorder keys; match by content against the original set.
        bool found = false;
        // (an empty tensor's shape can change undetectably: [0, 3] -> [0, 2] holds the same 0 bytes)
        for (const auto& [n2, t2] : got.tensors)
          found = found || identical(t2, t) || (t.numel() == 0 && t2.numel() == 0 && t2.dtype() == t.dtype());
        CHECK_MESSAGE(found, "byte ", at, " mask ", int(mask), " changed tensor ", name);
      }
    }
  }
  CHECK(refused > harmless);
  MESSAGE("header corruptions: ", refused, " refused, ", harmless, " harmless (names or metadata text)");
}

TEST_CASE("a failed save leaves the existing file untouched and no temporary behind") {
  std::string dir = scratch_dir("st_atomic");
  std::string path = dir + "/w.safetensors";
  save_safetensors(path, {{"x", ones({4})}});
  const auto before = read_bytes(path);

  // Into a directory that does not exist.
  std::string nowhere = dir + "/no/such/dir/w.safetensors";
  std::string msg = error_of([&] { save_safetensors(nowhere, {{"x", ones({4})}}); });
  CHECK(contains(msg, nowhere));
  CHECK(contains(msg, "No such file or directory"));

  // Over the existing file, with the temporary file's name taken by a directory.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::filesystem::create_directories(tmp);
  msg = error_of([&] { save_safetensors(path, {{"x", zeros({9})}}); });
  CHECK(contains(msg, path));
  std::filesystem::remove(tmp);
  CHECK(read_bytes(path) == before);

  // Invalid input is refused before anything is written.
  CHECK(contains(error_of([&] { save_safetensors(path, {{"x", Tensor()}}); }), "undefined"));
  CHECK(contains(error_of([&] { save_safetensors(path, {{"__metadata__", ones({1})}}); }), "reserved"));
  CHECK(contains(error_of([&] { save_safetensors(path, {{"", ones({1})}}); }), "empty name"));
  CHECK(contains(error_of([&] { save_safetensors(path, {{"\xff", ones({1})}}); }), "UTF-8"));
  CHECK(read_bytes(path) == before);
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) (void)e, ++files;
  CHECK(files == 1);

  // A successful save replaces the file.
  save_safetensors(path, {{"x", zeros({9})}});
  CHECK(load_safetensors(path).tensors.at("x").numel() == 9);
}

TEST_CASE("a flipped bit in any tensor's data is refused naming the tensor; files without checksums still load") {
  std::string dir = scratch_dir("st_checksum");
  std::string good = dir + "/good.safetensors", path = dir + "/bad.safetensors";
  auto tensors = every_dtype();
  save_safetensors(good, tensors, {{"step", "3"}});
  const auto bytes = read_bytes(good);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  const uint64_t data_start = 8 + n;

  // The checksums are in the header (for any reader to see) but not in the metadata returned.
  std::string header(bytes.begin() + 8, bytes.begin() + static_cast<long>(data_start));
  CHECK(contains(header, "\"kiln.checksum.f32\":\"xxh3_64:"));
  CHECK(load_safetensors(good).metadata == std::map<std::string, std::string>{{"step", "3"}});

  // Flip one bit of every data byte in turn: each is refused, naming the tensor that holds it.
  auto parsed = nlohmann::json::parse(header);
  int refused = 0;
  for (uint64_t at = data_start; at < bytes.size(); ++at) {
    std::string owner;
    for (const auto& [name, v] : parsed.items())
      if (name != "__metadata__" && at - data_start >= v["data_offsets"][0].get<uint64_t>() &&
          at - data_start < v["data_offsets"][1].get<uint64_t>())
        owner = name;
    REQUIRE(!owner.empty());
    auto bad = bytes;
    bad[at] ^= 0x10;
    write_bytes(path, bad);
    std::string msg = error_of([&] { load_safetensors(path); });
    CHECK_MESSAGE(contains(msg, path), msg);
    CHECK_MESSAGE(contains(msg, "tensor \"" + owner + "\" fails its checksum"), msg);
    refused += !msg.empty();
  }
  CHECK(refused == static_cast<int>(bytes.size() - data_start));

  // A file written by another tool (no checksums) loads unchecked, as before.
  std::vector<uint8_t> data = {0, 0, 128, 63, 0, 0, 0, 64};  // f32 1.0, 2.0
  write_bytes(path, file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  CHECK(load_safetensors(path).tensors.at("w").to_vector<float>() == std::vector<float>{1.0f, 2.0f});

  // A checksum without its tensor, or a tensor missing its checksum among checksummed ones.
  write_bytes(path, file_bytes(R"({"__metadata__":{"kiln.checksum.v":"xxh3_64:0000000000000000"},)"
                               R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                               data));
  CHECK(contains(error_of([&] { load_safetensors(path); }), "checksum for tensor \"v\""));
  save_safetensors(path, {{"w", tensor({1.0f, 2.0f})}});
  auto two = read_bytes(path);
  std::string h2(two.begin() + 8, two.end() - 8);
  auto doc = nlohmann::ordered_json::parse(h2);
  doc["x"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 8}}};
  write_bytes(path, file_bytes(doc.dump(), std::vector<uint8_t>(two.end() - 8, two.end())));
  CHECK(contains(error_of([&] { load_safetensors(path); }), "tensor \"x\" has no checksum"));

  // Users cannot write the reserved keys themselves.
  CHECK(contains(error_of([&] { save_safetensors(path, {{"w", ones({1})}}, {{"kiln.checksum.w", "x"}}); }),
                 "reserved for checksums"));
}
