// Autocast's thread-local state and casts. The weight cache is keyed by the TensorImpl and
// checked against a weak reference (an address can be reused by a later tensor), the storage
// version (an optimizer step invalidates the cast) and the grad mode (a cast made under
// NoGradGuard has no history and must not stand in for one that needs it).
#include "core/autocast.h"

#include <memory>
#include <unordered_map>

#include "core/grad_mode.h"
#include "core/op_kinds.h"
#include "core/ops.h"

namespace kiln::autocast {
namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  uint32_t version = 0;
  bool grad_mode = false;
  DType dtype = kBFloat16;
  Tensor cast;
};

thread_local State g_state;
thread_local std::unordered_map<const TensorImpl*, CacheEntry> g_cache;

bool is_low(DType t) { return t == kFloat16 || t == kBFloat16; }

/// An fp32-class input: f16/bf16 cast up to f32, anything else (f64, integers, undefined) as it is.
Tensor up_to_f32(const Tensor& t) { return t.defined() && is_low(t.dtype()) ? t.to(kFloat32) : t; }

/// An elementwise kind's input, as its row's `amp` column says.
Tensor cast_by_column(KindAutocast c, const Tensor& t) {
  return c == KindAutocast::fp32 && is_enabled() ? up_to_f32(t) : t;
}

/// A weight: what PyTorch caches too (activations are new every step, so caching them buys nothing).
bool cacheable(const Tensor& t) { return t.requires_grad() && t.is_leaf() && !t.unsafe_impl()->is_view; }

Tensor cast_lower(const Tensor& t, DType dtype) {
  if (!cacheable(t)) return t.to(dtype);
  const bool grad = GradMode::is_enabled();
  auto it = g_cache.find(t.unsafe_impl());
  if (it != g_cache.end()) {
    const CacheEntry& e = it->second;
    if (e.source.lock() == t.impl_ptr() && e.version == t.version() && e.grad_mode == grad && e.dtype == dtype)
      return e.cast;
  }
  Tensor cast = t.to(dtype);
  g_cache[t.unsafe_impl()] = CacheEntry{t.impl_ptr(), t.version(), grad, dtype, cast};
  return cast;
}

}  // namespace

State state() { return g_state; }

void set_state(const State& s) {
  KILN_CHECK(is_low(s.dtype), "autocast: the lower precision must be f16 or bf16, got {}", s.dtype);
  g_state = s;
}

bool is_enabled() { return g_state.enabled && !g_state.suspended; }

DType lower_dtype() { return g_state.dtype; }

Tensor cast_input(AutocastOp op, const Tensor& t) {
  if (!is_enabled() || !t.defined() || !t.is_floating_point()) return t;
  switch (autocast_class(op)) {
    case AutocastClass::lower:
      if (t.dtype() == kFloat64 || t.dtype() == g_state.dtype) return t;
      return cast_lower(t, g_state.dtype);
    case AutocastClass::fp32:
      return up_to_f32(t);
    case AutocastClass::promote:
      break;
  }
  fail("autocast: {} is a promote-class op: its inputs go through promote_inputs together",
       autocast_op_name(op));
}

Tensor cast_input(UnaryKind kind, const Tensor& t) { return cast_by_column(kind_autocast(kind), t); }

Tensor cast_input(BinaryKind kind, const Tensor& t) { return cast_by_column(kind_autocast(kind), t); }

std::vector<Tensor> promote_inputs(AutocastOp op, std::vector<Tensor> ts) {
  KILN_CHECK(autocast_class(op) == AutocastClass::promote, "autocast: promote_inputs called for {}, a {}-class op",
             autocast_op_name(op), autocast_class_name(autocast_class(op)));
  if (!is_enabled()) return ts;
  bool any = false;
  DType widest = kFloat16;
  for (const Tensor& t : ts) {
    if (!t.defined() || !t.is_floating_point()) continue;
    widest = any ? promote_types(widest, t.dtype()) : t.dtype();
    any = true;
  }
  for (Tensor& t : ts)
    if (t.defined() && t.is_floating_point() && t.dtype() != widest) t = t.to(widest);
  return ts;
}

void clear_cache() { g_cache.clear(); }

size_t cache_size() { return g_cache.size(); }

SuspendGuard::SuspendGuard() : prev_(g_state.suspended) { g_state.suspended = true; }
SuspendGuard::~SuspendGuard() { g_state.suspended = prev_; }

}  // namespace kiln::autocast

namespace kiln {

std::vector<AutocastEntry> autocast_policy() {
  std::vector<AutocastEntry> entries;
  for (int k = 0; k < kNumUnaryKinds; ++k)
    if (kind_autocast(static_cast<UnaryKind>(k)) == KindAutocast::fp32)
      entries.push_back({kind_name(static_cast<UnaryKind>(k)), AutocastClass::fp32});
  for (int k = 0; k < kNumBinaryKinds; ++k)
    if (kind_autocast(static_cast<BinaryKind>(k)) == KindAutocast::fp32)
      entries.push_back({kind_name(static_cast<BinaryKind>(k)), AutocastClass::fp32});
#define KILN_AUTOCAST_ENTRY_(NAME, CLASS) entries.push_back({#NAME, AutocastClass::CLASS});
  KILN_AUTOCAST_POLICY(KILN_AUTOCAST_ENTRY_)
#undef KILN_AUTOCAST_ENTRY_
  return entries;
}

}  // namespace kiln
