// The shared-memory send/receive channel (distributed/backend/shm_p2p.h) between real processes: tag
// matching and per-tag order, messages many times the ring, two ranks streaming big messages
// at each other, a size mismatch, a timeout and a dead peer (both naming the peer), a waiter
// polling rather than sleeping (KILN_SHM_SPIN_US), and the Gloo process group using it for ranks
// of one host (and TCP with KILN_SHM_P2P=0).
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/ops.h"
#include "core/parallel.h"
#include "distributed/store/errors.h"
#include "distributed/store/file_store.h"
#include "distributed/backend/gloo_backend.h"
#include "distributed/backend/init.h"
#include "distributed/backend/shm_p2p.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using test::expect;

constexpr size_t kSmallRing = 4096;  // messages below are up to 60x this

std::string store_path(const std::string& name) {
  std::string dir = test::scratch_dir(name);
  std::filesystem::remove(dir + "/store");
  return dir + "/store";
}

/// Bytes that depend on the message's tag and length (and position), so a mix-up shows.
std::vector<unsigned char> pattern(uint64_t tag, size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 31 + tag * 7 + n) & 0xff);
  return v;
}

/// `n` ranks, each running body(rank, its channel, the store they share) over a small ring.
void run_channel(int n, const std::string& name,
                 const std::function<void(int, dist::ShmP2P&, dist::Store&)>& body) {
  const std::string path = store_path(name);
  auto results = test::run_ranks(n, [&](int rank, int world) {
    auto store = std::make_shared<dist::FileStore>(path, world, 60s);
    dist::ShmP2P p2p(store, rank, world, kSmallRing);
    body(rank, p2p, *store);
  }, 120, name);
  test::require_all_ok(results);
}

