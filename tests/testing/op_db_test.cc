// The op database's one driver: every row of tests/testing/op_db.h through f64 gradcheck (or its
// pinned gradients at kinks), f32 vs f64, contiguous vs non-contiguous inputs, its f64 scalar
// reference (threaded, strided, f16/bf16), autocast (every policy entry has a row), and on a GPU
// the CUDA forward, backward and f64 gradcheck against the CPU's (skipped visibly without one).
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "amp/amp.h"
#include "autograd/autograd.h"
#include "core/device.h"
#include "core/op_kinds.h"
#include "core/op_table.h"
#include "tests/file_util.h"
#include "tests/testing/compare.h"
#include "tests/testing/op_db.h"

using namespace kiln;
using test::OpInfo;

namespace {

/// The gradient of every input of sum(fn(in) * w): w random (seeded), or ones for pinned rows.
std::vector<Tensor> grads_of(const OpInfo& row, std::vector<Tensor> in) {
  for (Tensor& t : in) t = t.detach().set_requires_grad(true);
  Tensor y = row.fn(in);
  if (y.requires_grad()) {
    Generator g(7);
    Tensor w = row.gradcheck ? rand(y.sizes(), kFloat64, &g).to(y.dtype()).to(y.device()) : ones_like(y);
    (y * w).sum().backward();
  }
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back((t.grad().defined() ? t.grad() : zeros_like(t)).to(kCPU));
  return out;
}

bool has_gpu() { return device_count(DeviceType::CUDA) > 0; }

void skip_visibly(const char* what) {
  std::printf("skipped: no CUDA device (%s)\n", what);
  MESSAGE("skipped: no CUDA device");
}

}  // namespace

TEST_CASE("every primitive in the op table has a derivative") {
  std::vector<std::pair<std::string, bool>> primitives;
#define KILN_LIST_PRIMITIVE_(NAME, SIG) primitives.emplace_back(#NAME, op::NAME.has_autograd());
  KILN_OP_LIST(KILN_LIST_PRIMITIVE_)
#undef KILN_LIST_PRIMITIVE_
  REQUIRE(primitives.size() > 20);
  for (const auto& [name, differentiable] : primitives) CHECK_MESSAGE(differentiable, "op::" << name << " has no derivative");
}

TEST_CASE("every row: f64 gradients, f32 vs f64, non-contiguous inputs") {
  const auto& db = test::op_db();
  REQUIRE(db.size() >= 250);
  int gradchecks = 0, pinned = 0, non_diff = 0;
  for (size_t i = 0; i < db.size(); ++i) {
    const OpInfo& row = db[i];
    CAPTURE(row.name);
    CHECK_MESSAGE(!row.torch.empty(), "no PyTorch expression (torch_compare.py needs one)");
    std::vector<Tensor> x64 = test::make_inputs(row, i, kFloat64);
    if (!row.differentiable) {
      ++non_diff;
      std::vector<Tensor> leaves;
      for (const Tensor& t : x64) leaves.push_back(t.clone().set_requires_grad(true));
      Tensor y = row.fn(leaves);
      CHECK_FALSE(is_floating(y.dtype()));
      CHECK_FALSE(y.requires_grad());
    } else if (row.gradcheck) {
      ++gradchecks;
      std::vector<Tensor> leaves;
      for (const Tensor& t : x64) leaves.push_back(t.clone().set_requires_grad(true));
      Tensor y = row.fn(leaves);
      REQUIRE(y.requires_grad());
      auto r = autograd::gradcheck(row.fn, leaves, {.eps = row.eps});
      CHECK_MESSAGE(r.ok, r.message);
    } else {
      ++pinned;
      auto g = grads_of(row, x64);
      REQUIRE(g.size() == row.grads.size());
      for (size_t k = 0; k < g.size(); ++k)
        CHECK_MESSAGE(g[k].to_vector<double>() == row.grads[k], "gradient of input ", k, ": ", g[k].str());
    }

    // f32 against f64 (on the same values, rounded).
    Tensor y64 = row.fn(x64);
    Tensor y32 = row.fn(test::make_inputs(row, i, kFloat32));
    if (row.differentiable) CHECK(y32.dtype() == kFloat32);
    CHECK_MESSAGE(test::allclose(y32, y64, row.f32_tol, row.f32_tol), "f32 ", y32.str(), "\nvs f64 ", y64.str());

    // Non-contiguous inputs: the same values, forward and gradients.
    std::vector<Tensor> strided;
    for (const Tensor& t : x64) strided.push_back(test::non_contiguous(t));
    CHECK(test::allclose(row.fn(strided), y64, 1e-12, 1e-12));
    if (row.differentiable) {
      auto g_contig = grads_of(row, x64), g_strided = grads_of(row, strided);
      for (size_t k = 0; k < g_contig.size(); ++k) CHECK(test::allclose(g_strided[k], g_contig[k], 1e-12, 1e-12));
    }
  }
  MESSAGE(db.size(), " rows: ", gradchecks, " f64 gradchecks, ", pinned, " pinned gradients, ", non_diff,
          " non-differentiable");
}

