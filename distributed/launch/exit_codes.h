// Exit statuses that trainers and the launcher agree on.
#pragma once

namespace kiln::dist {

/// A trainer stopped on SIGTERM/SIGINT after saving its checkpoint (75, EX_TEMPFAIL: "try again
/// later"). The launcher exits with it too when every rank stopped so.
constexpr int kExitPreempted = 75;

/// The launcher's watchdog stopped a job in which no rank made progress (as timeout(1)).
constexpr int kExitStalled = 124;

}  // namespace kiln::dist
