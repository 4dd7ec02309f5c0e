// mm / bmm / matmul against naive f64 loops: many shapes, every 1-D promotion, broadcast batch
// dims, transposed and strided (non-contiguous) operands, the parallel paths, 16-bit and integer
// dtypes, and shape errors that name the op and both shapes.
#include "core/cpu/gemm.h"
#include "core/kernels.h"
#include "core/matmul_precision.h"
#include "core/parallel.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

/// f64 torch.matmul from the definition: 1-D operands promoted, batch dims broadcast.
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.sizes(), sb = b.sizes();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "ref");
  // Batch-broadcast copies of both operands, read in row-major order.
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), {M, K});
  fb.insert(fb.end(), {K, N});
  std::vector<double> va = a.reshape(sa).expand(fa).to_vector<double>();
  std::vector<double> vb = b.reshape(sb).expand(fb).to_vector<double>();
  const int64_t B = shape_numel(batch);
  std::vector<double> out(B * M * N, 0.0);
  for (int64_t p = 0; p < B; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += va[(p * M + i) * K + k] * vb[(p * K + k) * N + j];
        out[(p * M + i) * N + j] = s;
      }
  Shape os = batch;
  if (a.dim() > 1) os.push_back(M);
  if (b.dim() > 1) os.push_back(N);
  return tensor(out, {static_cast<int64_t>(out.size())}, kFloat64).reshape(os);
}

void check_matmul(const Tensor& a, const Tensor& b, double tol) {
  CAPTURE(a.shape_str());
  CAPTURE(b.shape_str());
  Tensor r = matmul(a, b);
  Tensor e = ref_matmul(a, b);
  CHECK(r.sizes() == e.sizes());
  CHECK(r.dtype() == a.dtype());
  CHECK_ALLCLOSE(r, e, tol, tol);
}

}  // namespace

TEST_CASE("mm matches naive loops for many shapes") {
  for (DType dt : {kFloat32, kFloat64}) {
    const double tol = dt == kFloat32 ? 1e-4 : 1e-11;
    for (const Shape& mkn : std::vector<Shape>{{1, 1, 1}, {1, 5, 1}, {3, 5, 7}, {7, 1, 3}, {1, 17, 9}, {9, 17, 1},
                                               {64, 33, 17}, {128, 256, 64}, {65, 129, 31}}) {
      Tensor a = randn({mkn[0], mkn[1]}, dt), b = randn({mkn[1], mkn[2]}, dt);
      CAPTURE(mkn);
      Tensor r = mm(a, b);
      CHECK(r.sizes() == Shape{mkn[0], mkn[2]});
      CHECK_ALLCLOSE(r, ref_matmul(a, b), tol, tol);
      CHECK_ALLCLOSE(a.matmul(b), r, 0, 0);
    }
  }
}

TEST_CASE("large products use the threaded GEMM and stay exact to tolerance") {
  Tensor a = randn({300, 200}, kFloat64), b = randn({200, 310}, kFloat64);
  CHECK_ALLCLOSE(mm(a, b), ref_matmul(a, b), 1e-11, 1e-11);
  Tensor af = randn({257, 300}), bf = randn({300, 129});
  CHECK_ALLCLOSE(mm(af, bf), ref_matmul(af, bf), 1e-4, 1e-4);
}

/// `products()` run at 1, 2, 3 and 4 threads must give the same bits, product by product.
template <class F> void check_same_bits_at_1_to_4_threads(const F& products) {
  const int saved = get_num_threads();
  std::vector<std::vector<std::vector<double>>> runs;
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    std::vector<std::vector<double>> values;
    for (const Tensor& t : products()) values.push_back(t.to_vector<double>());
    runs.push_back(std::move(values));
  }
  set_num_threads(saved);
  for (size_t threads = 2; threads <= 4; ++threads)
    for (size_t i = 0; i < runs[0].size(); ++i) {
      INFO("product " << i << " at " << threads << " threads");
      CHECK(runs[0][i] == runs[threads - 1][i]);
    }
}

TEST_CASE("products give the same bits at any thread count (the slabs keep Eigen's panels whole)") {
  // The MLP's forward and backward products, a tall one split along M, and f64: each split into
  // 2, 3 and 4 slabs must compute every element with the same micro-kernel as one thread does.
  manual_seed(3);
  Tensor a = randn({128, 784}), b = randn({784, 256}), g = randn({128, 256}), w = randn({256, 784});
  Tensor tall = randn({1000, 64}), skinny = randn({64, 40}), ad = randn({96, 300}, kFloat64),
         bd = randn({300, 200}, kFloat64);
  check_same_bits_at_1_to_4_threads([&] {
    return std::vector<Tensor>{matmul(a, b), matmul(g.transpose(0, 1), a), matmul(g, w), matmul(tall, skinny),
                               matmul(ad, bd)};
  });
}