TEST_CASE("every row: each input alone requiring grad gets the gradient the full backward gives it") {
  // The backward computes only what is asked for (conv2d without the weight's gradient, batch
  // norm's x-free path, ...): each such path is checked against the all-inputs one, which the
  // gradchecks above hold to finite differences.
  const auto& db = test::op_db();
  int checked = 0;
  for (size_t i = 0; i < db.size(); ++i) {
    const OpInfo& row = db[i];
    if (!row.differentiable || row.args.size() < 2) continue;
    CAPTURE(row.name);
    std::vector<Tensor> x = test::make_inputs(row, i, kFloat64);
    const std::vector<Tensor> all = grads_of(row, x);
    for (size_t k = 0; k < x.size(); ++k) {
      CAPTURE(k);
      std::vector<Tensor> in;
      for (size_t j = 0; j < x.size(); ++j) in.push_back(j == k ? x[j].detach().set_requires_grad(true) : x[j].detach());
      Tensor y = row.fn(in);
      if (!y.requires_grad()) {  // the row does not differentiate this input: nor does the full backward
        CHECK(test::allclose(all[k], zeros_like(all[k]), 0, 0));
        continue;
      }
      Generator g(7);
      Tensor w = row.gradcheck ? rand(y.sizes(), kFloat64, &g).to(y.dtype()) : ones_like(y);
      (y * w).sum().backward();
      Tensor got = in[k].grad().defined() ? in[k].grad() : zeros_like(in[k]);
      CHECK_MESSAGE(test::allclose(got, all[k], 1e-12, 1e-12), "alone ", got.str(), "\nwith all ", all[k].str());
      ++checked;
    }
  }
  CHECK(checked >= 100);
}

namespace {

/// The f64 reference of f applied to every element of x.
Tensor ref1(const Tensor& x, const std::function<double(double)>& f) {
  auto v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return tensor(v, x.sizes(), kFloat64);
}

/// The f64 reference of f(a, b) with broadcasting.
Tensor ref2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), "ref2");
  auto x = (a.to(kFloat64) + zeros(shape, kFloat64)).to_vector<double>();
  auto y = (b.to(kFloat64) + zeros(shape, kFloat64)).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) x[i] = f(x[i], y[i]);
  return tensor(x, shape, kFloat64);
}

/// Values of arg `a` in `dt` and `shape` (the row's range, a fresh draw).
Tensor draw(const test::Arg& a, const Shape& shape, DType dt) { return test::uniform(shape, dt, a.lo, a.hi); }

/// A transposed (non-contiguous) view of a fresh [rows, cols] draw.
Tensor transposed(const test::Arg& a, int64_t rows, int64_t cols, DType dt) { return draw(a, {cols, rows}, dt).t(); }

}  // namespace

