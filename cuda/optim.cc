// Host side of the fused optimizer steps on CUDA (kernels::sgd_step, kernels::adam_step): gathers
// the lists' pointers and sizes and launches the multi-tensor kernels (cuda/kernels/optim.cu) on
// the parameters' device's current stream. The lists are checked against the slots' contract
// (core/optim_step_check.h) first: a mismatched list would make the kernel write past a tensor.
#include <cuda_runtime_api.h>

#include <vector>

#include "core/kernels.h"
#include "core/optim_step_check.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/optim.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

// The data pointers of `list` (empty when it is).
std::vector<void*> pointers(const std::vector<Tensor>& list) {
  std::vector<void*> out;
  out.reserve(list.size());
  for (const Tensor& t : list) out.push_back(t.data_ptr());
  return out;
}

std::vector<int64_t> numels_of(const std::vector<Tensor>& params) {
  std::vector<int64_t> out;
  for (const Tensor& p : params) out.push_back(p.numel());
  return out;
}

void bump(std::vector<Tensor>& ts) {
  for (Tensor& t : ts) t.storage()->bump_version();
}

void sgd_step_kernel(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& bufs,
                     const SGDStepParams& s, bool first) {
  if (params.empty()) return;
  check_sgd_step(params, grads, bufs, s);
  std::vector<int64_t> numels = numels_of(params);
  std::vector<void*> p = pointers(params), g = pointers(grads), b = pointers(bufs);
  DeviceGuard guard(params.front().device());
  kern::launch_sgd_step(scalar_type(params.front().dtype()), static_cast<int>(params.size()), p.data(), g.data(),
                        b.empty() ? nullptr : b.data(), numels.data(), s, first,
                        current_stream(params.front().device().index).raw());
  KILN_CUDA_CHECK_LAUNCH();
  bump(params);
  bump(bufs);
}

void adam_step_kernel(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avgs,
                      std::vector<Tensor>& exp_avg_sqs, std::vector<Tensor>& max_exp_avg_sqs,
                      const AdamStepParams& s) {
  if (params.empty()) return;
  check_adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, s);
  std::vector<int64_t> numels = numels_of(params);
  std::vector<void*> p = pointers(params), g = pointers(grads), m = pointers(exp_avgs), v = pointers(exp_avg_sqs);
  std::vector<void*> vmax = pointers(max_exp_avg_sqs);
  DeviceGuard guard(params.front().device());
  kern::launch_adam_step(scalar_type(params.front().dtype()), static_cast<int>(params.size()), p.data(), g.data(),
                         m.data(), v.data(), vmax.empty() ? nullptr : vmax.data(), numels.data(), s,
                         current_stream(params.front().device().index).raw());
  KILN_CUDA_CHECK_LAUNCH();
  bump(params);
  bump(exp_avgs);
  bump(exp_avg_sqs);
  bump(max_exp_avg_sqs);
}

}  // namespace

KILN_REGISTER_KERNEL(sgd_step, DeviceType::CUDA, &sgd_step_kernel);
KILN_REGISTER_KERNEL(adam_step, DeviceType::CUDA, &adam_step_kernel);

}  // namespace kiln::cuda
