// IDX reading streams through one source (plain file or gzip inflate), so the file is never held
// twice in memory and a gzip stream is checked to its end (CRC, trailing bytes).
#include "data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/stat.h>

#include "core/ops.h"

namespace kiln::data {
namespace {

[[noreturn]] void idx_fail(const std::string& path, const std::string& what) {
  fail("read_idx: '{}': {}", path, what);
}

/// Bytes of one stream: `read` returns fewer than asked only at the end of the stream.
class Source {
 public:
  virtual ~Source() = default;
  virtual size_t read(uint8_t* dst, size_t n) = 0;
};

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

size_t read_file(FILE* f, uint8_t* dst, size_t n, const std::string& path) {
  size_t got = std::fread(dst, 1, n, f);
  if (got < n && std::ferror(f)) idx_fail(path, fmt::format("read error: {}", std::strerror(errno)));
  return got;
}

class PlainSource : public Source {
 public:
  PlainSource(FILE* f, const std::string& path) : f_(f), path_(path) {}
  size_t read(uint8_t* dst, size_t n) override { return read_file(f_, dst, n, path_); }

 private:
  FILE* f_;
  const std::string& path_;
};

/// Inflates one or more concatenated gzip members; anything after the last member that is not
/// another member is an error, as is a stream that ends before its trailer.
class GzipSource : public Source {
 public:
  GzipSource(FILE* f, const std::string& path) : f_(f), path_(path), in_(1 << 16) {
    std::memset(&zs_, 0, sizeof(zs_));
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) idx_fail(path_, "cannot initialise zlib");
  }
  ~GzipSource() override { inflateEnd(&zs_); }

  size_t read(uint8_t* dst, size_t n) override {
    size_t produced = 0;
    while (produced < n && !ended_) {
      if (member_done_) {
        // The stream may end here, or another member may follow (it starts with the magic).
        refill(2);
        if (zs_.avail_in == 0) { ended_ = true; break; }
        if (zs_.avail_in < 2 || zs_.next_in[0] != 0x1f || zs_.next_in[1] != 0x8b)
          idx_fail(path_, "trailing bytes after the end of the gzip stream");
        inflateReset(&zs_);
        member_done_ = false;
      }
      if (zs_.avail_in == 0) refill(1);
      zs_.next_out = dst + produced;
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - produced, 1u << 30));
      uInt before = zs_.avail_out;
      int ret = inflate(&zs_, Z_NO_FLUSH);
      produced += before - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        member_done_ = true;
      } else if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
        idx_fail(path_, fmt::format("corrupt gzip data ({})", zs_.msg ? zs_.msg : "invalid stream"));
      } else if (ret == Z_MEM_ERROR) {
        idx_fail(path_, "out of memory while inflating");
      } else if (ret == Z_BUF_ERROR && zs_.avail_in == 0 && eof_) {
        // No progress possible and no input left: the member never reached its trailer.
        idx_fail(path_, "gzip stream is truncated (the file ends inside compressed data)");
      }
    }
    return produced;
  }

 private:
  /// Makes at least `want` bytes available (keeping unread ones); false when the file ends first.
  bool refill(size_t want) {
    if (zs_.avail_in >= want) return true;
    size_t keep = zs_.avail_in;
    if (keep) std::memmove(in_.data(), zs_.next_in, keep);
    size_t got = eof_ ? 0 : read_file(f_, in_.data() + keep, in_.size() - keep, path_);
    if (got == 0) eof_ = true;
    zs_.next_in = in_.data();
    zs_.avail_in = static_cast<uInt>(keep + got);
    return zs_.avail_in >= want;
  }

  FILE* f_;
  const std::string& path_;
  std::vector<uint8_t> in_;
  z_stream zs_;
  bool eof_ = false, member_done_ = false, ended_ = false;
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

bool known_type(uint8_t t) {
  return t == 0x08 || t == 0x09 || t == 0x0B || t == 0x0C || t == 0x0D || t == 0x0E;
}

}  // namespace

const char* idx_type_name(IdxType t) {
  switch (t) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  return "?";
}

size_t idx_type_size(IdxType t) {
  switch (t) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  return 0;
}

