// A step schedule as torch.profiler.schedule(wait, warmup, active, repeat): steps are skipped
// while waiting, the profiler records (and the results are discarded) while warming up, and
// the `active` steps are kept; then the cycle repeats `repeat` times (0: forever).
#pragma once

#include <cstdint>

namespace kiln::profiler {

enum class ProfilerAction { kNone, kWarmup, kRecord, kRecordAndSave };

struct Schedule {
  int64_t wait = 0, warmup = 1, active = 3, repeat = 1;
  /// What to do during step `step` (0-based); kRecordAndSave on the last active step of a cycle.
  ProfilerAction at(int64_t step) const {
    const int64_t cycle = wait + warmup + active;
    if (cycle <= 0 || active <= 0) return ProfilerAction::kNone;
    if (repeat > 0 && step >= cycle * repeat) return ProfilerAction::kNone;
    const int64_t s = step % cycle;
    if (s < wait) return ProfilerAction::kNone;
    if (s < wait + warmup) return ProfilerAction::kWarmup;
    return s == cycle - 1 ? ProfilerAction::kRecordAndSave : ProfilerAction::kRecord;
  }
};

}  // namespace kiln::profiler
