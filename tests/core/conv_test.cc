// conv2d and pooling, forward and backward kernels, against naive f64 loops on random inputs,
// over stride, padding, dilation, groups, bias, 1x1, ceil_mode and count_include_pad; and the
// errors that name the op.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/conv.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/parallel.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

struct ConvCase {
  int64_t N, C, H, W, Cout, KH, KW;
  Conv2dParams p;
  bool bias;
};

Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  Conv2dParams p;
  p.stride[0] = sh, p.stride[1] = sw;
  p.padding[0] = ph, p.padding[1] = pw;
  p.dilation[0] = dh, p.dilation[1] = dw;
  p.groups = groups;
  return p;
}

const std::vector<ConvCase> kCases = {
    {2, 3, 7, 6, 4, 3, 3, params(1, 1, 0, 0, 1, 1, 1), true},
    {2, 3, 7, 6, 4, 3, 3, params(2, 2, 0, 0, 1, 1, 1), false},            // stride 2
    {2, 3, 7, 6, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1), true},             // padding 1
    {2, 3, 9, 8, 4, 3, 3, params(1, 1, 0, 0, 2, 2, 1), true},             // dilation 2
    {2, 4, 7, 6, 6, 3, 3, params(1, 1, 1, 1, 1, 1, 2), true},             // groups 2
    {2, 4, 6, 6, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 4), false},            // depthwise
    {3, 5, 6, 7, 4, 1, 1, params(1, 1, 0, 0, 1, 1, 1), true},             // 1x1 fast path
    {2, 4, 6, 7, 6, 1, 1, params(1, 1, 0, 0, 1, 1, 2), false},            // 1x1 grouped
    {2, 5, 6, 7, 4, 1, 1, params(2, 2, 1, 0, 1, 1, 1), true},             // 1x1 strided, padded
    {2, 3, 10, 9, 5, 2, 4, params(3, 2, 2, 1, 2, 1, 1), true},            // asymmetric everything
    {6, 3, 12, 11, 8, 3, 3, params(1, 1, 1, 1, 1, 1, 1), true},           // several batch chunks
    {5, 32, 14, 14, 16, 3, 3, params(2, 1, 1, 0, 1, 1, 2), true},         // larger, uneven chunks
    // Stride 1 with OW == W: a tall kernel without height padding, height padding beyond the
    // kernel, and horizontal offsets as wide as the map.
    {2, 3, 7, 6, 4, 5, 3, params(1, 1, 0, 1, 1, 1, 1), true},
    {2, 2, 5, 6, 3, 1, 5, params(1, 1, 2, 2, 1, 1, 1), false},
    {2, 2, 4, 2, 3, 3, 5, params(1, 1, 1, 2, 1, 1, 1), true},
    // Deep enough (K >= 64) for the weight gradient through small_gemm on transposed grad_out:
    // channels and positions that are not multiples of 8, more output channels than one tile.
    {3, 8, 9, 10, 20, 3, 3, params(1, 1, 1, 1, 1, 1, 1), true},
    {2, 16, 7, 5, 70, 3, 3, params(2, 1, 1, 1, 1, 1, 1), false},
    {2, 64, 5, 6, 12, 1, 1, params(1, 1, 0, 0, 1, 1, 1), true},  // 1x1, K = 64: x[n] is the column matrix
};

std::string describe(const ConvCase& c) {
  return fmt::format("x [{}, {}, {}, {}] w [{}, {}, {}, {}] stride ({}, {}) pad ({}, {}) dil ({}, {}) groups {} bias {}",
                     c.N, c.C, c.H, c.W, c.Cout, c.C / c.p.groups, c.KH, c.KW, c.p.stride[0], c.p.stride[1],
                     c.p.padding[0], c.p.padding[1], c.p.dilation[0], c.p.dilation[1], c.p.groups, c.bias);
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/// Visits every (n, co, oh, ow, ci, ki, kj, ih, iw) term of the convolution that reads a real
/// (non-padding) input element.
template <class F> void for_each_term(const ConvCase& c, const F& f) {
  const int64_t OH = out_size(c.H, c.KH, c.p.stride[0], c.p.padding[0], c.p.dilation[0]);
  const int64_t OW = out_size(c.W, c.KW, c.p.stride[1], c.p.padding[1], c.p.dilation[1]);
  const int64_t Cg = c.C / c.p.groups, Coutg = c.Cout / c.p.groups;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t co = 0; co < c.Cout; ++co)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t ki = 0; ki < c.KH; ++ki)
              for (int64_t kj = 0; kj < c.KW; ++kj) {
                const int64_t ih = oh * c.p.stride[0] - c.p.padding[0] + ki * c.p.dilation[0];
                const int64_t iw = ow * c.p.stride[1] - c.p.padding[1] + kj * c.p.dilation[1];
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t ci = (co / Coutg) * Cg + cg;
                const int64_t xi = ((n * c.C + ci) * c.H + ih) * c.W + iw;
                const int64_t wi = ((co * Cg + cg) * c.KH + ki) * c.KW + kj;
                const int64_t oi = ((n * c.Cout + co) * OH + oh) * OW + ow;
                f(xi, wi, oi);
              }
}

