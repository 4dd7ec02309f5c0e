// Size2d: a 2-D size (kernel, stride, padding, dilation) written as one number for both sides
// or as {h, w}, as libtorch's ExpandingArray<2>: `Conv2d(1, 32, 3, {.padding = 1})`. It
// converts to the IntList the conv and pooling ops take, so every existing IntList argument
// still compiles.
#pragma once

#include <initializer_list>
#include <utility>

#include "core/tensor.h"

namespace kiln::nn {

class Size2d {
 public:
  /// No values: the op's default (a pooling stride defaults to its kernel).
  Size2d() = default;
  /// One value for both sides.
  Size2d(int64_t both) : values_{both, both} {}
  /// {h, w} (or {both}, which the ops expand themselves).
  Size2d(std::initializer_list<int64_t> values) : values_(values) {}
  Size2d(IntList values) : values_(std::move(values)) {}

  operator const IntList&() const { return values_; }
  const IntList& list() const { return values_; }

 private:
  IntList values_;
};

}  // namespace kiln::nn
