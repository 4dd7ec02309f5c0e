// PlacedSequential, SplitModel and the choice of devices for model parallel in one process
// (model_parallel.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "train/model_parallel.h"

namespace kiln::train {

DevicePair model_parallel_devices() {
  const int gpus = device_count(DeviceType::CUDA);
  if (gpus >= 2) return {Device("cuda:0"), Device("cuda:1"), "two GPUs: cuda:0 + cuda:1"};
  if (gpus == 1) return {kCPU, Device("cuda:0"), "one GPU: cpu + cuda:0"};
  return {kCPU, kCPU,
          "no GPU: cpu + cpu (the same code path and the same to(device) between the halves, but no second device "
          "to spread over)"};
}

PlacedSequential::PlacedSequential(const nn::Sequential& model, std::vector<int> boundaries,
                                   std::vector<Device> devices)
    : boundaries_(std::move(boundaries)), devices_(std::move(devices)) {
  const int n = static_cast<int>(model.size());
  KILN_CHECK(!devices_.empty(), "PlacedSequential: no devices given");
  KILN_CHECK(boundaries_.size() == devices_.size() + 1,
             "PlacedSequential: {} boundaries for {} devices (need one more than the devices: [0, ..., {}])",
             boundaries_.size(), devices_.size(), n);
  KILN_CHECK(boundaries_.front() == 0 && boundaries_.back() == n,
             "PlacedSequential: boundaries [{}] must run from 0 to the layer count {}", fmt::join(boundaries_, ", "), n);
  for (size_t k = 0; k + 1 < boundaries_.size(); ++k)
    KILN_CHECK(boundaries_[k] < boundaries_[k + 1],
               "PlacedSequential: boundaries [{}] leave part {} (on {}) without layers; each part needs at least one",
               fmt::join(boundaries_, ", "), k, devices_[k].str());
  for (size_t k = 0; k < devices_.size(); ++k)
    for (int i = boundaries_[k]; i < boundaries_[k + 1]; ++i) {
      push_back(model[static_cast<size_t>(i)]);
      model[static_cast<size_t>(i)]->to(devices_[k]);
    }
}

Tensor PlacedSequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t k = 0; k < devices_.size(); ++k) {
    h = h.to(devices_[k]);
    for (int i = boundaries_[k]; i < boundaries_[k + 1]; ++i) h = (*(*this)[static_cast<size_t>(i)])(h);
  }
  return h;
}

SplitModel::SplitModel(const nn::Sequential& model, int at, Device a, Device b)
    : net1_(std::make_shared<nn::Sequential>()), net2_(std::make_shared<nn::Sequential>()), a_(a), b_(b) {
  const int n = static_cast<int>(model.size());
  KILN_CHECK(at > 0 && at < n, "SplitModel: cut at layer {} of {} leaves a half empty (need 0 < at < {})", at, n, n);
  for (int i = 0; i < n; ++i) (i < at ? net1_ : net2_)->push_back(model[i]);
  net1_->to(a_);
  net2_->to(b_);
}

Tensor SplitModel::forward(const Tensor& x) { return net2_->forward(net1_->forward(x.to(a_)).to(b_)); }

std::vector<Tensor> SplitModel::parameters() const {
  std::vector<Tensor> p = net1_->parameters();
  for (const Tensor& t : net2_->parameters()) p.push_back(t);
  return p;
}

}  // namespace kiln::train