std::string error_of(const std::function<void()>& f, bool* timeout = nullptr, bool* peer = nullptr) {
  try {
    f();
  } catch (const dist::TimeoutError& e) {
    if (timeout) *timeout = true;
    return e.what();
  } catch (const dist::PeerError& e) {
    if (peer) *peer = true;
    return e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("shm p2p: receives match tags in posting order, whatever order they are posted, across ring wraps") {
  run_channel(2, "shm_p2p_tags", [](int rank, dist::ShmP2P& p2p, dist::Store&) {
    expect(p2p.connects(1 - rank), "rank {}: the peer on this host is not reached over shared memory", rank);
    // Tag t carries sizes[t] bytes, sent twice (in that order per tag); the receiver posts the
    // tags backwards, so every message but the last arrives before its receive.
    const std::vector<size_t> sizes = {0, 1, 7, 4095, 4096, 5000, 250000};
    if (rank == 0) {
      std::vector<std::vector<unsigned char>> data;
      std::vector<std::shared_ptr<dist::ShmP2P::Op>> ops;
      for (int round = 0; round < 2; ++round)
        for (uint64_t t = 0; t < sizes.size(); ++t) {
          data.push_back(pattern(t + 100 * round, sizes[t]));
          ops.push_back(p2p.send(data.back().data(), sizes[t], 1, t, nullptr));
        }
      for (auto& op : ops) p2p.wait(*op, 30s);
    } else {
      for (int t = static_cast<int>(sizes.size()) - 1; t >= 0; --t) {
        std::vector<unsigned char> first(sizes[t]), second(sizes[t]);
        auto a = p2p.recv(first.data(), first.size(), 0, t, nullptr);
        auto b = p2p.recv(second.data(), second.size(), 0, t, nullptr);
        p2p.wait(*b, 30s);  // waiting out of order is fine too
        p2p.wait(*a, 30s);
        expect(first == pattern(t, sizes[t]), "tag {}: the first receive did not get the first message", t);
        expect(second == pattern(t + 100, sizes[t]), "tag {}: the second receive did not get the second", t);
      }
    }
  });
}

TEST_CASE("shm p2p: two ranks stream messages 60x the ring at each other without deadlock") {
  run_channel(2, "shm_p2p_big", [](int rank, dist::ShmP2P& p2p, dist::Store&) {
    const int peer = 1 - rank;
    for (uint64_t step = 0; step < 3; ++step) {
      auto mine = pattern(step * 2 + rank, 60 * kSmallRing + 13);
      std::vector<unsigned char> theirs(mine.size());
      // Both wait on their send first: it only finishes as the other side drains its ring,
      // which the other's wait does while it waits on its own send.
      auto s = p2p.send(mine.data(), mine.size(), peer, 5, nullptr);
      auto r = p2p.recv(theirs.data(), theirs.size(), peer, 5, nullptr);
      p2p.wait(*s, 30s);
      p2p.wait(*r, 30s);
      expect(theirs == pattern(step * 2 + peer, theirs.size()), "step {}: rank {}'s message arrived altered", step,
             peer);
    }
  });
}

TEST_CASE("shm p2p: a message streams through its ring while the receiver waits on another peer") {
  // Rank 1 waits on a message from rank 2 while rank 0's 300 ring-fulls come in: its waits must
  // keep draining rank 0's ring briskly (slept on rank 2's channel, one ring-full per 10 ms tick
  // would take over 3 s).
  run_channel(3, "shm_p2p_elsewhere", [](int rank, dist::ShmP2P& p2p, dist::Store& store) {
    const size_t n = 300 * kSmallRing;
    if (rank == 0) {
      auto msg = pattern(4, n);
      auto t0 = std::chrono::steady_clock::now();
      p2p.wait(*p2p.send(msg.data(), n, 1, 4, nullptr), 30s);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      store.set("rank0/sent", "1");
      expect(s < 1.5, "300 ring-fulls to a rank waiting on another peer took {:.2f} s", s);
    } else if (rank == 1) {
      std::vector<unsigned char> big(n), small(8);
      auto r = p2p.recv(big.data(), n, 0, 4, nullptr);
      p2p.wait(*p2p.recv(small.data(), small.size(), 2, 1, nullptr), 30s);
      p2p.wait(*r, 30s);
      expect(big == pattern(4, n), "rank 0's message arrived altered");
    } else {
      store.get_string("rank0/sent");
      auto msg = pattern(1, 8);
      p2p.wait(*p2p.send(msg.data(), msg.size(), 1, 1, nullptr), 30s);
    }
  });
}

TEST_CASE("shm p2p: a receive of the wrong size, a timeout and a dead peer each fail naming the peer") {
  run_channel(3, "shm_p2p_errors", [](int rank, dist::ShmP2P& p2p, dist::Store& store) {
    if (rank == 0) {
      auto msg = pattern(1, 100);
      p2p.wait(*p2p.send(msg.data(), msg.size(), 1, 1, nullptr), 30s);
      // Then exits while rank 2 waits for a message from it that never comes.
      p2p.connects(2);
      store.set("rank0/sent", "1");
      std::this_thread::sleep_for(300ms);
      _exit(0);
    }
    if (rank == 1) {
      std::vector<unsigned char> buf(64);
      std::string msg = error_of([&] { p2p.wait(*p2p.recv(buf.data(), buf.size(), 0, 1, nullptr), 30s); });
      expect(contains(msg, "recv from rank 0") && contains(msg, "the buffer has 64 bytes, the message 100"),
             "the size mismatch says: {}", msg);
      bool timeout = false;
      auto t0 = std::chrono::steady_clock::now();
      msg = error_of([&] { p2p.wait(*p2p.recv(buf.data(), buf.size(), 2, 9, nullptr), 400ms); }, &timeout);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      expect(timeout && contains(msg, "recv from rank 2 (tag 9") && contains(msg, "timed out after 400 ms"),
             "the timeout says: {}", msg);
      expect(s >= 0.39 && s < 5, "the 400 ms timeout took {:.2f} s", s);
      store.set("rank1/done", "1");
    }
    if (rank == 2) {
      store.get_string("rank0/sent");
      std::vector<unsigned char> buf(8);
      bool peer = false;
      auto t0 = std::chrono::steady_clock::now();
      std::string msg = error_of([&] { p2p.wait(*p2p.recv(buf.data(), buf.size(), 0, 3, nullptr), 60s); }, nullptr,
                                 &peer);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      expect(peer && contains(msg, "recv from rank 0 (tag 3)") && contains(msg, "rank 0 (pid") &&
                 contains(msg, "has exited"),
             "the dead peer gives: {}", msg);
      expect(s < 5, "the dead peer was noticed after {:.2f} s (it exited ~0.3 s in)", s);
      // Alive (not an exited peer) until rank 1 has seen its receive from here time out.
      expect(p2p.connects(1), "rank 1 is not reached over shared memory");
      store.get_string("rank1/done");
    }
  });
}

void ring_exchange(int rank, int world) {
  auto pg = dist::init_process_group();
  // Each rank sends to the next and receives from the previous: 1 element to ~24 MB.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3} << 20}) {
    Tensor out = full({n}, static_cast<double>(rank + 1), dtype(kFloat64));
    Tensor in = zeros({n}, dtype(kFloat64));
    auto r = pg->recv(in, (rank + world - 1) % world, 7);
    auto s = pg->send(out, (rank + 1) % world, 7);
    r->wait();
    s->wait();
    // A finished transfer keeps no reference to its tensors (the Works live on here, as they
    // do in the flight recorder's ring).
    expect(out.impl_ptr().use_count() == 1 && in.impl_ptr().use_count() == 1,
           "rank {}: finished transfers still hold their tensors ({} and {} references)", rank,
           out.impl_ptr().use_count(), in.impl_ptr().use_count());
    const double want = static_cast<double>((rank + world - 1) % world + 1);
    expect((in - want).abs().max().item<double>() == 0, "rank {}: {} elements from the previous rank differ", rank,
           n);
  }
  bool uses = std::getenv("KILN_SHM_P2P") == nullptr;
  auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(pg.get());
  expect(gloo != nullptr, "the default group is {}, not gloo", pg->backend());
  expect(gloo->p2p_path((rank + 1) % world) == (uses ? "shared memory" : "TCP"),
         "rank {}: transfers to the next rank go by {}", rank, gloo->p2p_path((rank + 1) % world));
}

/// Rank 0 waits for a message rank 1 sends `delay` after both have set up, and counts its
/// thread's voluntary context switches over the wait (the futex sleep is the only way the wait
/// gives up its core): none when `spins`, at least one otherwise.
void expect_waiter(const std::string& name, std::chrono::milliseconds delay, bool spins) {
  const std::string path = store_path(name);
  test::require_all_ok(test::run_ranks(2, [&](int rank, int world) {
    set_num_threads(1);  // 2 ranks x 1 thread: each has a core where the machine has 2
    auto store = std::make_shared<dist::FileStore>(path, world, 60s);
    dist::ShmP2P p2p(store, rank, world, kSmallRing);
    std::vector<unsigned char> buf(64, 7);
    if (rank == 1) {
      std::this_thread::sleep_for(delay);
      auto op = p2p.send(buf.data(), buf.size(), 0, 1, nullptr);
      p2p.wait(*op, 30s);
      return;
    }
    auto op = p2p.recv(buf.data(), buf.size(), 1, 1, nullptr);
    rusage before{}, after{};
    getrusage(RUSAGE_THREAD, &before);
    p2p.wait(*op, 30s);
    getrusage(RUSAGE_THREAD, &after);
    const long slept = after.ru_nvcsw - before.ru_nvcsw;
    expect(spins ? slept == 0 : slept >= 1, "{}: the waiter gave up its core {} times over a {} ms wait", name, slept,
           delay.count());
  }, 60, name));
}

TEST_CASE("shm p2p: a waiter with a core of its own polls (KILN_SHM_SPIN_US) instead of sleeping; 0 sleeps") {
  if (std::thread::hardware_concurrency() < 2) {
    std::printf("skipped: needs 2 CPUs (a spinning waiter must not take its peer's core)\n");
    MESSAGE("skipped: needs 2 CPUs");
    return;
  }
  setenv("KILN_SHM_SPIN_US", "1000000", 1);  // a 1 s window: far longer than the 5 ms the send takes
  expect_waiter("shm_p2p_spin", 5ms, true);
  setenv("KILN_SHM_SPIN_US", "0", 1);
  expect_waiter("shm_p2p_nospin", 50ms, false);

  setenv("KILN_SHM_SPIN_US", "2ms", 1);
  auto store = std::make_shared<dist::FileStore>(store_path("shm_p2p_spin_bad"), 1, 10s);
  CHECK_THROWS_WITH(dist::ShmP2P(store, 0, 1), doctest::Contains("KILN_SHM_SPIN_US: '2ms' is not a spin time"));
  unsetenv("KILN_SHM_SPIN_US");
}

TEST_CASE("ProcessGroupGloo: sends and receives between ranks of one host go through shared memory") {
  test::require_all_ok(test::run_ranks(3, ring_exchange, 120, "shm_p2p_pg"));
}

TEST_CASE("ProcessGroupGloo: KILN_SHM_P2P=0 sends over TCP, with the same results") {
  setenv("KILN_SHM_P2P", "0", 1);
  auto results = test::run_ranks(3, ring_exchange, 120, "shm_p2p_pg_off");
  unsetenv("KILN_SHM_P2P");
  test::require_all_ok(results);
}

}  // namespace
}  // namespace kiln
