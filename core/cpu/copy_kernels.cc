// CPU fill, copy (with dtype conversion) and arange kernels.
#include <cstring>

#include "core/cpu/loops.h"
#include "core/kernels.h"

namespace kiln::cpu {
namespace {

void fill_kernel(Tensor& out, const Scalar& value) {
  KILN_DISPATCH_ALL(out.dtype(), "fill", [&]<class T>() {
    const T v = value.to<T>();
    StridedIter<1>({&out}).run([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

template <class Bits>
void copy_bits(Tensor& out, const Tensor& src) {
  StridedIter<2>({&out, &src}).run([&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Bits) && s[1] == sizeof(Bits)) {
      std::memcpy(p[0], p[1], n * sizeof(Bits));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Bits*>(p[0] + i * s[0]) = *reinterpret_cast<const Bits*>(p[1] + i * s[1]);
    }
  });
}

void copy_kernel(Tensor& out, const Tensor& src) {
  if (out.dtype() == src.dtype()) {
    // Same dtype: move bits as integers of the element's width (a typed loop, not a memcpy
    // call per element, for strided layouts such as a transpose).
    switch (out.element_size()) {
      case 1: copy_bits<uint8_t>(out, src); return;
      case 2: copy_bits<uint16_t>(out, src); return;
      case 4: copy_bits<uint32_t>(out, src); return;
      case 8: copy_bits<uint64_t>(out, src); return;
    }
  }
  KILN_DISPATCH_ALL(out.dtype(), "copy", [&]<class To>() {
    KILN_DISPATCH_ALL(src.dtype(), "copy", [&]<class Ti>() {
      map1<To, Ti>(out, src, [](auto x) {
        if constexpr (std::is_same_v<To, bool>) return x != decltype(x)(0);
        else return static_cast<opmath_t<To>>(x);
      });
    });
  });
}

void arange_kernel(Tensor& out, double start, double step) {
  KILN_DISPATCH_NUMERIC(out.dtype(), "arange", [&]<class T>() {
    T* o = out.data_ptr<T>();
    parallel_for(0, out.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
    });
  });
}

}  // namespace

KILN_REGISTER_KERNEL(fill, DeviceType::CPU, &fill_kernel);
KILN_REGISTER_KERNEL(copy, DeviceType::CPU, &copy_kernel);
KILN_REGISTER_KERNEL(arange, DeviceType::CPU, &arange_kernel);

}  // namespace kiln::cpu
