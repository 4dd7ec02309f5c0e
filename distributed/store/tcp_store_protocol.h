// The TcpStore wire format, shared by client and server. A connection opens with an 8-byte
// hello each way ("KILN" + little-endian u32 version). Then every request and reply is a frame:
// u32 body length (at most kMaxFrame) + body. Integers are little-endian; strings and byte
// strings are u32 length + bytes.
//   request body: u8 op, then per op
//     SET key value | GET key u64 timeout_ms | ADD key i64 delta | CHECK u32 n keys...
//     WAIT u32 n keys... u64 timeout_ms | DELETE key
//   reply body: u8 status, then
//     OK: SET -, GET value, ADD i64 sum, CHECK u8, WAIT -, DELETE u8 existed
//     TIMEOUT: u32 n missing keys... | ERROR: message
// GET and WAIT carry their timeout so the server answers TIMEOUT itself: a client that gave up
// on its own would leave a late reply in the stream and read it as the answer to its next call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::dist::wire {

inline constexpr uint8_t kMagic[4] = {'K', 'I', 'L', 'N'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHelloSize = 8;
/// Larger frames are refused (the connection is closed) rather than allocated.
inline constexpr uint32_t kMaxFrame = 64u << 20;

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kWait = 5, kDelete = 6 };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kCheck: return "CHECK";
    case Op::kWait: return "WAIT";
    case Op::kDelete: return "DELETE";
  }
  return "?";
}

/// Thrown by Reader on a body that does not parse: the peer is not speaking this protocol.
struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}

inline std::vector<uint8_t> hello() {
  std::vector<uint8_t> h(kMagic, kMagic + 4);
  h.resize(kHelloSize);
  put_u32(h.data() + 4, kVersion);
  return h;
}

/// Builds one frame; the length prefix is filled in by finish().
class Writer {
 public:
  Writer() : buf_(4, 0) {}
  Writer& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    size_t at = buf_.size();
    buf_.resize(at + 4);
    put_u32(buf_.data() + at, v);
    return *this;
  }
  Writer& u64(uint64_t v) {
    u32(static_cast<uint32_t>(v));
    return u32(static_cast<uint32_t>(v >> 32));
  }
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& bytes(const void* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    return *this;
  }
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& strs(const std::vector<std::string>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
    return *this;
  }
  size_t body_size() const { return buf_.size() - 4; }
  std::vector<uint8_t> finish() {
    put_u32(buf_.data(), static_cast<uint32_t>(body_size()));
    return std::move(buf_);
  }

 private:
  std::vector<uint8_t> buf_;
};

/// Reads a frame body; every read checks the bounds.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  uint8_t u8() {
    need(1);
    return *p_++;
  }
  uint32_t u32() {
    need(4);
    uint32_t v = get_u32(p_);
    p_ += 4;
    return v;
  }
  uint64_t u64() {
    uint64_t lo = u32();
    return lo | (uint64_t{u32()} << 32);
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::vector<uint8_t> bytes() {
    uint32_t n = u32();
    need(n);
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  std::string str() {
    uint32_t n = u32();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<std::string> strs() {
    uint32_t n = u32();
    // Each string needs at least its 4-byte length: refuses absurd counts before reserving.
    if (n > remaining() / 4) throw Malformed("string count exceeds the frame");
    std::vector<std::string> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  /// Trailing bytes mean the two sides disagree about the format.
  void expect_end() const {
    if (p_ != end_) throw Malformed("trailing bytes after the message");
  }

 private:
  void need(size_t n) const {
    if (remaining() < n) throw Malformed("message shorter than its fields");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace kiln::dist::wire
