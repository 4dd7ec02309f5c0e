// The launcher behind `//distributed/launch` (in the spirit of torchrun): starts one process per
// local rank with the rendezvous environment set, prefixes their output with the rank, passes
// on SIGINT/SIGTERM/SIGHUP/SIGQUIT, and stops the whole node as soon as one rank fails, so that
// no rank is left waiting forever for a peer that is gone.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace kiln::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port on this host (single node only)
  /// The program and its arguments. A relative path with a '/' that does not exist relative
  /// to the current directory is looked up under $BUILD_WORKING_DIRECTORY (the directory
  /// `bazel run` was started from); a bare name is searched in PATH.
  std::vector<std::string> argv;
  /// After a failure or a forwarded signal, how long ranks get to exit before SIGKILL.
  double kill_grace_s = 5;
  /// Elastic restarts (torchrun's --max-restarts; single node): when a rank fails, all ranks are
  /// stopped and the whole group started again on a fresh port, with KILN_RESTART_COUNT (and
  /// TORCHELASTIC_RESTART_COUNT) set to the attempt; the program resumes from its own latest
  /// checkpoint (the main job: --auto-resume). After this many restarts the launcher gives up,
  /// naming every failure. Not after a stop signal the launcher received, nor a preemption.
  int max_restarts = 0;
  /// Watchdog (0: off): once every rank has finished a first step, when none has finished
  /// another for this many seconds (each rank's
  /// trainer beats a heartbeat file per step, distributed/launch/heartbeat.h), the launcher names each
  /// rank's last step, sends every rank SIGUSR1 (stack dump), stops the job and exits 124.
  double watchdog_timeout_s = 0;
};

/// A command line the launcher cannot run; its message says what is wrong.
struct UsageError : Error {
  using Error::Error;
};

/// The launcher's usage text.
std::string launch_usage();

/// Parses the launcher's arguments (without argv[0]): flags, then `--` (optional) and the
/// program with its arguments. Returns nullopt for -h/--help; throws UsageError.
std::optional<LaunchOptions> parse_launch_args(const std::vector<std::string>& args);

/// Runs nproc_per_node processes of options.argv and waits for all of them. Each gets RANK,
/// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GROUP_RANK (the node
/// rank) and, unless already set, KILN_NUM_THREADS = max(1, cores / nproc_per_node). Under
/// `bazel run` the processes start in $BUILD_WORKING_DIRECTORY, as if run from the user's
/// shell. Each line a rank writes appears as "[rank N] line" on the launcher's stdout or
/// stderr. If a rank exits non-zero or dies of a signal, the others get SIGTERM, then SIGKILL
/// after kill_grace_s. Returns the exit status for the launcher: 0 when every rank succeeded,
/// else the failed rank's status (128 + signal number for a signal), or 128 + the signal the
/// launcher itself received. Throws kiln::Error if the program cannot be found or run.
/// Must be called from the main thread of a process that handles no signals of its own:
/// it takes SIGCHLD and the stop signals for the duration of the call.
int launch(const LaunchOptions& options);

}  // namespace kiln::dist