TEST_CASE("elementwise rows match their f64 reference: threaded, broadcast, 0-dim, non-contiguous, f16/bf16") {
  manual_seed(1);
  int n = 0;
  for (const OpInfo& row : test::op_db()) {
    if (!row.ref1 && !row.ref2) continue;
    ++n;
    CAPTURE(row.name);
    // A comparison's result is bool, its reference 0 or 1.
    const auto result_dtype = [&](DType in) { return row.differentiable ? in : kBool; };
    for (DType dt : {kFloat32, kFloat64}) {
      CAPTURE(dtype_name(dt));
      const double rtol = dt == kFloat32 ? 1e-5 : 1e-12, atol = dt == kFloat32 ? 1e-6 : 1e-12;
      if (row.ref1) {
        const auto f = [&](const Tensor& x) { return row.fn({x}); };
        Tensor x = draw(row.args[0], {70001}, dt);  // large enough to be split across threads
        Tensor y = f(x);
        CHECK(y.dtype() == result_dtype(dt));
        CHECK_ALLCLOSE(y, ref1(x, row.ref1), rtol, atol);
        Tensor xt = transposed(row.args[0], 7, 13, dt);
        REQUIRE(!xt.is_contiguous());
        CHECK_ALLCLOSE(f(xt), ref1(xt, row.ref1), rtol, atol);
      } else {
        const auto f = [&](const Tensor& a, const Tensor& b) { return row.fn({a, b}); };
        const test::Arg &A = row.args[0], &B = row.args[1];
        Tensor a = draw(A, {50003}, dt), b = draw(B, {50003}, dt);
        Tensor y = f(a, b);
        CHECK(y.dtype() == result_dtype(dt));
        CHECK_ALLCLOSE(y, ref2(a, b, row.ref2), rtol, atol);
        Tensor p = draw(A, {3, 1, 5}, dt), q = draw(B, {4, 1}, dt);  // broadcasting both ways
        Tensor r = f(p, q);
        CHECK(r.sizes() == Shape{3, 4, 5});
        CHECK_ALLCLOSE(r, ref2(p, q, row.ref2), rtol, atol);
        Tensor s = draw(B, {}, dt), sl = draw(A, {}, dt);  // a 0-dim operand on either side
        CHECK_ALLCLOSE(f(p, s), ref2(p, s, row.ref2), rtol, atol);
        CHECK_ALLCLOSE(f(sl, q), ref2(sl, q, row.ref2), rtol, atol);
        Tensor at = transposed(A, 11, 9, dt), bt = transposed(B, 11, 9, dt), bc = draw(B, {11, 9}, dt);
        CHECK_ALLCLOSE(f(at, bt), ref2(at, bt, row.ref2), rtol, atol);
        CHECK_ALLCLOSE(f(at, bc), ref2(at, bc, row.ref2), rtol, atol);
      }
    }
    for (DType dt : {kFloat16, kBFloat16}) {  // computed in float, rounded once
      CAPTURE(dtype_name(dt));
      if (row.ref1) {
        Tensor x = draw(row.args[0], {257}, dt);
        Tensor y = row.fn({x});
        CHECK(y.dtype() == result_dtype(dt));
        CHECK_ALLCLOSE(y, ref1(x, row.ref1), 1e-2, 1e-2);
      } else {
        Tensor a = draw(row.args[0], {4, 33}, dt), b = draw(row.args[1], {33}, dt);
        Tensor y = row.fn({a, b});
        CHECK(y.dtype() == result_dtype(dt));
        CHECK_ALLCLOSE(y, ref2(a, b, row.ref2), 1e-2, 2e-2);
      }
    }
  }
  CHECK(n >= 45);
}

namespace {

/// The dtype row's integer pass gives for `in` (PyTorch's promotion, measured).
DType integer_result(const OpInfo& row, DType in) {
  if (!row.differentiable) return kBool;
  return row.integers == test::Integers::keep ? in : kFloat32;
}

/// The row's f64 reference on these (integer) inputs.
Tensor reference(const OpInfo& row, const std::vector<Tensor>& in) {
  return row.ref1 ? ref1(in[0], row.ref1) : ref2(in[0], in[1], row.ref2);
}

}  // namespace

