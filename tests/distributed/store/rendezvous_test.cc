// rendezvous(): parsing of init methods and the environment (errors name the variable and its
// value), and real joins of three processes over env://, tcp:// and file://.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <chrono>
#include <map>
#include <optional>

#include "distributed/store/rendezvous.h"
#include "tests/distributed/store/proc_util.h"

using namespace kiln::dist;
using namespace kiln::test;
using namespace std::chrono_literals;

namespace {

const char* const kVars[] = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};

/// Sets exactly the given rendezvous variables for its lifetime (the others unset), then
/// restores what was there.
class EnvGuard {
 public:
  explicit EnvGuard(const std::map<std::string, std::string>& vars) {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (const char* v : kVars) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

std::string env_error(const std::map<std::string, std::string>& vars, int rank = -1, int world = -1) {
  EnvGuard g(vars);
  return error_of([&] { rendezvous("env://", rank, world, 2s); });
}

const std::map<std::string, std::string> kGood = {
    {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> m, const std::string& k,
                                        std::optional<std::string> v) {
  if (v) m[k] = *v;
  else m.erase(k);
  return m;
}

}  // namespace

TEST_CASE("env:// errors name the variable and its value") {
  CHECK(contains(env_error(with(kGood, "MASTER_ADDR", std::nullopt)), "MASTER_ADDR is not set"));
  CHECK(contains(env_error(with(kGood, "MASTER_PORT", std::nullopt)), "MASTER_PORT is not set"));
  CHECK(contains(env_error(with(kGood, "MASTER_PORT", "http")), "MASTER_PORT=\"http\" is not an integer"));
  CHECK(contains(env_error(with(kGood, "MASTER_PORT", "99999")), "MASTER_PORT=99999 is out of range 1..65535"));
  CHECK(contains(env_error(with(kGood, "RANK", "x")), "RANK=\"x\" is not an integer"));
  CHECK(contains(env_error(with(kGood, "RANK", "")), "RANK=\"\" is not an integer"));
  CHECK(contains(env_error(with(kGood, "RANK", "3")), "RANK=3 is out of range for WORLD_SIZE=2"));
  CHECK(contains(env_error(with(kGood, "RANK", "-1")), "RANK=-1 is out of range for WORLD_SIZE=2"));
  CHECK(contains(env_error(with(kGood, "RANK", std::nullopt)), "RANK is not set"));
  CHECK(contains(env_error(with(kGood, "WORLD_SIZE", "2x")), "WORLD_SIZE=\"2x\" is not an integer"));
  CHECK(contains(env_error(with(kGood, "WORLD_SIZE", "0")), "WORLD_SIZE=0 must be at least 1"));
  CHECK(contains(env_error(with(kGood, "LOCAL_RANK", "two")), "LOCAL_RANK=\"two\" is not an integer"));
  CHECK(contains(env_error(with(with(kGood, "LOCAL_WORLD_SIZE", "1"), "LOCAL_RANK", "1")),
                 "LOCAL_RANK=1 is out of range for LOCAL_WORLD_SIZE=1"));
  CHECK(contains(env_error(with(kGood, "LOCAL_WORLD_SIZE", "3")), "LOCAL_WORLD_SIZE=3 is out of range 1..2"));
  // Explicit arguments override the environment and are named as arguments.
  CHECK(contains(env_error(with(kGood, "RANK", "x"), 5, 2), "rank=5 is out of range for world_size=2"));
  CHECK(contains(env_error(kGood, -1, 0), "world_size=0 must be at least 1"));
  CHECK(contains(env_error(with(kGood, "RANK", "x")), "rendezvous(\"env://\")"));
}

TEST_CASE("init method errors") {
  EnvGuard g({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK(contains(error_of([] { rendezvous("nccl://x", -1, -1, 1s); }), "unknown init method"));
  CHECK(contains(error_of([] { rendezvous("tcp://127.0.0.1", -1, -1, 1s); }), "the port is missing"));
  CHECK(contains(error_of([] { rendezvous("tcp://:80", -1, -1, 1s); }), "the host is empty"));
  CHECK(contains(error_of([] { rendezvous("tcp://h:0", -1, -1, 1s); }), "port=0 is out of range"));
  CHECK(contains(error_of([] { rendezvous("tcp://[::1:80", -1, -1, 1s); }), "is not HOST:PORT"));
  CHECK(contains(error_of([] { rendezvous("file://relative/path", -1, -1, 1s); }), "must be absolute"));
}

TEST_CASE("a single rank joins at once; a missing rank times out saying how many joined") {
  {
    EnvGuard g({});
    Rendezvous rv = rendezvous("tcp://127.0.0.1:" + std::to_string(free_tcp_port()), 0, 1, 60s);
    CHECK(rv.rank == 0);
    CHECK(rv.world_size == 1);
    CHECK(rv.local_rank == 0);
    CHECK(rv.local_world_size == 1);
    rv.store->set("x", std::string("y"));
    CHECK(rv.store->get_string("x") == "y");
  }
  EnvGuard g({});
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of([] { rendezvous("tcp://127.0.0.1:" + std::to_string(free_tcp_port()), 0, 3, 500ms); });
  CHECK(std::chrono::steady_clock::now() - t0 >= 490ms);
  CHECK(contains(msg, "only 1 of 3 ranks joined within 500 ms"));
  const std::string path = scratch_dir("rendezvous_timeout") + "/store";
  msg = error_of([&] { rendezvous("file://" + path, 1, 2, 300ms); });
  CHECK(contains(msg, "only 1 of 2 ranks joined within 300 ms"));
  CHECK(contains(msg, path));
}

namespace {

void three_ranks(const std::string& init, const std::vector<std::string>& common_env) {
  std::vector<Proc> procs;
  ProcGuard guard;
  procs.reserve(3);
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> env = common_env;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=3");
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    env.push_back("LOCAL_WORLD_SIZE=3");
    procs.push_back(spawn("rdv", {worker_path(), "rendezvous", init}, env));
    guard.procs.push_back(&procs.back());
  }
  for (int r = 0; r < 3; ++r) {
    finish(procs[r]);
    CHECK_MESSAGE(procs[r].exited_ok(), procs[r].err());
    const std::string out = procs[r].out();
    CHECK(contains(out, "rank " + std::to_string(r) + " world 3 local " + std::to_string(r) + "/3"));
    CHECK(contains(out, "exchange ok rank " + std::to_string(r)));
  }
}

}  // namespace

TEST_CASE("three processes join over env://") {
  three_ranks("env://", {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(free_tcp_port())});
}

TEST_CASE("three processes join over tcp://") {
  three_ranks("tcp://127.0.0.1:" + std::to_string(free_tcp_port()), {});
}

TEST_CASE("three processes join over file://") {
  const std::string path = scratch_dir("rendezvous_file") + "/store";
  three_ranks("file://" + path, {});
}
