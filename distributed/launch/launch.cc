// launch(): what each rank runs (the program found, its environment), then hands the ranks to
// the Supervisor.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/parallel.h"
#include "distributed/launch/launch.h"
#include "distributed/launch/launch_supervisor.h"
#include "distributed/store/rendezvous.h"

extern char** environ;

namespace kiln::dist {
namespace {

bool executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// The absolute path to execute, or an error naming the program and where it was looked for.
std::string resolve_program(const std::string& prog) {
  if (prog.empty()) fail("launch: the program name is empty");
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (prog.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    for (;;) {
      size_t colon = dirs.find(':', start);
      std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      candidates.push_back((dir.empty() ? std::string(".") : dir) + "/" + prog);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    for (const auto& c : candidates)
      if (executable_file(c)) return fs::absolute(c).lexically_normal().string();
    fail("launch: program \"{}\" not found in PATH ({})", prog, dirs);
  }
  candidates.push_back(prog);
  const char* bwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (prog[0] != '/' && bwd != nullptr && *bwd != '\0') candidates.push_back(std::string(bwd) + "/" + prog);
  for (const auto& c : candidates) {
    struct stat st {};
    if (::stat(c.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) fail("launch: program \"{}\" ({}) is not a regular file", prog, c);
    if (::access(c.c_str(), X_OK) != 0) fail("launch: program \"{}\" ({}) is not executable", prog, c);
    return fs::absolute(c).lexically_normal().string();
  }
  std::string where = fs::absolute(prog).lexically_normal().string();
  if (candidates.size() > 1) where += " or " + candidates[1];
  fail("launch: program \"{}\" not found (looked for {})", prog, where);
}

// The environment every rank shares, minus the variables set per rank.
std::vector<std::string> base_environment(int nproc_per_node) {
  static const char* kPerRank[] = {"RANK",        "LOCAL_RANK",  "WORLD_SIZE",         "LOCAL_WORLD_SIZE",
                                   "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",         "KILN_RESTART_COUNT",
                                   "TORCHELASTIC_RESTART_COUNT", "KILN_HEARTBEAT_FILE"};
  std::vector<std::string> env;
  bool threads_set = false;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    if (std::any_of(std::begin(kPerRank), std::end(kPerRank), [&](const char* n) { return name == n; })) continue;
    threads_set |= name == "KILN_NUM_THREADS";
    env.push_back(std::move(kv));
  }
  // Ranks on one node share its cores: without this each would start a thread per core.
  if (!threads_set) env.push_back(fmt::format("KILN_NUM_THREADS={}", std::max(1, usable_cores() / nproc_per_node)));
  return env;
}

}  // namespace

static std::vector<RankSpec> rank_specs(const LaunchOptions& o, const std::vector<std::string>& base, int port,
                                 int attempt);

int launch(const LaunchOptions& o) {
  KILN_CHECK(o.nproc_per_node >= 1 && o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes,
             "launch: bad layout: nproc_per_node={}, nnodes={}, node_rank={}", o.nproc_per_node, o.nnodes,
             o.node_rank);
  KILN_CHECK(!o.argv.empty(), "launch: no program given");
  KILN_CHECK(o.master_port != 0 || o.nnodes == 1, "launch: master_port is required with nnodes={} > 1", o.nnodes);
  KILN_CHECK(o.master_port >= 0 && o.master_port <= 65535, "launch: master_port {} is out of range", o.master_port);
  KILN_CHECK(o.kill_grace_s >= 0, "launch: kill_grace_s {} is negative", o.kill_grace_s);

  KILN_CHECK(o.max_restarts >= 0, "launch: max_restarts {} is negative", o.max_restarts);
  KILN_CHECK(o.max_restarts == 0 || o.nnodes == 1,
             "launch: --max-restarts needs --nnodes 1 (restarting one node alone would strand the others)");
  const std::string program = resolve_program(o.argv[0]);
  const std::vector<std::string> base = base_environment(o.nproc_per_node);
  std::vector<std::string> argv = o.argv;
  argv[0] = program;
  const char* bwd = std::getenv("BUILD_WORKING_DIRECTORY");
  std::vector<std::string> failures;
  for (int attempt = 0;; ++attempt) {
    // A fresh port per round: the old store's port may linger in TIME_WAIT.
    const int port = o.master_port != 0 ? o.master_port : free_tcp_port();
    std::vector<RankSpec> ranks = rank_specs(o, base, port, attempt);
    std::string beat_dir;
    if (o.watchdog_timeout_s > 0) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-heartbeat-XXXXXX").string();
      KILN_CHECK(::mkdtemp(tmpl.data()) != nullptr, "launch: cannot create a heartbeat directory {}: {}", tmpl,
                 std::strerror(errno));
      beat_dir = tmpl;
      for (RankSpec& r : ranks) {
        r.heartbeat_file = fmt::format("{}/rank{}", beat_dir, r.rank);
        r.env.push_back("KILN_HEARTBEAT_FILE=" + r.heartbeat_file);
      }
    }
    Supervisor s(argv, std::move(ranks), bwd != nullptr ? bwd : "", o.kill_grace_s,
                 WatchdogOptions{.timeout_s = o.watchdog_timeout_s});
    const int rc = s.run();
    if (!beat_dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(beat_dir, ignored);
    }
    if (s.failure().empty() || s.received_signal() != 0) return rc;
    failures.push_back(s.failure());
    if (attempt >= o.max_restarts) {
      if (o.max_restarts > 0) {
        std::string all;
        for (size_t i = 0; i < failures.size(); ++i) all += fmt::format("\n  attempt {}: {}", i + 1, failures[i]);
        std::fprintf(stderr, "launch: giving up after %d restart(s); the failures were:%s\n", o.max_restarts,
                     all.c_str());
      }
      return rc;
    }
    std::fprintf(stderr, "launch: restarting all %d ranks (restart %d of %d) after: %s\n", o.nproc_per_node,
                 attempt + 1, o.max_restarts, s.failure().c_str());
  }
}

static std::vector<RankSpec> rank_specs(const LaunchOptions& o, const std::vector<std::string>& base, int port,
                                 int attempt) {
  const int world = o.nproc_per_node * o.nnodes;
  std::vector<RankSpec> ranks;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    RankSpec r;
    r.rank = o.node_rank * o.nproc_per_node + local;
    r.env = base;
    r.env.push_back(fmt::format("RANK={}", r.rank));
    r.env.push_back(fmt::format("LOCAL_RANK={}", local));
    r.env.push_back(fmt::format("WORLD_SIZE={}", world));
    r.env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", o.nproc_per_node));
    r.env.push_back(fmt::format("GROUP_RANK={}", o.node_rank));
    r.env.push_back("MASTER_ADDR=" + o.master_addr);
    r.env.push_back(fmt::format("MASTER_PORT={}", port));
    r.env.push_back(fmt::format("KILN_RESTART_COUNT={}", attempt));
    r.env.push_back(fmt::format("TORCHELASTIC_RESTART_COUNT={}", attempt));
    ranks.push_back(std::move(r));
  }
  return ranks;
}

}  // namespace kiln::dist
