// Test bodies as several real processes on 127.0.0.1 (dist::run_local_ranks), with each
// rank's stderr captured, a throwing `expect` for checks inside a rank (a failed doctest
// CHECK in a child process would be lost with it), GaveUp markers for failure tests that keep a
// rank away from a collective until the others have given up, and run_concurrently for such
// scenarios, which spend their time waiting on timeouts.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "distributed/launch/local_ranks.h"
#include "tests/file_util.h"

namespace kiln::test {

using RankResult = dist::LocalRankResult;

/// Throws (failing the rank) unless cond holds.
template <class... Args>
void expect(bool cond, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) throw kiln::Error(fmt::format(f, std::forward<Args>(args)...));
}

inline std::vector<RankResult> run_ranks(int n, const std::function<void(int, int)>& body, double timeout_s,
                                        const std::string& name) {
  dist::LocalRanksOptions o;
  o.timeout_s = timeout_s;
  o.capture_dir = scratch_dir(name);
  return dist::run_local_ranks(n, body, o);
}

/// Every rank exited 0 (each failed rank's stderr is printed).
inline void require_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << " (exit " << results[r].exit_code << ", signal " << results[r].signal << ") stderr:\n"
                 << results[r].stderr_text);
    CHECK(results[r].exit_code == 0);
  }
}

#if defined(__SANITIZE_THREAD__)
#define KILN_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_TEST_TSAN 1
#endif
#endif

/// False for sizes past 64k elements in a ThreadSanitizer build (CI's `tsan` step), true otherwise.
/// Under TSan every tensor op runs 5-20x slower (collectives_test took 4 minutes), and what TSan
/// checks, a rank's collective thread against its caller, is the same at every size; the big sizes
/// (several shared-memory chunks, many ring segments) stay checked in every other build, ASan's
/// included.
inline bool size_checked_here(int64_t elements) {
#if defined(KILN_TEST_TSAN)
  return elements <= (int64_t{1} << 16);
#else
  return elements > 0;
#endif
}

/// A failure test keeps one rank away from a collective, alive (a dead rank is another failure),
/// until the ranks that wait for it have given up. Each of those holds a GaveUp, which writes
/// `<dir>/gave_up.<rank>` when it goes out of scope (on return, or while an exception unwinds);
/// the absent rank calls wait_for_gave_up instead of sleeping longer than the timeout.
class GaveUp {
 public:
  GaveUp(const std::string& dir, int rank) : path_(dir + "/gave_up." + std::to_string(rank)) {}
  ~GaveUp() { std::ofstream(path_) << "gave up\n"; }
  GaveUp(const GaveUp&) = delete;
  GaveUp& operator=(const GaveUp&) = delete;

 private:
  std::string path_;
};

/// True once every rank of `ranks` has dropped its GaveUp in `dir`; false after `timeout_s`.
inline bool wait_for_gave_up(const std::string& dir, const std::vector<int>& ranks, double timeout_s = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool all = true;
    for (int r : ranks) all = all && std::filesystem::exists(dir + "/gave_up." + std::to_string(r));
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// Runs every job at once, each in its own forked process (which may start ranks with run_ranks),
/// and returns what each returned: "" when it went as it should, else what went wrong (a job that
/// throws or dies is reported as such). For failure scenarios that wait on timeouts and on the
/// failure report's grace periods rather than compute: run one after another, their waits add up.
/// Jobs report through their return value, not doctest's CHECK (lost in a child); like run_ranks,
/// call it from a process that has started no threads of its own.
inline std::vector<std::string> run_concurrently(const std::vector<std::function<std::string()>>& jobs,
                                                 const std::string& name) {
  const std::string dir = scratch_dir(name);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const pid_t pid = fork();
    REQUIRE_MESSAGE(pid >= 0, "fork failed for job " << i);
    if (pid == 0) {
      std::string report;
      try {
        report = jobs[i]();
      } catch (const std::exception& e) {
        report = std::string("threw: ") + e.what();
      }
      std::ofstream(dir + "/job." + std::to_string(i)) << report;
      std::fflush(nullptr);
      _exit(0);  // no static destructors, no doctest summary: they belong to the parent
    }
    pids.push_back(pid);
  }
  std::vector<std::string> reports;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    std::ifstream f(dir + "/job." + std::to_string(i));
    std::stringstream text;
    text << f.rdbuf();
    reports.push_back(WIFEXITED(status) && WEXITSTATUS(status) == 0 && f.is_open()
                          ? text.str()
                          : "job " + std::to_string(i) + " died (wait status " + std::to_string(status) + ")");
  }
  return reports;
}

}  // namespace kiln::test
