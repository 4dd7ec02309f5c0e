// Progress heartbeats for the launcher's watchdog (launch --watchdog-timeout): each rank rewrites
// a small file (KILN_HEARTBEAT_FILE, set by the launcher) with its step after every step; the
// launcher watches the files' contents and acts when none has changed for the timeout. Files, not
// the rendezvous store: the store is served by rank 0, which may be the rank that hangs, and the
// launcher stays single-threaded so that it can fork.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::dist {

/// A rank's side: beat(step) after every step. A no-op when KILN_HEARTBEAT_FILE is not set.
class Heartbeat {
 public:
  Heartbeat();
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  void beat(int64_t step);

 private:
  int fd_ = -1;
};

/// The launcher's side: the step last written to `path` (-1: none yet or unreadable).
int64_t read_heartbeat(const std::string& path);

/// Makes SIGUSR1 print the receiving thread's stack to stderr (the watchdog sends it to every
/// rank before stopping a stalled job; a collective flight recorder can hook the same signal).
/// Idempotent.
void install_stall_dump_handler();

}  // namespace kiln::dist
