// The NCCL backend on real GPUs: a 1-rank group (real NCCL calls) and, on a one-GPU host, two
// ranks that NCCL is told to treat as separate hosts (NCCL_HOSTID, sockets), each collective
// against the answer computed on the CPU. Skips visibly without the toolkit or a GPU. The GPU
// count is asked in a child: CUDA initialised in this process would not survive the fork of
// the ranks.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/ops.h"
#include "distributed/init.h"
#include "tests/distributed/multiprocess.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/device.h"
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
  }
  pg->barrier()->wait();
}
#endif

TEST_CASE("NCCL collectives on one rank and on two ranks of one GPU") {
#ifndef KILN_HAVE_CUDA
  skip("this build has no CUDA toolkit");
#else
  if (gpus_seen_by_a_child() <= 0) {
    skip("no CUDA device");
    return;
  }
  test::require_all_ok(test::run_ranks(1, check_collectives, 300, "nccl1"));
  // Two ranks on one GPU: NCCL refuses them as one host, so each gets its own host id and
  // talks over sockets (TOOLCHAIN.md).
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_NET", "Socket", 1);
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    setenv("NCCL_HOSTID", fmt::format("kiln-test-host-{}", rank).c_str(), 1);
    check_collectives(rank, world);
  }, 300, "nccl2"));
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
    expect(msg.find("backend 'nccl' is not in this program: link //distributed:nccl") != std::string::npos, "got: {}",
           msg);
  }, 60, "nccl_missing");
  test::require_all_ok(results);
#endif
}

}  // namespace
}  // namespace kiln
