// Type promotion as PyTorch does it: categories bool < integer < floating; dimensioned tensors
// outrank 0-dim tensors, which outrank bare numbers, unless the lower rank brings a higher
// category. Each case below was checked against torch.result_type.
#include "tests/testing/compare.h"

using namespace kiln;

namespace {
Tensor dimmed(DType t) { return ones({2}, t); }
Tensor zero_dim(DType t) { return ones({}, t); }
}  // namespace

TEST_CASE("same rank: the promotion lattice") {
  CHECK(result_type(dimmed(kInt32), dimmed(kInt64)) == kInt64);
  CHECK(result_type(dimmed(kFloat16), dimmed(kBFloat16)) == kFloat32);
  CHECK(result_type(dimmed(kFloat16), dimmed(kFloat32)) == kFloat32);
  CHECK(result_type(dimmed(kInt64), dimmed(kFloat16)) == kFloat16);
  CHECK(result_type(dimmed(kBool), dimmed(kBool)) == kBool);
  CHECK(result_type(dimmed(kBool), dimmed(kInt32)) == kInt32);
  CHECK(result_type(zero_dim(kInt32), zero_dim(kFloat16)) == kFloat16);
  CHECK(result_type(zero_dim(kInt64), zero_dim(kInt32)) == kInt64);
  CHECK(result_type(zero_dim(kFloat64), zero_dim(kFloat32)) == kFloat64);
}

TEST_CASE("a 0-dim tensor only matters when it brings a higher category") {
  CHECK(result_type(dimmed(kFloat32), zero_dim(kFloat64)) == kFloat32);
  CHECK(result_type(zero_dim(kFloat64), dimmed(kFloat32)) == kFloat32);
  CHECK(result_type(dimmed(kFloat16), zero_dim(kFloat64)) == kFloat16);
  CHECK(result_type(dimmed(kInt32), zero_dim(kInt64)) == kInt32);
  CHECK(result_type(dimmed(kInt32), zero_dim(kFloat64)) == kFloat64);
  CHECK(result_type(dimmed(kInt64), zero_dim(kFloat32)) == kFloat32);
  CHECK(result_type(dimmed(kInt64), zero_dim(kFloat16)) == kFloat16);
  CHECK(result_type(dimmed(kBool), zero_dim(kInt64)) == kInt64);
  CHECK(result_type(dimmed(kBool), zero_dim(kFloat64)) == kFloat64);
  CHECK(result_type(dimmed(kInt32), zero_dim(kBool)) == kInt32);
}

TEST_CASE("bare numbers: int keeps the tensor's dtype, float gives the default float") {
  CHECK((dimmed(kInt64) + 2.5).dtype() == kFloat32);
  CHECK((dimmed(kInt32) + 2.5).dtype() == kFloat32);
  CHECK((dimmed(kInt32) + 1).dtype() == kInt32);
  CHECK((dimmed(kFloat16) + 1).dtype() == kFloat16);
  CHECK((dimmed(kFloat16) + 2.5).dtype() == kFloat16);
  CHECK((dimmed(kBFloat16) * 2.5).dtype() == kBFloat16);
  CHECK((dimmed(kFloat64) * 2.5).dtype() == kFloat64);
  CHECK((dimmed(kBool) + 1).dtype() == kInt64);
  CHECK((dimmed(kBool) + 2.5).dtype() == kFloat32);
  CHECK((dimmed(kBool) + true).dtype() == kBool);
  // A 0-dim tensor outranks a number of its category.
  CHECK((zero_dim(kFloat16) + 2.5).dtype() == kFloat16);
  CHECK((zero_dim(kInt32) + 7).dtype() == kInt32);
  CHECK((zero_dim(kInt32) + 0.5).dtype() == kFloat32);
  CHECK((2.5 - dimmed(kInt64)).dtype() == kFloat32);
  CHECK((3 * dimmed(kInt32)).dtype() == kInt32);
}

TEST_CASE("ops produce the result type, and integer division is true division") {
  CHECK((dimmed(kInt32) + dimmed(kInt64)).dtype() == kInt64);
  CHECK((dimmed(kFloat16) + dimmed(kBFloat16)).dtype() == kFloat32);
  CHECK((dimmed(kFloat32) * zero_dim(kFloat64)).dtype() == kFloat32);
  CHECK((dimmed(kInt32) * zero_dim(kFloat64)).dtype() == kFloat64);
  CHECK((dimmed(kInt32) / dimmed(kInt32)).dtype() == kFloat32);
  CHECK((dimmed(kInt64) / 2).dtype() == kFloat32);
  CHECK((dimmed(kBool) / dimmed(kBool)).dtype() == kFloat32);
  CHECK((dimmed(kFloat16) / dimmed(kInt64)).dtype() == kFloat16);
  CHECK(kiln::maximum(dimmed(kInt32), dimmed(kFloat64)).dtype() == kFloat64);
  CHECK(kiln::where(dimmed(kBool), dimmed(kInt32), dimmed(kFloat16)).dtype() == kFloat16);
  CHECK(kiln::where(dimmed(kBool), dimmed(kFloat16), 2.5).dtype() == kFloat16);
  CHECK((dimmed(kInt32) < 2.5).dtype() == kBool);
  CHECK(kiln::exp(dimmed(kInt32)).dtype() == kFloat32);
  CHECK(kiln::exp(dimmed(kBool)).dtype() == kFloat32);
  CHECK(kiln::pow(dimmed(kInt32), 2).dtype() == kInt32);
  CHECK(kiln::pow(2.5, dimmed(kInt32)).dtype() == kFloat32);
  CHECK(kiln::pow(2, dimmed(kInt32)).dtype() == kInt32);
  CHECK(kiln::clamp(dimmed(kInt64), 0, 1).dtype() == kInt64);
  CHECK(kiln::clamp(dimmed(kFloat16), 0.5, 1.5).dtype() == kFloat16);
}

TEST_CASE("mixed dtypes compute in the promoted type") {
  Tensor i = tensor(std::vector<int32_t>{1, 2, 3});
  Tensor d = tensor(std::vector<double>{0.25, 0.5, 0.75});
  Tensor r = i + d;
  CHECK(r.dtype() == kFloat64);
  CHECK(r.to_vector<double>() == std::vector<double>{1.25, 2.5, 3.75});
  Tensor big = tensor(std::vector<int64_t>{int64_t{1} << 40});
  CHECK((big + tensor(std::vector<int32_t>{1})).to_vector<int64_t>()[0] == (int64_t{1} << 40) + 1);
}
