#include "distributed/data_parallel/scaler_sync.h"

namespace kiln::dist {

void share_found_inf(amp::GradScaler& scaler, std::shared_ptr<ProcessGroup> pg) {
  scaler.set_found_inf_reducer([pg](Tensor& found_inf) { pg->allreduce(found_inf, ReduceOp::kMax)->wait(); });
}

}  // namespace kiln::dist
