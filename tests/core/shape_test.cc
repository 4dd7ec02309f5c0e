// View and shape ops: geometry (sizes, strides, shared storage), values against hand indexing,
// copies only where a view is impossible, zero-size dims, and errors that name op and values.
#include <array>

#include "tests/testing/compare.h"

using namespace kiln;

namespace {

/// arange(0, n) as f32 with the given shape: every element's value is its flat index.
Tensor iota(const Shape& shape, DType dtype = kFloat32) {
  return arange(shape_numel(shape), dtype).view(shape);
}

/// The element at `idx`, read through the tensor's own strides and offset.
double at(const Tensor& t, const IntList& idx) {
  REQUIRE(static_cast<int64_t>(idx.size()) == t.dim());
  int64_t off = t.offset();
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  Tensor one = make_view(t, {}, {}, off);
  return one.item().to_double();
}

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

TEST_CASE("view keeps storage, infers -1 and gives contiguous strides") {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({4, -1});
  CHECK(v.sizes() == Shape{4, 6});
  CHECK(v.strides() == Shape{6, 1});
  CHECK(shares_storage(v, x));
  CHECK(v.data_ptr() == x.data_ptr());
  CHECK(v.unsafe_impl()->is_view);
  CHECK_FALSE(arange(3).unsafe_impl()->is_view);
  CHECK(values(v) == values(x));
  CHECK(x.view({24}).sizes() == Shape{24});
  CHECK(x.view({-1}).sizes() == Shape{24});
  CHECK(x.view({1, 2, 1, 12}).sizes() == Shape{1, 2, 1, 12});
}

TEST_CASE("view of a non-contiguous tensor splits and merges dims where memory allows") {
  Tensor x = iota({4, 6}).t();  // [6, 4], strides [1, 6]
  Tensor v = x.view({3, 2, 4});  // splitting the stride-1 dim is fine
  CHECK(v.strides() == Shape{2, 1, 6});
  CHECK(shares_storage(v, x));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(at(v, {i, j, k}) == at(x, {i * 2 + j, k}));
  // Merging the two dims would need one stride for non-adjacent memory.
  CHECK_THROWS_WITH(x.view({24}), doctest::Contains("view: shape [24] is not compatible"));
  CHECK_THROWS_WITH(x.view({24}), doctest::Contains("reshape()"));
  CHECK_THROWS_WITH(x.view({24}), doctest::Contains("strides [1, 6]"));
}

TEST_CASE("view errors name the op, the shape and the element count") {
  Tensor x = iota({2, 3});
  CHECK_THROWS_WITH(x.view({4, 2}), doctest::Contains("view: shape [4, 2] is invalid for an input of 6 elements"));
  CHECK_THROWS_WITH(x.view({4, -1}), doctest::Contains("[4, -1]"));
  CHECK_THROWS_WITH(x.view({-1, -1}), doctest::Contains("only one dimension can be inferred"));
  CHECK_THROWS_WITH(x.view({-2, 3}), doctest::Contains("invalid size -2"));
}

TEST_CASE("reshape views when it can and copies when it must") {
  Tensor x = iota({3, 4});
  Tensor r = x.reshape({2, 6});
  CHECK(shares_storage(r, x));
  CHECK(values(r) == values(x));

  Tensor t = x.t();  // [4, 3], not contiguous
  CHECK_FALSE(t.is_contiguous());
  Tensor c = t.reshape({12});
  CHECK_FALSE(shares_storage(c, x));
  CHECK(c.is_contiguous());
  std::vector<float> want;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) want.push_back(static_cast<float>(j * 4 + i));
  CHECK(values(c) == want);
  // A reshape that only splits a dim of the transposed tensor is still a view.
  CHECK(shares_storage(t.reshape({2, 2, 3}), x));
}

