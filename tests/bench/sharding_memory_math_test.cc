// The per-rank memory formulas of bench/sharding_memory (bench/sharding_memory_math.h) on
// hand-worked counts: 16 bytes per parameter in f32 with AdamW, divided as each strategy shards.
#include <doctest/doctest.h>

#include "bench/sharding_memory_math.h"
#include "core/error.h"

namespace kiln::bench {
namespace {

TEST_CASE("formula_bytes: DDP 4+4+8, ZeRO-1 shards the state, ZeRO-2/3 everything, TP the split part") {
  const ParamCount p{1000, 900};  // 100 replicated under TP
  MemoryBytes ddp = formula_bytes(Sharding::kDdp, p, 4);
  CHECK(ddp.params == 4000);
  CHECK(ddp.grads == 4000);
  CHECK(ddp.state == 8000);
  CHECK(ddp.total() == 16000);
  MemoryBytes z1 = formula_bytes(Sharding::kZero1, p, 4);
  CHECK(z1.total() == 4000 + 4000 + 2000);
  for (Sharding s : {Sharding::kZero2, Sharding::kZero3}) {
    MemoryBytes z = formula_bytes(s, p, 4);
    CHECK(z.params == 1000);
    CHECK(z.total() == 4000);
    CHECK(z.total() / ddp.total() <= 0.30);  // the target for ZeRO-3 on 4 ranks
  }
  // TP 4: 900 / 4 + 100 = 325 parameters per rank, 16 bytes each.
  MemoryBytes tp = formula_bytes(Sharding::kTensorParallel, p, 4);
  CHECK(tp.params == 4 * 325);
  CHECK(tp.total() == 16 * 325);
  CHECK(formula_bytes(Sharding::kDdp, p, 1).total() == formula_bytes(Sharding::kZero3, p, 1).total());
  CHECK_THROWS_WITH_AS(formula_bytes(Sharding::kDdp, p, 0), doctest::Contains("0 ranks"), kiln::Error);
  CHECK_THROWS_WITH_AS(formula_bytes(Sharding::kTensorParallel, {10, 20}, 2), doctest::Contains("20 split parameters of 10"),
                       kiln::Error);
}

TEST_CASE("gathered_bytes: ZeRO-2 holds every unit during a step, ZeRO-3 the root and the two largest blocks") {
  const std::vector<double> units = {50, 10, 30, 20};  // the root first
  CHECK(gathered_bytes(Sharding::kZero2, units) == 4 * 110);
  CHECK(gathered_bytes(Sharding::kZero3, units) == 4 * (50 + 30 + 20));
  CHECK(gathered_bytes(Sharding::kZero3, {50}) == 4 * 50);
  CHECK(gathered_bytes(Sharding::kDdp, units) == 0);
  CHECK(paper_params(Sharding::kZero2, {1000, 0}) == 4000);
  CHECK(paper_params(Sharding::kZero3, {1000, 0}) == 0);
}

TEST_CASE("strategy names round-trip; a bad one is named") {
  for (Sharding s : {Sharding::kDdp, Sharding::kZero1, Sharding::kZero2, Sharding::kZero3, Sharding::kTensorParallel})
    CHECK(parse_sharding(sharding_name(s)) == s);
  CHECK(std::string(sharding_label(Sharding::kZero3)) == "ZeRO-3");
  CHECK_THROWS_WITH_AS(parse_sharding("zero4"), doctest::Contains("'zero4'"), kiln::Error);
  CHECK(ratio(3, 2) == 1.5);
  CHECK(ratio(3, 0) == 0);
}

}  // namespace
}  // namespace kiln::bench
