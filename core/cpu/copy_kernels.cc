// CPU fill, copy (with dtype conversion) and arange kernels.
#include <algorithm>
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

/// out (contiguous) = src whose last two dims are swapped in memory (src.stride(-2) == 1), as
/// `x.transpose(-1, -2).contiguous()` produces: 32x32 tiles, so both sides move whole cache
/// lines (an element-by-element strided walk reads one element per cache line). Leading dims are
/// walked with src's strides. Returns false when the layout is not that.
template <class Bits>
bool copy_transposed_tiles(Tensor& out, const Tensor& src) {
  const int64_t nd = src.dim();
  if (nd < 2 || !out.is_contiguous() || src.stride(-2) != 1 || src.stride(-1) <= 1) return false;
  const int64_t R = src.size(-2), C = src.size(-1);
  if (R < 32 || C < 32) return false;
  const int64_t cs = src.stride(-1), planes = src.numel() / (R * C);
  const Bits* ps = static_cast<const Bits*>(src.data_ptr());
  Bits* po = static_cast<Bits*>(out.data_ptr());
  constexpr int64_t kTile = 32;
  const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile;
  parallel_for(0, planes * tiles_r, std::max<int64_t>(1, kGrainSize / (kTile * C)), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t plane = t / tiles_r, r0 = (t % tiles_r) * kTile, r1 = std::min(R, r0 + kTile);
      // The plane's offset in src from its multi-index over the leading dims.
      int64_t off = 0;
      for (int64_t d = nd - 3, rem = plane; d >= 0; --d) {
        off += (rem % src.size(d)) * src.stride(d);
        rem /= src.size(d);
      }
      const Bits* sp = ps + off;
      Bits* op = po + plane * R * C;
      // Stage each tile: read src columns (contiguous along r), write out rows (contiguous
      // along c). Going through the buffer touches every cache line once even when the
      // strides are powers of two and all rows of a tile fall into one cache set.
      Bits tile[kTile][kTile];
      for (int64_t tc = 0; tc < tiles_c; ++tc) {
        const int64_t c0 = tc * kTile, c1 = std::min(C, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) tile[c - c0][r - r0] = sp[r + c * cs];
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) op[r * C + c] = tile[c - c0][r - r0];
      }
    }
  });
  return true;
}

template <class Bits>
void copy_bits(Tensor& out, const Tensor& src) {
  if (copy_transposed_tiles<Bits>(out, src)) return;
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
