// Test helpers for distributed tests: start real processes (the store_worker binary) with
// posix_spawn, which is safe in a test process that already runs a store server thread, and
// wait for them with a deadline (pidfd + poll, no sleeping loops).
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/file_util.h"

extern char** environ;

namespace kiln::test {

/// The store_worker helper from this test's runfiles.
inline std::string worker_path() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) return std::string(srcdir) + "/" + ws + "/tests/distributed/store/store_worker";
  return "tests/distributed/store/store_worker";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A started process whose stdout and stderr go to files.
struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path;
  int status = -1;  // wait status once reaped

  std::string out() const { return read_text(out_path); }
  std::string err() const { return read_text(err_path); }
  bool exited_ok() const { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

/// Starts argv with the current environment plus `env` ("NAME=value", overriding).
inline Proc spawn(const std::string& name, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env = {}) {
  static int counter = 0;
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  Proc p;
  p.out_path = dir + "/" + name + "." + std::to_string(getpid()) + "." + std::to_string(counter) + ".out";
  p.err_path = dir + "/" + name + "." + std::to_string(getpid()) + "." + std::to_string(counter++) + ".err";

  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e, key = kv.substr(0, kv.find('=') + 1);
    bool overridden = false;
    for (const auto& o : env) overridden |= o.rfind(key, 0) == 0;
    if (!overridden) envs.push_back(kv);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> cargv, cenv;
  std::vector<std::string> args = argv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = posix_spawn(&p.pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, std::string("posix_spawn " + argv[0] + ": " + std::strerror(rc)));
  return p;
}

/// Waits up to `timeout` for p to exit: true once reaped (status in p.status), false if still
/// running when the time is up.
inline bool wait_for(Proc& p, std::chrono::milliseconds timeout) {
  if (p.status >= 0) return true;
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, p.pid, 0));
  REQUIRE_MESSAGE(pidfd >= 0, std::string(std::string("pidfd_open: ") + std::strerror(errno)));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pollfd pf{pidfd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    int r = poll(&pf, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (r < 0 && errno == EINTR) continue;
    close(pidfd);
    if (r == 0) return false;
    REQUIRE(waitpid(p.pid, &p.status, 0) == p.pid);
    return true;
  }
}

/// Waits until p's stdout contains `text` (checked every 10 ms; false after `timeout`).
inline bool wait_for_output(const Proc& p, const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (p.out().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// Waits (generously: machines under load) and fails the test, killing p, if it does not exit.
inline void finish(Proc& p, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  if (!wait_for(p, timeout)) {
    kill(p.pid, SIGKILL);
    waitpid(p.pid, &p.status, 0);
    FAIL("process did not exit in time; stdout: ", p.out(), " stderr: ", p.err());
  }
}

/// Kills every process still running (test cleanup on failure paths).
struct ProcGuard {
  std::vector<Proc*> procs;
  ~ProcGuard() {
    for (Proc* p : procs)
      if (p->status < 0 && p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &p->status, 0);
      }
  }
};

}  // namespace kiln::test
