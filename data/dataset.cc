#include "data/dataset.h"

namespace kiln::data {

Example stack_examples(const std::vector<Example>& examples) {
  KILN_CHECK(!examples.empty(), "stack_examples: no examples to stack");
  std::vector<Tensor> data, targets;
  data.reserve(examples.size());
  targets.reserve(examples.size());
  bool all_targets = true;
  for (const Example& e : examples) {
    KILN_CHECK(e.data.defined(), "stack_examples: example {} has no data", data.size());
    data.push_back(e.data);
    all_targets = all_targets && e.target.defined();
    if (e.target.defined()) targets.push_back(e.target);
  }
  KILN_CHECK(all_targets || targets.empty(),
             "stack_examples: {} of {} examples have a target; all or none must", targets.size(),
             examples.size());
  Example out;
  out.data = stack(data, 0);
  if (all_targets) out.target = stack(targets, 0);
  return out;
}

void Dataset::check_index(int64_t index) const {
  int64_t n = size();
  KILN_CHECK(index >= 0 && index < n, "{}: index {} is out of range for a dataset of {} examples", name(),
             index, n);
}

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return stack_examples(examples);
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
  KILN_CHECK(data_.defined(), "TensorDataset: data is undefined");
  KILN_CHECK(data_.dim() >= 1, "TensorDataset: data must have a leading example dim, got shape {}",
             data_.shape_str());
  if (targets_.defined()) {
    KILN_CHECK(targets_.dim() >= 1 && targets_.size(0) == data_.size(0),
               "TensorDataset: data has {} examples (shape {}) but targets have {} (shape {})", data_.size(0),
               data_.shape_str(), targets_.dim() >= 1 ? targets_.size(0) : 0, targets_.shape_str());
  }
}

Example TensorDataset::get(int64_t index) const {
  check_index(index);
  Example e;
  e.data = data_.select(0, index);
  if (targets_.defined()) e.target = targets_.select(0, index);
  return e;
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  KILN_CHECK(!indices.empty(), "{}: get_batch with no indices", name());
  for (int64_t i : indices) check_index(i);
  Tensor index = tensor(indices, {}, TensorOptions(kInt64).device(data_.device()));
  Example e;
  e.data = data_.index_select(0, index);
  if (targets_.defined()) {
    if (targets_.device() != data_.device()) index = index.to(targets_.device());
    e.target = targets_.index_select(0, index);
  }
  return e;
}

}  // namespace kiln::data
