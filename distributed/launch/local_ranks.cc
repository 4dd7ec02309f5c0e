#include "distributed/launch/local_ranks.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/parallel.h"
#include "distributed/store/rendezvous.h"

namespace kiln::dist {
namespace {

[[noreturn]] void run_child(int rank, int n, int port, const std::function<void(int, int)>& body,
                            const LocalRanksOptions& o) {
  if (!o.capture_dir.empty()) {
    std::string path = o.capture_dir + "/stderr." + std::to_string(rank);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
  }
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  if (o.threads_per_rank > 0) {
    setenv("KILN_NUM_THREADS", std::to_string(o.threads_per_rank).c_str(), 1);  // for what this rank starts
    // The thread count was read from the environment when the parent started, before the fork:
    // without this each rank would keep the parent's (every core), and n ranks would run n x cores
    // compute threads on the cores.
    set_num_threads(o.threads_per_rank);
  }
  int code = 0;
  try {
    body(rank, n);
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    code = 1;
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(code);  // no static destructors: they belong to the parent
}

}  // namespace

std::vector<LocalRankResult> run_local_ranks(int n, const std::function<void(int, int)>& body,
                                             const LocalRanksOptions& o) {
  KILN_CHECK(n >= 1, "run_local_ranks: need at least one rank, got {}", n);
  const int port = free_tcp_port();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      fail("run_local_ranks: fork failed for rank {}", r);
    }
    if (pid == 0) run_child(r, n, port, body, o);
    pids.push_back(pid);
  }
  std::vector<LocalRankResult> results(static_cast<size_t>(n));
  std::vector<bool> done(static_cast<size_t>(n), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  for (int remaining = n; remaining > 0;) {
    const bool late = std::chrono::steady_clock::now() > deadline;
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      if (late) kill(pids[r], SIGKILL);
      int status = 0;
      if (waitpid(pids[r], &status, late ? 0 : WNOHANG) != pids[r]) continue;
      done[r] = true;
      --remaining;
      if (WIFEXITED(status)) results[r].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!o.capture_dir.empty())
    for (int r = 0; r < n; ++r) {
      std::ifstream f(o.capture_dir + "/stderr." + std::to_string(r));
      std::stringstream ss;
      ss << f.rdbuf();
      results[r].stderr_text = ss.str();
    }
  return results;
}

}  // namespace kiln::dist
