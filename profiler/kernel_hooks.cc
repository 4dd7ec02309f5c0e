// Kernel interposition: while a Profiler records, every registered kernel slot of every stub in
// KILN_KERNEL_LIST holds a trampoline that times the original kernel and records its tensors'
// shapes, dtype and device; stop() puts the originals back. With no Profiler active the table
// holds the backends' own function pointers, so the off state costs nothing per op.
#include <fmt/format.h>

#include <string_view>
#include <type_traits>
#include <vector>

#include "core/kernels.h"
#include "profiler/hooks.h"
#include "profiler/profiler.h"

namespace kiln::profiler::detail {
namespace {

thread_local std::vector<const char*> t_scopes;
bool g_record_shapes = false;

struct ArgInfo {
  std::string shapes;
  const Tensor* first = nullptr;
  std::vector<const Tensor*> tensors;  // every tensor argument, undefined ones included
};

void note(ArgInfo& info, const Tensor& t) {
  info.tensors.push_back(&t);
  if (!t.defined()) return;
  if (info.first == nullptr) info.first = &t;
  if (!g_record_shapes) return;
  if (!info.shapes.empty()) info.shapes += ", ";
  info.shapes += t.shape_str();
}
void note(ArgInfo& info, const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) note(info, t);
}
template <class T> void note(ArgInfo&, const T&) {}

/// FLOPs (2 x multiply-adds) of the forward GEMM-like kernels, from their argument tensors in
/// kernel-table order: linear(out, x, w, bias), bmm(out, a, b), conv2d(out, x, w, bias), and
/// attention_forward(out, lse, q, k, v, mask): q k^T and p v, counted in full when causal (as
/// torch.utils.flop_counter counts SDPA).
double flops_of(std::string_view name, const std::vector<const Tensor*>& t) {
  auto numel = [&](size_t i) { return static_cast<double>(t[i]->numel()); };
  if (name == "linear" && t.size() >= 3 && t[2]->defined()) return 2 * numel(0) * static_cast<double>(t[2]->size(-1));
  if (name == "bmm" && t.size() >= 2 && t[1]->defined()) return 2 * numel(0) * static_cast<double>(t[1]->size(-1));
  if (name == "conv2d" && t.size() >= 3 && t[2]->defined() && t[2]->size(0) > 0)
    return 2 * numel(0) * numel(2) / static_cast<double>(t[2]->size(0));
  if (name == "attention_forward" && t.size() >= 5 && t[3]->defined())
    return 2 * (numel(2) + numel(0)) * static_cast<double>(t[3]->size(2));
  return 0;
}

template <class Sig, KernelStub<Sig>* S> struct Hook;
template <class R, class... A, KernelStub<R(A...)>* S> struct Hook<R(A...), S> {
  using Fn = R (*)(A...);
  static inline Fn original[kNumDeviceTypes] = {};

  template <int D> static R call(A... args) {
    ArgInfo info;
    (note(info, args), ...);
    push_scope(S->name());
    Event e;
    e.name = S->name();
    e.category = "kernel";
    e.shapes = std::move(info.shapes);
    e.flops = flops_of(S->name(), info.tensors);
    if (info.first != nullptr) {
      e.dtype = std::string(dtype_name(info.first->dtype()));
      e.device = info.first->device().str();
    }
    DeviceTimer* timer = nullptr;
    if (info.first != nullptr && info.first->device().type != DeviceType::CPU &&
        (timer = device_timer(static_cast<int>(info.first->device().type))) != nullptr)
      e.timer_id = timer->begin(info.first->device().index);
    e.start_ns = now_ns();
    struct Pop {
      ~Pop() { pop_scope(); }
    } pop;
    if constexpr (std::is_void_v<R>) {
      original[D](args...);
      e.end_ns = now_ns();
      if (timer != nullptr) timer->end(e.timer_id);
      record(std::move(e));
    } else {
      R r = original[D](args...);
      e.end_ns = now_ns();
      if (timer != nullptr) timer->end(e.timer_id);
      record(std::move(e));
      return r;
    }
  }

  template <int... D> static void install(std::integer_sequence<int, D...>) {
    ((S->has(static_cast<DeviceType>(D)) ? (original[D] = (*S)[Device(static_cast<DeviceType>(D))],
                                            S->set(static_cast<DeviceType>(D), &call<D>), 0)
                                         : (original[D] = nullptr, 0)),
     ...);
  }
  static void remove() {
    for (int d = 0; d < kNumDeviceTypes; ++d)
      if (original[d] != nullptr) S->set(static_cast<DeviceType>(d), original[d]), original[d] = nullptr;
  }
};

template <class Stub> struct SigOf;
template <class Sig> struct SigOf<KernelStub<Sig>> { using type = Sig; };

#define KILN_PROFILER_HOOK_(NAME, SIG) Hook<SIG, &::kiln::kernels::NAME>

}  // namespace

const char* current_scope() { return t_scopes.empty() ? "" : t_scopes.back(); }
void push_scope(const char* name) { t_scopes.push_back(name); }
void pop_scope() {
  if (!t_scopes.empty()) t_scopes.pop_back();
}

void install_kernel_hooks(bool record_shapes) {
  g_record_shapes = record_shapes;
  constexpr auto devices = std::make_integer_sequence<int, kNumDeviceTypes>{};
#define KILN_PROFILER_INSTALL_(NAME, SIG) KILN_PROFILER_HOOK_(NAME, SIG)::install(devices);
  KILN_KERNEL_LIST(KILN_PROFILER_INSTALL_)
#undef KILN_PROFILER_INSTALL_
}

void remove_kernel_hooks() {
#define KILN_PROFILER_REMOVE_(NAME, SIG) KILN_PROFILER_HOOK_(NAME, SIG)::remove();
  KILN_KERNEL_LIST(KILN_PROFILER_REMOVE_)
#undef KILN_PROFILER_REMOVE_
}

}  // namespace kiln::profiler::detail
