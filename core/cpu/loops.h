// CPU elementwise iteration. StridedIter walks N same-shaped operands (out first; inputs already
// broadcast with zero strides), coalescing dims so that contiguous tensors become one flat loop,
// and hands the innermost run of each chunk to a loop body. map1/map2/map3 wrap it with typed
// fast paths (all contiguous, or one operand a broadcast scalar) that the compiler vectorises;
// 16-bit floats are computed in float (opmath_t).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/tensor.h"

namespace kiln::cpu {

template <int N>
class StridedIter {
 public:
  /// Operands are tensors of one shape (ops[0]'s); walks their elements.
  explicit StridedIter(std::array<const Tensor*, N> ops) {
    std::array<Shape, N> strides;
    for (int k = 0; k < N; ++k) {
      base_[k] = static_cast<char*>(ops[k]->data_ptr());
      strides[k] = ops[k]->strides();
      for (int64_t& st : strides[k]) st *= static_cast<int64_t>(ops[k]->element_size());
    }
    init(ops[0]->sizes(), strides);
  }

  /// Geometry only: byte strides per operand over `sizes` (for kernels that address memory
  /// themselves, e.g. through an index); use for_range, not run.
  StridedIter(const Shape& sizes, const std::array<Shape, N>& byte_strides) {
    base_.fill(nullptr);
    init(sizes, byte_strides);
  }

  int64_t numel() const { return numel_; }

