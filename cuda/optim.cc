// Host side of the fused optimizer steps on CUDA (kernels::sgd_step, kernels::adam_step): checks
// the lists as the CPU kernels do, gathers their pointers and sizes, and launches the
// multi-tensor kernels (cuda/kernels/optim.cu) on the parameters' device's current stream.
#include <cuda_runtime_api.h>

#include <vector>

#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/optim.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

// Checks `list` (when required or non-empty) matches params tensor for tensor: contiguous, on
// the same CUDA device, same dtype and shape. Returns its data pointers (empty when it is).
std::vector<void*> pointers(const char* op, const char* name, const std::vector<Tensor>& params,
                            const std::vector<Tensor>& list, bool required) {
  std::vector<void*> out;
  if (!required && list.empty()) return out;
  KILN_CHECK(list.size() == params.size(), "{} (cuda): {} {} for {} parameters", op, list.size(), name,
             params.size());
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    KILN_CHECK(t.defined() && t.is_contiguous() && t.dtype() == p.dtype() && t.device() == p.device() &&
                   t.sizes() == p.sizes(),
               "{} (cuda): {}[{}] must be a contiguous {} tensor of shape {} on {} like its parameter", op, name, i,
               p.dtype(), p.sizes(), p.device());
    out.push_back(t.data_ptr());
  }
  return out;
}

// The parameters' pointers and sizes, after checking they share one CUDA device and one floating
// dtype and are contiguous.
std::vector<void*> param_pointers(const char* op, const std::vector<Tensor>& params, std::vector<int64_t>& numels) {
  const Tensor& p0 = params.front();
  KILN_CHECK(p0.device().is_cuda(), "{} (cuda): parameters are on {}", op, p0.device());
  KILN_CHECK(p0.is_floating_point(), "{}: dtype {} is not supported (floating types only)", op, p0.dtype());
  std::vector<void*> out;
  for (const Tensor& p : params) {
    KILN_CHECK(p.defined() && p.is_contiguous(), "{} (cuda): every parameter must be defined and contiguous", op);
    KILN_CHECK(p.dtype() == p0.dtype() && p.device() == p0.device(), "{} (cuda): parameters mix {} on {} with {} on {}",
               op, p.dtype(), p.device(), p0.dtype(), p0.device());
    out.push_back(p.data_ptr());
    numels.push_back(p.numel());
  }
  return out;
}

void bump(std::vector<Tensor>& ts) {
  for (Tensor& t : ts) t.storage()->bump_version();
}

void sgd_step_kernel(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& bufs,
                     const SGDStepParams& s, bool first) {
  if (params.empty()) return;
  std::vector<int64_t> numels;
  std::vector<void*> p = param_pointers("sgd_step", params, numels);
  std::vector<void*> g = pointers("sgd_step", "grads", params, grads, true);
  std::vector<void*> b = pointers("sgd_step", "bufs", params, bufs, false);
  KILN_CHECK((s.momentum != 0) == !bufs.empty(), "sgd_step (cuda): momentum buffers must be given exactly when "
             "momentum != 0 (momentum {}, {} buffers)", s.momentum, bufs.size());
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
  std::vector<int64_t> numels;
  std::vector<void*> p = param_pointers("adam_step", params, numels);
  std::vector<void*> g = pointers("adam_step", "grads", params, grads, true);
  std::vector<void*> m = pointers("adam_step", "exp_avgs", params, exp_avgs, true);
  std::vector<void*> v = pointers("adam_step", "exp_avg_sqs", params, exp_avg_sqs, true);
  std::vector<void*> vmax = pointers("adam_step", "max_exp_avg_sqs", params, max_exp_avg_sqs, false);
  KILN_CHECK(s.amsgrad == !max_exp_avg_sqs.empty(),
             "adam_step (cuda): max_exp_avg_sqs must be given exactly when amsgrad");
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