TEST_CASE("integer rows on i32/i64: PyTorch's result dtype, exact values, strided too") {
  int n = 0;
  const auto& db = test::op_db();
  for (size_t i = 0; i < db.size(); ++i) {
    const OpInfo& row = db[i];
    if (row.integers == test::Integers::no) continue;
    REQUIRE_MESSAGE((row.ref1 || row.ref2), row.name, ": an integer row needs a reference");
    ++n;
    CAPTURE(row.name);
    for (DType dt : {kInt32, kInt64}) {
      CAPTURE(dtype_name(dt));
      std::vector<Tensor> in = test::make_int_inputs(row, i, dt);
      Tensor y = row.fn(in);
      CHECK(y.dtype() == integer_result(row, dt));
      CHECK_FALSE(y.requires_grad());
      const double tol = row.integers == test::Integers::keep ? 0 : 1e-6;
      CHECK_ALLCLOSE(y, reference(row, in), tol, tol);
      std::vector<Tensor> strided;
      for (const Tensor& t : in) strided.push_back(test::non_contiguous(t));
      CHECK(test::identical(row.fn(strided), y));
    }
  }
  CHECK(n >= 30);
}

TEST_CASE("every unary, binary and comparison kind of the registry has a reference row") {
  std::set<std::string> covered;
  for (const OpInfo& row : test::op_db())
    if (!row.kind.empty()) covered.insert(row.kind);
  std::vector<std::string> kinds;
  for (int k = 0; k < kNumUnaryKinds; ++k) kinds.emplace_back(kind_name(static_cast<UnaryKind>(k)));
  for (int k = 0; k < kNumBinaryKinds; ++k) kinds.emplace_back(kind_name(static_cast<BinaryKind>(k)));
  for (int k = 0; k <= static_cast<int>(CompareKind::ge); ++k) kinds.emplace_back(kind_name(static_cast<CompareKind>(k)));
  for (const std::string& k : kinds) CHECK_MESSAGE(covered.count(k), "no op_db row with a reference for kind ", k);
}

namespace {

const DType kLows[] = {kBFloat16, kFloat16};

/// The row standing for each autocast policy entry.
std::map<std::string, std::pair<size_t, const OpInfo*>> amp_rows() {
  std::map<std::string, std::pair<size_t, const OpInfo*>> m;
  const auto& db = test::op_db();
  for (size_t i = 0; i < db.size(); ++i)
    if (!db[i].amp.empty()) m[db[i].amp] = {i, &db[i]};
  return m;
}

Tensor run(const std::pair<size_t, const OpInfo*>& r, DType dt, std::optional<DType> as = {}) {
  return r.second->fn(test::make_inputs(*r.second, r.first, dt, as));
}

}  // namespace

TEST_CASE("autocast: every policy entry has a row, with the dtype its class promises, only under a guard") {
  auto rows = amp_rows();
  for (const AutocastEntry& e : autocast_policy())
    CHECK_MESSAGE(rows.count(std::string(e.name)), "no op_db row for autocast entry ", e.name);
  CHECK(rows.size() == autocast_policy().size());
  for (DType low : kLows) {
    for (const auto& [op_name, cls] : autocast_policy()) {
      const auto& r = rows.at(std::string(op_name));
      CAPTURE(r.second->name);
      CAPTURE(dtype_name(low));
      switch (cls) {
        case AutocastClass::lower: {
          CHECK(run(r, kFloat32).dtype() == kFloat32);  // no guard: untouched
          amp::AutocastGuard g(low);
          CHECK(run(r, kFloat32).dtype() == low);
          CHECK(run(r, kFloat64).dtype() == kFloat64);  // f64 is never lowered
          break;
        }
        case AutocastClass::fp32: {
          CHECK(run(r, low).dtype() == low);
          amp::AutocastGuard g(low);
          CHECK(run(r, low).dtype() == kFloat32);
          CHECK(run(r, kFloat64).dtype() == kFloat64);
          break;
        }
        case AutocastClass::promote: {
          // f32 input, low-precision source: one dtype is required, so without a guard it fails.
          CHECK(!test::error_of([&] { run(r, low); }).empty());
          amp::AutocastGuard g(low);
          CHECK(run(r, low).dtype() == kFloat32);
          break;
        }
      }
    }
  }
}

