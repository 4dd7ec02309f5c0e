// Every collective of the Gloo process group, run by real processes on 127.0.0.1, against
// answers computed locally: several sizes (1 element to tens of MB), dtypes and reduce ops.
#include <doctest/doctest.h>
#include <signal.h>

#include "core/ops.h"
#include "core/parallel.h"
#include "distributed/backend/gloo_backend.h"
#include "distributed/backend/init.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using dist::ReduceOp;
using test::expect;

// Small integers, exact in every dtype (bf16 included) after summing a few ranks.
Tensor rank_values(int rank, int64_t n, DType dt) {
  Tensor v = empty({n}, dtype(kFloat64));
  double* p = v.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>((i % 7 + 1) * (rank + 1));
  return v.to(dt);
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  Tensor diff = (got.to(kFloat64) - want.to(kFloat64)).abs().max();
  expect(diff.item<double>() == 0, "{}: differs from the expected answer by up to {}", what, diff.item<double>());
}

Tensor reduce_expected(int world, int64_t n, DType dt, ReduceOp op) {
  Tensor acc = rank_values(0, n, kFloat64);
  for (int r = 1; r < world; ++r) {
    Tensor v = rank_values(r, n, kFloat64);
    acc = op == ReduceOp::kMax ? maximum(acc, v) : op == ReduceOp::kMin ? minimum(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc = acc / world;
  return acc.to(dt);
}

TEST_CASE("local ranks compute with threads_per_rank threads, not the parent's count") {
  // The parent read its count at start-up; each forked rank must use its own (1 by default), or
  // n ranks would run n x cores compute threads on the machine's cores.
  const int before = get_num_threads();
  set_num_threads(3);
  auto results = test::run_ranks(2, [](int, int) {
    test::expect(get_num_threads() == 1, "a rank computes with {} threads, want 1", get_num_threads());
    const char* env = std::getenv("KILN_NUM_THREADS");
    test::expect(env != nullptr && std::string(env) == "1", "KILN_NUM_THREADS is {}", env ? env : "unset");
  }, 60, "threads");
  set_num_threads(before);
  test::require_all_ok(results);
}

TEST_CASE("allreduce: every op, dtype and size up to three shared-memory chunks, on 3 ranks") {
  auto results = test::run_ranks(3, [](int rank, int world) {
    auto pg = dist::init_process_group();
    expect(pg->rank() == rank && pg->size() == world, "rank {} of {} got {} of {}", rank, world, pg->rank(),
           pg->size());
    // 1 << 20 f32 fill one 4 MiB chunk exactly; (2 << 20) + 5 take three, the last of 5 elements
    // (two for bf16, the last of 10 bytes).
    const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, int64_t{1} << 20, (int64_t{2} << 20) + 5}) {
      if (!test::size_checked_here(n)) continue;
      // The answers in f64, once per size (not once per dtype: the reference costs more than the
      // collective at the big sizes, several times more under the sanitizers).
      const Tensor mine = rank_values(rank, n, kFloat64);
      std::vector<Tensor> answers;
      for (ReduceOp op : ops) answers.push_back(reduce_expected(world, n, kFloat64, op));
      for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64})
        for (size_t i = 0; i < ops.size(); ++i) {
          const ReduceOp op = ops[i];
          if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
          if (n > 4099 && dt != kFloat32 && dt != kBFloat16) continue;  // big sizes: one wide and one narrow type
          Tensor t = mine.to(dt).clone();  // to(f64) is mine itself, and allreduce works in place
          pg->allreduce(t, op)->wait();
          Tensor want = answers[i].to(dt);
          if (op == ReduceOp::kAvg)  // 1/3 rounds in the narrow types
            expect(((t.to(kFloat64) - want.to(kFloat64)).abs() - want.to(kFloat64).abs() * 1e-2).max().item<double>() <= 1e-2,
                   "allreduce avg n={} {}", n, dt);
          else
            expect_equal(t, want, fmt::format("allreduce {} n={} {}", dist::reduce_op_name(op), n, dt));
        }
    }
  }, 300, "allreduce");
  test::require_all_ok(results);
}