  /// Calls f(const int64_t* byte_offsets, const int64_t* inner_strides, int64_t n) over the
  /// innermost runs covering logical positions [begin, end), serially.
  template <class F>
  void for_range(int64_t begin, int64_t end, const F& f) const {
    if (begin >= end) return;
    const int nd = static_cast<int>(sizes_.size());
    const int64_t inner = sizes_[nd - 1];
    std::vector<int64_t> idx(nd, 0);
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % sizes_[d];
      rem /= sizes_[d];
    }
    for (int64_t pos = begin; pos < end;) {
      const int64_t n = std::min(inner - idx[nd - 1], end - pos);
      std::array<int64_t, N> off{};
      for (int d = 0; d < nd; ++d)
        for (int k = 0; k < N; ++k) off[k] += idx[d] * strides_[d][k];
      f(off.data(), strides_[nd - 1].data(), n);
      pos += n;
      idx[nd - 1] += n;
      for (int d = nd - 1; d > 0 && idx[d] == sizes_[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }

  /// Calls loop(char* ptrs[N], const int64_t strides[N], int64_t n) over innermost runs,
  /// in parallel chunks of at least `grain` elements.
  template <class Loop>
  void run(const Loop& loop, int64_t grain = kGrainSize) const {
    run_loop({&loop, [](const void* l, char** p, const int64_t* s, int64_t n) { (*static_cast<const Loop*>(l))(p, s, n); }},
             grain);
  }

  /// A loop body behind one indirect call per innermost run. The walk and the split into
  /// threads (run_loop, in loops.cc) are then compiled once per operand count instead of once
  /// per kernel lambda: they were two thirds of the elementwise kernels' object code.
  struct LoopRef {
    const void* loop;
    void (*call)(const void* loop, char** ptrs, const int64_t* strides, int64_t n);
  };
  void run_loop(LoopRef loop, int64_t grain) const;

 private:
  // Keeps non-trivial dims (outermost first), merging neighbours that are contiguous with each
  // other in every operand.
  void init(const Shape& shape, const std::array<Shape, N>& strides) {
    numel_ = shape_numel(shape);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      std::array<int64_t, N> st;
      for (int k = 0; k < N; ++k) st[k] = strides[k][d];
      if (!sizes_.empty()) {
        bool merge = true;
        for (int k = 0; k < N; ++k) merge &= strides_.back()[k] == st[k] * shape[d];
        if (merge) {
          sizes_.back() *= shape[d];
          strides_.back() = st;
          continue;
        }
      }
      sizes_.push_back(shape[d]);
      strides_.push_back(st);
    }
    if (sizes_.empty()) {  // a single element
      sizes_.push_back(1);
      strides_.push_back({});
    }
  }

  int64_t numel_ = 0;
  std::array<char*, N> base_;
  std::vector<int64_t> sizes_;
  std::vector<std::array<int64_t, N>> strides_;
};

extern template class StridedIter<1>;
extern template class StridedIter<2>;
extern template class StridedIter<3>;
extern template class StridedIter<4>;

template <class T> inline opmath_t<T> load(const char* p) { return static_cast<opmath_t<T>>(*reinterpret_cast<const T*>(p)); }

/// out = f(a), elementwise.
template <class To, class Ta, class F>
void map1(Tensor& out, const Tensor& a, const F& f, int64_t grain = kGrainSize) {
  StridedIter<2>({&out, &a}).run([&](char** p, const int64_t* s, int64_t n) {
    To* o = reinterpret_cast<To*>(p[0]);
    const Ta* x = reinterpret_cast<const Ta*>(p[1]);
    if (s[0] == sizeof(To) && s[1] == sizeof(Ta)) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(f(static_cast<opmath_t<Ta>>(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<To*>(p[0] + i * s[0]) = static_cast<To>(f(load<Ta>(p[1] + i * s[1])));
    }
  }, grain);
}

/// out = f(a, b), elementwise.
template <class To, class Ta, class Tb, class F>
void map2(Tensor& out, const Tensor& a, const Tensor& b, const F& f, int64_t grain = kGrainSize) {
  StridedIter<3>({&out, &a, &b}).run([&](char** p, const int64_t* s, int64_t n) {
    To* o = reinterpret_cast<To*>(p[0]);
    const Ta* x = reinterpret_cast<const Ta*>(p[1]);
    const Tb* y = reinterpret_cast<const Tb*>(p[2]);
    if (s[0] == sizeof(To) && s[1] == sizeof(Ta) && s[2] == sizeof(Tb)) {
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<To>(f(static_cast<opmath_t<Ta>>(x[i]), static_cast<opmath_t<Tb>>(y[i])));
    } else if (s[0] == sizeof(To) && s[1] == sizeof(Ta) && s[2] == 0) {
      const opmath_t<Tb> yv = static_cast<opmath_t<Tb>>(*y);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(f(static_cast<opmath_t<Ta>>(x[i]), yv));
    } else if (s[0] == sizeof(To) && s[1] == 0 && s[2] == sizeof(Tb)) {
      const opmath_t<Ta> xv = static_cast<opmath_t<Ta>>(*x);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(f(xv, static_cast<opmath_t<Tb>>(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<To*>(p[0] + i * s[0]) =
            static_cast<To>(f(load<Ta>(p[1] + i * s[1]), load<Tb>(p[2] + i * s[2])));
    }
  }, grain);
}

/// out = f(a, b, c), elementwise (where, fused updates).
template <class To, class Ta, class Tb, class Tc, class F>
void map3(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, const F& f,
          int64_t grain = kGrainSize) {
  StridedIter<4>({&out, &a, &b, &c}).run([&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(To) && s[1] == sizeof(Ta) && s[2] == sizeof(Tb) && s[3] == sizeof(Tc)) {
      To* o = reinterpret_cast<To*>(p[0]);
      const Ta* x = reinterpret_cast<const Ta*>(p[1]);
      const Tb* y = reinterpret_cast<const Tb*>(p[2]);
      const Tc* z = reinterpret_cast<const Tc*>(p[3]);
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<To>(f(static_cast<opmath_t<Ta>>(x[i]), static_cast<opmath_t<Tb>>(y[i]),
                                 static_cast<opmath_t<Tc>>(z[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<To*>(p[0] + i * s[0]) = static_cast<To>(
            f(load<Ta>(p[1] + i * s[1]), load<Tb>(p[2] + i * s[2]), load<Tc>(p[3] + i * s[3])));
    }
  }, grain);
}

}  // namespace kiln::cpu