IdxArray read_idx_raw(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) idx_fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (fstat(fileno(file.get()), &st) == 0 && S_ISDIR(st.st_mode)) idx_fail(path, "is a directory, not a file");

  uint8_t magic[4] = {0, 0, 0, 0};
  size_t got = read_file(file.get(), magic, 2, path);
  bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::rewind(file.get());
  std::unique_ptr<Source> src;
  if (gzip) src = std::make_unique<GzipSource>(file.get(), path);
  else src = std::make_unique<PlainSource>(file.get(), path);
  const char* kind = gzip ? " (gzip-compressed)" : "";

  got = src->read(magic, 4);
  if (got < 4) idx_fail(path, fmt::format("too short for an IDX header: {} bytes{}", got, kind));
  if (magic[0] != 0 || magic[1] != 0)
    idx_fail(path, fmt::format("bad magic {:02x} {:02x} {:02x} {:02x}{} (an IDX file starts with 00 00 <type> <ndim>)",
                               magic[0], magic[1], magic[2], magic[3], kind));
  if (!known_type(magic[2]))
    idx_fail(path, fmt::format("unknown element type 0x{:02x} (IDX types: 08 u8, 09 i8, 0b i16, 0c i32, 0d f32, "
                               "0e f64)", magic[2]));
  IdxArray out;
  out.type = static_cast<IdxType>(magic[2]);
  int ndim = magic[3];
  if (ndim == 0) idx_fail(path, "has 0 dims");

  std::vector<uint8_t> dim_bytes(4 * static_cast<size_t>(ndim));
  got = src->read(dim_bytes.data(), dim_bytes.size());
  if (got < dim_bytes.size())
    idx_fail(path, fmt::format("truncated header: {} dims need {} bytes, found {}", ndim, dim_bytes.size(), got));
  uint64_t numel = 1, span = 1;  // span: the product of the non-zero dims (what strides reach)
  for (int d = 0; d < ndim; ++d) {
    uint32_t v = be32(&dim_bytes[4 * d]);
    out.dims.push_back(v);
    if (v != 0 && span > (uint64_t(1) << 40) / v)
      idx_fail(path, fmt::format("dims {} are implausibly large", out.dims));
    numel *= v;
    span *= std::max<uint64_t>(v, 1);
  }
  const size_t esize = idx_type_size(out.type);
  const uint64_t nbytes = numel * esize;

  const uint64_t header = 4 + dim_bytes.size();
  if (!gzip && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < header + nbytes)
    idx_fail(path, fmt::format("truncated: dims {} of {} need {} bytes of data, the file holds {}", out.dims,
                               idx_type_name(out.type), nbytes, static_cast<uint64_t>(st.st_size) - header));

  // Grow while reading so a corrupt gzip header cannot make us allocate its claim up front.
  constexpr size_t kChunk = size_t(1) << 24;
  out.bytes.reserve(static_cast<size_t>(gzip ? std::min<uint64_t>(nbytes, 4 * kChunk) : nbytes));
  size_t have = 0;
  while (have < nbytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, nbytes - have));
    out.bytes.resize(have + want);
    size_t n = src->read(out.bytes.data() + have, want);
    have += n;
    if (n < want)
      idx_fail(path, fmt::format("truncated: dims {} of {} need {} bytes of data, found {}{}", out.dims,
                                 idx_type_name(out.type), nbytes, have, kind));
  }
  uint8_t extra;
  if (src->read(&extra, 1) != 0) {
    std::string more = !gzip && S_ISREG(st.st_mode)
                           ? fmt::format("{} trailing bytes", static_cast<uint64_t>(st.st_size) - header - nbytes)
                           : std::string("trailing data");
    idx_fail(path, fmt::format("{} after the {} bytes of data that dims {} of {} call for{}", more, nbytes,
                               out.dims, idx_type_name(out.type), kind));
  }
  return out;
}

Tensor read_idx(const std::string& path) {
  IdxArray a = read_idx_raw(path);
  const uint8_t* p = a.bytes.data();
  const int64_t n = a.numel();
  auto fill = [&](DType dt, auto&& convert) {
    Tensor t = make_tensor(a.dims, dt, kCPU);
    using T = std::decay_t<decltype(convert(p))>;
    T* dst = t.data_ptr<T>();
    const size_t es = idx_type_size(a.type);
    for (int64_t i = 0; i < n; ++i) dst[i] = convert(p + i * es);
    return t;
  };
  switch (a.type) {
    case IdxType::u8: return fill(kInt32, [](const uint8_t* q) { return int32_t(q[0]); });
    case IdxType::i8: return fill(kInt32, [](const uint8_t* q) { return int32_t(int8_t(q[0])); });
    case IdxType::i16:
      return fill(kInt32, [](const uint8_t* q) { return int32_t(int16_t(uint16_t((q[0] << 8) | q[1]))); });
    case IdxType::i32: return fill(kInt32, [](const uint8_t* q) { return int32_t(be32(q)); });
    case IdxType::f32:
      return fill(kFloat32, [](const uint8_t* q) {
        uint32_t u = be32(q);
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      });
    case IdxType::f64:
      return fill(kFloat64, [](const uint8_t* q) {
        uint64_t u = (uint64_t(be32(q)) << 32) | be32(q + 4);
        double f;
        std::memcpy(&f, &u, 8);
        return f;
      });
  }
  fail("read_idx: '{}': unhandled element type", path);
}

}  // namespace kiln::data