TEST_CASE("allreduce over Gloo's TCP ring too (shared memory turned off), 3 ranks") {
  auto results = test::run_ranks(3, [](int rank, int world) {
    setenv("KILN_SHM_ALLREDUCE", "0", 1);
    auto pg = dist::init_process_group();
    expect(!dynamic_cast<dist::ProcessGroupGloo&>(*pg).uses_shared_memory(), "rank {}: shared memory not off", rank);
    for (int64_t n : {int64_t{1}, int64_t{4099}, int64_t{3} << 20})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        if (!test::size_checked_here(n)) continue;
        Tensor t = rank_values(rank, n, kFloat32);
        pg->allreduce(t, op)->wait();
        expect_equal(t, reduce_expected(world, n, kFloat32, op), fmt::format("tcp allreduce n={}", n));
      }
  }, 120, "allreduce_tcp");
  test::require_all_ok(results);
}

TEST_CASE("shared-memory all-reduce, reduce-scatter, all-gather and broadcast across round boundaries, with 5 ranks") {
  // 4 MiB chunks: 1M + 3 floats spans two chunks unevenly; 5 ranks split each chunk unevenly.
  auto results = test::run_ranks(5, [](int rank, int world) {
    auto pg = dist::init_process_group();
    auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(pg.get());
    expect(gloo != nullptr && gloo->uses_shared_memory(), "rank {}: all-reduce is not using shared memory", rank);
    for (int64_t n : {int64_t{5}, int64_t{3}, (int64_t{1} << 20) + 3})
      for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt64}) {
        Tensor t = rank_values(rank, n, dt);
        pg->allreduce(t, ReduceOp::kSum)->wait();
        expect_equal(t, reduce_expected(world, n, dt, ReduceOp::kSum), fmt::format("shm allreduce n={} {}", n, dt));
      }
    // ZeRO's in-place reduce-scatter: a round moves 4 MiB / (8 bytes x 5 ranks) = 104857 f64 of each
    // chunk, so 2 x 104857 + 3 takes three rounds, the last of 3 elements. Chunk c of rank r's input
    // holds rank_values(r + c); chunk `rank` becomes the sum over r, the other chunks stay as they were.
    for (int64_t chunk : {int64_t{1}, int64_t{2} * 104857 + 3})
      for (DType dt : {kFloat64, kInt64, kBFloat16}) {
        Tensor in = empty({world * chunk}, dtype(dt));
        for (int c = 0; c < world; ++c) in.narrow(0, c * chunk, chunk).copy_(rank_values(rank + c, chunk, dt));
        Tensor before = in.clone();
        pg->reduce_scatter_tensor(in.narrow(0, rank * chunk, chunk), in, ReduceOp::kSum)->wait();
        Tensor want = zeros({chunk}, dtype(kFloat64));
        for (int src = 0; src < world; ++src) want = want + rank_values(src + rank, chunk, kFloat64);
        for (int c = 0; c < world; ++c)
          expect_equal(in.narrow(0, c * chunk, chunk), c == rank ? want : before.narrow(0, c * chunk, chunk),
                       fmt::format("shm reduce_scatter_tensor chunk={} {} slot {}", chunk, dt, c));
      }
    // All-gather of 4 MiB + 24 bytes per rank (two rounds), the input being this rank's part of the output.
    const int64_t part = (int64_t{1} << 19) + 3;
    Tensor all = zeros({world * part}, dtype(kFloat64));
    all.narrow(0, rank * part, part).copy_(rank_values(rank, part, kFloat64));
    pg->allgather_into_tensor(all, all.narrow(0, rank * part, part))->wait();
    for (int r = 0; r < world; ++r)
      expect_equal(all.narrow(0, r * part, part), rank_values(r, part, kFloat64),
                   fmt::format("shm allgather_into_tensor slot {}", r));
    // Broadcast from rank 3 across two 4 MiB rounds.
    Tensor b = rank_values(rank, part, kFloat64);
    pg->broadcast(b, 3)->wait();
    expect_equal(b, rank_values(3, part, kFloat64), "shm broadcast");
  }, 120, "allreduce_shm5");
  test::require_all_ok(results);
}

