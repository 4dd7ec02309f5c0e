// Command-line parsing for the launcher through CLI11 (core/util/cli.h): flags in both "--flag value"
// and "--flag=value" forms, dashes or underscores (torchrun spells them both ways), then `--`
// (optional) and the program with its arguments.
#include <algorithm>

#include "core/util/cli.h"
#include "distributed/launch/launch.h"

namespace kiln::dist {
namespace {

constexpr const char* kDescription =
    "usage: launch [flags] [--] PROGRAM [ARGS...]\n\n"
    "Starts --nproc-per-node processes of PROGRAM on this node, each with RANK, LOCAL_RANK,\n"
    "WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and KILN_NUM_THREADS set, and prints\n"
    "their output with a \"[rank N] \" prefix. If one process fails, the others are stopped.";

constexpr const char* kFooter =
    "\nUnder `bazel run`, a relative PROGRAM path is also looked up in the directory bazel was run\n"
    "from ($BUILD_WORKING_DIRECTORY), and the processes start in that directory.";

/// Every flag of the launcher, declared once, writing into `o`.
void declare(CLI::App& app, LaunchOptions& o) {
  app.description(kDescription);
  app.footer(kFooter);
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node, "processes on this node")
      ->check(cli::range(1, 65536));
  app.add_option("--nnodes", o.nnodes, "nodes in the job")->check(cli::range(1, 65536));
  app.add_option("--node-rank,--node_rank", o.node_rank, "this node's index, 0..nnodes-1")->check(cli::range(0, 65535));
  app.add_option("--master-addr,--master_addr", o.master_addr, "host running rank 0's store");
  app.add_option("--master-port,--master_port", o.master_port, "its port (0: a free port; required when nnodes > 1)")
      ->check(cli::range(0, 65535));
  app.add_option("--kill-grace,--kill_grace", o.kill_grace_s, "seconds ranks get to exit after SIGTERM before SIGKILL")
      ->check(cli::range(0.0, 1e6));
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "when a rank fails, restart the whole group up to this many times (single node; the program "
                 "resumes from its latest checkpoint)")
      ->check(cli::range(0, 1000000));
  app.add_option("--watchdog-timeout,--watchdog_timeout", o.watchdog_timeout_s,
                 "stop the job when no rank finished a step for this many seconds, after SIGUSR1 (stack "
                 "dump) to every rank (0: off; the program must beat KILN_HEARTBEAT_FILE, as the main job does)")
      ->check(cli::range(0.0, 1e7));
  // The first argument that is not one of these flags starts the program's command line.
  app.prefix_command();
}

}  // namespace

std::string launch_usage() {
  cli::App app("", "launch");
  LaunchOptions o;
  declare(app, o);
  return app.help();
}

std::optional<LaunchOptions> parse_launch_args(const std::vector<std::string>& args) {
  LaunchOptions o;
  cli::App app("", "launch");
  declare(app, o);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  o.argv = app.remaining();
  if (!o.argv.empty() && o.argv.front() == "--") {
    o.argv.erase(o.argv.begin());
  } else if (!o.argv.empty() && o.argv.front().size() > 1 && o.argv.front()[0] == '-') {
    throw UsageError(
        fmt::format("unknown flag \"{}\" (the program's own flags go after its name, or after --)", o.argv.front()));
  }
  if (o.argv.empty()) throw UsageError("no program given");
  if (o.node_rank >= o.nnodes)
    throw UsageError(fmt::format("--node-rank {} is out of range 0..{} for --nnodes {}", o.node_rank, o.nnodes - 1,
                                 o.nnodes));
  if (o.master_addr.empty()) throw UsageError("--master-addr is empty");
  if (o.max_restarts > 0 && o.nnodes > 1)
    throw UsageError("--max-restarts needs --nnodes 1 (restarting one node alone would strand the others)");
  if (o.nnodes > 1 && o.master_port == 0)
    throw UsageError("--master-port is required with --nnodes > 1: every node must use the same port");
  return o;
}

}  // namespace kiln::dist