Tensor naive_conv(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t OH = out_size(c.H, c.KH, c.p.stride[0], c.p.padding[0], c.p.dilation[0]);
  const int64_t OW = out_size(c.W, c.KW, c.p.stride[1], c.p.padding[1], c.p.dilation[1]);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> out(c.N * c.Cout * OH * OW, 0.0);
  if (c.bias) {
    auto bv = b.to_vector<double>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = bv[(i / (OH * OW)) % c.Cout];
  }
  for_each_term(c, [&](int64_t xi, int64_t wi, int64_t oi) { out[oi] += xv[xi] * wv[wi]; });
  return tensor(out, {c.N, c.Cout, OH, OW});
}

Tensor random(const Shape& s, DType dt) { return (rand(s, kFloat64) * 2.0 - 1.0).to(dt); }

}  // namespace

TEST_CASE("conv2d matches a direct convolution in f32 and f64") {
  manual_seed(11);
  for (const ConvCase& c : kCases) {
    for (DType dt : {kFloat32, kFloat64}) {
      CAPTURE(describe(c));
      CAPTURE(dtype_name(dt));
      Tensor x = random({c.N, c.C, c.H, c.W}, dt);
      Tensor w = random({c.Cout, c.C / c.p.groups, c.KH, c.KW}, dt);
      Tensor b = c.bias ? random({c.Cout}, dt) : Tensor();
      Tensor y = op::conv2d(x, w, b, c.p);
      CHECK(y.dtype() == dt);
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      CHECK_ALLCLOSE(y, naive_conv(c, x, w, b), tol, tol);
    }
  }
}

TEST_CASE("conv2d backward kernel matches direct loops") {
  manual_seed(12);
  for (const ConvCase& c : kCases) {
    for (DType dt : {kFloat32, kFloat64}) {
      CAPTURE(describe(c));
      CAPTURE(dtype_name(dt));
      Tensor x = random({c.N, c.C, c.H, c.W}, dt);
      Tensor w = random({c.Cout, c.C / c.p.groups, c.KH, c.KW}, dt);
      Tensor y = op::conv2d(x, w, Tensor(), c.p);
      Tensor go = random(y.sizes(), dt);
      auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = go.to_vector<double>();
      std::vector<double> gx(xv.size(), 0.0), gw(wv.size(), 0.0), gb(c.Cout, 0.0);
      for_each_term(c, [&](int64_t xi, int64_t wi, int64_t oi) {
        gx[xi] += gv[oi] * wv[wi];
        gw[wi] += gv[oi] * xv[xi];
      });
      const int64_t plane = y.size(2) * y.size(3);
      for (size_t i = 0; i < gv.size(); ++i) gb[(i / plane) % c.Cout] += gv[i];

      Tensor kx = make_tensor(x.sizes(), dt, kCPU), kw = make_tensor(w.sizes(), dt, kCPU);
      Tensor kb = make_tensor({c.Cout}, dt, kCPU);
      kernels::conv2d_backward[kCPU](kx, kw, kb, go, x, w, c.p);
      const double tol = dt == kFloat32 ? 1e-4 : 1e-11;
      CHECK_ALLCLOSE(kx, tensor(gx, x.sizes()), tol, tol);
      CHECK_ALLCLOSE(kw, tensor(gw, w.sizes()), tol, tol);
      CHECK_ALLCLOSE(kb, tensor(gb, {c.Cout}), tol, tol);

      // Each gradient alone, the others undefined.
      Tensor none, only_w = make_tensor(w.sizes(), dt, kCPU), only_x = make_tensor(x.sizes(), dt, kCPU);
      kernels::conv2d_backward[kCPU](none, only_w, none, go, x, w, c.p);
      CHECK_ALLCLOSE(only_w, kw, 0, 0);
      kernels::conv2d_backward[kCPU](only_x, none, none, go, x, w, c.p);
      CHECK_ALLCLOSE(only_x, kx, 0, 0);
    }
  }
}