TEST_CASE("contiguous copies non-contiguous tensors only") {
  Tensor x = iota({2, 3});
  CHECK(x.contiguous().is_same(x));
  Tensor t = x.t();
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK_FALSE(shares_storage(c, x));
  CHECK(values(c) == std::vector<float>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("transpose and permute swap strides without copying") {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(shares_storage(p, x));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) CHECK(at(p, {i, j, k}) == at(x, {j, k, i}));
  Tensor t = x.transpose(0, -1);
  CHECK(t.sizes() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK(at(t, {3, 1, 1}) == at(x, {1, 1, 3}));
  Tensor m = iota({2, 5});
  CHECK(m.t().sizes() == Shape{5, 2});
  CHECK(m.t().strides() == Shape{1, 5});
  CHECK(x.permute({-1, 0, 1}).sizes() == Shape{4, 2, 3});
}

TEST_CASE("transpose, permute and t() errors name the op and the values") {
  Tensor x = iota({2, 3, 4});
  CHECK_THROWS_WITH(x.t(), doctest::Contains("t: expects a 2-D tensor, got shape [2, 3, 4]"));
  CHECK_THROWS_WITH(x.transpose(0, 3), doctest::Contains("transpose: dim 3 out of range"));
  CHECK_THROWS_WITH(x.permute({0, 1}), doctest::Contains("permute: got 2 dims"));
  CHECK_THROWS_WITH(x.permute({0, 1, 1}), doctest::Contains("permute: dim 1 repeats"));
  CHECK_THROWS_WITH(x.permute({0, 1, 5}), doctest::Contains("permute: dim 5 out of range"));
}

TEST_CASE("slice follows Python slicing: negative and clamped bounds, steps") {
  Tensor x = iota({10});
  CHECK(values(x.slice(0, 2, 5)) == std::vector<float>{2, 3, 4});
  CHECK(values(x.slice(0, -3, 10)) == std::vector<float>{7, 8, 9});
  CHECK(values(x.slice(0, 1, 9, 3)) == std::vector<float>{1, 4, 7});
  CHECK(values(x.slice(0, -100, 100, 4)) == std::vector<float>{0, 4, 8});
  CHECK(values(x.slice(0, 0, -8)) == std::vector<float>{0, 1});
  CHECK(x.slice(0, 7, 3).sizes() == Shape{0});
  CHECK(x.slice(0, 12, 20).sizes() == Shape{0});
  CHECK(x.slice(0, 0, std::numeric_limits<int64_t>::max()).sizes() == Shape{10});
  Tensor s = x.slice(0, 3, 10, 2);
  CHECK(s.strides() == Shape{2});
  CHECK(s.offset() == 3);
  CHECK(shares_storage(s, x));
  CHECK_THROWS_WITH(x.slice(0, 0, 5, 0), doctest::Contains("slice: step must be positive, got 0"));
  CHECK_THROWS_WITH(x.slice(1, 0, 5), doctest::Contains("slice: dim 1 out of range"));
}

TEST_CASE("slice, narrow and select on inner dims match hand indexing") {
  Tensor x = iota({3, 5, 4});
  Tensor s = x.slice(1, 1, 5, 2);  // rows 1 and 3
  CHECK(s.sizes() == Shape{3, 2, 4});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(at(s, {i, j, k}) == at(x, {i, 1 + 2 * j, k}));

  Tensor n = x.narrow(2, 1, 2);
  CHECK(n.sizes() == Shape{3, 5, 2});
  CHECK(at(n, {2, 4, 1}) == at(x, {2, 4, 2}));
  CHECK(x.narrow(-1, -2, 2).sizes() == Shape{3, 5, 2});
  CHECK_THROWS_WITH(x.narrow(2, 3, 2), doctest::Contains("narrow: start 3 + length 2 exceeds dim 2 of size 4"));

  Tensor sel = x.select(1, -1);
  CHECK(sel.sizes() == Shape{3, 4});
  CHECK(shares_storage(sel, x));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 4; ++k) CHECK(at(sel, {i, k}) == at(x, {i, 4, k}));
  CHECK(x[2].sizes() == Shape{5, 4});
  CHECK(at(x[2], {0, 0}) == 40);
  CHECK(x[1][2][3].item<float>() == 1 * 20 + 2 * 4 + 3);
  CHECK_THROWS_WITH(x.select(0, 3), doctest::Contains("select: index 3 is out of range for dim 0 of size 3"));
  CHECK_THROWS_WITH(x.select(0, -4), doctest::Contains("index -4"));
}

TEST_CASE("expand broadcasts size-1 dims with stride 0 and adds leading dims") {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({2, 3, 4});
  CHECK(e.sizes() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(shares_storage(e, x));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(at(e, {i, j, k}) == static_cast<double>(j));
  CHECK(x.expand({-1, 5}).sizes() == Shape{3, 5});
  CHECK(x.expand({3, 1}).strides() == x.strides());
  CHECK(x.expand({3, 0}).numel() == 0);
  CHECK(iota({2, 3}).expand_as(zeros({4, 2, 3})).sizes() == Shape{4, 2, 3});
  // A materialised expand has the broadcast values.
  CHECK(values(e.contiguous()).size() == 24);
  CHECK(values(e.contiguous())[5] == 1.0f);
}

TEST_CASE("expand errors name the shapes") {
  Tensor x = iota({3, 1});
  CHECK_THROWS_WITH(x.expand({4, 4}),
                    doctest::Contains("expand: the expanded size 4 must match the existing size 3 at non-singleton dim 0"));
  CHECK_THROWS_WITH(x.expand({4, 4}), doctest::Contains("target shape [4, 4], tensor shape [3, 1]"));
  CHECK_THROWS_WITH(x.expand({3}), doctest::Contains("fewer dims"));
  CHECK_THROWS_WITH(x.expand({-1, 3, 2}), doctest::Contains("new leading dim"));
}

TEST_CASE("squeeze, unsqueeze and flatten") {
  Tensor x = iota({1, 3, 1, 2});
  CHECK(x.squeeze().sizes() == Shape{3, 2});
  CHECK(x.squeeze(0).sizes() == Shape{3, 1, 2});
  CHECK(x.squeeze(-2).sizes() == Shape{1, 3, 2});
  CHECK(x.squeeze(1).sizes() == Shape{1, 3, 1, 2});  // not size 1: unchanged
  CHECK(shares_storage(x.squeeze(), x));
  Tensor y = iota({2, 3});
  CHECK(y.unsqueeze(0).sizes() == Shape{1, 2, 3});
  CHECK(y.unsqueeze(1).sizes() == Shape{2, 1, 3});
  CHECK(y.unsqueeze(-1).sizes() == Shape{2, 3, 1});
  CHECK(y.unsqueeze(1).strides() == Shape{3, 3, 1});
  CHECK(shares_storage(y.unsqueeze(2), y));
  CHECK_THROWS_WITH(y.unsqueeze(4), doctest::Contains("unsqueeze: dim 4 out of range"));
  Tensor s = scalar_tensor(3.0, {});
  CHECK(s.unsqueeze(0).sizes() == Shape{1});
  CHECK(s.squeeze().dim() == 0);

  Tensor z = iota({2, 3, 4, 5});
  CHECK(z.flatten().sizes() == Shape{120});
  CHECK(z.flatten(1).sizes() == Shape{2, 60});
  CHECK(z.flatten(1, 2).sizes() == Shape{2, 12, 5});
  CHECK(z.flatten(-2, -1).sizes() == Shape{2, 3, 20});
  CHECK(shares_storage(z.flatten(1, 2), z));
  Tensor zt = z.transpose(1, 2);
  Tensor f = zt.flatten(1, 2);  // needs a copy
  CHECK(f.sizes() == Shape{2, 12, 5});
  CHECK(at(f, {1, 5, 3}) == at(zt, {1, 1, 2, 3}));
  CHECK(s.flatten().sizes() == Shape{1});
  CHECK_THROWS_WITH(z.flatten(2, 1), doctest::Contains("flatten: start_dim 2 comes after end_dim 1"));
}

TEST_CASE("cat joins along a dim and copies into slices of one output") {
  Tensor a = iota({2, 3});
  Tensor b = iota({2, 2}) + 100;
  Tensor c = cat({a, b}, 1);
  CHECK(c.sizes() == Shape{2, 5});
  CHECK(values(c) == std::vector<float>{0, 1, 2, 100, 101, 3, 4, 5, 102, 103});
  Tensor d = cat({a, a.slice(0, 1, 2)}, 0);
  CHECK(d.sizes() == Shape{3, 3});
  CHECK(values(d) == std::vector<float>{0, 1, 2, 3, 4, 5, 3, 4, 5});
  // Non-contiguous inputs and a negative dim.
  Tensor e = cat({a.t(), a.t()}, -1);
  CHECK(e.sizes() == Shape{3, 4});
  CHECK(values(e) == std::vector<float>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5});
}

TEST_CASE("cat promotes dtypes and rejects mismatched shapes naming them") {
  Tensor i = arange(3);  // i64
  Tensor f = tensor({0.5, 1.5});
  Tensor c = cat({i, f});
  CHECK(c.dtype() == kFloat32);
  CHECK(values(c) == std::vector<float>{0, 1, 2, 0.5f, 1.5f});
  CHECK(cat({i, i.to(kInt32)}).dtype() == kInt64);
  CHECK_THROWS_WITH(cat({iota({2, 3}), iota({3, 3})}, 1),
                    doctest::Contains("cat: sizes must match except in dim 1: tensor 1 has shape [3, 3] but tensor 0 "
                                      "has shape [2, 3]"));
  CHECK_THROWS_WITH(cat({iota({2, 3}), iota({6})}), doctest::Contains("cat: tensor 1 has 1 dims"));
  CHECK_THROWS_WITH(cat({}), doctest::Contains("cat: expected a non-empty list"));
  CHECK_THROWS_WITH(cat({scalar_tensor(1.0, {})}), doctest::Contains("zero-dimensional"));
  CHECK_THROWS_WITH(cat({iota({2, 3})}, 2), doctest::Contains("cat: dim 2 out of range"));
}

TEST_CASE("stack adds a dim; split, split_with_sizes and chunk undo cat") {
  Tensor a = iota({2, 3}), b = iota({2, 3}) * 2;
  Tensor s = stack({a, b}, 1);
  CHECK(s.sizes() == Shape{2, 2, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 3; ++k) {
      CHECK(at(s, {i, 0, k}) == at(a, {i, k}));
      CHECK(at(s, {i, 1, k}) == at(b, {i, k}));
    }
  CHECK(stack({a, b}, -1).sizes() == Shape{2, 3, 2});
  CHECK(stack({a, b}).sizes() == Shape{2, 2, 3});
  CHECK_THROWS_WITH(stack({a, iota({3, 2})}), doctest::Contains("stack: expects each tensor to be of equal shape"));

  Tensor x = iota({7, 2});
  std::vector<Tensor> parts = x.split(3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].sizes() == Shape{3, 2});
  CHECK(parts[2].sizes() == Shape{1, 2});
  CHECK(shares_storage(parts[1], x));
  CHECK(values(cat(parts)) == values(x));

  std::vector<Tensor> ws = split_with_sizes(x, {1, 0, 6});
  REQUIRE(ws.size() == 3);
  CHECK(ws[1].sizes() == Shape{0, 2});
  CHECK(values(cat(ws, 0)) == values(x));
  CHECK_THROWS_WITH(split_with_sizes(x, {3, 3}), doctest::Contains("split_with_sizes: split sizes [3, 3] sum to 6 "
                                                                   "but dim 0 has size 7"));

  std::vector<Tensor> ch = x.chunk(3);  // sizes 3, 3, 1
  REQUIRE(ch.size() == 3);
  CHECK(ch[2].sizes() == Shape{1, 2});
  CHECK(values(cat(ch)) == values(x));
  CHECK(x.chunk(2, 1).size() == 2);
  CHECK(x.chunk(10).size() == 7);  // never more chunks than rows
  CHECK(values(cat(x.chunk(2, 1), 1)) == values(x));
  CHECK_THROWS_WITH(x.chunk(0), doctest::Contains("chunk: chunks must be positive, got 0"));
  CHECK_THROWS_WITH(x.split(0), doctest::Contains("split: split_size must be positive"));
}

TEST_CASE("zero-size dims flow through every view op") {
  Tensor x = zeros({0, 3});
  CHECK(x.view({3, 0}).sizes() == Shape{3, 0});
  CHECK(x.view({0, 1, 3}).sizes() == Shape{0, 1, 3});
  CHECK(x.reshape({0}).sizes() == Shape{0});
  CHECK_THROWS_WITH(x.view({-1, 0}), doctest::Contains("ambiguous"));
  CHECK(x.view({-1, 3}).sizes() == Shape{0, 3});
  CHECK(x.t().sizes() == Shape{3, 0});
  CHECK(x.t().contiguous().sizes() == Shape{3, 0});
  CHECK(x.expand({2, 0, 3}).sizes() == Shape{2, 0, 3});
  CHECK(x.unsqueeze(1).sizes() == Shape{0, 1, 3});
  CHECK(x.flatten().sizes() == Shape{0});
  CHECK(x.slice(1, 1, 3).sizes() == Shape{0, 2});
  CHECK(x.select(1, 2).sizes() == Shape{0});
  CHECK(cat({x, iota({2, 3})}).sizes() == Shape{2, 3});
  CHECK(cat({x, x}, 1).sizes() == Shape{0, 6});
  CHECK(stack({x, x}).sizes() == Shape{2, 0, 3});
  CHECK(x.split(2).size() == 1);
  CHECK(x.split(0).size() == 1);
  std::vector<Tensor> ch = x.chunk(3);
  CHECK(ch.size() == 3);
  for (const Tensor& c : ch) CHECK(c.sizes() == Shape{0, 3});
  CHECK(x.permute({1, 0}).sizes() == Shape{3, 0});
}

TEST_CASE("views see writes made through the base and vice versa") {
  Tensor x = zeros({3, 4});
  Tensor col = x.select(1, 2);
  col.fill_(7);
  for (int64_t i = 0; i < 3; ++i) CHECK(at(x, {i, 2}) == 7);
  CHECK(at(x, {0, 1}) == 0);
  x.fill_(1);
  CHECK(values(col) == std::vector<float>{1, 1, 1});
  Tensor sl = x.slice(0, 0, 3, 2);  // rows 0 and 2
  sl.copy_(full({2, 4}, 5.0));
  CHECK(values(x.select(0, 1)) == std::vector<float>{1, 1, 1, 1});
  CHECK(values(x.select(0, 2)) == std::vector<float>{5, 5, 5, 5});
}

TEST_CASE("views work for every dtype") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    Tensor x = arange(12, dt).view({3, 4});
    Tensor t = x.t().contiguous();
    CHECK(t.dtype() == dt);
    CHECK(t.to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
    CHECK(cat({x, x}).to_vector<double>().size() == 24);
  }
  Tensor b = arange(6).view({2, 3}).to(kBool);
  CHECK(b.t().contiguous().to_vector<bool>() == std::vector<bool>{false, true, true, true, true, true});
}

