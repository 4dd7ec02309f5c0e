// CPU conv2d forward and backward: im2col + GEMM (core/cpu/gemm.h), one image at a time: the
// forward and input-gradient products through small_gemm (no packing: the Fashion-MNIST CNN's
// second conv forward 26 % faster than through gemm); the weight gradient too where it is deep
// enough, summed transposed (GW^T[K, Cout] += col @ GO^T, with this image's grad_out transposed
// first so that small_gemm reads b by rows), else through gemm. Threads take blocks of images
// as they come free, each with its own column buffers (core/cpu/scratch.h, kept across calls);
// a batch smaller than the thread count runs on one thread. 1x1 / stride 1 / no padding
// convolutions skip im2col. The weight gradient is summed per block and the blocks are added in
// order, so results do not depend on scheduling. f16/bf16 compute in f32.
#include <Eigen/Core>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/scratch.h"
#include "core/cpu/transpose_rows.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

template <class T> using ConstVecMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

/// Sizes of one convolution; a "column" matrix holds, for one image, row (c, ki, kj) and
/// column (oh, ow): x[c, oh * sh - ph + ki * dh, ow * sw - pw + kj * dw] (0 outside).
struct Geometry {
  int64_t N, C, H, W, Cout, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t Cg, Coutg, K, L;  // per-group in/out channels, GEMM inner size per group, OH * OW
  bool pointwise;           // 1x1 kernel, stride 1, no padding: x[n] is its own column matrix

  Geometry(const Tensor& x, const Tensor& w, const Shape& out, const Conv2dParams& p)
      : N(x.size(0)), C(x.size(1)), H(x.size(2)), W(x.size(3)), Cout(w.size(0)), KH(w.size(2)), KW(w.size(3)),
        OH(out[2]), OW(out[3]), sh(p.stride[0]), sw(p.stride[1]), ph(p.padding[0]), pw(p.padding[1]),
        dh(p.dilation[0]), dw(p.dilation[1]), groups(p.groups) {
    Cg = C / groups;
    Coutg = Cout / groups;
    K = Cg * KH * KW;
    L = OH * OW;
    pointwise = KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
};

/// The output columns [lo, hi) whose input column ow * s + off lies inside [0, size).
inline void valid_range(int64_t off, int64_t s, int64_t size, int64_t n_out, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = off >= size ? 0 : std::min(n_out, (size - 1 - off) / s + 1);
  if (hi < lo) hi = lo;
}

/// Stride 1, dilation 1 and OW == W (a "same"-padded 3x3, say): every column row is the image
/// shifted by (ki - ph, kj - pw), so im2col and col2im can move its rows inside the image as one
/// flat block; per-row memcpy calls of 14 or 28 floats cost more than the copying itself.
inline bool shifted_geometry(const Geometry& g) {
  return g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.OW == g.W;
}

/// One kernel tap (c, ki, kj) of a shifted geometry: its column row index, its channel's plane
/// offset, the flat range [begin, end) of the row that reads plane element i + shift, the output
/// rows [oh_lo, oh_hi) inside the image, and the columns [e_lo, e_hi) of those rows whose input
/// column lies outside the image (read from a neighbouring row by the flat block: to be zeroed).
struct ShiftedTap {
  int64_t row, plane, shift, begin, end, oh_lo, oh_hi, e_lo, e_hi;
};

template <class F> void for_each_shifted_tap(const Geometry& g, F&& f) {
  const int64_t HW = g.H * g.W;
  for (int64_t c = 0; c < g.C; ++c) {
    for (int64_t ki = 0; ki < g.KH; ++ki) {
      const int64_t off_h = ki - g.ph;
      const int64_t oh_lo = std::clamp<int64_t>(-off_h, 0, g.OH), oh_hi = std::clamp<int64_t>(g.H - off_h, oh_lo, g.OH);
      for (int64_t kj = 0; kj < g.KW; ++kj) {
        const int64_t off_w = kj - g.pw, shift = off_h * g.W + off_w;
        ShiftedTap t{(c * g.KH + ki) * g.KW + kj, c * HW, shift, std::max(oh_lo * g.W, -shift),
                     std::min(oh_hi * g.W, HW - shift), oh_lo, oh_hi, 0, 0};
        if (off_w < 0) t.e_hi = std::min(-off_w, g.OW);
        if (off_w > 0) t.e_lo = std::max<int64_t>(g.OW - off_w, 0), t.e_hi = g.OW;
        f(t);
      }
    }
  }
}

template <class T> void zero_edges(const Geometry& g, const ShiftedTap& t, T* row) {
  if (t.e_lo == t.e_hi) return;
  for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) std::fill(row + oh * g.OW + t.e_lo, row + oh * g.OW + t.e_hi, T(0));
}

