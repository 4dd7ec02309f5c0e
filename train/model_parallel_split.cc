// SplitModel and the choice of devices for model parallel in one process (model_parallel.h).
#include <fmt/format.h>

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
