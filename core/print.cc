// Tensor::str(): PyTorch's layout, so printouts can be compared side by side. Values of one
// tensor share a width and a style (whole floats as "1.", 4 decimals, or scientific when the
// magnitudes span too much); tensors above 1000 elements show the first and last 3 entries of
// every long dim around "...". The suffix names what the values cannot: a non-default dtype, a
// device other than the CPU, and autograd state.
#include "core/print.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln {
namespace {

std::atomic<GradFnNamer> g_grad_fn_namer{nullptr};

constexpr int64_t kSummarizeAbove = 1000;  // elements
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

/// Reads the elements of a host tensor by element offset, widened to double / int64 / bool.
class Reader {
 public:
  explicit Reader(const Tensor& t) : t_(t) {}

  double as_double(int64_t off) const {
    return KILN_DISPATCH_ALL(t_.dtype(), "print", [&]<class T>() {
      return static_cast<double>(static_cast<opmath_t<T>>(base<T>()[off]));
    });
  }
  int64_t as_int(int64_t off) const {
    return KILN_DISPATCH_ALL(t_.dtype(), "print", [&]<class T>() {
      return static_cast<int64_t>(static_cast<opmath_t<T>>(base<T>()[off]));
    });
  }

 private:
  template <class T> const T* base() const {
    return static_cast<const T*>(t_.storage()->data()) + t_.offset();
  }
  const Tensor& t_;
};

/// Shares one style and width among the values shown (PyTorch's _Formatter).
class Formatter {
 public:
  Formatter(const Reader& r, DType dtype, const std::vector<int64_t>& offsets) : reader_(r), dtype_(dtype) {
    if (dtype == kBool) {
      for (int64_t off : offsets) width_ = std::max(width_, raw(off).size());
      return;
    }
    if (!is_floating(dtype)) {
      for (int64_t off : offsets) width_ = std::max(width_, raw(off).size());
      return;
    }
    std::vector<double> vals;
    for (int64_t off : offsets) {
      double v = reader_.as_double(off);
      if (std::isfinite(v) && v != 0) vals.push_back(v);
    }
    if (vals.empty()) return;
    double lo = INFINITY, hi = 0;
    for (double v : vals) {
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    for (double v : vals) width_ = std::max(width_, float_str(v).size());
  }

  size_t width() const { return width_; }

  /// The value at `off`, right-aligned to the shared width.
  std::string format(int64_t off) const {
    std::string s = raw(off);
    return s.size() < width_ ? std::string(width_ - s.size(), ' ') + s : s;
  }

 private:
  std::string raw(int64_t off) const {
    if (dtype_ == kBool) return reader_.as_int(off) != 0 ? "True" : "False";
    if (!is_floating(dtype_)) return fmt::format("{}", reader_.as_int(off));
    return float_str(reader_.as_double(off));
  }

  std::string float_str(double v) const {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (sci_mode_) return fmt::format("{:.4e}", v);
    if (int_mode_) return fmt::format("{:.0f}.", v);
    return fmt::format("{:.4f}", v);
  }

  const Reader& reader_;
  DType dtype_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t width_ = 1;
};

/// Lays out the nested brackets; `indent` is the column of the opening bracket.
class Layout {
 public:
  Layout(const Tensor& t, bool summarize) : t_(t), summarize_(summarize) {}

  /// Positions shown along a dim of `size`; -1 marks the "..." gap.
  std::vector<int64_t> shown(int64_t size) const {
    std::vector<int64_t> out;
    if (summarize_ && size > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
      out.push_back(-1);
      for (int64_t i = size - kEdgeItems; i < size; ++i) out.push_back(i);
    } else {
      for (int64_t i = 0; i < size; ++i) out.push_back(i);
    }
    return out;
  }

  void collect(int64_t d, int64_t off, std::vector<int64_t>& out) const {
    if (d == t_.dim()) {
      out.push_back(off);
      return;
    }
    for (int64_t i : shown(t_.sizes()[d]))
      if (i >= 0) collect(d + 1, off + i * t_.strides()[d], out);
  }

  std::string render(const Formatter& f, int64_t d, int64_t off, int64_t indent) const {
    if (t_.dim() == 0) return f.format(off);
    const int64_t size = t_.sizes()[d], stride = t_.strides()[d];
    std::vector<std::string> parts;
    if (d == t_.dim() - 1) {
      for (int64_t i : shown(size)) parts.push_back(i < 0 ? " ..." : f.format(off + i * stride));
      const int64_t per_line =
          std::max<int64_t>(1, (kLineWidth - indent) / static_cast<int64_t>(f.width() + 2));
      std::string s = "[";
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) s += static_cast<int64_t>(i) % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
        s += parts[i];
      }
      return s + "]";
    }
    for (int64_t i : shown(size)) parts.push_back(i < 0 ? "..." : render(f, d + 1, off + i * stride, indent + 1));
    const std::string sep = "," + std::string(t_.dim() - d - 1, '\n') + std::string(indent + 1, ' ');
    std::string s = "[";
    for (size_t i = 0; i < parts.size(); ++i) s += (i > 0 ? sep : "") + parts[i];
    return s + "]";
  }

 private:
  const Tensor& t_;
  bool summarize_;
};

}  // namespace

void set_grad_fn_namer(GradFnNamer namer) { g_grad_fn_namer.store(namer); }

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back(fmt::format("device={}", device()));

  std::string body;
  if (numel() == 0) {
    body = "[]";
    if (dim() != 1) suffixes.push_back(fmt::format("size={}", sizes()));
    if (dtype() != kDefaultFloat) suffixes.push_back(fmt::format("dtype={}", dtype()));
  } else {
    Tensor host;
    {
      NoGradGuard no_grad;  // printing must not record anything
      host = device().is_cpu() ? *this : to(kCPU);
    }
    const bool summarize = numel() > kSummarizeAbove;
    Layout layout(host, summarize);
    std::vector<int64_t> offsets;
    layout.collect(0, 0, offsets);
    Reader reader(host);
    Formatter f(reader, host.dtype(), offsets);
    body = layout.render(f, 0, 0, static_cast<int64_t>(prefix.size()));
    // f32, i64 and bool are what PyTorch infers from the printed values themselves.
    if (dtype() != kDefaultFloat && dtype() != kInt64 && dtype() != kBool)
      suffixes.push_back(fmt::format("dtype={}", dtype()));
  }

  const GradFnNamer namer = g_grad_fn_namer.load();
  if (grad_fn() != nullptr && namer != nullptr) suffixes.push_back(fmt::format("grad_fn=<{}>", namer(*grad_fn())));
  else if (requires_grad()) suffixes.push_back("requires_grad");

  std::string s = prefix + body;
  for (const std::string& x : suffixes) s += ", " + x;
  return s + ")";
}

}  // namespace kiln
