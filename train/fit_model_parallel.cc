// The Trainer's ModelParallel strategy: see fit_model_parallel.h.
#include "train/fit_model_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "distributed/pipeline/pipeline.h"
#include "train/model_parallel.h"

namespace kiln::train {

nn::ModulePtr<> place_model_parallel(const nn::ModulePtr<>& model, const ModelParallel& parts, Device& device) {
  auto seq = std::dynamic_pointer_cast<nn::Sequential>(std::shared_ptr<nn::Module>(model));
  KILN_CHECK(seq != nullptr,
             "Trainer: ModelParallel splits an nn::Sequential over devices; the model is a {} (train it with "
             "SingleProcess or DataParallel, or write it as a Sequential)",
             model->type_name());
  const auto n = static_cast<int64_t>(seq->size());
  const auto k = static_cast<int64_t>(parts.devices.size());
  KILN_CHECK(k >= 2, "Trainer: ModelParallel needs at least 2 devices, got {}", k);
  KILN_CHECK(k <= n, "Trainer: ModelParallel: {} devices, but the Sequential has only {} layers (each part needs one)",
             k, n);
  for (const Device& d : parts.devices)
    KILN_CHECK(!d.is_cuda() || d.index < device_count(DeviceType::CUDA),
               "Trainer: ModelParallel: device {} is not present ({} CUDA devices here)", d.str(),
               device_count(DeviceType::CUDA));
  std::vector<int> boundaries = parts.boundaries;
  if (boundaries.empty()) {
    std::vector<int64_t> params;
    for (size_t i = 0; i < seq->size(); ++i) {
      int64_t count = 0;
      for (const Tensor& p : (*seq)[i]->parameters()) count += p.numel();
      params.push_back(count);
    }
    boundaries = dist::balanced_boundaries(params, static_cast<int>(k));
  }
  KILN_CHECK(static_cast<int64_t>(boundaries.size()) == k + 1,
             "Trainer: ModelParallel: boundaries [{}] for {} devices: give {} (from 0 to {}), or none for equal "
             "parameter counts",
             fmt::join(boundaries, ", "), k, k + 1, n);
  auto placed = std::make_shared<PlacedSequential>(*seq, boundaries, parts.devices);
  device = parts.devices.back();
  return placed;
}

}  // namespace kiln::train