template <class T> void im2col_shifted(const Geometry& g, const T* x, T* col) {
  for_each_shifted_tap(g, [&](const ShiftedTap& t) {
    T* row = col + t.row * g.L;
    std::fill(row, row + t.oh_lo * g.OW, T(0));
    std::fill(row + t.oh_hi * g.OW, row + g.L, T(0));
    if (t.end > t.begin) std::memcpy(row + t.begin, x + t.plane + t.begin + t.shift, (t.end - t.begin) * sizeof(T));
    zero_edges(g, t, row);
  });
}

/// col[C * KH * KW, OH * OW] from one image x[C, H, W].
template <class T> void im2col(const Geometry& g, const T* x, T* col) {
  if (shifted_geometry(g)) return im2col_shifted(g, x, col);
  for (int64_t c = 0; c < g.C; ++c) {
    const T* xc = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.KH; ++ki) {
      for (int64_t kj = 0; kj < g.KW; ++kj) {
        T* row = col + ((c * g.KH + ki) * g.KW + kj) * g.L;
        const int64_t off_w = kj * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(off_w, g.sw, g.W, g.OW, lo, hi);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          T* r = row + oh * g.OW;
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(r, r + g.OW, T(0));
            continue;
          }
          const T* xr = xc + ih * g.W + off_w;
          std::fill(r, r + lo, T(0));
          if (g.sw == 1) {
            std::memcpy(r + lo, xr + lo, (hi - lo) * sizeof(T));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * g.sw];
          }
          std::fill(r + hi, r + g.OW, T(0));
        }
      }
    }
  }
}

/// col2im for a shifted geometry: each row's edge entries are zeroed in `col` (scratch) so that
/// the flat block add puts nothing on a neighbouring row.
template <class T> void col2im_shifted(const Geometry& g, T* col, T* x) {
  std::fill(x, x + g.C * g.H * g.W, T(0));
  for_each_shifted_tap(g, [&](const ShiftedTap& t) {
    T* row = col + t.row * g.L;
    zero_edges(g, t, row);
    T* dst = x + t.plane + t.shift;
    for (int64_t i = t.begin; i < t.end; ++i) dst[i] += row[i];
  });
}

/// x[C, H, W] = the sum of col's entries over the positions each was read from (x zeroed here).
/// `col` is scratch: the shifted path zeroes some of its entries.
template <class T> void col2im(const Geometry& g, T* col, T* x) {
  if (shifted_geometry(g)) return col2im_shifted(g, col, x);
  std::fill(x, x + g.C * g.H * g.W, T(0));
  for (int64_t c = 0; c < g.C; ++c) {
    T* xc = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.KH; ++ki) {
      for (int64_t kj = 0; kj < g.KW; ++kj) {
        const T* row = col + ((c * g.KH + ki) * g.KW + kj) * g.L;
        const int64_t off_w = kj * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(off_w, g.sw, g.W, g.OW, lo, hi);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T* r = row + oh * g.OW;
          T* xr = xc + ih * g.W + off_w;
          if (g.sw == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) xr[ow] += r[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sw] += r[ow];
          }
        }
      }
    }
  }
}

