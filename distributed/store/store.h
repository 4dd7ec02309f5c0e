// Rendezvous key-value stores (the PyTorch c10d Store contract): every rank of a job talks to
// one store to exchange addresses, ids and small flags. `TcpStore`: rank 0 (or whoever is told
// to) serves on a port, every rank (the server's own included) is a client. `FileStore`: a file
// on a filesystem all ranks share. Keys are strings, values are bytes.
//
// Every blocking call waits at most `timeout()` and then throws dist::TimeoutError naming the key(s)
// it waited for; a lost connection to the store server throws dist::PeerError (errors.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dist {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

inline constexpr Millis kDefaultStoreTimeout{std::chrono::seconds(300)};

class Store {
 public:
  virtual ~Store() = default;

  // Sets (overwrites) `key`.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent = 0) and returns the sum.
  // The value is kept as decimal text, so `get` of an added key reads e.g. "3".
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True if every key exists now; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists, at most `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // Removes `key`; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;

  Millis timeout() const { return timeout_; }
  void set_timeout(Millis t) { timeout_ = t; }

  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  Millis timeout_ = kDefaultStoreTimeout;
};

// Namespaces another store: key k becomes prefix + "/" + k.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  using Store::get_string;
  using Store::set;
  using Store::wait;

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> k(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace kiln::dist
