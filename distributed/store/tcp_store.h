// A Store served over TCP. One process (rank 0, usually) constructs it with is_server = true and
// runs the server thread; every instance, the server's own included, is a client holding one
// TCP connection to host:port. Clients may start before the server: connecting retries until
// the timeout. Wire format: distributed/store/tcp_store_protocol.h.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/store/socket_util.h"
#include "distributed/store/store.h"
#include "distributed/store/tcp_store_protocol.h"

namespace kiln::dist {

class TcpStoreServer;

class TcpStore final : public Store {
 public:
  /// Connects to the store at host:port, first starting its server on `port` (all IPv4
  /// interfaces; 0 picks a free port, see port()) when `is_server`. `world_size` is the number
  /// of ranks expected to use the store (informational; <= 0 when unknown). `timeout` bounds
  /// connecting and every blocking call. Throws kiln::Error naming the address on failure.
  TcpStore(std::string host, int port, int world_size, bool is_server, Millis timeout = kDefaultStoreTimeout);
  /// Closes this client's connection and, on the serving instance, stops the server (clients
  /// still connected then see their connection close). Once a client's connection breaks
  /// (server gone, I/O error, protocol error), every later call fails at once naming why.
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  using Store::get_string;
  using Store::set;
  using Store::wait;

  /// The server's port (the one actually bound when constructed with port 0 as the server).
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  bool is_server() const { return server_ != nullptr; }
  int world_size() const { return world_size_; }
  /// "host:port", as error messages name the server.
  std::string address() const { return format_address(host_, port_); }

 private:
  /// Sends one request and returns its reply body after the status byte. `what` describes the
  /// request for error messages; `reply_within` is how long the server may take to answer.
  std::vector<uint8_t> call(wire::Writer& request, const std::string& what, Millis reply_within,
                            const std::vector<std::string>& waited_keys = {});
  void connect_to_server();
  void lose_connection_locked(const std::string& why);

  std::string host_;
  int port_;
  int world_size_;
  // Declared before sock_ so that the connection closes before the server stops.
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mu_;  // one request in flight per connection
  Fd sock_;
  std::string lost_;  // why the connection broke; empty while it works
};

}  // namespace kiln::dist