TEST_CASE("autocast: lower-class rows agree with f32 within the lower precision, fp32-class rows compute in f32") {
  auto rows = amp_rows();
  // Inputs are rounded to the lower dtype and the product to it again; bf16 keeps 8 bits, f16 11.
  const std::map<DType, double> tol = {{kBFloat16, 2e-2}, {kFloat16, 3e-3}};
  for (DType low : kLows)
    for (const auto& [op_name, cls] : autocast_policy()) {
      const auto& r = rows.at(std::string(op_name));
      CAPTURE(r.second->name);
      CAPTURE(dtype_name(low));
      if (cls == AutocastClass::lower) {
        Tensor ref = run(r, kFloat32), got;
        {
          amp::AutocastGuard g(low);
          got = run(r, kFloat32);
        }
        const double err = test::scaled_error(got, ref);
        CHECK(err < tol.at(low));
        CHECK(err > 0);  // it did run in the lower precision
      } else if (cls == AutocastClass::fp32) {
        Tensor in_low = run(r, low);  // no guard: computed in (and rounded to) the low dtype
        Tensor got;
        {
          amp::AutocastGuard g(low);
          got = run(r, low);
        }
        // The same low-precision values widened by hand and run in f32 without a guard.
        CHECK(test::identical(got, run(r, low, kFloat32)));
        CHECK(test::scaled_error(got, in_low) < 5e-2);
      }
    }
}

TEST_CASE("autocast leaves f64 alone: every row's f64 gradcheck passes inside a guard") {
  amp::AutocastGuard g(kBFloat16);
  const auto& db = test::op_db();
  for (const auto& [name, r] : amp_rows()) {
    CAPTURE(name);
    std::vector<Tensor> leaves;
    for (Tensor t : test::make_inputs(*r.second, r.first, kFloat64)) leaves.push_back(t.set_requires_grad(true));
    auto res = autograd::gradcheck(r.second->fn, leaves, {.eps = r.second->eps});
    CHECK_MESSAGE(res.ok, res.message);
  }
  (void)db;
}