/// How the batch is spread over threads: `workers` threads take turns at `blocks` contiguous
/// blocks of images. More blocks than threads, taken as threads come free, so that a thread
/// slowed down by another process does not hold the others up.
struct BatchSchedule {
  int64_t workers = 1, blocks = 1;
};

/// min(N, max_blocks) blocks whatever the thread count (the weight gradient's partial sums are
/// per block); one worker when the batch has fewer images than threads or the problem is too
/// small to be worth waking threads for, otherwise one per thread.
BatchSchedule batch_schedule(int64_t N, int64_t work_per_image, int64_t max_blocks) {
  const int64_t nt = get_num_threads();
  const int64_t blocks = std::max<int64_t>(1, std::min(N, max_blocks));
  if (nt <= 1 || N < nt || N * work_per_image < (int64_t{1} << 16)) return {1, blocks};
  return {std::min(nt, blocks), blocks};
}

/// Runs body(state, block, n_begin, n_end) for every block; each worker first builds its own
/// scratch `state` (column buffers) with make_state().
template <class MakeState, class Body>
void run_batch(int64_t N, BatchSchedule s, const MakeState& make_state, const Body& body) {
  std::atomic<int64_t> next{0};
  parallel_for(0, s.workers, 1, [&](int64_t, int64_t) {
    auto state = make_state();
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < s.blocks;)
      body(state, b, b * N / s.blocks, (b + 1) * N / s.blocks);
  });
}

template <class T>
void conv2d_forward_impl(Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const Geometry g(x, w, out.sizes(), p);
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  const T* pb = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* po = out.data_ptr<T>();
  const int64_t col_size = g.pointwise ? 0 : g.groups * g.K * g.L;
  auto make_scratch = [&] { return thread_scratch<T>(0, col_size); };  // written whole by im2col
  auto images = [&](T* col_buf, int64_t, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* xn = px + n * g.C * g.H * g.W;
      const T* col = xn;
      if (!g.pointwise) {
        im2col(g, xn, col_buf);
        col = col_buf;
      }
      T* on = po + n * g.Cout * g.L;
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        // O[Coutg, L] (+)= W_g[Coutg, K] @ col_g[K, L], the bias written first.
        T* O = on + gi * g.Coutg * g.L;
        if (pb != nullptr)
          for (int64_t co = 0; co < g.Coutg; ++co) std::fill_n(O + co * g.L, g.L, pb[gi * g.Coutg + co]);
        small_gemm<T>(g.Coutg, g.L, g.K, pw + gi * g.Coutg * g.K, g.K, 1, col + gi * g.K * g.L, g.L, O, g.L,
                      /*accumulate=*/pb != nullptr);
      }
    }
  };
  run_batch(g.N, batch_schedule(g.N, g.Cout * g.K * g.L, /*max_blocks=*/g.N), make_scratch, images);
}

