// Graceful preemption of a training job: SIGTERM or SIGINT asks every rank to finish the step it
// is in, write a checkpoint and exit with kExitPreempted; a second signal exits at once. Under data
// parallel the ranks agree (one all-reduced flag per step) so they all stop after the same step,
// whichever rank the signal reached first.
#pragma once

#include "distributed/launch/exit_codes.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

/// Installs the SIGTERM/SIGINT handlers for its lifetime (restoring the previous ones after).
/// The first signal only sets a flag; the second calls _exit(128 + signal).
class PreemptionGuard {
 public:
  PreemptionGuard();
  ~PreemptionGuard();
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;

  /// Whether this process received a stop signal.
  static bool requested();
  /// The signal received (0: none).
  static int signal();
  /// Whether the job should stop now: this process's flag, or under `pg` (nullable) any rank's
  /// (a collective: every rank of `pg` must call it after the same step). `comm` is the device
  /// the group's collectives take (the rank's GPU under NCCL, else the CPU).
  bool should_stop(ProcessGroup* pg, Device comm = kCPU) const;
};

}  // namespace kiln::dist