TEST_CASE("every row on CUDA: forward and gradients match the CPU's, f64 gradients against finite differences") {
  if (!has_gpu()) return skip_visibly("op database on CUDA");
  const Device gpu("cuda:0");
  const auto& db = test::op_db();
  for (size_t i = 0; i < db.size(); ++i) {
    const OpInfo& row = db[i];
    CAPTURE(row.name);
    std::vector<Tensor> x = test::make_inputs(row, i, kFloat32), xg;
    for (const Tensor& t : x) xg.push_back(t.to(gpu));
    const double tol = std::max(10 * row.f32_tol, 1e-4);
    Tensor cpu_out = row.fn(x), gpu_out = row.fn(xg);
    CHECK(gpu_out.device() == gpu);
    CHECK_MESSAGE(test::allclose(gpu_out, cpu_out, tol, tol), "forward");
    if (!row.differentiable) continue;
    auto g_cpu = grads_of(row, x), g_gpu = grads_of(row, xg);
    for (size_t k = 0; k < x.size(); ++k)
      CHECK_MESSAGE(test::allclose(g_gpu[k], g_cpu[k], tol, tol), "gradient of input ", k);
    if (!row.gradcheck) continue;
    // f64 on the GPU: CPU leaves moved inside the function (to() is differentiable), so the
    // forward and backward kernels run on the GPU while finite differences perturb the leaves.
    std::vector<Tensor> leaves;
    for (Tensor t : test::make_inputs(row, i, kFloat64)) leaves.push_back(t.set_requires_grad(true));
    auto on_gpu = [&](const std::vector<Tensor>& v) {
      std::vector<Tensor> d;
      for (const Tensor& t : v) d.push_back(t.to(gpu));
      return row.fn(d).to(kCPU);
    };
    auto r = autograd::gradcheck(on_gpu, leaves, {.eps = row.eps});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

namespace {

/// One layout of a row's inputs: contiguous bases and the views of them the op gets.
struct Layout {
  std::string name;
  std::vector<Tensor> bases;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> view;
};

/// The layouts device kernels are checked in: contiguous (odd sizes, for the vectorised kernels'
/// tails), transposed, a strided slice, and for binary rows a broadcast row.
std::vector<Layout> device_layouts(const OpInfo& row, DType dt) {
  using V = const std::vector<Tensor>&;
  if (row.ref1) {
    std::vector<Tensor> x = {draw(row.args[0], {129, 67}, dt)};
    return {{"contiguous", x, [](V v) { return v; }},
            {"transposed", x, [](V v) { return std::vector<Tensor>{v[0].transpose(0, 1)}; }},
            {"sliced", x, [](V v) { return std::vector<Tensor>{v[0].slice(1, 1, 67, 2)}; }}};
  }
  std::vector<Tensor> ab = {draw(row.args[0], {65, 130}, dt), draw(row.args[1], {65, 130}, dt)};
  return {{"contiguous", ab, [](V v) { return v; }},
          {"broadcast row", {ab[0], draw(row.args[1], {1, 130}, dt)}, [](V v) { return v; }},
          {"transposed", ab, [](V v) { return std::vector<Tensor>{v[0].transpose(0, 1), v[1].transpose(0, 1)}; }},
          {"sliced", ab, [](V v) { return std::vector<Tensor>{v[0].slice(1, 0, 129, 3), v[1].slice(1, 1, 129, 3)}; }}};
}

}  // namespace

TEST_CASE("elementwise rows on CUDA: every dtype and layout, forward and backward, match the CPU kernels") {
  if (!has_gpu()) return skip_visibly("elementwise rows on CUDA");
  const Device gpu("cuda:0");
  manual_seed(3);
  const auto& db = test::op_db();
  for (size_t i = 0; i < db.size(); ++i) {
    const OpInfo& row = db[i];
    if (!row.ref1 && !row.ref2) continue;
    CAPTURE(row.name);
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      const double tol = test::tolerance(dt);
      for (const Layout& layout : device_layouts(row, dt)) {
        CAPTURE(layout.name);
        CAPTURE(dtype_name(dt));
        std::vector<Tensor> bases_gpu;
        for (const Tensor& b : layout.bases) bases_gpu.push_back(b.to(gpu));
        std::vector<Tensor> x = layout.view(layout.bases), xg = layout.view(bases_gpu);
        Tensor cpu_out = row.fn(x), gpu_out = row.fn(xg);
        CHECK(gpu_out.device() == gpu);
        CHECK(gpu_out.dtype() == cpu_out.dtype());
        CHECK_MESSAGE(test::allclose(gpu_out, cpu_out, tol, tol), "forward");
        if (!row.differentiable) continue;
        auto g_cpu = grads_of(row, x), g_gpu = grads_of(row, xg);
        for (size_t k = 0; k < x.size(); ++k)  // broadcast gradients are sums: held to the largest term
          CHECK_MESSAGE(test::close_scaled(g_gpu[k], g_cpu[k], 2 * tol), "gradient of input ", k);
      }
    }
    if (row.integers == test::Integers::no) continue;
    for (DType dt : {kInt32, kInt64}) {
      CAPTURE(dtype_name(dt));
      std::vector<Tensor> in = test::make_int_inputs(row, i, dt), ing;
      for (const Tensor& t : in) ing.push_back(t.to(gpu));
      Tensor cpu_out = row.fn(in), gpu_out = row.fn(ing);
      CHECK(gpu_out.dtype() == cpu_out.dtype());
      const double tol = row.integers == test::Integers::keep ? 0 : 1e-5;  // exact, or f32 math
      CHECK(test::allclose(gpu_out, cpu_out, tol, tol));
    }
  }
}
