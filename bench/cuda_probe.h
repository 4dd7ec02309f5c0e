// Whether a CUDA device is present, asked in a child process: CUDA does not survive fork(), so a
// benchmark that forks its ranks must not initialise CUDA in the parent.
#pragma once

#include <cstdlib>

#include "core/device.h"
#include "distributed/launch/local_ranks.h"

namespace kiln::bench {

inline bool cuda_device_present() {
  auto r = dist::run_local_ranks(
      1, [](int, int) { std::_Exit(device_count(DeviceType::CUDA) > 0 ? 0 : 3); }, {.timeout_s = 120});
  return r[0].exit_code == 0;
}

}  // namespace kiln::bench
