// The clock and the median every benchmark reports with.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace kiln::bench {

/// Seconds on the monotonic clock.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Median seconds of `f` over about `budget_s` of runs (clamped to [min_reps, max_reps]), after
/// a warm-up call and one call that sizes the count.
inline double time_median(const std::function<void()>& f, double budget_s, int min_reps = 5, int max_reps = 200) {
  f();
  double t0 = now_s();
  f();
  const double once = std::max(now_s() - t0, 1e-7);
  const double lo = min_reps, hi = max_reps;
  const int reps = static_cast<int>(std::clamp(budget_s / once, lo, hi));
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    t0 = now_s();
    f();
    ts.push_back(now_s() - t0);
  }
  return median(ts);
}

}  // namespace kiln::bench