TEST_CASE("conv2d results do not depend on the thread count") {
  manual_seed(13);
  const ConvCase& c = kCases.back();
  Tensor x = random({c.N, c.C, c.H, c.W}, kFloat32), w = random({c.Cout, c.C / c.p.groups, c.KH, c.KW}, kFloat32);
  Tensor b = random({c.Cout}, kFloat32);
  const int saved = get_num_threads();
  Tensor ref = op::conv2d(x, w, b, c.p);
  for (int nt : {1, 3}) {
    set_num_threads(nt);
    CHECK_ALLCLOSE(op::conv2d(x, w, b, c.p), ref, 1e-6, 1e-6);
  }
  set_num_threads(saved);
}

TEST_CASE("conv2d takes non-contiguous inputs, 16-bit floats and the public IntList form") {
  manual_seed(14);
  Tensor x = random({2, 3, 8, 9}, kFloat32), w = random({4, 3, 3, 3}, kFloat32), b = random({4}, kFloat32);
  Tensor ref = conv2d(x, w, b, {2}, {1}, {1});
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);  // same values, strided
  CHECK_FALSE(xt.is_contiguous());
  CHECK_ALLCLOSE(conv2d(xt, w, b, {2, 2}, {1, 1}), ref, 1e-6, 1e-6);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor y = conv2d(x.to(dt), w.to(dt), b.to(dt), {2}, {1});
    CHECK(y.dtype() == dt);
    CHECK_ALLCLOSE(y, ref, 3e-2, 3e-2);
  }
}

TEST_CASE("conv2d errors name the op and the shapes") {
  Tensor x = rand({2, 3, 8, 8}), w = rand({4, 3, 3, 3});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([&] { conv2d(rand({3, 8, 8}), w); });
  CHECK(m.find("conv2d") != std::string::npos);
  CHECK(m.find("[3, 8, 8]") != std::string::npos);
  m = message([&] { conv2d(rand({2, 5, 8, 8}), w); });
  CHECK(m.find("conv2d") != std::string::npos);
  CHECK(m.find("[2, 5, 8, 8]") != std::string::npos);
  CHECK(m.find("[4, 3, 3, 3]") != std::string::npos);
  m = message([&] { conv2d(x, rand({4, 3, 3, 3}), Tensor(), {1}, {0}, {1}, 2); });
  CHECK(m.find("groups") != std::string::npos);
  m = message([&] { conv2d(x, w, rand({5})); });
  CHECK(m.find("bias") != std::string::npos);
  m = message([&] { conv2d(rand({1, 3, 2, 2}), w); });
  CHECK(m.find("conv2d") != std::string::npos);
  CHECK(m.find("kernel") != std::string::npos);
  m = message([&] { conv2d(x, w, Tensor(), {0}); });
  CHECK(m.find("stride") != std::string::npos);
  m = message([&] { conv2d(x, w, Tensor(), {1, 1, 1}); });
  CHECK(m.find("stride") != std::string::npos);
  m = message([&] { conv2d(x, w.to(kFloat64)); });
  CHECK(m.find("dtype") != std::string::npos);
  m = message([&] { max_pool2d(rand({2, 3, 8}), {2}); });
  CHECK(m.find("max_pool2d") != std::string::npos);
  m = message([&] { avg_pool2d(x, {2}, {2}, {2}); });
  CHECK(m.find("avg_pool2d") != std::string::npos);
  CHECK(m.find("padding") != std::string::npos);
  m = message([&] { max_pool2d(rand({1, 1, 2, 2}), {3}); });
  CHECK(m.find("max_pool2d") != std::string::npos);
  m = message([&] { adaptive_avg_pool2d(x, {0, 2}); });
  CHECK(m.find("adaptive_avg_pool2d") != std::string::npos);
}

namespace {

struct PoolCase {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw;
  bool ceil_mode, count_include_pad;
};

const std::vector<PoolCase> kPoolCases = {
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, false, true},
    {2, 3, 7, 9, 3, 3, 2, 2, 1, 1, false, true},
    {2, 3, 7, 9, 3, 3, 2, 2, 1, 1, false, false},
    {2, 3, 7, 9, 2, 2, 2, 2, 0, 0, true, true},   // ceil_mode: a partial last window
    {2, 3, 8, 7, 3, 2, 2, 3, 1, 1, true, false},
    {1, 2, 5, 6, 3, 3, 1, 1, 1, 1, true, true},
    {3, 2, 9, 9, 4, 3, 3, 2, 2, 1, true, true},
    {1, 2, 5, 5, 2, 2, 2, 2, 1, 1, true, false},  // ceil_mode drops a window starting in padding
    // The 2x2/2 fast paths: rows of 7 (4-wide steps and a ragged redo), 4, 5 and 19 outputs.
    {3, 5, 14, 14, 2, 2, 2, 2, 0, 0, false, true},
    {2, 2, 9, 8, 2, 2, 2, 2, 0, 0, false, true},
    {2, 2, 6, 11, 2, 2, 2, 2, 0, 0, false, true},
    {1, 3, 4, 38, 2, 2, 2, 2, 0, 0, false, true},
};

