// The launcher's watchdog (Supervisor::watch, see WatchdogOptions): reads every rank's heartbeat
// file on each turn of the poll loop and, once all ranks have beaten and none has moved for the
// timeout, reports each rank's last step, sends SIGUSR1 for stack dumps and stops the job.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "distributed/launch/heartbeat.h"
#include "distributed/launch/launch_supervisor.h"

namespace kiln::dist {

void Supervisor::watch(Clock::time_point now) {
  if (watchdog_.timeout_s <= 0 || stopping_) return;
  if (stall_stop_at_ != Clock::time_point::max()) {
    if (now >= stall_stop_at_) begin_stop(SIGTERM);
    return;
  }
  for (auto& c : children_) {
    const int64_t step = read_heartbeat(c.spec.heartbeat_file);
    if (step != c.last_step) {
      c.last_step = step;
      last_progress_ = now;
    }
  }
  // Armed once every rank has finished a step: start-up (data loading, the rendezvous, with its
  // own timeout) may take longer than a step ever should.
  for (const auto& c : children_)
    if (c.running && c.last_step < 0) {
      last_progress_ = now;
      return;
    }
  if (now - last_progress_ < std::chrono::duration<double>(watchdog_.timeout_s)) return;
  // Every rank is stuck; the ones furthest behind are those the others wait for.
  int64_t lowest = INT64_MAX;
  for (const auto& c : children_)
    if (c.running) lowest = std::min(lowest, c.last_step);
  std::vector<std::string> steps, behind;
  for (const auto& c : children_) {
    if (!c.running) continue;
    steps.push_back(fmt::format("rank {}: step {}", c.spec.rank, c.last_step));
    if (c.last_step == lowest) behind.push_back(std::to_string(c.spec.rank));
  }
  stall_ = fmt::format("no rank made progress for {} s (last heartbeats: {}); stalled rank(s) furthest behind: {}",
                       watchdog_.timeout_s, fmt::join(steps, ", "), fmt::join(behind, ", "));
  say("launch: watchdog: " + stall_ + "; sending SIGUSR1 (stack dump) to every rank, then stopping the job");
  for (auto& c : children_)
    if (c.running) ::kill(c.pid, SIGUSR1);
  stall_stop_at_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(watchdog_.dump_wait_s));
}

}  // namespace kiln::dist
