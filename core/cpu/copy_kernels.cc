// CPU fill, copy (with dtype conversion) and arange kernels.
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/cpu/loops.h"
#include "core/cpu/transpose_rows.h"
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

/// Tile side: 16 x 16 for 32-bit elements (whole cache lines of src columns and out rows in
/// four 8 x 8 blocks), 32 x 32 for the others.
template <class Bits> constexpr int64_t kTile = sizeof(Bits) == 4 ? 16 : 32;

/// op[r * C + c] = sp[r + c * cs] for r in [r0, r1), c in [c0, c1). 32-bit elements move by
/// 8 x 8 register transposes straight from src to out (the edges that are not whole blocks
/// element by element); others through a buffer: src columns (contiguous along r) are read into
/// it and out rows (contiguous along c) written from it, which touches every cache line once even
/// when the strides are powers of two and all rows of a tile fall into one cache set.
template <class Bits>
void transpose_tile(const Bits* sp, int64_t cs, Bits* op, int64_t C, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  constexpr int64_t T = kTile<Bits>;
  const int64_t nr = r1 - r0, nc = c1 - c0;
#if defined(__AVX__)
  if constexpr (sizeof(Bits) == 4) {
    const int64_t vr = nr - nr % 8, vc = nc - nc % 8;  // covered by whole 8 x 8 blocks
    const uint32_t* s = reinterpret_cast<const uint32_t*>(sp);
    uint32_t* o = reinterpret_cast<uint32_t*>(op);
    // The tile below (the next one this thread moves, tile rows being innermost): its src lines
    // are one per column in as many pages, which no hardware prefetcher follows.
    for (int64_t c = 0; c < nc; ++c) __builtin_prefetch(sp + r0 + T + (c0 + c) * cs, 0);
    for (int64_t r = 0; r < nr; ++r) __builtin_prefetch(op + (r0 + T + r) * C + c0, 1);
    for (int64_t rb = 0; rb < vr; rb += 8)
      for (int64_t cb = 0; cb < vc; cb += 8) transpose8x8(s + (c0 + cb) * cs + r0 + rb, cs, o + (r0 + rb) * C + c0 + cb, C);
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t c = r < vr ? vc : 0; c < nc; ++c) op[(r0 + r) * C + c0 + c] = sp[r0 + r + (c0 + c) * cs];
    return;
  }
#endif
  Bits buf[T][T];  // [c - c0][r - r0]
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t r = 0; r < nr; ++r) buf[c][r] = sp[r0 + r + (c0 + c) * cs];
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t c = 0; c < nc; ++c) op[(r0 + r) * C + c0 + c] = buf[c][r];
}

/// out (contiguous) = src whose last two dims are swapped in memory (src.stride(-2) == 1), as
/// `x.transpose(-1, -2).contiguous()` produces, in tiles (transpose_tile). Tiles are walked in
/// panels of kPanel columns, all of a panel's rows before the next panel: a panel touches one
/// page per src column and one per out row at a time (a few hundred, within the TLB), where
/// walking whole rows of tiles touched one page per src column (thousands: a TLB miss per tile
/// row at 4096 columns). Leading dims are walked with src's strides. Returns false when the
/// layout is not that.
template <class Bits>
bool copy_transposed_tiles(Tensor& out, const Tensor& src) {
  const int64_t nd = src.dim();
  if (nd < 2 || !out.is_contiguous() || src.stride(-2) != 1 || src.stride(-1) <= 1) return false;
  const int64_t R = src.size(-2), C = src.size(-1);
  constexpr int64_t T = kTile<Bits>;
  if (R < 32 || C < 32) return false;
  const int64_t cs = src.stride(-1), planes = src.numel() / (R * C);
  const Bits* ps = static_cast<const Bits*>(src.data_ptr());
  Bits* po = static_cast<Bits*>(out.data_ptr());
  constexpr int64_t kPanel = 256;  // columns: a multiple of T (and 1 KiB of each out row)
  const int64_t tiles_r = (R + T - 1) / T, panels = (C + kPanel - 1) / kPanel;
  const int64_t items = planes * panels * tiles_r;  // (plane, panel, tile row), tile rows innermost
  parallel_for(0, items, std::max<int64_t>(1, kGrainSize / (T * kPanel)), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t plane = t / (panels * tiles_r), panel = t / tiles_r % panels;
      const int64_t r0 = (t % tiles_r) * T, r1 = std::min(R, r0 + T);
      // The plane's offset in src from its multi-index over the leading dims.
      int64_t off = 0;
      for (int64_t d = nd - 3, rem = plane; d >= 0; --d) {
        off += (rem % src.size(d)) * src.stride(d);
        rem /= src.size(d);
      }
      const Bits* sp = ps + off;
      Bits* op = po + plane * R * C;
      for (int64_t c0 = panel * kPanel, c_end = std::min(C, c0 + kPanel); c0 < c_end; c0 += T)
        transpose_tile(sp, cs, op, C, r0, r1, c0, std::min(C, c0 + T));
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
