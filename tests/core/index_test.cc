// Indexing ops against loops written out by hand on random data: index_select, gather,
// scatter_add, index_add and one_hot, on contiguous and strided operands, with repeated
// indices, sizes large enough to take the parallel paths, and out-of-range indices.
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

/// Row-major flat offset of `idx` in `shape`.
int64_t flat(const Shape& shape, const IntList& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + idx[d];
  return off;
}

/// Calls f(idx) for every multi-index of `shape` in row-major order.
template <class F> void for_each_index(const Shape& shape, const F& f) {
  const int64_t n = shape_numel(shape);
  IntList idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(idx);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

std::vector<double> ref_index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  auto xv = x.to_vector<double>();
  auto iv = index.to_vector<int64_t>();
  Shape out_shape = x.sizes();
  out_shape[dim] = static_cast<int64_t>(iv.size());
  std::vector<double> out;
  for_each_index(out_shape, [&](const IntList& idx) {
    IntList src = idx;
    src[dim] = iv[idx[dim]];
    out.push_back(xv[flat(x.sizes(), src)]);
  });
  return out;
}

std::vector<double> ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  auto xv = x.to_vector<double>();
  auto iv = index.to_vector<int64_t>();
  std::vector<double> out;
  for_each_index(index.sizes(), [&](const IntList& idx) {
    IntList src = idx;
    src[dim] = iv[flat(index.sizes(), idx)];
    out.push_back(xv[flat(x.sizes(), src)]);
  });
  return out;
}

std::vector<double> ref_scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  auto out = x.to_vector<double>();
  auto iv = index.to_vector<int64_t>();
  auto sv = src.to_vector<double>();
  for_each_index(index.sizes(), [&](const IntList& idx) {
    IntList dst = idx;
    dst[dim] = iv[flat(index.sizes(), idx)];
    out[flat(x.sizes(), dst)] += sv[flat(src.sizes(), idx)];
  });
  return out;
}

std::vector<double> ref_index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  auto out = x.to_vector<double>();
  auto iv = index.to_vector<int64_t>();
  auto sv = src.to_vector<double>();
  for_each_index(src.sizes(), [&](const IntList& idx) {
    IntList dst = idx;
    dst[dim] = iv[idx[dim]];
    out[flat(x.sizes(), dst)] += sv[flat(src.sizes(), idx)];
  });
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-9) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])))) ++bad;
  CHECK_MESSAGE(bad == 0, bad, " of ", got.size(), " values differ");
}

}  // namespace

TEST_CASE("index_select picks slices along every dim, with repeats") {
  Generator gen(1);
  Tensor x = randn({4, 5, 6}, kFloat64, &gen);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Tensor index = randint(0, x.size(dim), {7}, kInt64, &gen);
    Tensor y = index_select(x, dim, index);
    Shape want = x.sizes();
    want[dim] = 7;
    CHECK(y.sizes() == want);
    check_close(y.to_vector<double>(), ref_index_select(x, dim, index));
    CHECK(x.index_select(dim - 3, index).sizes() == want);
  }
}

TEST_CASE("index_select on strided inputs, i32 and 0-dim indices, and empty results") {
  Generator gen(2);
  Tensor x = randn({6, 8}, kFloat32, &gen).t();  // [8, 6], strides [1, 8]
  Tensor index = randint(0, 6, {10}, kInt64, &gen).slice(0, 0, 10, 2);  // stride 2
  Tensor y = index_select(x, 1, index);
  CHECK(y.sizes() == Shape{8, 5});
  check_close(y.to_vector<double>(), ref_index_select(x.contiguous(), 1, index.contiguous()), 1e-6);
  Tensor y32 = index_select(x, 1, index.to(kInt32));
  check_close(y32.to_vector<double>(), y.to_vector<double>(), 0);
  Tensor one = index_select(x, 0, scalar_tensor(3, kInt64));
  CHECK(one.sizes() == Shape{1, 6});
  check_close(one.to_vector<double>(), x.select(0, 3).to_vector<double>(), 0);
  CHECK(index_select(x, 0, zeros({0}, kInt64)).sizes() == Shape{0, 6});
  CHECK(index_select(zeros({0, 3}), 1, tensor(std::vector<int64_t>{2, 0})).sizes() == Shape{0, 2});
}

TEST_CASE("index_select keeps every dtype's bits") {
  Tensor index = tensor(std::vector<int64_t>{2, 0, 2});
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    Tensor x = arange(12, dt).view({4, 3});
    Tensor y = x.index_select(1, index);
    CHECK(y.dtype() == dt);
    CHECK(y.to_vector<double>() == std::vector<double>{2, 0, 2, 5, 3, 5, 8, 6, 8, 11, 9, 11});
  }
  Tensor b = tensor(std::vector<bool>{true, false, false});
  CHECK(b.index_select(0, index).to_vector<bool>() == std::vector<bool>{false, true, false});
}