TEST_CASE("products on the GEMM library give the same bits at any thread count and match f64") {
  // Large float products go to oneDNN (core/cpu/gemm.h) in row slabs fixed by the product and the
  // machine's cores; 1-4 threads must run the same calls. Every layout, a row count that is no
  // multiple of the slabs' 16-row steps, and a batch of them.
  MESSAGE("GEMM library: ", std::string(cpu::sgemm_library()[0] ? cpu::sgemm_library() : "none (Eigen runs everything)"));
  manual_seed(4);
  Tensor a = randn({300, 200}), at = randn({200, 300}), b = randn({200, 310}), bt = randn({310, 200});
  Tensor big = randn({3, 1030, 96}), w = randn({96, 130});
  const bool library = cpu::sgemm_library()[0] != 0;
  if (library) CHECK(cpu::sgemm_library_takes(300, 310, 200));
  check_same_bits_at_1_to_4_threads([&] {
    return std::vector<Tensor>{matmul(a, b), matmul(a, bt.transpose(0, 1)), matmul(at.transpose(0, 1), b),
                               matmul(at.transpose(0, 1), bt.transpose(0, 1)), matmul(big, w)};
  });
  CHECK_ALLCLOSE(matmul(a, bt.transpose(0, 1)), ref_matmul(a, bt.transpose(0, 1)), 1e-4, 1e-4);
  CHECK_ALLCLOSE(matmul(at.transpose(0, 1), b), ref_matmul(at.transpose(0, 1), b), 1e-4, 1e-4);
  CHECK_ALLCLOSE(matmul(big, w), ref_matmul(big, w), 1e-4, 1e-4);
}

TEST_CASE("bmm matches naive loops, including many small matrices run in parallel") {
  for (const Shape& bmkn : std::vector<Shape>{{1, 2, 3, 4}, {5, 7, 3, 2}, {64, 8, 16, 8}, {3, 40, 50, 60}}) {
    CAPTURE(bmkn);
    Tensor a = randn({bmkn[0], bmkn[1], bmkn[2]}, kFloat64), b = randn({bmkn[0], bmkn[2], bmkn[3]}, kFloat64);
    Tensor r = bmm(a, b);
    CHECK(r.sizes() == Shape{bmkn[0], bmkn[1], bmkn[3]});
    CHECK_ALLCLOSE(r, ref_matmul(a, b), 1e-11, 1e-11);
  }
}

TEST_CASE("matmul promotes 1-D operands and broadcasts batch dims") {
  const double tol = 1e-11;
  auto R = [](const Shape& s) { return randn(s, kFloat64); };
  check_matmul(R({5}), R({5}), tol);              // dot -> 0-dim
  CHECK(matmul(R({5}), R({5})).sizes() == Shape{});
  check_matmul(R({4}), R({4, 3}), tol);           // vector @ matrix -> [3]
  check_matmul(R({3, 4}), R({4}), tol);           // matrix @ vector -> [3]
  check_matmul(R({3, 4}), R({4, 6}), tol);
  check_matmul(R({2, 3, 4}), R({4}), tol);        // batched matrix @ vector -> [2, 3]
  check_matmul(R({4}), R({2, 4, 5}), tol);        // vector @ batched matrix -> [2, 5]
  check_matmul(R({2, 3, 4}), R({4, 5}), tol);     // folded into one mm
  check_matmul(R({2, 2, 3, 4}), R({4, 5}), tol);
  check_matmul(R({3, 4}), R({2, 4, 5}), tol);     // 2-D a broadcast over b's batch
  check_matmul(R({2, 3, 4}), R({2, 4, 5}), tol);
  check_matmul(R({2, 1, 3, 4}), R({5, 4, 2}), tol);  // batch [2, 1] x [5] -> [2, 5]
  check_matmul(R({1, 3, 4}), R({6, 4, 2}), tol);
  check_matmul(R({6, 3, 4}), R({1, 4, 2}), tol);
  check_matmul(R({2, 3, 1, 3, 4}), R({3, 1, 4, 2}), tol);
  CHECK(matmul(R({2, 1, 3, 4}), R({5, 4, 2})).sizes() == Shape{2, 5, 3, 2});
  CHECK(matmul(R({7, 3, 4}), R({4})).sizes() == Shape{7, 3});
}

