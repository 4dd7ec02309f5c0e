// The TcpStore's server: one background thread running a poll() loop over non-blocking sockets,
// holding the key-value map. GET/WAIT on a missing key are parked and answered when the key
// appears or their timeout passes. A connection that breaks the protocol (wrong hello,
// oversized or malformed frame, unknown op, hang-up mid-message) is closed on its own; the
// server keeps serving everyone else.
#pragma once

#include <memory>

namespace kiln::dist {

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
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::dist
