// PyTorch's view + in-place semantics, as far as core needs them: a view follows its base's
// autograd history, and an in-place write hands the op's history to the tensor written (for a
// view, to its base). Only autograd/ can build that history; it registers the two functions here
// at start-up, so core depends on nothing above it (with autograd not linked nothing needs them).
#pragma once

#include "core/tensor.h"

namespace kiln::detail {

struct ViewHistoryHooks {
  /// Rebuilds the history of a view whose storage was written in place since it was current.
  void (*refresh)(const Tensor& view) = nullptr;
  /// Gives `self` the history of the in-place op `op` whose new value is `result` (already
  /// written into self): for a view, its base takes a CopySlices history and the view follows it.
  void (*rebase)(const Tensor& self, const Tensor& result, const char* op) = nullptr;
};

ViewHistoryHooks& view_history_hooks();

/// Brings a view's autograd history up to date; a no-op for non-views and current views.
inline void refresh_view_history(const Tensor& t) {
  TensorImpl* i = t.unsafe_impl();
  if (i != nullptr && i->view_base != nullptr && i->view_tracks_grad && i->storage->version() != i->view_version &&
      view_history_hooks().refresh != nullptr)
    view_history_hooks().refresh(t);
}

}  // namespace kiln::detail