struct NaivePool {
  std::vector<double> out, grad_x;
  std::vector<int64_t> idx;
  int64_t OH, OW;
};

/// Naive pooling of x with grad_out (may be empty) pushed back through it.
NaivePool naive_pool(const PoolCase& c, const std::vector<double>& x, const std::vector<double>& go, bool is_max) {
  NaivePool r;
  r.OH = pool_output_size(c.H, c.kh, c.ph, c.sh, 1, c.ceil_mode);
  r.OW = pool_output_size(c.W, c.kw, c.pw, c.sw, 1, c.ceil_mode);
  r.out.assign(c.N * c.C * r.OH * r.OW, 0.0);
  r.idx.assign(r.out.size(), -1);
  r.grad_x.assign(x.size(), 0.0);
  for (int64_t pl = 0; pl < c.N * c.C; ++pl)
    for (int64_t oh = 0; oh < r.OH; ++oh)
      for (int64_t ow = 0; ow < r.OW; ++ow) {
        const int64_t oi = (pl * r.OH + oh) * r.OW + ow;
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t arg = -1, inside = 0, padded = 0;
        for (int64_t i = 0; i < c.kh; ++i)
          for (int64_t j = 0; j < c.kw; ++j) {
            const int64_t h = oh * c.sh - c.ph + i, w = ow * c.sw - c.pw + j;
            if (h < c.H + c.ph && w < c.W + c.pw) ++padded;  // inside the padded input
            if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
            ++inside;
            const double v = x[pl * c.H * c.W + h * c.W + w];
            sum += v;
            if (v > best) best = v, arg = h * c.W + w;
          }
        if (is_max) {
          r.out[oi] = best;
          r.idx[oi] = arg;
          if (!go.empty()) r.grad_x[pl * c.H * c.W + arg] += go[oi];
        } else {
          const int64_t div = c.count_include_pad ? padded : inside;
          r.out[oi] = sum / div;
          if (!go.empty())
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t h = oh * c.sh - c.ph + i, w = ow * c.sw - c.pw + j;
                if (h >= 0 && h < c.H && w >= 0 && w < c.W) r.grad_x[pl * c.H * c.W + h * c.W + w] += go[oi] / div;
              }
        }
      }
  return r;
}

std::string describe(const PoolCase& c) {
  return fmt::format("x [{}, {}, {}, {}] kernel ({}, {}) stride ({}, {}) pad ({}, {}) ceil {} include_pad {}", c.N,
                     c.C, c.H, c.W, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.ceil_mode, c.count_include_pad);
}

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match naive loops, forward and backward") {
  manual_seed(21);
  for (const PoolCase& c : kPoolCases) {
    for (DType dt : {kFloat32, kFloat64}) {
      CAPTURE(describe(c));
      CAPTURE(dtype_name(dt));
      Tensor x = random({c.N, c.C, c.H, c.W}, dt);
      const Pool2dParams p =
          make_pool2d_params({c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, c.ceil_mode, c.count_include_pad, "test");
      auto xv = x.to_vector<double>();
      const Shape out_shape{c.N, c.C, pool_output_size(c.H, c.kh, c.ph, c.sh, 1, c.ceil_mode),
                            pool_output_size(c.W, c.kw, c.pw, c.sw, 1, c.ceil_mode)};
      Tensor go = random(out_shape, dt);
      auto gv = go.to_vector<double>();
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;

      NaivePool m = naive_pool(c, xv, gv, true);
      auto [y, idx] = max_pool2d_with_indices(x, p);
      CHECK(y.sizes() == out_shape);
      CHECK_ALLCLOSE(y, tensor(m.out, out_shape), tol, tol);
      CHECK(idx.to_vector<int64_t>() == m.idx);
      CHECK_ALLCLOSE(max_pool2d(x, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.ceil_mode), y, 0, 0);
      Tensor gx = make_tensor(x.sizes(), dt, kCPU);
      kernels::max_pool2d_backward[kCPU](gx, go, idx);
      CHECK_ALLCLOSE(gx, tensor(m.grad_x, x.sizes()), tol, tol);

      NaivePool a = naive_pool(c, xv, gv, false);
      Tensor ya = avg_pool2d(x, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, c.ceil_mode, c.count_include_pad);
      CHECK_ALLCLOSE(ya, tensor(a.out, out_shape), tol, tol);
      Tensor gxa = make_tensor(x.sizes(), dt, kCPU);
      kernels::avg_pool2d_backward[kCPU](gxa, go, p);
      CHECK_ALLCLOSE(gxa, tensor(a.grad_x, x.sizes()), tol, tol);
    }
  }
}

