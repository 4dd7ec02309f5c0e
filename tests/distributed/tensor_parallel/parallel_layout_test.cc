// The 3D rank layout (data x pipeline x tensor, tensor fastest): coordinates, groups, the printed
// table and the errors for worlds that do not factor; and make_groups on 4 real processes, where
// an all-reduce over each group sums exactly its members' ranks.
#include <doctest/doctest.h>

#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/tensor_parallel/parallel_layout.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using dist::ParallelLayout;
using test::expect;

TEST_CASE("ParallelLayout: tensor peers neighbour, then stages, then replicas") {
  ParallelLayout l(8, /*tensor=*/2, /*pipeline=*/2);
  CHECK(l.data() == 2);
  const dist::ParallelCoords c = l.coords(5);  // (1 * 2 + 0) * 2 + 1
  CHECK(c.data == 1);
  CHECK(c.pipeline == 0);
  CHECK(c.tensor == 1);
  CHECK(l.rank_of(c) == 5);
  CHECK(l.tensor_ranks(5) == std::vector<int>{4, 5});
  CHECK(l.pipeline_ranks(5) == std::vector<int>{5, 7});
  CHECK(l.data_ranks(5) == std::vector<int>{1, 5});
  for (int r = 0; r < 8; ++r) CHECK(l.rank_of(l.coords(r)) == r);
  // With tensor 1 it is pipeline_groups()'s layout: rank = replica * stages + stage.
  ParallelLayout p(6, 1, 3);
  CHECK(p.pipeline_ranks(4) == std::vector<int>{3, 4, 5});
  CHECK(p.data_ranks(4) == std::vector<int>{1, 4});
  CHECK(l.describe().find("world 8 = data 2 x pipeline 2 x tensor 2") == 0);
  CHECK(l.describe().find("rank   5: data  1  stage  0  tensor  1") != std::string::npos);
}

TEST_CASE("ParallelLayout: worlds that do not factor name the numbers") {
  CHECK_THROWS_WITH(ParallelLayout(6, 4, 1),
                    doctest::Contains("a world of 6 ranks does not divide into tensor 4 x pipeline 1 (= 4)"));
  CHECK_THROWS_WITH(ParallelLayout(8, 2, 2, 3),
                    doctest::Contains("data 3 x pipeline 2 x tensor 2 = 12 ranks, but the world has 8"));
  CHECK_THROWS_WITH(ParallelLayout(4, 0, 1), doctest::Contains("sizes must be positive"));
  CHECK_THROWS_WITH(ParallelLayout(4, 2, 1).coords(4), doctest::Contains("rank 4 is outside the world of 4"));
}

void groups(int rank, int world, int tensor, int pipeline) {
  dist::init_process_group();
  const ParallelLayout layout(world, tensor, pipeline);
  const dist::ParallelGroups g = dist::make_groups(layout);
  auto sum_of_ranks = [&](const std::shared_ptr<dist::ProcessGroup>& pg, const std::vector<int>& members,
                          const char* what) {
    expect(pg != nullptr, "rank {}: no {} group", rank, what);
    expect(pg->size() == static_cast<int>(members.size()), "rank {}: {} group of {}, want {}", rank, what, pg->size(),
           members.size());
    Tensor t = full({1}, static_cast<double>(rank));
    pg->allreduce(t)->wait();
    double want = 0;
    for (int m : members) want += m;
    expect(t.item<float>() == want, "rank {}: {} group summed {}, its members {}", rank, what, t.item<float>(), want);
  };
  sum_of_ranks(g.tensor, layout.tensor_ranks(rank), "tensor");
  sum_of_ranks(g.pipeline, layout.pipeline_ranks(rank), "pipeline");
  sum_of_ranks(g.data, layout.data_ranks(rank), "data");
  expect(g.tensor->rank() == g.coords.tensor && g.pipeline->rank() == g.coords.pipeline &&
             g.data->rank() == g.coords.data,
         "rank {}: group ranks {}/{}/{} are not its coordinates", rank, g.tensor->rank(), g.pipeline->rank(),
         g.data->rank());
}

TEST_CASE("make_groups on 4 ranks: tensor 2 x data 2, and tensor 2 x pipeline 2") {
  test::require_all_ok(test::run_ranks(4, [](int r, int w) { groups(r, w, 2, 1); }, 120, "layout_t2d2"));
  test::require_all_ok(test::run_ranks(4, [](int r, int w) { groups(r, w, 2, 2); }, 120, "layout_t2p2"));
}

}  // namespace
}  // namespace kiln
