#include "distributed/tensor_parallel/parallel_layout.h"

#include <fmt/format.h>

#include "core/error.h"
#include "distributed/backend/init.h"

namespace kiln::dist {

ParallelLayout::ParallelLayout(int world, int tensor, int pipeline, int data)
    : world_(world), tensor_(tensor), pipeline_(pipeline), data_(data) {
  KILN_CHECK(world >= 1 && tensor >= 1 && pipeline >= 1 && data >= 0,
             "parallel layout: sizes must be positive (world {}, tensor {}, pipeline {}, data {})", world, tensor,
             pipeline, data);
  KILN_CHECK(world % (tensor * pipeline) == 0,
             "parallel layout: a world of {} ranks does not divide into tensor {} x pipeline {} (= {}) ranks per replica",
             world, tensor, pipeline, tensor * pipeline);
  if (data_ == 0) data_ = world / (tensor * pipeline);
  KILN_CHECK(data_ * pipeline * tensor == world,
             "parallel layout: data {} x pipeline {} x tensor {} = {} ranks, but the world has {}", data_, pipeline,
             tensor, data_ * pipeline * tensor, world);
}

ParallelCoords ParallelLayout::coords(int rank) const {
  KILN_CHECK(rank >= 0 && rank < world_, "parallel layout: rank {} is outside the world of {}", rank, world_);
  return {rank / (tensor_ * pipeline_), rank / tensor_ % pipeline_, rank % tensor_};
}

int ParallelLayout::rank_of(const ParallelCoords& c) const { return (c.data * pipeline_ + c.pipeline) * tensor_ + c.tensor; }

std::vector<int> ParallelLayout::tensor_ranks(int rank) const {
  ParallelCoords c = coords(rank);
  std::vector<int> out;
  for (c.tensor = 0; c.tensor < tensor_; ++c.tensor) out.push_back(rank_of(c));
  return out;
}

std::vector<int> ParallelLayout::pipeline_ranks(int rank) const {
  ParallelCoords c = coords(rank);
  std::vector<int> out;
  for (c.pipeline = 0; c.pipeline < pipeline_; ++c.pipeline) out.push_back(rank_of(c));
  return out;
}

std::vector<int> ParallelLayout::data_ranks(int rank) const {
  ParallelCoords c = coords(rank);
  std::vector<int> out;
  for (c.data = 0; c.data < data_; ++c.data) out.push_back(rank_of(c));
  return out;
}

std::string ParallelLayout::describe() const {
  std::string s = fmt::format("world {} = data {} x pipeline {} x tensor {}\n", world_, data_, pipeline_, tensor_);
  for (int r = 0; r < world_; ++r) {
    const ParallelCoords c = coords(r);
    s += fmt::format("  rank {:>3}: data {:>2}  stage {:>2}  tensor {:>2}\n", r, c.data, c.pipeline, c.tensor);
  }
  return s;
}

ParallelGroups make_groups(const ParallelLayout& layout) {
  const int rank = get_rank();
  KILN_CHECK(get_world_size() == layout.world(), "make_groups: the layout is for {} ranks, the job has {}",
             layout.world(), get_world_size());
  ParallelGroups g;
  g.coords = layout.coords(rank);
  // Every rank creates every group in the same order: each dimension's groups by the lowest rank.
  for (int r = 0; r < layout.world(); ++r)
    if (layout.coords(r).tensor == 0)
      if (auto pg = new_group(layout.tensor_ranks(r))) g.tensor = pg;
  for (int r = 0; r < layout.world(); ++r)
    if (layout.coords(r).pipeline == 0)
      if (auto pg = new_group(layout.pipeline_ranks(r))) g.pipeline = pg;
  for (int r = 0; r < layout.world(); ++r)
    if (layout.coords(r).data == 0)
      if (auto pg = new_group(layout.data_ranks(r))) g.data = pg;
  return g;
}

}  // namespace kiln::dist
