// safetensors reading and writing with POSIX I/O: pread into freshly allocated tensors after the
// header has been checked against the file size, and write/fsync/rename for atomic saves.
#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/util/fd.h"
#include "core/ops.h"
#include "nn/checksum.h"

namespace kiln::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; Kiln writes host memory as is");

namespace {

// The reference implementation's bound; a header beyond it is corruption, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{kFloat32, "F32"}, {kFloat64, "F64"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},
                                 {kInt32, "I32"},   {kInt64, "I64"},   {kBool, "BOOL"}};
// Valid safetensors dtypes Kiln cannot represent (named in the error rather than "unknown").
constexpr const char* kForeignDTypes[] = {"U8", "I8", "U16", "I16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                          "F4", "F6_E2M3", "F6_E3M2", "C64"};

using Json = nlohmann::json;

// JSON's nesting bound for a header; real headers nest three deep.
constexpr int kMaxDepth = 64;

std::string errno_str() { return std::strerror(errno); }

/// Reads exactly n bytes at `offset`; false if the file ends first.
bool pread_all(int fd, void* dst, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* src, size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool is_valid_utf8(const std::string& s) {
  try {
    (void)Json(s).dump();  // dump() refuses invalid UTF-8
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

/// `s` as a JSON string literal, for messages (invalid UTF-8 shown as U+FFFD).
std::string quote(const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); }

/// Parses `text` as one strict RFC 8259 JSON value (nlohmann's grammar: no comments, trailing
/// commas or NaN, valid UTF-8 only), and beyond it refuses duplicate object keys (a std::map would
/// keep only the last) and nesting deeper than kMaxDepth. Throws kiln::Error naming the problem.
Json parse_strict(const std::string& text) {
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each open object
  auto limits = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxDepth) fail("nesting deeper than {} levels", kMaxDepth);
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          fail("duplicate key {}", quote(parsed.get<std::string>()));
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, limits, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    fail("{}", e.what());
  }
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  fail("safetensors: dtype {} has no safetensors name", dtype);
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) fail("save_safetensors: '{}': {}", path, what);
  };
  // Header first, from shapes alone: tensors are copied to the host one at a time below. Keys
  // in the reference writer's order: __metadata__, then tensors by name, each dtype, shape,
  // data_offsets.
  // The checksums go in the header, so every tensor is on the host (a no-op for contiguous CPU
  // tensors) before anything is written.
  std::map<std::string, std::string> meta_all = metadata;
  for (const auto& [key, value] : metadata) {
    std::string unused;
    check(!parse_checksum_key(key, unused), fmt::format("metadata key {} is reserved for checksums", quote(key)));
  }
  std::vector<Tensor> host;
  for (const auto& [name, t] : tensors) {
    check(!name.empty(), "a tensor has an empty name");
    check(name != "__metadata__", "\"__metadata__\" is reserved and cannot name a tensor");
    check(is_valid_utf8(name), fmt::format("tensor name {} is not valid UTF-8", quote(name)));
    check(t.defined(), fmt::format("tensor '{}' is undefined", name));
    host.push_back(t.detach().to(kCPU).contiguous());
    meta_all[checksum_key(name)] =
        tensor_checksum(host.back().data_ptr(), static_cast<size_t>(host.back().numel()) * host.back().element_size());
  }
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (!meta_all.empty()) {
    auto& meta = doc["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : meta_all) {
      check(is_valid_utf8(key) && is_valid_utf8(value),
            fmt::format("metadata key {} or its value is not valid UTF-8", quote(key)));
      meta[key] = value;
    }
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    auto& entry = doc[name];
    entry["dtype"] = safetensors_dtype_name(t.dtype());
    entry["shape"] = t.sizes();
    entry["data_offsets"] = {offset, offset + nbytes};
    offset += nbytes;
  }
  std::string header = doc.dump();
  // Pad with spaces (as the reference writer does) so the data starts 8-byte aligned.
  while ((8 + header.size()) % 8 != 0) header += ' ';

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("save_safetensors: '{}': cannot create temporary file '{}': {}", path, tmp, errno_str());
  try {
    auto io = [&](bool ok, const char* step) {
      if (!ok) fail("save_safetensors: '{}': {} failed on '{}': {}", path, step, tmp, errno_str());
    };
    uint8_t len[8];
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    io(write_all(fd.get(), len, 8), "write");
    io(write_all(fd.get(), header.data(), header.size()), "write");
    for (const Tensor& h : host)
      io(write_all(fd.get(), h.data_ptr(), static_cast<size_t>(h.numel()) * h.element_size()), "write");
    io(::fsync(fd.get()) == 0, "fsync");
    io(fd.reset() == 0, "close");
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail("save_safetensors: '{}': cannot rename '{}' over it: {}", path, tmp, errno_str());
  } catch (...) {
    fd.reset();
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; the data is already safe, so failure here is not fatal.
  std::string dir = std::filesystem::path(path).parent_path().string();
  Fd dfd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() >= 0) (void)::fsync(dfd.get());
}

