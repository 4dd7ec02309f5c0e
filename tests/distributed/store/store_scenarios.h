// Scenarios every Store must pass, run against a store by the store_worker processes that reach
// it through `spec` (see store_worker.cc): shared by the TcpStore and FileStore tests.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "distributed/store/store.h"
#include "tests/distributed/store/proc_util.h"

namespace kiln::test {

/// Three processes exchange values through the store (each sets its key, waits for the others'
/// and reads them; store_worker's "exchange"), and all three join.
inline void check_three_exchange(dist::Store& store, const std::string& spec, const std::string& tag) {
  std::vector<Proc> procs;
  for (int r = 0; r < 3; ++r)
    procs.push_back(spawn(tag, {worker_path(), "exchange", spec, std::to_string(r), "3"}));
  ProcGuard guard;
  for (auto& p : procs) guard.procs.push_back(&p);
  for (int r = 0; r < 3; ++r) {
    finish(procs[r]);
    CHECK_MESSAGE(procs[r].exited_ok(), procs[r].err());
    CHECK(procs[r].out().find("exchange ok rank " + std::to_string(r)) != std::string::npos);
  }
  CHECK(store.get_string("joined") == "3");
  CHECK(store.get_string("key/2") == "value-2");
}

/// Three processes add 1 a thousand times each: the total is 3000 and, the adds being atomic,
/// the values they got back are 1..3000, each once.
inline void check_atomic_adds(dist::Store& store, const std::string& spec, const std::string& tag) {
  std::vector<Proc> procs;
  for (int r = 0; r < 3; ++r) procs.push_back(spawn(tag, {worker_path(), "add", spec, "1000"}));
  ProcGuard guard;
  for (auto& p : procs) guard.procs.push_back(&p);
  long long sum = 0;
  for (auto& p : procs) {
    finish(p);
    REQUIRE_MESSAGE(p.exited_ok(), p.err());
    long long first = 0, last = 0, s = 0;
    REQUIRE(std::sscanf(p.out().c_str(), "adds %lld %lld %lld", &first, &last, &s) == 3);
    sum += s;
  }
  CHECK(store.add("adds", 0) == 3000);
  CHECK(sum == 3000LL * 3001 / 2);
}

/// A process's get of a missing key blocks until this process sets it, then returns the value.
inline void check_get_waits_for_set(dist::Store& store, const std::string& spec, const std::string& tag) {
  using namespace std::chrono_literals;
  Proc p = spawn(tag, {worker_path(), "get", spec, "late"});
  ProcGuard guard{{&p}};
  CHECK_FALSE(wait_for(p, 300ms));
  store.set("late", std::string("value-late"));
  finish(p);
  CHECK_MESSAGE(p.exited_ok(), p.err());
  CHECK(p.out() == "connected\ngot value-late\n");
}

}  // namespace kiln::test
