// Dataset: random access to (data, target) examples, plus a batch fast path that tensor-backed
// datasets implement with one index_select. `get` and `get_batch` are const and must be safe to
// call from several DataLoader worker threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ops.h"

namespace kiln::data {

/// One example or one batch. `target` may be undefined (unlabelled data).
struct Example {
  Tensor data;
  Tensor target;
};

/// Stacks examples along a new leading dim (the DataLoader's default collate). Every example
/// must have the same shapes and dtypes; targets are stacked only when all are defined.
Example stack_examples(const std::vector<Example>& examples);

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// The example at `index` in [0, size()).
  virtual Example get(int64_t index) const = 0;
  virtual int64_t size() const = 0;
  /// The examples at `indices`, stacked. The default gets each and stacks them; tensor-backed
  /// datasets override it to gather the whole batch at once.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
  /// Used in error messages ("TensorDataset", "MnistDataset(train)").
  virtual std::string name() const { return "Dataset"; }

 protected:
  /// Throws naming the dataset when `index` is outside [0, size()).
  void check_index(int64_t index) const;
};

/// Examples are rows of `data` and `targets` (their first dims must match). Rows are views,
/// batches are gathered with index_select.
class TensorDataset : public Dataset {
 public:
  /// `targets` may be undefined for unlabelled data.
  TensorDataset(Tensor data, Tensor targets);

  Example get(int64_t index) const override;
  int64_t size() const override { return data_.size(0); }
  Example get_batch(const std::vector<int64_t>& indices) const override;
  std::string name() const override { return "TensorDataset"; }

  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_;
  Tensor targets_;
};

}  // namespace kiln::data
