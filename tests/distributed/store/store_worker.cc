// A separate process for the store tests: connects to a store and runs one scenario, printing
// what it saw. Exit status 0: the scenario's own checks passed; 1: a check failed; 2: an error.
//   store_worker exchange STORE RANK WORLD   set key/RANK, wait for every rank's key, verify all
//   store_worker add STORE N                 N adds of 1 to "adds", results strictly increasing
//   store_worker get STORE KEY               print "connected", then get(KEY)
//   store_worker rendezvous INIT_METHOD      rendezvous (ranks from the environment), exchange
// STORE is tcp:HOST:PORT or file:MEMBERS:PATH (MEMBERS: the FileStore's world_size).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "distributed/store/file_store.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/tcp_store.h"

using namespace kiln::dist;

namespace {

constexpr Millis kTimeout{120000};

std::shared_ptr<Store> open_store(const std::string& spec, int world) {
  if (spec.rfind("tcp:", 0) == 0) {
    size_t colon = spec.rfind(':');
    return std::make_shared<TcpStore>(spec.substr(4, colon - 4), std::stoi(spec.substr(colon + 1)), world, false,
                                      kTimeout);
  }
  if (spec.rfind("file:", 0) == 0) {
    size_t colon = spec.find(':', 5);
    return std::make_shared<FileStore>(spec.substr(colon + 1), std::stoi(spec.substr(5, colon - 5)), kTimeout);
  }
  throw std::runtime_error("bad store spec " + spec);
}

int check(bool ok, const std::string& what) {
  if (!ok) std::fprintf(stderr, "check failed: %s\n", what.c_str());
  return ok ? 0 : 1;
}

// Every rank publishes a value, then reads everyone's: proves set/wait/get across processes.
int exchange(Store& store, int rank, int world) {
  store.set("key/" + std::to_string(rank), "value-" + std::to_string(rank));
  store.add("joined", 1);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("key/" + std::to_string(r));
  store.wait(keys);
  for (int r = 0; r < world; ++r) {
    std::string v = store.get_string(keys[r]);
    if (check(v == "value-" + std::to_string(r), "key/" + std::to_string(r) + " = \"" + v + "\"")) return 1;
  }
  std::printf("exchange ok rank %d\n", rank);
  return 0;
}

int adds(Store& store, int n) {
  int64_t prev = 0, sum = 0, first = 0;
  for (int i = 0; i < n; ++i) {
    int64_t v = store.add("adds", 1);
    if (i == 0) first = v;
    if (check(v > prev, "add returned " + std::to_string(v) + " after " + std::to_string(prev))) return 1;
    prev = v;
    sum += v;
  }
  std::printf("adds %lld %lld %lld\n", static_cast<long long>(first), static_cast<long long>(prev),
              static_cast<long long>(sum));
  return 0;
}

int run(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "exchange" && argc == 5) {
    int world = std::stoi(argv[4]);
    return exchange(*open_store(argv[2], world), std::stoi(argv[3]), world);
  }
  if (scenario == "add" && argc == 4) return adds(*open_store(argv[2], 0), std::stoi(argv[3]));
  if (scenario == "get" && argc == 4) {
    std::shared_ptr<Store> store = open_store(argv[2], 0);
    std::printf("connected\n");
    std::string v = store->get_string(argv[3]);
    std::printf("got %s\n", v.c_str());
    return 0;
  }
  if (scenario == "rendezvous" && argc == 3) {
    Rendezvous rv = rendezvous(argv[2], -1, -1, kTimeout);
    std::printf("rank %d world %d local %d/%d\n", rv.rank, rv.world_size, rv.local_rank, rv.local_world_size);
    int rc = exchange(*rv.store, rv.rank, rv.world_size);
    // Rank 0 serves the TcpStore, so it may leave only once everyone else is done with the
    // store: their last request is the add, and whoever counts last tells rank 0.
    if (rv.rank != 0) {
      if (rv.store->add("done", 1) == rv.world_size - 1) rv.store->set("all done", std::string("1"));
    } else if (rv.world_size > 1) {
      rv.store->wait({"all done"});
    }
    return rc;
  }
  std::fprintf(stderr, "store_worker: bad arguments\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_worker: %s\n", e.what());
    return 2;
  }
}