TEST_CASE("transposed and strided operands") {
  Tensor a = randn({6, 5}, kFloat64), b = randn({7, 6}, kFloat64);
  check_matmul(a.t(), b.t(), 1e-11);                       // both column-major views
  check_matmul(a.t(), randn({6, 4}, kFloat64), 1e-11);     // a column-major
  check_matmul(randn({3, 7}, kFloat64), b, 1e-11);
  check_matmul(randn({4, 7}, kFloat64), b.t().t(), 1e-11);
  Tensor big = randn({8, 12}, kFloat64);
  check_matmul(big.slice(1, 0, 12, 2), randn({6, 3}, kFloat64), 1e-11);  // neither stride 1: copied
  check_matmul(big.slice(0, 1, 8, 2).slice(1, 0, 12, 3), big.slice(0, 0, 4).slice(1, 0, 5), 1e-11);
  // Batched transposes as autograd produces them.
  Tensor x = randn({3, 4, 5}, kFloat64), y = randn({3, 6, 5}, kFloat64);
  check_matmul(x, y.transpose(1, 2), 1e-11);
  check_matmul(x.transpose(1, 2), randn({3, 4, 2}, kFloat64), 1e-11);
  check_matmul(randn({2, 5}, kFloat64).expand({3, 2, 5}), y.transpose(1, 2), 1e-11);
  // A gradient of zero strides (as sum's backward makes) as an operand.
  check_matmul(full({1, 1, 1}, 2.0, kFloat64).expand({3, 4, 6}), y, 1e-11);
  Tensor f = randn({20, 30});
  check_matmul(f.t(), randn({20, 10}), 1e-4);
}

TEST_CASE("f16 and bf16 matmul computes in f32") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dt);
    Tensor a = randn({16, 40}).to(dt), b = randn({40, 24}).to(dt);
    Tensor r = matmul(a, b);
    CHECK(r.dtype() == dt);
    CHECK_ALLCLOSE(r, ref_matmul(a, b), 1e-2, 5e-2);
    CHECK_ALLCLOSE(matmul(a.t().contiguous().t(), b), ref_matmul(a, b), 1e-2, 5e-2);
    Tensor x = randn({3, 5, 8}).to(dt), y = randn({3, 8, 4}).to(dt);
    CHECK_ALLCLOSE(bmm(x, y), ref_matmul(x, y), 1e-2, 5e-2);
  }
}

TEST_CASE("integer matmul is exact") {
  Tensor a = randint(-5, 6, {4, 7}), b = randint(-5, 6, {7, 3});
  Tensor r = matmul(a, b);
  CHECK(r.dtype() == kInt64);
  CHECK(r.to_vector<double>() == ref_matmul(a, b).to_vector<double>());
  Tensor ai = a.to(kInt32), bi = b.to(kInt32);
  CHECK(matmul(ai.t().contiguous().t(), bi).to_vector<double>() == ref_matmul(a, b).to_vector<double>());
  CHECK(matmul(bi.t(), ai.t()).to_vector<double>() == ref_matmul(b.t(), a.t()).to_vector<double>());
}

TEST_CASE("empty dims: K = 0 gives zeros, M or N = 0 an empty result") {
  Tensor r = mm(zeros({3, 0}), zeros({0, 4}));
  CHECK(r.sizes() == Shape{3, 4});
  CHECK(r.to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK(mm(zeros({0, 3}), zeros({3, 4})).sizes() == Shape{0, 4});
  CHECK(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).sizes() == Shape{0, 2, 4});
}

TEST_CASE("shape and dtype errors name the op and both shapes") {
  CHECK_THROWS_WITH(mm(randn({2, 3}), randn({4, 5})),
                    doctest::Contains("mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
  CHECK_THROWS_WITH(bmm(randn({2, 2, 3}), randn({2, 4, 5})),
                    doctest::Contains("bmm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
  CHECK_THROWS_WITH(matmul(randn({7, 2, 3}), randn({4, 5})),
                    doctest::Contains("matmul: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
  CHECK_THROWS_WITH(matmul(randn({3}), randn({4})), doctest::Contains("matmul"));
  CHECK_THROWS_WITH(bmm(randn({2, 2, 3}), randn({3, 3, 5})), doctest::Contains("bmm: batch sizes differ"));
  CHECK_THROWS_WITH(mm(randn({2, 3, 1}), randn({3, 5})), doctest::Contains("mm: expected 2-D"));
  CHECK_THROWS_WITH(bmm(randn({2, 3}), randn({3, 5})), doctest::Contains("bmm: expected 3-D"));
  CHECK_THROWS_WITH(matmul(scalar_tensor(1.0, kFloat32), randn({3})), doctest::Contains("matmul"));
  CHECK_THROWS_WITH(matmul(randn({2, 3}), randn({3, 2}, kFloat64)), doctest::Contains("matmul: expected both"));
  CHECK_THROWS_WITH(matmul(randn({2, 2, 3, 4}), randn({3, 4, 5})), doctest::Contains("matmul"));
}

TEST_CASE("float32 matmul precision: \"highest\" by default, \"high\" allows TF32, others rejected") {
  CHECK(float32_matmul_precision() == Float32MatmulPrecision::highest);
  CHECK_FALSE(allow_tf32());
  Tensor a = randn({5, 7}), b = randn({7, 3});
  Tensor full = matmul(a, b);
  set_float32_matmul_precision("high");
  CHECK(allow_tf32());
  // The CPU has no TF32: its results do not change.
  CHECK(test::allclose(matmul(a, b), full, 0, 0));
  set_float32_matmul_precision("highest");
  CHECK_FALSE(allow_tf32());
  try {
    set_float32_matmul_precision("medium");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("\"medium\"") != std::string::npos);
  }
}