TEST_CASE("init_process_group with tcp://host:port and explicit ranks") {
  auto results = test::run_ranks(2, [](int rank, int world) {
    // The environment's MASTER_PORT is free; explicit arguments win over RANK/WORLD_SIZE.
    dist::InitOptions o;
    o.init_method = fmt::format("tcp://127.0.0.1:{}", std::getenv("MASTER_PORT"));
    o.rank = 1 - rank;  // swapped, to see that the arguments are used
    o.world_size = world;
    auto pg = dist::init_process_group(o);
    expect(pg->rank() == 1 - rank && pg->size() == world, "got rank {} of {}", pg->rank(), pg->size());
    expect(dist::get_rank() == pg->rank() && dist::get_world_size() == world, "default group not set");
    expect(dist::is_initialized() && dist::default_group() == pg, "the default group is not this group");
    Tensor t = full({3}, pg->rank() + 1.0);
    pg->allreduce(t)->wait();
    expect(t.min().item<float>() == 3, "allreduce over tcp:// init got {}", t.min().item<float>());
  }, 120, "tcp_init");
  test::require_all_ok(results);
}

TEST_CASE("allreduce of a non-contiguous view writes the result through the view") {
  auto results = test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    Tensor base = rank_values(rank, 6 * 5, kFloat32).view({6, 5});
    Tensor view = base.t();  // 5 x 6, not contiguous
    pg->allreduce(view)->wait();
    expect_equal(base, reduce_expected(world, 30, kFloat32, ReduceOp::kSum).view({6, 5}), "transposed allreduce");
  }, 120, "allreduce_view");
  test::require_all_ok(results);
}

TEST_CASE("reduce_scatter_tensor and allgather_into_tensor (ZeRO's flat forms) on 2 and 3 ranks, shared memory "
          "and Gloo's TCP (the ring reduce-scatter)") {
  for (int world : {2, 3})
  for (bool shm : {true, false}) {
    auto results = test::run_ranks(world, [shm](int rank, int world) {
      setenv("KILN_SHM_ALLREDUCE", shm ? "1" : "0", 1);
      auto pg = dist::init_process_group();
      auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(pg.get());
      expect(gloo != nullptr && gloo->uses_shared_memory() == shm, "shared memory in use: {}, wanted {}",
             gloo && gloo->uses_shared_memory(), shm);
      // (1 << 20) + 5 floats: the ring moves them in 17 segments of 256 KiB, the last of 5 elements.
      for (int64_t chunk : {int64_t{1}, int64_t{777}, (int64_t{1} << 20) + 5}) {
        if (!test::size_checked_here(chunk)) continue;
        // Chunk c of rank r's input holds rank_values(r + c); rank `rank` gets the sum over r of chunk `rank`.
        Tensor in = empty({world * chunk}, dtype(kFloat32));
        for (int c = 0; c < world; ++c) in.narrow(0, c * chunk, chunk).copy_(rank_values(rank + c, chunk, kFloat32));
        Tensor before = in.clone();
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          Tensor out = zeros({chunk}, dtype(kFloat32));
          pg->reduce_scatter_tensor(out, in, op)->wait();
          Tensor want = rank_values(rank, chunk, kFloat64);
          for (int src = 1; src < world; ++src) {
            Tensor v = rank_values(src + rank, chunk, kFloat64);
            want = op == ReduceOp::kMax ? maximum(want, v) : want + v;
          }
          if (op == ReduceOp::kAvg) want = want / world;
          expect_equal(out, want.to(kFloat32), fmt::format("reduce_scatter_tensor {} chunk={}", dist::reduce_op_name(op), chunk));
          expect_equal(in, before, "reduce_scatter_tensor left its input as it was");
        }
        Tensor all = zeros({world * chunk}, dtype(kFloat64));
        pg->allgather_into_tensor(all, rank_values(rank, chunk, kFloat64))->wait();
        for (int r = 0; r < world; ++r)
          expect_equal(all.narrow(0, r * chunk, chunk), rank_values(r, chunk, kFloat64),
                       fmt::format("allgather_into_tensor chunk={} slot {}", chunk, r));
      }
      // A flat tensor that is not size() chunks is named with both sizes.
      std::string m;
      try {
        pg->reduce_scatter_tensor(zeros({4}), zeros({4 * world + 1}));
      } catch (const Error& e) {
        m = e.what();
      }
      expect(m.find("reduce_scatter_tensor: the flat tensor has") != std::string::npos, "got: {}", m);
      try {
        pg->allgather_into_tensor(zeros({5}), zeros({2}));
        m = "";
      } catch (const Error& e) {
        m = e.what();
      }
      expect(m.find("allgather_into_tensor: the flat tensor has 5 elements") != std::string::npos, "got: {}", m);
    }, 300, fmt::format("collectives_flat{}{}", world, shm ? "_shm" : "_tcp"));
    test::require_all_ok(results);
  }
}

