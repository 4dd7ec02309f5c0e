// The hierarchical all-reduce (distributed/backend/hierarchical_allreduce.h) as real processes on one
// machine, with the launcher's GROUP_RANK making "nodes" of them: it is chosen exactly when the
// ranks span several nodes with several ranks on some, and it gives the flat ring's answers
// (exact for integer-valued data in every op and dtype; to f32 rounding for random data,
// where both are compared with an f64 reference), across the 4 MiB shared-memory chunks.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/generator.h"
#include "distributed/backend/gloo_backend.h"
#include "distributed/backend/init.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using dist::ReduceOp;
using test::expect;

Tensor rank_values(int rank, int64_t n, DType dt) {
  Tensor v = empty({n}, dtype(kFloat64));
  double* p = v.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>((i % 11 + 1) * (rank + 2));
  return v.to(dt);
}

Tensor expected(int world, int64_t n, DType dt, ReduceOp op) {
  Tensor acc = rank_values(0, n, kFloat64);
  for (int r = 1; r < world; ++r) {
    Tensor v = rank_values(r, n, kFloat64);
    acc = op == ReduceOp::kMax ? maximum(acc, v) : op == ReduceOp::kMin ? minimum(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc = acc / world;
  return acc.to(dt);
}

// Random f32 data of rank r (the same on every rank that regenerates it).
Tensor random_values(int r, int64_t n) {
  manual_seed(1000 + r);
  return randn({n});
}

/// Runs the checks on `nodes[r]` = rank r's GROUP_RANK; `hierarchical` false sets
/// KILN_HIERARCHICAL_ALLREDUCE=0 (the flat TCP ring).
void check_layout(const std::vector<int>& nodes, bool hierarchical, const std::string& layout) {
  const int world = static_cast<int>(nodes.size());
  auto results = test::run_ranks(world, [&](int rank, int) {
    setenv("GROUP_RANK", std::to_string(nodes[rank]).c_str(), 1);
    setenv("KILN_HIERARCHICAL_ALLREDUCE", hierarchical ? "1" : "0", 1);
    auto pg = dist::init_process_group();
    auto& gloo = dynamic_cast<dist::ProcessGroupGloo&>(*pg);
    expect(!gloo.uses_shared_memory(), "ranks on different nodes must not share one segment");
    expect(gloo.uses_hierarchy() == hierarchical, "uses_hierarchy() {} (want {})", gloo.uses_hierarchy(),
           hierarchical);
    if (hierarchical)
      expect(gloo.allreduce_path().find(layout) != std::string::npos, "path '{}' does not say '{}'",
             gloo.allreduce_path(), layout);
    // Exact answers: small integers, every op, several dtypes, sizes across the 4 MiB chunks.
    const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
    for (int64_t n : {int64_t{1}, int64_t{1031}, (int64_t{4} << 20) / 4 + 3}) {
      if (!test::size_checked_here(n)) continue;
      // The answers in f64 once per size, not once per dtype (at 4-5 ranks the reference cost
      // more than the collectives).
      const Tensor mine = rank_values(rank, n, kFloat64);
      std::vector<Tensor> answers;
      for (ReduceOp op : ops) answers.push_back(expected(world, n, kFloat64, op));
      for (DType dt : {kFloat32, kFloat64, kInt32, kBFloat16})
        for (size_t i = 0; i < ops.size(); ++i) {
          const ReduceOp op = ops[i];
          if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
          if (op == ReduceOp::kAvg && dt == kBFloat16) continue;  // 1/world rounds there
          Tensor t = mine.to(dt).clone();  // to(f64) is mine itself, and allreduce works in place
          pg->allreduce(t, op)->wait();
          Tensor want = answers[i].to(dt);
          double diff = (t.to(kFloat64) - want.to(kFloat64)).abs().max().item<double>();
          double tol = op == ReduceOp::kAvg ? 1e-12 * world * 12 : 0;
          expect(diff <= tol, "allreduce {} n={} {}: off by {}", dist::reduce_op_name(op), n, dt, diff);
        }
    }
    // Random data: the f64 sum, to f32 rounding (summation order differs between algorithms).
    const int64_t n = (int64_t{2} << 20) + 5;  // 8 MB: three shared-memory chunks, the last of 5 floats
    if (!test::size_checked_here(n)) return;
    Tensor t = random_values(rank, n);
    pg->allreduce(t)->wait();
    Tensor want = zeros({n}, dtype(kFloat64));
    for (int r = 0; r < world; ++r) want = want + random_values(r, n).to(kFloat64);
    double err = ((t.to(kFloat64) - want).abs() - want.abs() * 1e-6).max().item<double>();
    expect(err <= 1e-5, "random f32 sum: off by {} beyond 1e-6 relative", err);
  }, 300, "hierarchical_" + layout);
  test::require_all_ok(results);
}

TEST_CASE("hierarchical all-reduce: 2 nodes x 2 ranks equals the reference, as the flat ring does") {
  check_layout({0, 0, 1, 1}, true, "2 nodes x 2 ranks");
  check_layout({0, 0, 1, 1}, false, "");
}

TEST_CASE("hierarchical all-reduce: 3 nodes of 2, 1 and 2 ranks (a node without shared memory)") {
  check_layout({0, 0, 1, 2, 2}, true, "3 nodes with 2/1/2 ranks");
}

TEST_CASE("hierarchical all-reduce is not used with one rank per node, nor on one node") {
  for (const std::vector<int>& nodes : {std::vector<int>{0, 1, 2}, std::vector<int>{0, 0, 0}}) {
    const bool one_node = nodes[1] == 0;
    auto results = test::run_ranks(3, [&](int rank, int) {
      setenv("GROUP_RANK", std::to_string(nodes[rank]).c_str(), 1);
      auto pg = dist::init_process_group();
      auto& gloo = dynamic_cast<dist::ProcessGroupGloo&>(*pg);
      expect(!gloo.uses_hierarchy(), "hierarchical with GROUP_RANKs {}/{}/{}", nodes[0], nodes[1], nodes[2]);
      expect(gloo.uses_shared_memory() == one_node, "shared memory {} on {}", gloo.uses_shared_memory(),
             one_node ? "one node" : "three nodes");
      Tensor t = rank_values(rank, 100, kFloat32);
      pg->allreduce(t)->wait();
      expect((t - expected(3, 100, kFloat32, ReduceOp::kSum)).abs().max().item<float>() == 0, "wrong sum");
    }, 120, "hierarchical_off");
    test::require_all_ok(results);
  }
}

}  // namespace
}  // namespace kiln
