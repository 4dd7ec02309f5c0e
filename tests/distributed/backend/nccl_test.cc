// The NCCL backend on real GPUs: a 1-rank group (real NCCL calls) and, on a one-GPU host, two
// ranks that NCCL is told to treat as separate hosts (NCCL_HOSTID, sockets), each collective
// against the answer computed on the CPU; two groups on one store, a paired exchange, and a peer
// that never joins or dies (set-up and destructor give up after the timeout instead of hanging).
// Skips visibly without the toolkit or a GPU. The GPU count is asked in a child: CUDA
// initialised in this process would not survive the fork of the ranks.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/ops.h"
#include "distributed/backend/init.h"
#include "tests/distributed/multiprocess.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/device.h"
#include "distributed/store/file_store.h"
#include "distributed/backend/nccl_backend.h"
#include "distributed/data_parallel/zero.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#endif

namespace kiln {
namespace {

using test::expect;

bool skip(const char* why) {
  std::printf("skipped: %s (%s)\n", why, doctest::getContextOptions()->currentTest->m_name);
  MESSAGE(std::string(why));
  return true;
}

#ifdef KILN_HAVE_CUDA
int gpus_seen_by_a_child() {
  auto r = dist::run_local_ranks(1, [](int, int) { _exit(std::min(cuda::device_count(), 100)); });
  return r[0].exit_code;
}

void check_collectives(int rank, int world) {
  Device gpu(DeviceType::CUDA, 0);
  setenv("LOCAL_RANK", "0", 1);  // every rank of this test on the one GPU
  cuda::set_device(0);
  auto pg = dist::init_process_group({.backend = "nccl"});
  expect(pg->backend() == "nccl", "backend {}", pg->backend());
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 22}) {
    for (DType dt : {kFloat32, kBFloat16, kFloat16, kInt64}) {
      Tensor host = full({n}, rank + 1, dtype(dt));
      Tensor t = host.to(gpu);
      pg->allreduce(t, dist::ReduceOp::kSum)->wait();
      double want = world * (world + 1) / 2.0;
      Tensor back = t.cpu().to(kFloat64);
      expect(back.min().item<double>() == want && back.max().item<double>() == want, "allreduce n={} {}: {}", n, dt,
             back.min().item<double>());
    }
    Tensor b = full({n}, rank + 10.0).to(gpu);
    pg->broadcast(b, world - 1)->wait();
    expect(b.cpu().min().item<float>() == world - 1 + 10.0f, "broadcast n={}", n);
    std::vector<Tensor> outs;
    for (int r = 0; r < world; ++r) outs.push_back(zeros({n}).to(gpu));
    pg->allgather(outs, full({n}, rank * 1.0).to(gpu))->wait();
    for (int r = 0; r < world; ++r) expect(outs[r].cpu().max().item<float>() == r, "allgather slot {}", r);
    // ZeRO's flat forms: chunk c of every rank's input is c + 1, so rank r receives world * (r + 1).
    Tensor flat = empty({world * n}).to(gpu), chunk = zeros({n}).to(gpu);
    for (int c = 0; c < world; ++c) flat.narrow(0, c * n, n).fill_(c + 1.0);
    pg->reduce_scatter_tensor(chunk, flat, dist::ReduceOp::kSum)->wait();
    expect(chunk.cpu().min().item<float>() == world * (rank + 1.0f) && chunk.cpu().max().item<float>() == world * (rank + 1.0f),
           "reduce_scatter_tensor n={}: {}", n, chunk.cpu().min().item<float>());
    Tensor gathered = zeros({world * n}).to(gpu);
    pg->allgather_into_tensor(gathered, full({n}, rank * 1.0).to(gpu))->wait();
    for (int r = 0; r < world; ++r)
      expect(gathered.narrow(0, r * n, n).cpu().max().item<float>() == r, "allgather_into_tensor slot {}", r);
  }
  // Host tensors go through device copies, as DDP's model check and the trainers' metadata need.
  Tensor h = full({5}, rank + 1.0);
  pg->allreduce(h, dist::ReduceOp::kSum)->wait();
  expect(h.min().item<float>() == world * (world + 1) / 2.0f, "allreduce of a host tensor: {}", h.min().item<float>());
  Tensor hb = full({3}, rank + 10, dtype(kInt64));
  pg->broadcast(hb, 0)->wait();
  expect(hb.max().item<int64_t>() == 10, "broadcast of a host tensor: {}", hb.max().item<int64_t>());
  std::vector<Tensor> hs;
  for (int r = 0; r < world; ++r) hs.push_back(zeros({2}, dtype(kInt32)));
  pg->allgather(hs, full({2}, rank, dtype(kInt32)))->wait();
  for (int r = 0; r < world; ++r)
    expect(hs[r].max().item<int32_t>() == r, "allgather of host tensors, slot {}: {}", r, hs[r].max().item<int32_t>());
  if (world > 1 && rank < 2) {
    Tensor m = full({4}, rank == 0 ? 7.0 : 0.0);
    (rank == 0 ? pg->send(m, 1, 0) : pg->recv(m, 0, 0))->wait();
    expect(m.min().item<float>() == 7.0f, "send/recv of a host tensor: {}", m.min().item<float>());
  }
  pg->barrier()->wait();
}