template <class T>
void conv2d_backward_impl(Tensor& grad_x, Tensor& grad_w, Tensor& grad_bias, const Tensor& grad_out, const Tensor& x,
                          const Tensor& w, const Conv2dParams& p) {
  const Geometry g(x, w, grad_out.sizes(), p);
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  const T* pgo = grad_out.data_ptr<T>();

  const bool need_x = grad_x.defined(), need_w = grad_w.defined(), need_b = grad_bias.defined();
  if (!need_x && !need_w && !need_b) return;
  T* pgx = need_x ? grad_x.data_ptr<T>() : nullptr;
  const int64_t wsize = g.Cout * g.K;
  // The weight and bias gradients are summed per block of images (up to kWeightBlocks, fewer for
  // large weights; a number that does not depend on the thread count) and the blocks added in
  // order at the end, so the result depends neither on which thread ran which block nor on how
  // many threads there are. grad_x alone makes every image a block.
  constexpr int64_t kWeightBlocks = 16;
  const int64_t part_bytes = (need_w ? wsize * static_cast<int64_t>(sizeof(T)) : 0) + g.Cout * 8;
  const int64_t max_blocks = need_w || need_b
                                 ? std::max<int64_t>(1, std::min<int64_t>(kWeightBlocks, (int64_t{64} << 20) / part_bytes))
                                 : g.N;
  const int64_t work = g.Cout * g.L * (1 + g.K * (need_x + need_w));
  const BatchSchedule sched = batch_schedule(g.N, work, max_blocks);
  // The weight gradient through small_gemm needs grad_out transposed per image: worth it when
  // the product is deep enough (K >= 64: the transpose is then under 1 % of the product's work;
  // the CNN's 32 -> 64 conv, K = 288: its backward 6 % faster). Shallow ones (a first layer's
  // K = 9) stay on gemm, which reads grad_out as it is. Partial sums are then GW_g^T[K, Coutg].
  const bool wgrad_transposed = g.K >= 64;
  std::vector<T> gw_parts(need_w ? sched.blocks * wsize : 0, T(0));
  std::vector<double> gb_parts(need_b ? sched.blocks * g.Cout : 0, 0.0);
  const int64_t col_size = g.pointwise ? 0 : g.groups * g.K * g.L;
  struct Scratch {
    T *col, *dcol, *got;  // written whole by im2col, the input gradient's product, the transpose
  };
  auto make_scratch = [&] {
    return Scratch{need_w ? thread_scratch<T>(0, col_size) : nullptr,
                   need_x ? thread_scratch<T>(1, col_size) : nullptr,
                   need_w && wgrad_transposed ? thread_scratch<T>(2, g.L * g.Cout) : nullptr};
  };
  auto images = [&](Scratch& scratch, int64_t block, int64_t n0, int64_t n1) {
    T* col_buf = scratch.col;
    T* dcol_buf = scratch.dcol;
    T* gw = need_w ? gw_parts.data() + block * wsize : nullptr;
    double* gb = need_b ? gb_parts.data() + block * g.Cout : nullptr;
    for (int64_t n = n0; n < n1; ++n) {
      const T* gon = pgo + n * g.Cout * g.L;
      if (need_b) {  // while this image's grad_out is in cache for the GEMMs below
        for (int64_t co = 0; co < g.Cout; ++co)
          gb[co] += static_cast<double>(ConstVecMap<T>(gon + co * g.L, g.L).sum());
      }
      if (need_w) {
        const T* xn = px + n * g.C * g.H * g.W;
        const T* col = xn;
        if (!g.pointwise) {
          im2col(g, xn, col_buf);
          col = col_buf;
        }
        if (wgrad_transposed) {
          // GO^T[L, Cout], so that the product below reads its b operand row by row.
          T* got = scratch.got;
          transpose_rows(gon, g.L, g.Cout, g.L, got, g.Cout);
          for (int64_t gi = 0; gi < g.groups; ++gi) {
            // GW_g^T[K, Coutg] += col_g[K, L] @ GO_g^T[L, Coutg].
            small_gemm<T>(g.K, g.Coutg, g.L, col + gi * g.K * g.L, g.L, 1, got + gi * g.Coutg, g.Cout,
                          gw + gi * g.K * g.Coutg, g.Coutg, /*accumulate=*/true);
          }
        } else {
          for (int64_t gi = 0; gi < g.groups; ++gi) {
            // GW_g[Coutg, K] += GO_g[Coutg, L] @ col_g^T (col_g read as a column-major [L, K]).
            gemm<T>(g.Coutg, g.K, g.L, {gon + gi * g.Coutg * g.L, true, g.L}, {col + gi * g.K * g.L, false, g.L},
                    gw + gi * g.Coutg * g.K, g.K, /*accumulate=*/true);
          }
        }
      }
      if (need_x) {
        T* gxn = pgx + n * g.C * g.H * g.W;
        T* dcol = g.pointwise ? gxn : dcol_buf;
        for (int64_t gi = 0; gi < g.groups; ++gi) {
          // D[K, L] = W_g^T (W_g read as a column-major [K, Coutg]) @ GO[Coutg, L].
          small_gemm<T>(g.K, g.L, g.Coutg, pw + gi * g.Coutg * g.K, 1, g.K, gon + gi * g.Coutg * g.L, g.L,
                        dcol + gi * g.K * g.L, g.L, /*accumulate=*/false);
        }
        if (!g.pointwise) col2im(g, dcol, gxn);
      }
    }
  };
  run_batch(g.N, sched, make_scratch, images);
  if (need_w) {  // the blocks' sums added in order (then transposed when they are GW_g^T)
    T* sum = gw_parts.data();
    for (int64_t b = 1; b < sched.blocks; ++b) {
      const T* part = gw_parts.data() + b * wsize;
      for (int64_t i = 0; i < wsize; ++i) sum[i] += part[i];
    }
    T* pgw = grad_w.data_ptr<T>();
    if (wgrad_transposed) {
      for (int64_t gi = 0; gi < g.groups; ++gi)
        transpose_rows(sum + gi * g.K * g.Coutg, g.Coutg, g.K, g.Coutg, pgw + gi * g.Coutg * g.K, g.K);
    } else {
      std::copy_n(sum, wsize, pgw);
    }
  }
  if (need_b) {
    T* pgb = grad_bias.data_ptr<T>();
    for (int64_t co = 0; co < g.Cout; ++co) {
      double sum = 0;
      for (int64_t b = 0; b < sched.blocks; ++b) sum += gb_parts[b * g.Cout + co];
      pgb[co] = static_cast<T>(sum);
    }
  }
}

