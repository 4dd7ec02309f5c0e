#include "distributed/store/rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>
#include <cstdlib>
#include <optional>

#include "core/error.h"
#include "distributed/store/errors.h"
#include "distributed/store/file_store.h"
#include "distributed/store/socket_util.h"
#include "distributed/store/tcp_store.h"

namespace kiln::dist {
namespace {

constexpr const char* kJoinedKey = "rendezvous/joined";
constexpr const char* kCompleteKey = "rendezvous/complete";

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

// `text` as an int, or an error naming where it came from (`what`).
int parse_int(const std::string& ctx, const std::string& what, const std::string& text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail("{}: {}=\"{}\" is not an integer", ctx, what, text);
  return v;
}

// An integer setting: the argument when >= 0, else the environment variable.
int setting(const std::string& ctx, int arg, const char* var, const char* arg_name) {
  if (arg >= 0) return arg;
  std::optional<std::string> v = env(var);
  if (!v) fail("{}: {} is not set (set it in the environment or pass {})", ctx, var, arg_name);
  return parse_int(ctx, var, *v);
}

struct Ranks {
  int rank, world_size, local_rank, local_world_size;
};

Ranks read_ranks(const std::string& ctx, int rank_arg, int world_size_arg) {
  Ranks r{};
  r.world_size = setting(ctx, world_size_arg, "WORLD_SIZE", "world_size");
  const char* ws_name = world_size_arg >= 0 ? "world_size" : "WORLD_SIZE";
  if (r.world_size < 1) fail("{}: {}={} must be at least 1", ctx, ws_name, r.world_size);
  r.rank = setting(ctx, rank_arg, "RANK", "rank");
  const char* rank_name = rank_arg >= 0 ? "rank" : "RANK";
  if (r.rank < 0 || r.rank >= r.world_size)
    fail("{}: {}={} is out of range for {}={}", ctx, rank_name, r.rank, ws_name, r.world_size);
  std::optional<std::string> lws = env("LOCAL_WORLD_SIZE"), lr = env("LOCAL_RANK");
  r.local_world_size = lws ? parse_int(ctx, "LOCAL_WORLD_SIZE", *lws) : r.world_size;
  if (r.local_world_size < 1 || r.local_world_size > r.world_size)
    fail("{}: LOCAL_WORLD_SIZE={} is out of range 1..{} ({}={})", ctx, r.local_world_size, r.world_size, ws_name,
         r.world_size);
  r.local_rank = lr ? parse_int(ctx, "LOCAL_RANK", *lr) : r.rank;
  if (r.local_rank < 0 || r.local_rank >= r.local_world_size)
    fail("{}: LOCAL_RANK={} is out of range for LOCAL_WORLD_SIZE={}", ctx, r.local_rank, r.local_world_size);
  return r;
}

int parse_port(const std::string& ctx, const std::string& what, const std::string& text) {
  int port = parse_int(ctx, what, text);
  if (port < 1 || port > 65535) fail("{}: {}={} is out of range 1..65535", ctx, what, port);
  return port;
}

// "host:port" or "[v6]:port" → (host, port).
std::pair<std::string, int> split_host_port(const std::string& ctx, const std::string& hp) {
  std::string host, port;
  if (!hp.empty() && hp[0] == '[') {
    size_t close = hp.find(']');
    if (close == std::string::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
      fail("{}: \"{}\" is not HOST:PORT", ctx, hp);
    host = hp.substr(1, close - 1);
    port = hp.substr(close + 2);
  } else {
    size_t colon = hp.rfind(':');
    if (colon == std::string::npos) fail("{}: \"{}\" is not HOST:PORT (the port is missing)", ctx, hp);
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  if (host.empty()) fail("{}: \"{}\" is not HOST:PORT (the host is empty)", ctx, hp);
  return {host, parse_port(ctx, "port", port)};
}

// Every rank counts itself in; the last to arrive opens the gate the others wait at.
void join_barrier(Store& store, const std::string& ctx, const Ranks& r, Millis timeout, const std::string& where) {
  const int64_t n = store.add(kJoinedKey, 1);
  if (n > r.world_size)
    fail("{}: {} ranks joined a job of WORLD_SIZE={} ({}): are two jobs sharing it, or a rank started twice?", ctx,
         n, r.world_size, where);
  if (n == r.world_size) store.set(kCompleteKey, std::string("1"));
  try {
    store.wait({kCompleteKey}, timeout);
  } catch (const Error& e) {
    int64_t joined = -1;
    try {
      joined = store.add(kJoinedKey, 0);  // reads the count without blocking
    } catch (const Error&) {
    }
    rethrow_as(e, fmt::format("{}: only {} of {} ranks joined within {} ms (this is rank {}; {}): {}", ctx,
                              joined < 0 ? std::string("?") : std::to_string(joined), r.world_size, timeout.count(),
                              r.rank, where, e.what()));
  }
}

}  // namespace

Rendezvous rendezvous(const std::string& init_method, int rank, int world_size, Millis timeout) {
  const std::string ctx = fmt::format("rendezvous(\"{}\")", init_method);
  Rendezvous out;
  std::string where;
  Ranks r{};
  if (init_method == "env://" || init_method.rfind("tcp://", 0) == 0) {
    std::string host;
    int port = 0;
    if (init_method == "env://") {
      std::optional<std::string> addr = env("MASTER_ADDR"), p = env("MASTER_PORT");
      if (!addr || addr->empty()) fail("{}: MASTER_ADDR is not set (the host that runs rank 0)", ctx);
      if (!p) fail("{}: MASTER_PORT is not set (a free port on MASTER_ADDR for the store)", ctx);
      host = *addr;
      port = parse_port(ctx, "MASTER_PORT", *p);
    } else {
      std::tie(host, port) = split_host_port(ctx, init_method.substr(6));
    }
    r = read_ranks(ctx, rank, world_size);
    where = fmt::format("TcpStore at {}", format_address(host, port));
    try {
      out.store = std::make_shared<TcpStore>(host, port, r.world_size, /*is_server=*/r.rank == 0, timeout);
    } catch (const Error& e) {
      rethrow_as(e, fmt::format("{} as rank {}: {}", ctx, r.rank, e.what()));
    }
  } else if (init_method.rfind("file://", 0) == 0) {
    const std::string path = init_method.substr(7);
    if (path.empty() || path[0] != '/') fail("{}: the path \"{}\" must be absolute (file:///PATH)", ctx, path);
    r = read_ranks(ctx, rank, world_size);
    where = fmt::format("FileStore \"{}\"", path);
    out.store = std::make_shared<FileStore>(path, r.world_size, timeout);
  } else {
    fail("{}: unknown init method; expected \"env://\", \"tcp://HOST:PORT\" or \"file:///PATH\"", ctx);
  }
  join_barrier(*out.store, ctx, r, timeout, where);
  out.rank = r.rank;
  out.world_size = r.world_size;
  out.local_rank = r.local_rank;
  out.local_world_size = r.local_world_size;
  return out;
}

int free_tcp_port() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail("free_tcp_port: socket() failed: {}", errno_text(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    fail("free_tcp_port: bind to 127.0.0.1:0 failed: {}", errno_text(errno));
  return local_port(fd.get());
}

}  // namespace kiln::dist