void use_one_gpu();

// ZeRO-1 on the GPU over NCCL against DDP with the same Adam: four steps, then the parameters, the
// state bytes per rank and the consolidated state (all-gathered on the GPU).
void check_zero(int rank, int world) {
  use_one_gpu();
  Device gpu(DeviceType::CUDA, 0);
  auto pg = dist::init_process_group({.backend = "nccl"});
  manual_seed(3);
  auto make = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(16, 64), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(64, 7)});
  };
  auto a = make(), b = make();
  a->to(gpu);
  b->to(gpu);
  dist::DDPOptions o;
  o.first_bucket_mb = 0.001;
  o.bucket_cap_mb = 0.004;
  dist::DistributedDataParallel ddp_a(a, pg, o), ddp_b(b, pg, o);
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < a->parameters().size(); ++i) b->parameters()[i].copy_(a->parameters()[i]);
  }
  optim::Adam plain(a->parameters(), optim::AdamOptions(1e-2));
  dist::ZeroRedundancyOptimizer zero(ddp_b, dist::optimizer_factory<optim::Adam>(optim::AdamOptions(1e-2)));
  for (int step = 0; step < 4; ++step) {
    Generator g(40 + static_cast<uint64_t>(step));
    Tensor x = randn({8 * world, 16}, {}, &g).narrow(0, 8 * rank, 8).to(gpu);
    Tensor y = randint(0, 7, {8 * world}, kInt64, &g).narrow(0, 8 * rank, 8).to(gpu);
    nn::functional::cross_entropy(ddp_a(x), y).backward();
    nn::functional::cross_entropy(ddp_b(x), y).backward();
    plain.step();
    zero.step();
    plain.zero_grad();
    zero.zero_grad();
  }
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    const float d = (a->parameters()[i] - b->parameters()[i]).abs().max().cpu().item<float>();
    expect(d <= 1e-5f, "ZeRO over NCCL: parameter {} differs from DDP by {}", i, d);
  }
  optim::StateDict cz = zero.consolidated_state_dict(), cp = plain.state_dict();
  expect(cz.size() == cp.size(), "consolidated state: {} keys, DDP's optimizer {}", cz.size(), cp.size());
  for (const auto& [key, t] : cp) {
    const double d = (cz.at(key).cpu().to(kFloat64) - t.cpu().to(kFloat64)).abs().max().item<double>();
    expect(d <= 1e-5, "consolidated '{}' differs by {}", key, d);
  }
}

// Ranks on one GPU: NCCL refuses them as one host, so each gets its own host id and talks over
// sockets (TOOLCHAIN.md).
std::vector<test::RankResult> run_ranks_as_hosts(int n, const std::function<void(int, int)>& body,
                                                 const std::string& name) {
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_NET", "Socket", 1);
  return test::run_ranks(n, [&](int rank, int world) {
    setenv("NCCL_HOSTID", fmt::format("kiln-test-host-{}", rank).c_str(), 1);
    body(rank, world);
  }, 300, name);
}

void use_one_gpu() {
  setenv("LOCAL_RANK", "0", 1);
  cuda::set_device(0);
}

