// Schedule generation; see pipeline_schedule.h.
#include "distributed/pipeline_schedule.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace kiln::dist {

const char* schedule_name(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

Schedule parse_schedule(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "gpipe") return Schedule::kGPipe;
  if (n == "1f1b") return Schedule::k1F1B;
  fail("pipeline schedule '{}' is unknown (gpipe or 1f1b)", name);
}

std::vector<PipelineAction> schedule_actions(Schedule schedule, int stage, int stages, int micro_batches) {
  KILN_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1,
             "schedule_actions: stage {} of {} with {} micro-batches is invalid", stage, stages, micro_batches);
  std::vector<PipelineAction> out;
  const int m = micro_batches;
  if (schedule == Schedule::kGPipe) {
    for (int j = 0; j < m; ++j) out.push_back({true, j});
    for (int j = 0; j < m; ++j) out.push_back({false, j});
    return out;
  }
  // 1F1B: the later the stage, the shorter its warm-up (the last stage has none).
  const int warmup = std::min(stages - 1 - stage, m);
  for (int j = 0; j < warmup; ++j) out.push_back({true, j});
  for (int i = 0; i + warmup < m; ++i) {
    out.push_back({true, warmup + i});
    out.push_back({false, i});
  }
  for (int j = m - warmup; j < m; ++j) out.push_back({false, j});
  return out;
}

int peak_live(const std::vector<PipelineAction>& actions) {
  int live = 0, peak = 0;
  for (const auto& a : actions) {
    live += a.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double simulated_step_time(Schedule schedule, int micro_batches, const std::vector<double>& forward,
                           const std::vector<double>& backward) {
  const int p = static_cast<int>(forward.size()), m = micro_batches;
  KILN_CHECK(p >= 1 && backward.size() == forward.size() && m >= 1,
             "simulated_step_time: {} forward and {} backward costs for {} micro-batches (one per stage each)", p,
             backward.size(), m);
  std::vector<std::vector<PipelineAction>> plan(p);
  for (int s = 0; s < p; ++s) plan[s] = schedule_actions(schedule, s, p, m);
  // When each forward / backward ends (negative: not yet run); each stage's next action and clock.
  std::vector<std::vector<double>> f_end(p, std::vector<double>(m, -1)), b_end = f_end;
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < plan[s].size()) {
        const PipelineAction& a = plan[s][next[s]];
        const double ready = a.forward ? (s == 0 ? 0 : f_end[s - 1][a.micro]) : (s == p - 1 ? f_end[s][a.micro] : b_end[s + 1][a.micro]);
        if (ready < 0) break;  // waits for a stage not simulated that far yet
        clock[s] = std::max(clock[s], ready) + (a.forward ? forward[s] : backward[s]);
        (a.forward ? f_end : b_end)[s][a.micro] = clock[s];
        ++next[s];
        progress = true;
      }
    }
  }
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace kiln::dist