TEST_CASE("broadcast, reduce, allgather, reduce_scatter, send/recv and barrier on 3 ranks, shared memory and TCP") {
  for (bool shm : {true, false}) {
    auto results = test::run_ranks(3, [shm](int rank, int world) {
      setenv("KILN_SHM_ALLREDUCE", shm ? "1" : "0", 1);
      setenv("KILN_SHM_P2P", shm ? "1" : "0", 1);
      auto pg = dist::init_process_group();
      auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(pg.get());
      expect(gloo != nullptr && gloo->uses_shared_memory() == shm, "shared memory in use: {}, wanted {}",
             gloo && gloo->uses_shared_memory(), shm);
      // (2 << 20) + 5 f32: three 4 MiB shared-memory chunks, the last of 5 elements.
      for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{2} << 20) + 5}) {
        if (!test::size_checked_here(n)) continue;
        // broadcast from a non-zero root
        Tensor b = rank_values(rank, n, kFloat32);
        pg->broadcast(b, 1)->wait();
        expect_equal(b, rank_values(1, n, kFloat32), fmt::format("broadcast n={}", n));

        // reduce to root 2: only the root's tensor changes
        Tensor r = rank_values(rank, n, kFloat64);
        pg->reduce(r, 2, ReduceOp::kMax)->wait();
        Tensor want_r =
            rank == 2 ? reduce_expected(world, n, kFloat64, ReduceOp::kMax) : rank_values(rank, n, kFloat64);
        expect_equal(r, want_r, fmt::format("reduce n={}", n));

        // allgather
        std::vector<Tensor> outs;
        for (int i = 0; i < world; ++i) outs.push_back(zeros({n}, dtype(kInt64)));
        pg->allgather(outs, rank_values(rank, n, kInt64))->wait();
        for (int i = 0; i < world; ++i)
          expect_equal(outs[i], rank_values(i, n, kInt64), fmt::format("allgather n={} slot {}", n, i));

        // reduce_scatter: input i of every rank is rank_values(rank + i)
        std::vector<Tensor> ins;
        for (int i = 0; i < world; ++i) ins.push_back(rank_values(rank + i, n, kFloat32));
        Tensor out = zeros({n}, dtype(kFloat32));
        pg->reduce_scatter(out, ins, ReduceOp::kSum)->wait();
        Tensor want = zeros({n}, dtype(kFloat64));
        for (int src = 0; src < world; ++src) want = want + rank_values(src + rank, n, kFloat64);
        expect_equal(out, want.to(kFloat32), fmt::format("reduce_scatter n={}", n));

        // a ring of sends and receives, both in flight at once
        Tensor sent = rank_values(rank, n, kFloat32);
        Tensor got = zeros({n}, dtype(kFloat32));
        auto s = pg->send(sent, (rank + 1) % world, 7);
        auto q = pg->recv(got, (rank + world - 1) % world, 7);
        s->wait();
        q->wait();
        expect_equal(got, rank_values((rank + world - 1) % world, n, kFloat32), fmt::format("send/recv n={}", n));
      }
      pg->barrier()->wait();
    }, 300, shm ? "collectives_shm" : "collectives_tcp");
    test::require_all_ok(results);
  }
}

TEST_CASE("asynchronous collectives complete in issue order and report their sequence numbers") {
  auto results = test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    std::vector<Tensor> ts;
    std::vector<dist::WorkPtr> works;
    for (int i = 0; i < 20; ++i) {
      ts.push_back(full({1000}, rank + i, dtype(kFloat32)));
      works.push_back(pg->allreduce(ts.back()));
    }
    for (size_t i = 0; i < works.size(); ++i) {
      works[i]->wait();
      expect(works[i]->seq() == i + 1, "work {} has sequence number {}", i, works[i]->seq());
      expect(ts[i].min().item<float>() == static_cast<float>(1 + 2 * i), "allreduce {} got {}", i,
             ts[i].min().item<float>());
    }
  }, 120, "async");
  test::require_all_ok(results);
}