// Two groups one after the other on the same store: the second must not read the first's NCCL
// id (each group has its own store prefix). In each, ranks exchange tensors with send_recv (one
// NCCL group call), which separate send and recv calls on both sides could deadlock.
void check_groups_and_exchange(const std::string& store_path, int rank, int world) {
  use_one_gpu();
  auto store = std::make_shared<dist::FileStore>(store_path, world);
  Device gpu(DeviceType::CUDA, 0);
  for (int g = 0; g < 2; ++g) {
    dist::ProcessGroupNCCL pg(store, rank, world, std::chrono::seconds(120));
    Tensor t = full({1000}, rank + 1.0).to(gpu);
    pg.allreduce(t, dist::ReduceOp::kSum)->wait();
    expect(t.cpu().min().item<float>() == world * (world + 1) / 2.0f, "group {}: allreduce", g);
    if (world < 2) continue;
    const int peer = 1 - rank;
    Tensor mine = full({1 << 20}, rank + 1.0).to(gpu), theirs = zeros({1 << 20}).to(gpu);
    pg.send_recv(mine, peer, theirs, peer)->wait();
    expect(theirs.cpu().min().item<float>() == peer + 1.0f && theirs.cpu().max().item<float>() == peer + 1.0f,
           "group {}: send_recv got {}", g, theirs.cpu().min().item<float>());
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Rank 1 never joins: rank 0's non-blocking set-up fails after its 5 s timeout, naming the call.
void check_missing_peer(const std::string& store_path, int rank, int world) {
  if (rank == 1) return;
  use_one_gpu();
  auto store = std::make_shared<dist::FileStore>(store_path, world);
  const auto start = std::chrono::steady_clock::now();
  std::string msg = "no error";
  try {
    dist::ProcessGroupNCCL pg(store, rank, world, std::chrono::seconds(5));
  } catch (const std::exception& e) {
    msg = e.what();
  }
  expect(msg.find("ncclCommInitRankConfig") != std::string::npos, "set-up without a peer: {}", msg);
  expect(seconds_since(start) < 90, "set-up without a peer took {} s", seconds_since(start));
}

// Rank 1 dies after joining: rank 0's collective cannot finish, and dropping the group (and the
// collective's Work) returns after the bounded waits instead of blocking forever.
void check_dead_peer(const std::string& store_path, int rank, int world) {
  use_one_gpu();
  auto store = std::make_shared<dist::FileStore>(store_path, world);
  auto pg = std::make_unique<dist::ProcessGroupNCCL>(store, rank, world, std::chrono::seconds(5));
  if (rank == 1) _exit(0);  // no destructors: a peer that vanished
  const auto start = std::chrono::steady_clock::now();
  // NCCL connects lazily, on the first collective: with the peer gone that connection never
  // completes, and the collective fails after the group's timeout (the communicator aborted).
  // Either way (an error now, or a Work that never finishes), dropping everything is bounded.
  std::string msg = "no error";
  try {
    dist::WorkPtr w = pg->allreduce(full({1 << 20}, 1.0).to(Device(DeviceType::CUDA, 0)), dist::ReduceOp::kSum);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } catch (const std::exception& e) {
    msg = e.what();
  }
  expect(msg == "no error" || (msg.find("allreduce") != std::string::npos && msg.find("aborted") != std::string::npos),
         "a collective with a dead peer failed without naming itself and the abort: {}", msg);
  pg.reset();
  expect(seconds_since(start) < 120, "dropping a group with a dead peer took {} s", seconds_since(start));
}
#endif

/// True (after saying why, visibly) when this build or machine cannot run NCCL.
bool cannot_run_nccl() {
#ifndef KILN_HAVE_CUDA
  return skip("this build has no CUDA toolkit");
#else
  return gpus_seen_by_a_child() <= 0 && skip("no CUDA device");
#endif
}

TEST_CASE("NCCL collectives on one rank and on two ranks of one GPU") {
  if (cannot_run_nccl()) return;
#ifdef KILN_HAVE_CUDA
  test::require_all_ok(test::run_ranks(1, check_collectives, 300, "nccl1"));
  test::require_all_ok(run_ranks_as_hosts(2, check_collectives, "nccl2"));
  for (int world : {1, 2}) {
    const std::string path = test::scratch_dir(fmt::format("nccl_groups{}", world)) + "/store";
    test::require_all_ok(run_ranks_as_hosts(world, [&](int rank, int w) { check_groups_and_exchange(path, rank, w); },
                                            fmt::format("nccl_groups_ranks{}", world)));
  }
#endif
}

TEST_CASE("ZeRO-1 over NCCL matches DDP, on one rank and two ranks of one GPU") {
  if (cannot_run_nccl()) return;
#ifdef KILN_HAVE_CUDA
  test::require_all_ok(test::run_ranks(1, check_zero, 300, "nccl_zero1"));
  test::require_all_ok(run_ranks_as_hosts(2, check_zero, "nccl_zero2"));
#endif
}

TEST_CASE("an NCCL peer that never joins or dies fails the group after the timeout, not never") {
  if (cannot_run_nccl()) return;
#ifdef KILN_HAVE_CUDA
  const std::string missing = test::scratch_dir("nccl_missing_peer") + "/store";
  test::require_all_ok(run_ranks_as_hosts(2, [&](int rank, int world) { check_missing_peer(missing, rank, world); },
                                          "nccl_missing_peer_ranks"));
  const std::string dead = test::scratch_dir("nccl_dead_peer") + "/store";
  test::require_all_ok(run_ranks_as_hosts(2, [&](int rank, int world) { check_dead_peer(dead, rank, world); },
                                          "nccl_dead_peer_ranks"));
#endif
}

TEST_CASE("asking for NCCL in a program without it names what to link") {
#ifdef KILN_HAVE_CUDA
  skip("this program links the NCCL backend");
#else
  auto results = test::run_ranks(1, [](int, int) {
    std::string msg = "no error";
    try {
      dist::init_process_group({.backend = "nccl"});
    } catch (const std::exception& e) {
      msg = e.what();
    }
    expect(msg.find("backend 'nccl' is not in this program: link //distributed/backend:nccl") != std::string::npos, "got: {}",
           msg);
  }, 60, "nccl_missing");
  test::require_all_ok(results);
#endif
}

}  // namespace
}  // namespace kiln