TEST_CASE("index_select over many rows takes the parallel path and stays exact") {
  Generator gen(3);
  Tensor table = randn({500, 64}, kFloat32, &gen);  // an embedding lookup
  Tensor index = randint(0, 500, {3000}, kInt64, &gen);
  Tensor y = table.index_select(0, index);
  check_close(y.to_vector<double>(), ref_index_select(table, 0, index), 0);
  Tensor cols = randn({3000, 40}, kFloat64, &gen);
  Tensor ci = randint(0, 40, {25}, kInt64, &gen);
  check_close(cols.index_select(1, ci).to_vector<double>(), ref_index_select(cols, 1, ci), 0);
}

TEST_CASE("gather reads along a dim with an index smaller than the input") {
  Generator gen(4);
  Tensor x = randn({5, 6, 7}, kFloat64, &gen);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape ishape = {3, 4, 5};
    ishape[dim] = 9;  // may exceed x along dim
    Tensor index = randint(0, x.size(dim), ishape, kInt64, &gen);
    Tensor y = gather(x, dim, index);
    CHECK(y.sizes() == ishape);
    CHECK(y.dtype() == kFloat64);
    check_close(y.to_vector<double>(), ref_gather(x, dim, index));
  }
  // Strided operands and i32 indices.
  Tensor xt = x.transpose(0, 2);  // [7, 6, 5]
  Tensor index = randint(0, 6, {7, 8, 5}, kInt32, &gen);
  check_close(xt.gather(1, index).to_vector<double>(), ref_gather(xt.contiguous(), 1, index.to(kInt64)));
  // Large enough for several threads.
  Tensor big = randn({300, 200}, kFloat32, &gen);
  Tensor bi = randint(0, 200, {300, 150}, kInt64, &gen);
  check_close(big.gather(1, bi).to_vector<double>(), ref_gather(big, 1, bi), 0);
  CHECK(gather(scalar_tensor(2.5, {}), 0, scalar_tensor(0, kInt64)).item<float>() == 2.5f);
}

TEST_CASE("scatter_add accumulates repeated positions and leaves the input untouched") {
  Generator gen(5);
  Tensor x = randn({4, 5, 6}, kFloat64, &gen);
  std::vector<double> before = x.to_vector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    Tensor src = randn({6, 6, 7}, kFloat64, &gen);
    Shape ishape = {3, 4, 5};
    ishape[dim] = 6;  // more entries than x has along dim: repeats are certain
    Tensor index = randint(0, x.size(dim), ishape, kInt64, &gen);
    Tensor y = scatter_add(x, dim, index, src);
    CHECK(y.sizes() == x.sizes());
    check_close(y.to_vector<double>(), ref_scatter_add(x, dim, index, src));
  }
  CHECK(x.to_vector<double>() == before);
  Tensor hits = zeros({3}, kInt64).scatter_add(0, tensor(std::vector<int64_t>{1, 1, 2, 1}),
                                               ones({4}, kInt64));
  CHECK(hits.to_vector<int64_t>() == std::vector<int64_t>{0, 3, 1});
  // Many rows and a long scatter dim, so the row-parallel path runs with collisions inside rows.
  Tensor big = zeros({400, 30}, kFloat64);
  Tensor bsrc = randn({400, 200}, kFloat64, &gen);
  Tensor bidx = randint(0, 30, {400, 200}, kInt64, &gen);
  check_close(big.scatter_add(1, bidx, bsrc).to_vector<double>(), ref_scatter_add(big, 1, bidx, bsrc), 1e-12);
  Tensor col = zeros({30, 400}, kFloat64);
  check_close(col.scatter_add(0, bidx.t(), bsrc.t()).to_vector<double>(),
              ref_scatter_add(col, 0, bidx.t().contiguous(), bsrc.t().contiguous()), 1e-12);
}

TEST_CASE("scatter_add in 16-bit floats and booleans") {
  Tensor index = tensor(std::vector<int64_t>{0, 2, 0});
  for (DType dt : {kFloat16, kBFloat16, kInt32}) {
    Tensor y = zeros({3}, dt).scatter_add(0, index, full({3}, 1.5, dt));
    std::vector<double> want = dt == kInt32 ? std::vector<double>{2, 0, 1} : std::vector<double>{3, 0, 1.5};
    CHECK(y.to_vector<double>() == want);
  }
  Tensor b = zeros({3}, kBool).scatter_add(0, index, tensor(std::vector<bool>{false, true, true}));
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("index_add adds rows of src at repeated indices") {
  Generator gen(6);
  Tensor x = randn({5, 4, 3}, kFloat64, &gen);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Tensor index = randint(0, x.size(dim), {8}, kInt64, &gen);
    Shape sshape = x.sizes();
    sshape[dim] = 8;
    Tensor src = randn(sshape, kFloat64, &gen);
    Tensor y = index_add(x, dim, index, src);
    check_close(y.to_vector<double>(), ref_index_add(x, dim, index, src));
  }
  // The backward of an embedding lookup: many repeated rows, wide enough to run in parallel.
  Tensor grad = randn({5000, 32}, kFloat64, &gen);
  Tensor index = randint(0, 50, {5000}, kInt32, &gen);
  Tensor acc = index_add(zeros({50, 32}, kFloat64), 0, index, grad);
  check_close(acc.to_vector<double>(), ref_index_add(zeros({50, 32}, kFloat64), 0, index.to(kInt64), grad), 1e-12);
  Tensor strided = index_add(zeros({32, 50}, kFloat64).t(), 0, index, grad);
  check_close(strided.to_vector<double>(), acc.to_vector<double>(), 1e-12);
}

