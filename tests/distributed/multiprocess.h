// Test bodies as several real processes on 127.0.0.1 (dist::run_local_ranks), with each
// rank's stderr captured, and a throwing `expect` for checks inside a rank (a failed doctest
// CHECK in a child process would be lost with it).
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>
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

}  // namespace kiln::test