Tensor as_f32(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = make_tensor(t.sizes(), kFloat32, t.device());
  kernels::copy[t.device()](c, t);
  return c;
}

Tensor f32_like(const Tensor& t) { return t.defined() ? make_tensor(t.sizes(), kFloat32, t.device()) : t; }

void copy_back(Tensor& dst, const Tensor& src) {
  if (dst.defined()) kernels::copy[dst.device()](dst, src);
}

void conv2d_kernel(Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  switch (x.dtype()) {
    case DType::f32: return conv2d_forward_impl<float>(out, x, w, bias, p);
    case DType::f64: return conv2d_forward_impl<double>(out, x, w, bias, p);
    case DType::f16:
    case DType::bf16: {
      Tensor o = f32_like(out);
      conv2d_forward_impl<float>(o, as_f32(x), as_f32(w), as_f32(bias), p);
      return copy_back(out, o);
    }
    default: fail("conv2d: dtype {} is not supported (floating types only)", x.dtype());
  }
}

void conv2d_backward_kernel(Tensor& grad_x, Tensor& grad_w, Tensor& grad_bias, const Tensor& grad_out,
                            const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  switch (x.dtype()) {
    case DType::f32: return conv2d_backward_impl<float>(grad_x, grad_w, grad_bias, grad_out, x, w, p);
    case DType::f64: return conv2d_backward_impl<double>(grad_x, grad_w, grad_bias, grad_out, x, w, p);
    case DType::f16:
    case DType::bf16: {
      Tensor gx = f32_like(grad_x), gw = f32_like(grad_w), gb = f32_like(grad_bias);
      conv2d_backward_impl<float>(gx, gw, gb, as_f32(grad_out), as_f32(x), as_f32(w), p);
      copy_back(grad_x, gx);
      copy_back(grad_w, gw);
      copy_back(grad_bias, gb);
      return;
    }
    default: fail("conv2d_backward: dtype {} is not supported (floating types only)", x.dtype());
  }
}

}  // namespace

KILN_REGISTER_KERNEL(conv2d, DeviceType::CPU, &conv2d_kernel);
KILN_REGISTER_KERNEL(conv2d_backward, DeviceType::CPU, &conv2d_backward_kernel);

}  // namespace kiln::cpu
