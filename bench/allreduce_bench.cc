// All-reduce bandwidth of a Kiln process group over sizes from 4 B to 64 MiB (f32 sum), with
// the nccl-tests definitions: algbw = bytes / time, busbw = algbw x 2(n-1)/n (what each link
// carries in a ring); with --op reduce_scatter or allgather, those collectives as ZeRO-1 runs
// them (busbw = algbw x (n-1)/n, bytes the whole buffer). Gloo (CPU tensors, this machine's
// loopback) or, in a build with CUDA, NCCL (each rank's tensors on cuda:LOCAL_RANK; one GPU per
// rank). Starts its own ranks (--nproc, default 2) as real processes on 127.0.0.1, or joins a
// job started by //distributed/launch. Rank 0 prints the table; the last line is JSON.
//   tools/bazel run //bench:allreduce_bench -- --nproc 2 [--backend nccl] [--op reduce_scatter]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/cuda_probe.h"
#include "bench/host_check.h"
#include "bench/local_job.h"
#include "bench/scaling_math.h"
#include "bench/timing.h"
#include "core/util/cli.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/launch/local_ranks.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/device.h"
#endif

using namespace kiln;
using kiln::bench::now_s;

namespace {

/// `host`: the start process's host check (null in a launched rank other than 0); rank 0
/// finishes it into the JSON line.
void run(int64_t max_bytes, const std::string& backend, bench::Collective op, bench::HostCheck* host) {
  Device dev = kCPU;
#ifdef KILN_HAVE_CUDA
  if (backend == "nccl") {
    const char* local = std::getenv("LOCAL_RANK");
    dev = Device(DeviceType::CUDA, local ? std::atoi(local) : 0);
    cuda::set_device(dev.index);
  }
#endif
  auto pg = dist::init_process_group({.backend = backend});
  const int n = pg->size(), rank = pg->rank();
  const char* name = bench::collective_name(op);
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (rank == 0) {
    fmt::print("{} {} (f32, sum where it reduces), {} ranks{}; bytes: the whole buffer (nccl-tests' size)\n", backend,
               name, n, dev.is_cuda() ? ", one GPU each" : " on 127.0.0.1");
    fmt::print("{:>12} {:>10} {:>12} {:>12}\n", "bytes", "time us", "algbw GB/s", "busbw GB/s");
  }
  for (int64_t size = 4; size <= max_bytes; size *= 4) {
    // The buffer of f32 elements; for the other collectives a multiple of the ranks, so that it
    // splits into chunks. As ZeRO runs them: reduce-scatter in place (this rank's chunk of the
    // buffer is the output), all-gather from a chunk of its own into the buffer.
    const bool whole = op == bench::Collective::kAllReduce;
    const int64_t chunk = std::max<int64_t>(1, (size / 4 + n - 1) / n), elems = whole ? size / 4 : chunk * n,
                  bytes = 4 * elems;
    Tensor t = ones({elems}).to(dev), mine = ones({chunk}).to(dev);
    auto issue = [&]() -> dist::WorkPtr {
      switch (op) {
        case bench::Collective::kReduceScatter: return pg->reduce_scatter_tensor(t.narrow(0, rank * chunk, chunk), t);
        case bench::Collective::kAllGather: return pg->allgather_into_tensor(t, mine);
        case bench::Collective::kAllReduce: break;
      }
      return pg->allreduce(t);
    };
    // Enough iterations for ~0.3 s per size (agreed on by all ranks: rank 0's estimate).
    issue()->wait();
    synchronize(dev);
    double t0 = now_s();
    for (int i = 0; i < 3; ++i) issue()->wait();
    synchronize(dev);
    Tensor iters = full({1}, std::clamp(0.3 / std::max((now_s() - t0) / 3, 1e-6), 5.0, 2000.0)).to(dev);
    pg->broadcast(iters, 0)->wait();
    const int k = static_cast<int>(iters.cpu().item<float>());
    pg->barrier()->wait();
    synchronize(dev);
    t0 = now_s();
    for (int i = 0; i < k; ++i) issue()->wait();
    synchronize(dev);
    double per = (now_s() - t0) / k;
    double algbw = static_cast<double>(bytes) / per / 1e9;
    double busbw = algbw * bench::ring_steps(op, n) / n;  // what each link carries in a ring
    if (rank == 0) {
      fmt::print("{:>12} {:>10.1f} {:>12.3f} {:>12.3f}\n", bytes, per * 1e6, algbw, busbw);
      results.push_back({{"bytes", bytes}, {"us", per * 1e6}, {"algbw_gbs", algbw}, {"busbw_gbs", busbw}});
    }
  }
  if (rank == 0) {
    nlohmann::ordered_json line = {
        {"benchmark", "allreduce"}, {"op", name}, {"backend", backend}, {"ranks", n}, {"results", results}};
    if (host) host->finish(line);
    fmt::print("{}\n", line.dump());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2;
  int64_t max_bytes = int64_t{64} << 20;
  std::string backend = "gloo";
  cli::App app("All-reduce algbw/busbw over sizes from 4 B to --max-bytes.", "allreduce_bench");
  app.add_option("--nproc", nproc, "ranks to start (ignored under //distributed/launch)")->check(cli::range(1, 256));
  app.add_option("--max-bytes", max_bytes, "largest message in bytes")->check(cli::range<int64_t>(4, int64_t{1} << 40));
  app.add_option("--backend", backend, "process group backend")->check(cli::one_of({"gloo", "nccl"}));
  std::string op_name = "allreduce";
  app.add_option("--op", op_name, "the collective: allreduce, or reduce_scatter / allgather as ZeRO runs them")
      ->check(cli::one_of({"allreduce", "reduce_scatter", "allgather"}));
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const bench::Collective op = bench::parse_collective(op_name);
  if (backend == "nccl" && !dist::launched_with_world() && !bench::cuda_device_present()) {
    std::printf("skipped: no CUDA device\n{\"bench\": \"allreduce\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  std::optional<bench::HostCheck> host;
  if (bench::leads_job()) {
    host.emplace("allreduce_bench", allow_load);
    if (!host->may_report()) return bench::kLoadedExitCode;
  }
  bench::HostCheck* host_ptr = host ? &*host : nullptr;
  if (dist::launched_with_world()) {  // under //distributed/launch
    run(max_bytes, backend, op, host_ptr);
    return 0;
  }
  auto results =
      dist::run_local_ranks(nproc, [&](int, int) { run(max_bytes, backend, op, host_ptr); }, {.timeout_s = 600});
  for (size_t r = 0; r < results.size(); ++r)
    if (results[r].exit_code != 0) {
      std::fprintf(stderr, "allreduce_bench: rank %zu failed\n", r);
      return 1;
    }
  return 0;
}
