// Gloo's rendezvous talking to Kiln's store: the adapter every Gloo context of a group connects
// through (the group's full mesh, the hierarchical all-reduce's leaders).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace kiln::dist {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<dist::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& v) override { s_->set(key, Bytes(v.begin(), v.end())); }
  std::vector<char> get(const std::string& key) override {
    Bytes b = s_->get(key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override { s_->wait(keys, t); }

 private:
  std::shared_ptr<dist::Store> s_;
};

}  // namespace kiln::dist
