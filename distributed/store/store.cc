#include "distributed/store/store.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "distributed/store/store_value.h"

namespace kiln::dist {

int64_t added_value(const std::string& key, const Bytes* old, int64_t delta) {
  if (old == nullptr) return delta;
  int64_t x = 0;
  const char* b = reinterpret_cast<const char*>(old->data());
  const char* e = b + old->size();
  auto [end, ec] = std::from_chars(b, e, x);
  if (old->empty() || ec != std::errc() || end != e) {
    std::string shown(b, std::min<size_t>(old->size(), 40));
    fail("add(\"{}\", {}): the value stored at \"{}\" is not a decimal integer: \"{}\"{}", key, delta, key, shown,
         old->size() > 40 ? "..." : "");
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(x, delta, &sum)) fail("add(\"{}\", {}): {} + {} overflows int64", key, delta, x, delta);
  return sum;
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

Bytes int_value(int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  KILN_CHECK(base_ != nullptr, "PrefixStore(\"{}\"): the base store is null", prefix_);
  // Blocking calls made through the prefix wait as long as the base would.
  timeout_ = base_->timeout();
}

std::vector<std::string> PrefixStore::k(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(k(key));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(k(key), value); }

Bytes PrefixStore::get(const std::string& key) {
  // The base's get waits with the base's timeout; honour this store's own by waiting first.
  if (timeout_ != base_->timeout()) base_->wait({k(key)}, timeout_);
  return base_->get(k(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(k(key), delta); }

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(k(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) { base_->wait(k(keys), timeout); }

bool PrefixStore::remove(const std::string& key) { return base_->remove(k(key)); }

}  // namespace kiln::dist
