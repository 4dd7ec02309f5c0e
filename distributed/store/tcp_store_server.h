// The TcpStore's server: one background thread running a poll() loop over non-blocking sockets,
// holding the key-value map. GET/WAIT on a missing key are parked and answered when the key
// appears or their timeout passes. A connection that breaks the protocol (wrong hello,
// oversized or malformed frame, unknown op, hang-up mid-message) is closed on its own; the
// server keeps serving everyone else.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::dist {

/// The server's request handling with no socket and no thread, for fuzzing the wire protocol:
/// `replay_tcp_store_server(streams)` treats each stream as everything one client sent, buffered
/// before the server looks, and runs the serving loop's steps on them (hello, frames, parked
/// GET/WAIT answered when their keys appear, and at the end every still-parked request timed
/// out) until nothing changes.
struct TcpStoreReplay {
  /// What the server sent on each connection, in order.
  std::vector<std::vector<uint8_t>> replies;
  /// Whether it closed that connection (a protocol violation).
  std::vector<bool> closed;
};
TcpStoreReplay replay_tcp_store_server(const std::vector<std::vector<uint8_t>>& streams);

class TcpStoreServer {
 public:
  /// Listens on `port` on all IPv4 interfaces (0: the kernel picks a free port) and starts the
  /// serving thread. Throws kiln::Error if the port cannot be bound.
  explicit TcpStoreServer(int port);
  /// Stops the thread and closes every connection; parked clients see the connection close.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  /// The port actually bound.
  int port() const;

 private:
  class Impl;
  friend TcpStoreReplay replay_tcp_store_server(const std::vector<std::vector<uint8_t>>& streams);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::dist
