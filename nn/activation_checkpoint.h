// Activation checkpointing, as torch.utils.checkpoint.checkpoint: run a piece of the model
// without keeping its intermediate activations, and recompute them during backward. (Saving a
// model to disk is train/checkpoint.h; this file is about memory.)
#pragma once

#include <functional>
#include <type_traits>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace kiln::nn {

struct CheckpointOptions {
  /// Generators whose state the recomputation replays, besides the default one (dropout with
  /// an explicit generator).
  std::vector<Generator*> generators;
};

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

/// fn(inputs), with no graph kept inside fn: only the inputs are saved. Backward re-runs fn with
/// grad enabled (random state and autocast replayed, so dropout draws the same masks) and
/// back-propagates through the recomputed graph: gradients reach the inputs and every leaf fn
/// uses (module parameters), exactly as without checkpointing. With grad mode off it is fn(inputs).
/// Tensors fn captures rather than takes as inputs must be leaves (parameters) or need no grad.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});

/// checkpoint for fn(const Tensor&...) -> Tensor: nn::checkpoint([&](const Tensor& x) { return block(x); }, x).
/// fn is kept (copied) until backward; what it captures by reference must live that long.
template <class Fn, class... Ts>
  requires(sizeof...(Ts) > 0 && (std::is_convertible_v<const Ts&, const Tensor&> && ...))
Tensor checkpoint(Fn&& fn, const Ts&... inputs) {
  return checkpoint(
      // fn is copied: backward calls it again after this call has returned.
      [f = std::decay_t<Fn>(std::forward<Fn>(fn))](const std::vector<Tensor>& in) {
        return [&]<size_t... I>(std::index_sequence<I...>) {
          return std::vector<Tensor>{f(in[I]...)};
        }(std::index_sequence_for<Ts...>{});
      },
      std::vector<Tensor>{inputs...})[0];
}

}  // namespace kiln::nn