TEST_CASE("contiguous() of large transposes matches element-wise indexing (tiled path, panels, ragged edges)") {
  for (auto [B, R, C] : {std::array<int64_t, 3>{1, 70, 45}, {3, 33, 96}, {2, 64, 64}, {1, 96, 600}}) {
    Tensor base = arange(B * C * R, kFloat32).reshape({B, C, R});  // [B, C, R] contiguous
    Tensor t = base.transpose(1, 2);                                 // [B, R, C], stride(-2) == 1
    Tensor c = t.contiguous();
    REQUIRE(c.is_contiguous());
    auto v = c.to_vector<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < C; ++k)
          REQUIRE(v[(b * R + r) * C + k] == static_cast<float>((b * C + k) * R + r));
    Tensor d = base.to(kFloat64).transpose(1, 2).contiguous();  // 8-byte elements
    CHECK(d.to_vector<float>() == v);
  }
  // A batch dim that is itself strided: the plane offset must follow src's strides.
  Tensor big = arange(4 * 40 * 50, kFloat32).reshape({4, 40, 50});
  Tensor view = big.slice(0, 0, 4, 2).transpose(1, 2);  // [2, 50, 40]: view[b][r][c] = big[2b][c][r]
  auto got = view.contiguous().to_vector<float>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 50; ++r)
      for (int64_t c = 0; c < 40; ++c)
        REQUIRE(got[(b * 50 + r) * 40 + c] == static_cast<float>((2 * b * 40 + c) * 50 + r));
}

TEST_CASE("Storage::resize_ frees and reallocates under every view, keeping the version; wrapped memory refuses") {
  Tensor t = arange(6, kFloat32);
  Tensor v = t.narrow(0, 2, 3);
  StorageImpl& s = *t.storage();
  t.add_(1.0);
  const uint32_t version = s.version();
  s.resize_(0);
  CHECK(s.nbytes() == 0);
  CHECK(s.data() == nullptr);
  s.resize_(6 * sizeof(float));
  CHECK(v.storage().get() == &s);  // the view sees the new memory
  t.fill_(2.0);
  CHECK(v.sum().item<float>() == 6.0f);
  s.set_version_unsafe(version);
  CHECK(t.version() == version);
  float blob[2] = {1, 2};
  Tensor w = from_blob(blob, {2}, kFloat32);
  CHECK_THROWS_WITH(w.storage()->resize_(0), doctest::Contains("wraps memory Kiln does not own"));
}
