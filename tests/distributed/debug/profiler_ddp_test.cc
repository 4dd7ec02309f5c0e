// The profiler under data parallel on 2 real processes: each rank writes its own Chrome trace
// (rank in the file name and the process row); the traces parse, thread events nest, durations
// are non-negative, every gradient bucket's all-reduce of every step appears on every rank, and
// the ranks' clocks are aligned (the same all-reduce ends at nearly the same time everywhere).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/backend/init.h"
#include "distributed/debug/traced_process_group.h"
#include "nn/nn.h"
#include "profiler/profiler.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using json = nlohmann::json;
constexpr int kSteps = 3;

void profiled_rank(int rank, const std::string& dir) {
  auto pg = dist::trace_process_group(dist::init_process_group());
  dist::align_profiler_clock(*pg);
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 256),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
  // Small buckets: several all-reduces per step.
  dist::DistributedDataParallel ddp(model, pg, {.first_bucket_mb = 0.05, .bucket_cap_mb = 0.2});
  profiler::Profiler prof({.record_shapes = true, .rank = rank});
  prof.start();
  for (int s = 0; s < kSteps; ++s) {
    profiler::RecordFunction step("train_step");
    Generator g(100 + static_cast<uint64_t>(s) * 2 + static_cast<uint64_t>(rank));
    Tensor x = randn({32, 64}, {}, &g);
    Tensor y = randint(0, 10, {32}, kInt64, &g);
    Tensor loss = nn::functional::cross_entropy(ddp(x), y);
    loss.backward();
  }
  prof.stop();
  prof.export_chrome_trace(fmt::format("{}/trace.rank{}.json", dir, rank));
  std::ofstream(fmt::format("{}/buckets.rank{}", dir, rank)) << ddp.bucket_names().size();
}

}  // namespace

TEST_CASE("per-rank Chrome traces of a DDP run: structure, bucket all-reduces on every rank, aligned clocks") {
  const std::string dir = test::scratch_dir("profiler_ddp");
  test::require_all_ok(test::run_ranks(2, [dir](int rank, int) { profiled_rank(rank, dir); }, 120, "profiler_ddp"));

  int buckets = 0;
  std::ifstream(dir + "/buckets.rank0") >> buckets;
  REQUIRE(buckets >= 2);
  std::map<int, std::map<int64_t, std::pair<double, double>>> allreduce;  // rank -> seq -> (ts, end)
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    std::ifstream f(fmt::format("{}/trace.rank{}.json", dir, rank));
    REQUIRE(f.good());
    json doc = json::parse(f);
    bool labelled = false, backward = false, kernels = false;
    std::map<int64_t, std::vector<std::pair<double, double>>> rows;
    std::map<int64_t, std::string> row_names;
    for (const json& e : doc["traceEvents"]) {
      CHECK(e["pid"] == rank);
      if (e["ph"] == "M" && e["name"] == "process_name") labelled = e["args"]["name"] == fmt::format("rank {}", rank);
      if (e["ph"] == "M" && e["name"] == "thread_name") row_names[e["tid"]] = e["args"]["name"];
      if (e["ph"] != "X") continue;
      double ts = e["ts"], dur = e["dur"];
      CHECK(dur >= 0);
      rows[e["tid"]].push_back({ts, ts + dur});
      backward |= e["cat"] == "backward";
      kernels |= e["cat"] == "kernel";
      if (e["cat"] == "collective" && std::string(e["name"]).rfind("allreduce", 0) == 0)
        allreduce[rank][e["args"]["seq"].get<int64_t>()] = {ts, ts + dur};
    }
    CHECK(labelled);
    CHECK(backward);
    CHECK(kernels);
    for (auto& [tid, spans] : rows) {  // events of one row are disjoint or nested
      CAPTURE(row_names[tid]);
      std::sort(spans.begin(), spans.end(),
                [](auto a, auto b) { return a.first < b.first || (a.first == b.first && a.second > b.second); });
      std::vector<double> open;
      for (auto [s, e] : spans) {
        while (!open.empty() && open.back() <= s) open.pop_back();
        if (!open.empty()) CHECK(e <= open.back() + 1e-3);
        open.push_back(e);
      }
    }
    CHECK(static_cast<int>(allreduce[rank].size()) >= buckets * kSteps);
  }
  // The same all-reduces on both ranks, ending at nearly the same time on the shared clock.
  std::set<int64_t> seq0, seq1;
  for (auto& [s, t] : allreduce[0]) seq0.insert(s);
  for (auto& [s, t] : allreduce[1]) seq1.insert(s);
  CHECK(seq0 == seq1);
  for (int64_t s : seq0) {
    CAPTURE(s);
    double end0 = allreduce[0][s].second, end1 = allreduce[1][s].second;
    CHECK(std::abs(end0 - end1) < 50e3);  // µs: same host, barrier-aligned origin
  }
}

}  // namespace kiln
