// ModuleList and ModuleDict, as torch.nn's: containers that register their modules (so
// parameters, state_dict names, train()/eval() and to() reach them) without a forward of their
// own (forward throws, as Module's). ModuleList names its entries "0", "1", ...; ModuleDict by key, in insertion order.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/sequential.h"

namespace kiln::nn {

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : Module("ModuleList") {
    for (const auto& m : modules) push_back(m);
  }
  void push_back(std::shared_ptr<Module> m) {
    KILN_CHECK(m != nullptr, "ModuleList::push_back: null module");
    modules_.push_back(register_module(std::to_string(modules_.size()), std::move(m)));
  }
  template <ModuleLike M> void push_back(M&& m) { push_back(std::make_shared<std::remove_cvref_t<M>>(std::move(m))); }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  /// Entry `i` (negative counts from the end); throws naming the index and size when out of range.
  const std::shared_ptr<Module>& operator[](int64_t i) const {
    const int64_t n = static_cast<int64_t>(modules_.size());
    KILN_CHECK(i >= -n && i < n, "ModuleList: index {} is out of range for {} modules", i, n);
    return modules_[i < 0 ? i + n : i];
  }
  /// Entry `i` as its concrete type (nullptr if it is another type).
  template <class M> std::shared_ptr<M> at(int64_t i) const { return std::dynamic_pointer_cast<M>((*this)[i]); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) : Module("ModuleDict") {
    for (const auto& [k, m] : modules) insert(k, m);
  }
  /// Adds `m` under `key` (a valid module name, not already present).
  void insert(const std::string& key, std::shared_ptr<Module> m) {
    KILN_CHECK(m != nullptr, "ModuleDict::insert: null module for key '{}'", key);
    KILN_CHECK(!contains(key), "ModuleDict::insert: key '{}' is already present", key);
    index_[key] = keys_.size();
    keys_.push_back(key);
    modules_.push_back(register_module(key, std::move(m)));
  }
  template <ModuleLike M> void insert(const std::string& key, M&& m) {
    insert(key, std::make_shared<std::remove_cvref_t<M>>(std::move(m)));
  }
  bool contains(const std::string& key) const { return index_.count(key) > 0; }
  size_t size() const { return keys_.size(); }
  /// Keys in insertion order.
  const std::vector<std::string>& keys() const { return keys_; }
  const std::shared_ptr<Module>& operator[](const std::string& key) const {
    auto it = index_.find(key);
    KILN_CHECK(it != index_.end(), "ModuleDict: no module under key '{}'", key);
    return modules_[it->second];
  }
  template <class M> std::shared_ptr<M> at(const std::string& key) const {
    return std::dynamic_pointer_cast<M>((*this)[key]);
  }

 private:
  std::vector<std::string> keys_;
  std::vector<std::shared_ptr<Module>> modules_;
  std::map<std::string, size_t> index_;
};

}  // namespace kiln::nn