SafetensorsContents load_safetensors(const std::string& path) {
  auto bad = [&](const std::string& what) { fail("load_safetensors: '{}': {}", path, what); };
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) bad(fmt::format("cannot open: {}", errno_str()));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) bad(fmt::format("cannot stat: {}", errno_str()));
  if (!S_ISREG(st.st_mode)) bad("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) bad(fmt::format("the file is {} bytes, too short for the 8-byte header length (truncated?)", size));

  uint8_t len[8];
  if (!pread_all(fd.get(), len, 8, 0)) bad("cannot read the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > size - 8)
    bad(fmt::format("header length {} exceeds the {} bytes that follow it (truncated, or not a safetensors file)", n,
                    size - 8));
  if (n > kMaxHeaderBytes) bad(fmt::format("header length {} is over the {} byte limit", n, kMaxHeaderBytes));
  if (n < 2) bad(fmt::format("header length {} is too small for a JSON object", n));
  std::string text(n, '\0');
  if (!pread_all(fd.get(), text.data(), n, 8)) bad("cannot read the header");
  if (text[0] != '{') bad("the header does not start with '{' (not a safetensors file?)");

  Json header;
  try {
    header = parse_strict(text);
  } catch (const Error& e) {
    bad(fmt::format("the header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) bad(fmt::format("the header is a JSON {}, expected an object", header.type_name()));

  SafetensorsContents out;
  std::vector<Entry> entries;
  std::map<std::string, std::string> checksums;  // tensor -> "xxh3_64:..." (Kiln-written files)
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) bad(fmt::format("__metadata__ is a JSON {}, expected an object", v.type_name()));
      for (const auto& [key, value] : v.items()) {
        if (!value.is_string())
          bad(fmt::format("__metadata__ value of {} is a JSON {}, expected a string", quote(key), value.type_name()));
        std::string tensor;
        if (parse_checksum_key(key, tensor)) checksums[tensor] = value.get<std::string>();
        else out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string who = "tensor " + quote(name);
    if (!v.is_object()) bad(fmt::format("{} is a JSON {}, expected an object", who, v.type_name()));
    for (const auto& [field, unused] : v.items())
      if (field != "dtype" && field != "shape" && field != "data_offsets")
        bad(fmt::format("{} has an unknown field {}", who, quote(field)));
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad(fmt::format("{} lacks one of dtype, shape, data_offsets", who));
    const Json& dtype = v.at("dtype");
    const Json& shape = v.at("shape");
    const Json& offsets = v.at("data_offsets");

    Entry e{name, kFloat32, {}, 0, 0};
    if (!dtype.is_string()) bad(fmt::format("{} has a non-string dtype", who));
    const std::string dtype_text = dtype.get<std::string>();
    bool known = false;
    for (const DTypeName& d : kDTypes)
      if (dtype_text == d.name) {
        e.dtype = d.dtype;
        known = true;
      }
    if (!known) {
      for (const char* foreign : kForeignDTypes)
        if (dtype_text == foreign)
          bad(fmt::format("{} has dtype {}, which Kiln does not support (F32 F64 F16 BF16 I32 I64 BOOL)", who,
                          dtype_text));
      bad(fmt::format("{} has unknown dtype {}", who, quote(dtype_text)));
    }

    if (!shape.is_array()) bad(fmt::format("{} has a shape that is not an array", who));
    unsigned __int128 numel = 1;
    for (const Json& d : shape) {
      // Only a plain non-negative integer literal parses as number_unsigned (not -0, 2.0, 1e3).
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        bad(fmt::format("{} has an invalid shape entry (non-negative integers only)", who));
      const uint64_t dim = d.get<uint64_t>();
      e.shape.push_back(static_cast<int64_t>(dim));
      numel *= dim;
      if (numel > (static_cast<unsigned __int128>(1) << 62)) bad(fmt::format("{} has an impossibly large shape", who));
    }

    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      bad(fmt::format("{} has invalid data_offsets (expected [begin, end])", who));
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (end < begin) bad(fmt::format("{} has data_offsets [{}, {}] that end before they begin", who, begin, end));
    const unsigned __int128 nbytes = numel * element_size(e.dtype);
    if (nbytes != end - begin)
      bad(fmt::format("{} has shape {} of {} ({} bytes) but data_offsets [{}, {}] span {} bytes", who, e.shape,
                      dtype_text, static_cast<uint64_t>(nbytes), begin, end, end - begin));
    e.begin = begin;
    e.end = end;
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data section: in bounds, no overlap, no gap, nothing after.
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->end > data_size)
      bad(fmt::format("tensor {} has data_offsets [{}, {}] past the end of the {}-byte data section (truncated?)",
                      quote(e->name), e->begin, e->end, data_size));
    if (e->begin < expected) bad(fmt::format("tensors {} and {} overlap", quote(prev->name), quote(e->name)));
    if (e->begin > expected)
      bad(fmt::format("{} unused bytes before tensor {} (data_offsets must be contiguous)", e->begin - expected,
                      quote(e->name)));
    expected = e->end;
    prev = e;
  }
  if (expected != data_size)
    bad(fmt::format("{} trailing bytes after the last tensor's data", data_size - expected));
  // Files from other tools carry no checksums and load as they are; Kiln's cover every tensor.
  for (const auto& named_sum : checksums) {
    const std::string& tensor = named_sum.first;  // not a structured binding: clang 14 cannot capture those
    if (std::none_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == tensor; }))
      bad(fmt::format("__metadata__ holds a checksum for tensor {}, which the file does not contain", quote(tensor)));
  }
  if (!checksums.empty())
    for (const Entry& e : entries)
      if (!checksums.count(e.name))
        bad(fmt::format("tensor {} has no checksum while the file's other tensors do", quote(e.name)));

  for (const Entry& e : entries) {
    Tensor t = make_tensor(e.shape, e.dtype, kCPU);
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    if (nbytes && !pread_all(fd.get(), t.data_ptr(), nbytes, data_start + e.begin))
      bad(fmt::format("cannot read the data of tensor {} (the file changed while reading?)", quote(e.name)));
    if (auto it = checksums.find(e.name); it != checksums.end()) {
      const std::string got = tensor_checksum(t.data_ptr(), nbytes);
      if (got != it->second)
        bad(fmt::format("tensor {} fails its checksum: the header records {}, its {} bytes hash to {} (the data is "
                        "corrupt)",
                        quote(e.name), quote(it->second), nbytes, got));
    }
    if (e.dtype == kBool) {
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < nbytes; ++i)
        if (p[i] > 1) bad(fmt::format("BOOL tensor {} holds byte {} (only 0 and 1 are booleans)", quote(e.name), p[i]));
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace kiln::nn
