// cuDNN algorithm choice without a GPU: exact f32/f64 never runs tensor-op math (default math is
// run as FMA), half and TF32 keep the algorithm's own math type, and an algorithm whose
// workspace cannot be allocated gives way to the next one.
#include <doctest/doctest.h>

#include "cuda/conv_algo.h"

using namespace kiln::cuda;

namespace {
bool any_workspace(size_t) { return true; }
}  // namespace

TEST_CASE("exact precision accepts FMA math only; default math is run as FMA") {
  CHECK(conv_math_for(true, ConvMath::kFma) == ConvMath::kFma);
  CHECK(conv_math_for(true, ConvMath::kDefault) == ConvMath::kFma);
  CHECK(!conv_math_for(true, ConvMath::kTensorOp));
  CHECK(!conv_math_for(true, ConvMath::kTensorOpAllowConversion));
}

TEST_CASE("half and TF32 precision run the algorithm's own math type") {
  for (ConvMath m : {ConvMath::kDefault, ConvMath::kTensorOp, ConvMath::kTensorOpAllowConversion, ConvMath::kFma})
    CHECK(conv_math_for(false, m) == m);
}

TEST_CASE("the first runnable candidate is chosen, with its math type") {
  const std::vector<ConvCandidate> c = {{false, ConvMath::kTensorOp, 0}, {true, ConvMath::kTensorOp, 64},
                                        {true, ConvMath::kFma, 0}};
  auto half = choose_conv_algo(c, false, any_workspace);
  REQUIRE(half);
  CHECK(half->index == 1);
  CHECK(half->math == ConvMath::kTensorOp);
  auto exact = choose_conv_algo(c, true, any_workspace);  // the tensor-op one is skipped
  REQUIRE(exact);
  CHECK(exact->index == 2);
  CHECK(exact->math == ConvMath::kFma);
}

TEST_CASE("an algorithm whose workspace cannot be allocated gives way to the next") {
  const std::vector<ConvCandidate> c = {{true, ConvMath::kFma, size_t{8} << 30}, {true, ConvMath::kFma, 1 << 20},
                                        {true, ConvMath::kFma, 0}};
  std::vector<size_t> asked;
  auto limited = [&](size_t bytes) {
    asked.push_back(bytes);
    return bytes <= (size_t{2} << 20);
  };
  auto got = choose_conv_algo(c, true, limited);
  REQUIRE(got);
  CHECK(got->index == 1);
  CHECK(asked == std::vector<size_t>{size_t{8} << 30, 1 << 20});
  auto none = choose_conv_algo(c, true, [](size_t bytes) { return bytes == 12345; });
  CHECK(!none);
  CHECK(!choose_conv_algo({}, false, any_workspace));
}
