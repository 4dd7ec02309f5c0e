// Loss scaling under data parallel: all ranks must skip or take a step together, or their
// models diverge. After this, the scaler all-reduces its found-inf flag (max) across the group
// before deciding, so an inf/NaN gradient on any rank skips the step on every rank.
#pragma once

#include <memory>

#include "amp/grad_scaler.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

void share_found_inf(amp::GradScaler& scaler, std::shared_ptr<ProcessGroup> pg);

}  // namespace kiln::dist