TEST_CASE("pooling output sizes follow PyTorch") {
  // torch.nn.functional.max_pool2d(torch.zeros(1, 1, H, W), k, s, p, ceil_mode=...).shape
  CHECK(pool_output_size(28, 2, 0, 2, 1, false) == 14);
  CHECK(pool_output_size(7, 2, 0, 2, 1, false) == 3);
  CHECK(pool_output_size(7, 2, 0, 2, 1, true) == 4);
  CHECK(pool_output_size(6, 3, 1, 3, 1, true) == 3);
  CHECK(pool_output_size(5, 2, 1, 2, 1, true) == 3);  // a window starting in the right padding is dropped
  CHECK(pool_output_size(5, 3, 1, 2, 1, false) == 3);
  CHECK(max_pool2d(rand({2, 3, 7, 9}), {3}, {2}, {1}, {1}, true).sizes() == Shape{2, 3, 4, 5});
  CHECK(avg_pool2d(rand({1, 1, 5, 6}), {2}, {2}, {1}, true).sizes() == Shape{1, 1, 3, 4});
}

TEST_CASE("max_pool2d propagates NaN and handles 16-bit floats") {
  Tensor x = tensor({1.0, 5.0, std::nan(""), 2.0}, kFloat32).reshape({1, 1, 2, 2});
  Tensor y = max_pool2d(x, {2});
  CHECK(std::isnan(y.item<double>()));
  Tensor h = rand({2, 2, 6, 6}).to(kBFloat16);
  CHECK_ALLCLOSE(max_pool2d(h, {2}).to(kFloat32), max_pool2d(h.to(kFloat32), {2}), 0, 0);
  CHECK_ALLCLOSE(avg_pool2d(h, {2}).to(kFloat32), avg_pool2d(h.to(kFloat32), {2}), 1e-2, 1e-2);
}

TEST_CASE("adaptive_avg_pool2d averages PyTorch's windows") {
  manual_seed(31);
  for (const std::array<int64_t, 4>& sizes :
       std::vector<std::array<int64_t, 4>>{{8, 6, 4, 3}, {7, 5, 3, 2}, {5, 5, 1, 1}, {6, 7, 4, 7}}) {
    const int64_t H = sizes[0], W = sizes[1], oh = sizes[2], ow = sizes[3];
    CAPTURE(H);
    CAPTURE(W);
    Tensor x = random({2, 3, H, W}, kFloat64);
    auto xv = x.to_vector<double>();
    std::vector<double> ref;
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh;
          const int64_t w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xv[pl * H * W + h * W + w];
          ref.push_back(s / ((h1 - h0) * (w1 - w0)));
        }
    CHECK_ALLCLOSE(adaptive_avg_pool2d(x, {oh, ow}), tensor(ref, {2, 3, oh, ow}), 1e-12, 1e-12);
  }
  CHECK(adaptive_avg_pool2d(rand({1, 2, 5, 4}), {1}).sizes() == Shape{1, 2, 1, 1});
  CHECK(adaptive_avg_pool2d(rand({1, 2, 5, 4}), {3, -1}).sizes() == Shape{1, 2, 3, 4});
}

TEST_CASE("max_pool2d with dilation picks window elements dilation apart, as PyTorch") {
  // 1x1x5x5 of 0..24; kernel 2, stride 1, dilation 2: window (i, j) covers i, i+2 / j, j+2.
  Tensor x = arange(25, kFloat32).view({1, 1, 5, 5});
  auto [y, idx] = max_pool2d_with_indices(x, make_pool2d_params({2}, {1}, {0}, false, true, "max_pool2d", {2, 2}));
  CHECK(y.sizes() == Shape{1, 1, 3, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{12, 13, 14, 17, 18, 19, 22, 23, 24});
  CHECK(idx.to_vector<int64_t>()[0] == 12);
  CHECK(max_pool2d(x, {2}, {2}, {1}, {2}).sizes() == Shape{1, 1, 3, 3});
  CHECK_THROWS_WITH(max_pool2d(x, {2}, {1}, {2}, {1}), doctest::Contains("at most half of the effective kernel"));
  CHECK_THROWS_WITH(max_pool2d(x, {2}, {1}, {0}, {0}), doctest::Contains("dilation must be positive"));
}
