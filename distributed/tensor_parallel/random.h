// Dropout under tensor parallelism, as Megatron-LM's RNG tracker (tensor_parallel/random.py).
// A region whose activations are whole on every tensor rank (the embeddings' sum, a row-parallel
// layer's output after its all-reduce) draws its mask from the default generator, which every
// tensor rank advances alike from the same seed: the masks are identical and the ranks stay
// replicas. A region whose activations are split over the ranks (attention probabilities over
// this rank's heads; under sequence parallelism this rank's part of the sequence) draws from a
// generator seeded by the default generator's next counter plus the tensor rank (Megatron's
// seed + 2718 + rank), so each rank's part gets its own mask while the default generator still
// moves alike everywhere. The sharded generator is derived per draw from the default one, so a
// checkpoint of the default generator's state resumes both.
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "distributed/tensor_parallel/mappings.h"
#include "nn/module.h"

namespace kiln::dist::tp {

/// The seed of one draw in a region split over `group`: takes one counter of the default
/// generator (the same on every rank of the group) and offsets it by the rank.
uint64_t sharded_region_seed(const ProcessGroup& group);

/// Dropout of `x`, in a region split over `group` when `sharded` (a mask per tensor rank) or
/// replicated (the default generator: the same mask on every rank). Draws nothing unless
/// training with p > 0.
Tensor parallel_dropout(const Tensor& x, double p, bool training, const ProcessGroup& group, bool sharded);

/// parallel_dropout as a module (nn::Dropout's place in a tensor-parallel model).
class ParallelDropout : public nn::Module {
 public:
  ParallelDropout(double p, GroupPtr group, bool sharded);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  bool sharded() const { return sharded_; }

 private:
  double p_;
  GroupPtr group_;
  bool sharded_;
};

}  // namespace kiln::dist::tp