TEST_CASE("index errors name the op, the bad index and the dim size") {
  Tensor x = arange(12, kFloat32).view({3, 4});
  Tensor bad = tensor(std::vector<int64_t>{0, 5});
  CHECK_THROWS_WITH(x.index_select(0, bad), doctest::Contains("index_select: index 5 is out of bounds for dim 0 "
                                                              "with size 3"));
  CHECK_THROWS_WITH(x.index_select(1, tensor(std::vector<int64_t>{-1})), doctest::Contains("index -1"));
  CHECK_THROWS_WITH(x.index_select(0, tensor({1.0})), doctest::Contains("index_select: index must be an integer"));
  CHECK_THROWS_WITH(x.index_select(0, zeros({2, 2}, kInt64)), doctest::Contains("index must be 1-D"));
  CHECK_THROWS_WITH(x.index_select(2, bad), doctest::Contains("index_select: dim 2 out of range"));

  CHECK_THROWS_WITH(x.gather(1, full({3, 4}, 4, kInt64)),
                    doctest::Contains("gather: index 4 is out of bounds for dim 1 with size 4"));
  CHECK_THROWS_WITH(x.gather(1, zeros({3}, kInt64)), doctest::Contains("gather: index has 1 dims"));
  CHECK_THROWS_WITH(x.gather(1, zeros({4, 2}, kInt64)),
                    doctest::Contains("gather: index shape [4, 2] exceeds input shape [3, 4] at dim 0"));

  CHECK_THROWS_WITH(x.scatter_add(0, full({1, 4}, 3, kInt64), ones({1, 4})),
                    doctest::Contains("scatter_add: index 3 is out of bounds for dim 0 with size 3"));
  CHECK_THROWS_WITH(x.scatter_add(0, zeros({2, 4}, kInt64), ones({1, 4})),
                    doctest::Contains("scatter_add: index shape [2, 4] exceeds src shape [1, 4]"));
  CHECK_THROWS_WITH(x.scatter_add(0, zeros({1, 4}, kInt64), ones({1, 4}, kFloat64)),
                    doctest::Contains("scatter_add: src has dtype f64"));

  CHECK_THROWS_WITH(index_add(x, 0, tensor(std::vector<int64_t>{3}), ones({1, 4})),
                    doctest::Contains("index_add: index 3 is out of bounds for dim 0 with size 3"));
  CHECK_THROWS_WITH(index_add(x, 0, tensor(std::vector<int64_t>{0, 1}), ones({1, 4})),
                    doctest::Contains("index_add: src has shape [1, 4]"));
}

TEST_CASE("one_hot encodes class indices as i64") {
  Tensor labels = tensor(std::vector<int64_t>{2, 0, 1, 2}, {2, 2});
  Tensor y = one_hot(labels);
  CHECK(y.dtype() == kInt64);
  CHECK(y.sizes() == Shape{2, 2, 3});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor y5 = one_hot(labels.to(kInt32), 5);
  CHECK(y5.sizes() == Shape{2, 2, 5});
  CHECK(y5.to_vector<int64_t>()[2] == 1);
  CHECK(one_hot(zeros({0}, kInt64), 4).sizes() == Shape{0, 4});

  Generator gen(7);
  Tensor many = randint(0, 10, {1000}, kInt64, &gen);
  Tensor oh = one_hot(many, 10);
  auto lv = many.to_vector<int64_t>();
  auto ov = oh.to_vector<int64_t>();
  int64_t ok = 0;
  for (size_t i = 0; i < lv.size(); ++i) {
    int64_t row_sum = 0;
    for (int64_t c = 0; c < 10; ++c) row_sum += ov[i * 10 + c];
    ok += row_sum == 1 && ov[i * 10 + lv[i]] == 1;
  }
  CHECK(ok == 1000);

  CHECK_THROWS_WITH(one_hot(tensor(std::vector<int64_t>{1, -2})), doctest::Contains("one_hot: class index -2 is "
                                                                                    "negative"));
  CHECK_THROWS_WITH(one_hot(tensor(std::vector<int64_t>{1, 4}), 3),
                    doctest::Contains("one_hot: class index 4 is out of range for 3 classes"));
  CHECK_THROWS_WITH(one_hot(zeros({0}, kInt64)), doctest::Contains("empty"));
  CHECK_THROWS_WITH(one_hot(tensor({1.0})), doctest::Contains("one_hot: index must be an integer"));
}
