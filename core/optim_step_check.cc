// The fused optimizer-step slots' list checks (core/optim_step_check.h).
#include "core/optim_step_check.h"

#include "core/error.h"

namespace kiln {
namespace {

// A list beside params: each tensor contiguous and of its parameter's dtype, device and shape.
// A list that is not `required` may be empty.
struct TensorList {
  const char* name;
  const std::vector<Tensor>* tensors;
  bool required;
};

void check_lists(const char* op, const std::vector<Tensor>& params, std::initializer_list<TensorList> lists) {
  for (const Tensor& p : params) {
    KILN_CHECK(p.defined() && p.is_contiguous(), "{}: every parameter must be defined and contiguous", op);
    KILN_CHECK(p.dtype() == params.front().dtype() && p.device() == params.front().device(),
               "{}: parameters mix {} on {} with {} on {}", op, p.dtype(), p.device(), params.front().dtype(),
               params.front().device());
  }
  for (const TensorList& l : lists) {
    if (!l.required && l.tensors->empty()) continue;
    KILN_CHECK(l.tensors->size() == params.size(), "{}: {} {} for {} parameters", op, l.tensors->size(), l.name,
               params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& t = (*l.tensors)[i];
      const Tensor& p = params[i];
      KILN_CHECK(t.defined() && t.is_contiguous() && t.dtype() == p.dtype() && t.device() == p.device() &&
                     t.sizes() == p.sizes(),
                 "{}: {}[{}] must be a contiguous {} tensor of shape {} on {} like its parameter", op, l.name, i,
                 p.dtype(), p.sizes(), p.device());
    }
  }
}

}  // namespace

void check_sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& bufs, const SGDStepParams& s) {
  check_lists("sgd_step", params, {{"grads", &grads, true}, {"bufs", &bufs, false}});
  KILN_CHECK(s.momentum != 0 || bufs.empty(), "sgd_step: momentum buffers given but momentum is 0");
  KILN_CHECK(s.momentum == 0 || params.empty() || !bufs.empty(), "sgd_step: momentum {} needs momentum buffers",
             s.momentum);
}

void check_adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                     const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& s) {
  check_lists("adam_step", params,
              {{"grads", &grads, true},
               {"exp_avgs", &exp_avgs, true},
               {"exp_avg_sqs", &exp_avg_sqs, true},
               {"max_exp_avg_sqs", &max_exp_avg_sqs, false}});
  KILN_CHECK(s.amsgrad == !max_exp_avg_sqs.empty() || params.empty(),
             "adam_step: max_exp_avg_sqs must be given exactly when amsgrad");
}

}  // namespace kiln
