// Fuzzes the TcpStore server's request handling (hello, framing, every op, parked GET/WAIT)
// without sockets, through replay_tcp_store_server. The input is one or more clients' byte
// streams separated by kSplit. Contract under test: whatever clients send, the server neither
// crashes nor leaks an exception, and everything it sends back is well formed: its hello, then
// frames of 1..kMaxFrame bytes that each open with a known status.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "distributed/store/tcp_store_protocol.h"
#include "distributed/store/tcp_store_server.h"

namespace {

namespace wire = kiln::dist::wire;

constexpr std::string_view kSplit = "|next|";
constexpr size_t kMaxClients = 8;

std::vector<std::vector<uint8_t>> split(const uint8_t* data, size_t size) {
  std::vector<std::vector<uint8_t>> out(1);
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  size_t at = 0;
  for (size_t hit; out.size() < kMaxClients && (hit = s.find(kSplit, at)) != std::string_view::npos;) {
    out.back().assign(data + at, data + hit);
    out.emplace_back();
    at = hit + kSplit.size();
  }
  out.back().assign(data + at, data + size);
  return out;
}

void check_replies(const std::vector<uint8_t>& r) {
  if (r.empty()) return;
  const std::vector<uint8_t> hello = wire::hello();
  if (r.size() < hello.size() || !std::equal(hello.begin(), hello.end(), r.begin())) std::abort();
  for (size_t at = hello.size(); at < r.size();) {
    if (r.size() - at < 5) std::abort();
    const uint32_t len = wire::get_u32(&r[at]);
    if (len == 0 || len > wire::kMaxFrame || r.size() - at - 4 < len) std::abort();
    if (r[at + 4] > static_cast<uint8_t>(wire::Status::kError)) std::abort();
    at += 4 + size_t{len};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::vector<uint8_t>> streams = split(data, size);
  const kiln::dist::TcpStoreReplay r = kiln::dist::replay_tcp_store_server(streams);
  if (r.replies.size() != streams.size() || r.closed.size() != streams.size()) std::abort();
  for (size_t i = 0; i < streams.size(); ++i) {
    check_replies(r.replies[i]);
    // A client that sent the full, correct hello always gets the server's hello back.
    const std::vector<uint8_t> hello = wire::hello();
    if (streams[i].size() >= hello.size() && std::equal(hello.begin(), hello.end(), streams[i].begin()) &&
        r.replies[i].size() < hello.size())
      std::abort();
  }
  return 0;
}