TEST_CASE("bad arguments are refused on the calling rank, naming the op and the value") {
  auto results = test::run_ranks(2, [](int, int) {
    auto pg = dist::init_process_group();
    auto msg = [](auto fn) {
      try {
        fn();
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    std::string m = msg([&] { pg->broadcast(zeros({2}), 5); });
    expect(m.find("broadcast: root 5 is out of range") != std::string::npos, "got: {}", m);
    m = msg([&] { pg->allreduce(zeros({2}, dtype(kInt32)), ReduceOp::kAvg); });
    expect(m.find("allreduce: avg needs a floating dtype") != std::string::npos, "got: {}", m);
    m = msg([&] { pg->allgather({zeros({2})}, zeros({2})); });
    expect(m.find("allgather: 1 output tensors for a group of 2") != std::string::npos, "got: {}", m);
    pg->barrier()->wait();  // the group still works after refusing
  }, 120, "bad_args");
  test::require_all_ok(results);
}

/// What ranks 0 and 1 must report when rank 2 is absent from collective `seq`: "" when both
/// exited 1 naming the collective and rank 2 (`detail`: what else the message must say).
std::string absent_rank_report(const std::vector<test::RankResult>& results, int seq, const std::string& detail) {
  std::string problems;
  for (int r : {0, 1}) {
    const std::string& err = results[r].stderr_text;
    if (results[r].exit_code != 1 || err.find(fmt::format("allreduce #{} failed", seq)) == std::string::npos ||
        err.find(detail) == std::string::npos)
      problems += fmt::format("rank {} exited {}, wanted 1 with 'allreduce #{} failed' and '{}':\n{}\n", r,
                              results[r].exit_code, seq, detail, err);
  }
  return problems;
}

/// A rank that never arrives (alive, until the others have failed) and a rank that dies: each a
/// 3-rank job, both at once (test::run_concurrently), since they wait rather than compute.
std::string never_arrives() {
  const std::string marks = test::scratch_dir("timeout_gave_up");
  const auto start = std::chrono::steady_clock::now();
  auto results = test::run_ranks(3, [marks](int rank, int) {
    dist::InitOptions o;
    o.timeout = std::chrono::seconds(3);
    auto pg = dist::init_process_group(o);
    Tensor t = ones({10});
    pg->allreduce(t)->wait();  // #1: everyone
    if (rank == 2) {  // stuck elsewhere, alive, until the others have failed
      expect(test::wait_for_gave_up(marks, {0, 1}), "rank 2: ranks 0 and 1 never gave up on #2");
      return;
    }
    test::GaveUp gave_up(marks, rank);
    pg->allreduce(t)->wait();  // #2: rank 2 never comes
  }, 60, "timeout");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string problems = absent_rank_report(results, 2, "ranks [2] did not arrive (rank 2 last entered #1)");
  if (took >= 30) problems += fmt::format("took {:.1f} s; ", took);
  if (results[2].exit_code != 0) problems += "rank 2 failed: " + results[2].stderr_text;
  return problems.empty() ? "" : "never arrives: " + problems;
}

std::string killed() {
  const auto start = std::chrono::steady_clock::now();
  auto results = test::run_ranks(3, [](int rank, int) {
    dist::InitOptions o;
    o.timeout = std::chrono::seconds(5);
    auto pg = dist::init_process_group(o);
    Tensor t = ones({1000});
    for (int i = 0; i < 3; ++i) pg->allreduce(t)->wait();  // #1..#3
    if (rank == 2) raise(SIGKILL);
    pg->allreduce(t)->wait();  // #4
  }, 60, "killed");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // (Entries are published at most every 20 ms, so the dead rank's may lag: no "last entered".)
  std::string problems = absent_rank_report(results, 4, "ranks [2] did not arrive");
  if (took >= 30) problems += fmt::format("took {:.1f} s; ", took);
  if (results[2].signal != SIGKILL) problems += "rank 2 was not killed; ";
  return problems.empty() ? "" : "killed: " + problems;
}

TEST_CASE("a rank that never arrives, or is killed, makes the others fail within the timeout, naming it") {
  for (const std::string& report : test::run_concurrently({never_arrives, killed}, "absent_rank"))
    CHECK_MESSAGE(report.empty(), report);
}

}  // namespace
}  // namespace kiln
