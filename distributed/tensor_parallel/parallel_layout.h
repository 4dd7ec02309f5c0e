// The rank layout of 3D-parallel training (data x pipeline x tensor), as Megatron-LM's
// initialize_model_parallel: tensor-parallel peers are neighbouring ranks (on one node when a
// node has at least T devices), then pipeline stages, then data-parallel replicas:
//   rank = (data * P + stage) * T + tensor
// With T = 1 this is the layout pipeline_groups() uses. make_groups() builds every group on
// every rank in the same order (new_group's rule) and returns this rank's three.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/backend/process_group.h"

namespace kiln::dist {

struct ParallelCoords {
  int data = 0, pipeline = 0, tensor = 0;
};

class ParallelLayout {
 public:
  /// `data` 0: what is left of the world. Throws naming the numbers when any size is below 1 or
  /// the world is not data x pipeline x tensor.
  ParallelLayout(int world, int tensor, int pipeline, int data = 0);

  int world() const { return world_; }
  int tensor() const { return tensor_; }
  int pipeline() const { return pipeline_; }
  int data() const { return data_; }
  ParallelCoords coords(int rank) const;
  int rank_of(const ParallelCoords& c) const;
  /// The ranks of `rank`'s tensor-, pipeline- and data-parallel groups, in group-rank order.
  std::vector<int> tensor_ranks(int rank) const;
  std::vector<int> pipeline_ranks(int rank) const;
  std::vector<int> data_ranks(int rank) const;
  /// "world 8 = data 2 x pipeline 2 x tensor 2" and one line per rank with its coordinates.
  std::string describe() const;

 private:
  int world_, tensor_, pipeline_, data_;
};

/// This rank's groups (a size-1 dimension still gets its group of one).
struct ParallelGroups {
  std::shared_ptr<ProcessGroup> tensor, pipeline, data;
  ParallelCoords coords;
};

/// Builds every group of `layout` over the default group (every rank must call it).
ParallelGroups make_groups(const ParallelLayout& layout);

}  // namespace kiln::dist
