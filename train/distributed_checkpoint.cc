#include "train/distributed_checkpoint.h"

#include "core/error.h"
#include "core/ops.h"

namespace kiln::dist {
namespace {

/// Whether every rank succeeded (a max-reduced failure flag): throws on the ranks that did not
/// fail when another did, naming how many failed.
void agree(ProcessGroup& pg, const nn::Module& model, bool failed, const char* what, const std::string& path) {
  // NCCL takes only tensors on the rank's GPU: the model's.
  Device comm = kCPU;
  if (pg.backend() == "nccl")
    for (const Tensor& p : model.parameters()) comm = p.device();
  Tensor flag = full({1}, failed ? 1 : 0, dtype(kInt32)).to(comm);
  pg.allreduce(flag, ReduceOp::kSum)->wait();
  int failures = flag.to(kCPU).item<int32_t>();
  if (!failed && failures > 0)
    fail("{} '{}': failed on {} other rank(s) (see their errors)", what, path, failures);
}

}  // namespace

void save_checkpoint(ProcessGroup& pg, const std::string& path, const nn::Module& model,
                     const optim::Optimizer* opt, const train::TrainingState& state) {
  std::exception_ptr error;
  if (pg.rank() == 0) {
    try {
      train::save_checkpoint(path, model, opt, state);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree(pg, model, error != nullptr, "save_checkpoint", path);
  if (error) std::rethrow_exception(error);
}

train::TrainingState load_checkpoint(ProcessGroup& pg, const std::string& path, nn::Module& model,
                                  optim::Optimizer* opt) {
  std::exception_ptr error;
  train::TrainingState state;
  try {
    state = train::load_checkpoint(path, model, opt);
  } catch (...) {
    error = std::current_exception();
  }
  agree(pg, model, error != nullptr, "load_checkpoint", path);
  if (error) std::rethrow_exception(error);
  return state;
}

}  // namespace kiln::dist
