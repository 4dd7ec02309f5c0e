#include "profiler/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace kiln::profiler {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// Protobuf wire format: the handful of encodings Event and Summary need.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }
template <class T> void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host (x86-64), as the wire format
  out.append(b, sizeof(T));
}
void bytes_field(std::string& out, int field, std::string_view v) {
  key(out, field, 2);
  varint(out, v.size());
  out.append(v);
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event(int64_t step, std::string_view file_version, std::string_view summary) {
  std::string e;
  key(e, 1, 1);
  fixed<double>(e, wall_time());
  if (step != 0) {
    key(e, 2, 0);
    varint(e, static_cast<uint64_t>(step));
  }
  if (!file_version.empty()) bytes_field(e, 3, file_version);
  if (!summary.empty()) bytes_field(e, 5, summary);
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

SummaryWriter::SummaryWriter(const std::string& logdir) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  KILN_CHECK(!ec, "SummaryWriter: cannot create the log directory {}: {}", logdir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", logdir, static_cast<int64_t>(wall_time()), host, ::getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  KILN_CHECK(file_ != nullptr, "SummaryWriter: cannot create {}: {}", path_, std::strerror(errno));
  write_record(event(0, "brain.Event:2", {}));
  flush();
}

SummaryWriter::~SummaryWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void SummaryWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string v;
  bytes_field(v, 1, tag);
  key(v, 2, 5);
  fixed<float>(v, static_cast<float>(value));
  std::string summary;
  bytes_field(summary, 1, v);
  write_record(event(step, {}, summary));
  flush();
}

void SummaryWriter::write_record(const std::string& data) {
  std::string rec;
  uint64_t len = data.size();
  fixed<uint64_t>(rec, len);
  fixed<uint32_t>(rec, masked_crc32c(&len, sizeof(len)));
  rec += data;
  fixed<uint32_t>(rec, masked_crc32c(data.data(), data.size()));
  KILN_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size(), "SummaryWriter: writing {} failed: {}", path_,
             std::strerror(errno));
}

void SummaryWriter::flush() {
  KILN_CHECK(std::fflush(file_) == 0, "SummaryWriter: flushing {} failed: {}", path_, std::strerror(errno));
}

}  // namespace kiln::profiler
