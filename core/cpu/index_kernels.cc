// CPU index_select, index_add, gather and scatter_add for every dtype and any strides. Indices
// are i64 and already range-checked by the op. Kernels that only read through the index run in
// parallel over every output element; the accumulating ones (index_add, scatter_add) run in
// parallel only over the dims an index cannot address, so no two threads add into one element.
#include <array>
#include <cstring>

#include "core/cpu/loops.h"
#include "core/kernels.h"

namespace kiln::cpu {
namespace {

Shape drop(const Shape& s, int64_t dim) {
  Shape out = s;
  out.erase(out.begin() + dim);
  return out;
}

/// t's strides in bytes, without `dim` when dim >= 0.
Shape byte_strides(const Tensor& t, int64_t dim = -1) {
  Shape st = t.strides();
  for (int64_t& s : st) s *= static_cast<int64_t>(t.element_size());
  return dim >= 0 ? drop(st, dim) : st;
}

/// Runs f.template operator()<U>() with U an unsigned type of the element size: copies move
/// bits, so one instantiation serves every dtype of that width.
template <class F>
void dispatch_bits(size_t element_size, const char* op, const F& f) {
  switch (element_size) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    case 8: return f.template operator()<uint64_t>();
    default: fail("{}: unsupported element size {}", op, element_size);
  }
}

template <class T>
inline void add_into(char* dst, const char* src) {
  T& d = *reinterpret_cast<T*>(dst);
  const T s = *reinterpret_cast<const T*>(src);
  if constexpr (std::is_same_v<T, bool>) d = d || s;
  else d = static_cast<T>(static_cast<opmath_t<T>>(d) + static_cast<opmath_t<T>>(s));
}

/// Reads a 1-D i64 index of any stride.
class IndexReader {
 public:
  explicit IndexReader(const Tensor& index) : p_(index.data_ptr<int64_t>()), stride_(index.strides()[0]) {}
  int64_t operator()(int64_t j) const { return p_[j * stride_]; }

 private:
  const int64_t* p_;
  int64_t stride_;
};

void index_select_kernel(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t m = index.numel();
  const IndexReader index_at(index);
  StridedIter<2> w(drop(out.sizes(), dim), {byte_strides(out, dim), byte_strides(x, dim)});
  const int64_t rows = w.numel(), total = m * rows;
  if (total == 0) return;
  const int64_t es = static_cast<int64_t>(out.element_size());
  const int64_t out_step = out.strides()[dim] * es, x_step = x.strides()[dim] * es;
  char* ob = static_cast<char*>(out.data_ptr());
  const char* xb = static_cast<const char*>(x.data_ptr());
  dispatch_bits(out.element_size(), "index_select", [&]<class U>() {
    // Position p = j * rows + r: row r of the slice that index[j] selects.
    parallel_for(0, total, kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t j = b / rows; j * rows < e; ++j) {
        const int64_t rb = std::max(b, j * rows) - j * rows, re = std::min(e, (j + 1) * rows) - j * rows;
        char* o = ob + j * out_step;
        const char* s = xb + index_at(j) * x_step;
        w.for_range(rb, re, [&](const int64_t* off, const int64_t* st, int64_t n) {
          if (st[0] == es && st[1] == es) {
            std::memcpy(o + off[0], s + off[1], n * es);
          } else {
            for (int64_t i = 0; i < n; ++i)
              *reinterpret_cast<U*>(o + off[0] + i * st[0]) = *reinterpret_cast<const U*>(s + off[1] + i * st[1]);
          }
        });
      }
    });
  });
}

void index_add_kernel(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t m = index.numel();
  const IndexReader index_at(index);
  StridedIter<2> w(drop(src.sizes(), dim), {byte_strides(out, dim), byte_strides(src, dim)});
  const int64_t rows = w.numel();
  if (rows == 0 || m == 0) return;
  const int64_t es = static_cast<int64_t>(out.element_size());
  const int64_t out_step = out.strides()[dim] * es, src_step = src.strides()[dim] * es;
  char* ob = static_cast<char*>(out.data_ptr());
  const char* sb = static_cast<const char*>(src.data_ptr());
  KILN_DISPATCH_ALL(out.dtype(), "index_add", [&]<class T>() {
    // Repeated indices add into the same slice, so threads split the rows, never the indices.
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / m), [&](int64_t rb, int64_t re) {
      for (int64_t j = 0; j < m; ++j) {
        char* o = ob + index_at(j) * out_step;
        const char* s = sb + j * src_step;
        w.for_range(rb, re, [&](const int64_t* off, const int64_t* st, int64_t n) {
          for (int64_t i = 0; i < n; ++i) add_into<T>(o + off[0] + i * st[0], s + off[1] + i * st[1]);
        });
      }
    });
  });
}

void gather_kernel(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  Shape xs = byte_strides(x);
  const int64_t x_step = xs[dim];
  xs[dim] = 0;  // the index supplies the position along dim
  StridedIter<3> w(index.sizes(), {byte_strides(out), xs, byte_strides(index)});
  char* ob = static_cast<char*>(out.data_ptr());
  const char* xb = static_cast<const char*>(x.data_ptr());
  const char* ib = static_cast<const char*>(index.data_ptr());
  dispatch_bits(out.element_size(), "gather", [&]<class U>() {
    parallel_for(0, w.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      w.for_range(b, e, [&](const int64_t* off, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = *reinterpret_cast<const int64_t*>(ib + off[2] + i * st[2]);
          *reinterpret_cast<U*>(ob + off[0] + i * st[0]) =
              *reinterpret_cast<const U*>(xb + off[1] + i * st[1] + k * x_step);
        }
      });
    });
  });
}

void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  StridedIter<3> w(drop(index.sizes(), dim), {byte_strides(out, dim), byte_strides(index, dim), byte_strides(src, dim)});
  const int64_t rows = w.numel(), m = index.sizes()[dim];
  if (rows == 0 || m == 0) return;
  const int64_t out_step = out.strides()[dim] * static_cast<int64_t>(out.element_size());
  const int64_t index_step = index.strides()[dim] * static_cast<int64_t>(sizeof(int64_t));
  const int64_t src_step = src.strides()[dim] * static_cast<int64_t>(src.element_size());
  char* ob = static_cast<char*>(out.data_ptr());
  const char* ib = static_cast<const char*>(index.data_ptr());
  const char* sb = static_cast<const char*>(src.data_ptr());
  KILN_DISPATCH_ALL(out.dtype(), "scatter_add", [&]<class T>() {
    // Elements that differ outside `dim` never collide; those along `dim` may, so each thread
    // owns a set of rows and walks `dim` serially.
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / m), [&](int64_t rb, int64_t re) {
      for (int64_t j = 0; j < m; ++j) {
        w.for_range(rb, re, [&](const int64_t* off, const int64_t* st, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = *reinterpret_cast<const int64_t*>(ib + off[1] + i * st[1] + j * index_step);
            add_into<T>(ob + off[0] + i * st[0] + k * out_step, sb + off[2] + i * st[2] + j * src_step);
          }
        });
      }
    });
  });
}

}  // namespace

KILN_REGISTER_KERNEL(index_select, DeviceType::CPU, &index_select_kernel);
KILN_REGISTER_KERNEL(index_add, DeviceType::CPU, &index_add_kernel);
KILN_REGISTER_KERNEL(gather, DeviceType::CPU, &gather_kernel);
KILN_REGISTER_KERNEL(scatter_add, DeviceType::CPU, &scatter_add_kernel);

}  // namespace kiln::cpu
