// The two halves of the op table.
//
// KernelStub<Sig>: one per device-level kernel, declared once in core/kernels.h; each device
// registers the kernels it has (KILN_REGISTER_KERNEL). Calling a stub on a device with no
// kernel throws naming the kernel and the device.
//
// Op<Sig>: one per differentiable primitive, declared once in core/op_table.h. `core` gives it
// its forward (validation, shape inference, kernel dispatch); `autograd/` sets a recording
// wrapper. While grad mode is on and an input requires grad, calls go through the wrapper.
#pragma once

#include <type_traits>
#include <vector>

#include "core/grad_mode.h"
#include "core/tensor.h"

namespace kiln {

template <class Sig> class KernelStub;
template <class R, class... A> class KernelStub<R(A...)> {
 public:
  using Fn = R (*)(A...);
  constexpr explicit KernelStub(const char* name) : name_(name) {}

  /// The kernel for `device`; throws kiln::NotImplementedError "<name>: no kernel registered for
  /// device <device>" if missing.
  Fn operator[](Device device) const {
    Fn f = fns_[static_cast<int>(device.type)];
    if (f == nullptr)
      throw NotImplementedError(detail::with_location(
          fmt::format("{}: no kernel registered for device {}", name_, device), __FILE__, __LINE__));
    return f;
  }
  bool has(DeviceType type) const { return fns_[static_cast<int>(type)] != nullptr; }
  void set(DeviceType type, Fn fn) { fns_[static_cast<int>(type)] = fn; }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Fn fns_[kNumDeviceTypes] = {};
};

inline bool any_requires_grad_arg(const Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool any_requires_grad_arg(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) if (any_requires_grad_arg(t)) return true;
  return false;
}
template <class T> bool any_requires_grad_arg(const T&) { return false; }

template <class Sig> class Op;
template <class R, class... A> class Op<R(A...)> {
 public:
  using Fn = R (*)(A...);
  constexpr Op(const char* name, Fn forward) : name_(name), forward_(forward) {}

  R operator()(A... args) const {
    if (autograd_ != nullptr && GradMode::is_enabled() && (any_requires_grad_arg(args) || ...))
      return autograd_(args...);
    return forward_(args...);
  }
  /// The plain computation, never recorded (autograd wrappers call this).
  R forward(A... args) const { return forward_(args...); }
  void set_autograd(Fn fn) { autograd_ = fn; }
  bool has_autograd() const { return autograd_ != nullptr; }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Fn forward_;
  Fn autograd_ = nullptr;
};

namespace detail {
struct Registrar {
  template <class F> explicit Registrar(F&& f) { f(); }
};
}  // namespace detail

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

/// KILN_REGISTER_KERNEL(binary, DeviceType::CPU, &cpu_binary) at namespace scope.
#define KILN_REGISTER_KERNEL(NAME, DEVTYPE, FN)                                       \
  static ::kiln::detail::Registrar KILN_CONCAT_(kiln_kernel_reg_, __COUNTER__)(        \
      [] { ::kiln::kernels::NAME.set(DEVTYPE, FN); })
