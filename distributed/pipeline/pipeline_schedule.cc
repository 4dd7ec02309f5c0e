// Schedule generation; see pipeline_schedule.h.
#include "distributed/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace kiln::dist {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kGPipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved1F1B: return "interleaved";
  }
  return "?";
}

Schedule parse_schedule(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "gpipe") return Schedule::kGPipe;
  if (n == "1f1b") return Schedule::k1F1B;
  if (n == "interleaved" || n == "interleaved1f1b") return Schedule::kInterleaved1F1B;
  fail("pipeline schedule '{}' is unknown (gpipe, 1f1b or interleaved)", name);
}

void check_schedule(Schedule schedule, int stages, int micro_batches, int chunks) {
  KILN_CHECK(stages >= 1 && micro_batches >= 1 && chunks >= 1,
             "pipeline schedule: {} stages, {} micro-batches and {} chunks per stage (each must be at least 1)",
             stages, micro_batches, chunks);
  if (schedule != Schedule::kInterleaved1F1B) {
    KILN_CHECK(chunks == 1,
               "pipeline schedule {}: {} virtual stages per rank need the interleaved schedule (--schedule "
               "interleaved)",
               schedule_name(schedule), chunks);
    return;
  }
  KILN_CHECK(chunks >= 2,
             "pipeline schedule interleaved: needs at least 2 virtual stages (model chunks) per rank, got {} (with "
             "one, use 1f1b)",
             chunks);
  KILN_CHECK(micro_batches % stages == 0,
             "pipeline schedule interleaved: {} micro-batches do not split into rounds of {} (one per stage); use a "
             "multiple of {}",
             micro_batches, stages, stages);
}

std::vector<PipelineAction> schedule_actions(Schedule schedule, int stage, int stages, int micro_batches,
                                             int chunks) {
  KILN_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1,
             "schedule_actions: stage {} of {} with {} micro-batches is invalid", stage, stages, micro_batches);
  check_schedule(schedule, stages, micro_batches, chunks);
  std::vector<PipelineAction> out;
  const int m = micro_batches, p = stages;
  if (schedule == Schedule::kGPipe) {
    for (int j = 0; j < m; ++j) out.push_back({true, j});
    for (int j = 0; j < m; ++j) out.push_back({false, j});
    return out;
  }
  if (schedule == Schedule::k1F1B) {
    // The later the stage, the shorter its warm-up (the last stage has none).
    const int warmup = std::min(p - 1 - stage, m);
    for (int j = 0; j < warmup; ++j) out.push_back({true, j});
    for (int i = 0; i + warmup < m; ++i) {
      out.push_back({true, warmup + i});
      out.push_back({false, i});
    }
    for (int j = m - warmup; j < m; ++j) out.push_back({false, j});
    return out;
  }
  // Interleaved: the k-th forward takes micro-batches in rounds of p through chunk 0, the same
  // round through chunk 1, ..., then the next round; backwards go through the chunks in reverse.
  // The warm-up fills the chunks' pipeline: 2 per later stage (the activation and, a round
  // later, its gradient must cross each), plus a round per extra chunk.
  const int v = chunks, total = m * v;
  auto nth = [&](int k, bool forward) {
    const int c = (k / p) % v;
    return PipelineAction{forward, (k / (p * v)) * p + k % p, forward ? c : v - 1 - c};
  };
  const int warmup = std::min(2 * (p - 1 - stage) + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) out.push_back(nth(k, true));
  for (int i = 0; i + warmup < total; ++i) {
    out.push_back(nth(warmup + i, true));
    out.push_back(nth(i, false));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(nth(k, false));
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

double replayed_step_time(Schedule schedule, int micro_batches, const std::vector<std::vector<double>>& action_seconds,
                          int chunks) {
  const int p = static_cast<int>(action_seconds.size()), m = micro_batches, v = chunks, n = p * v;
  KILN_CHECK(p >= 1 && v >= 1 && m >= 1, "replayed_step_time: {} stages, {} micro-batches, {} chunks per stage", p, m,
             v);
  std::vector<std::vector<PipelineAction>> plan(p);
  for (int s = 0; s < p; ++s) {
    plan[s] = schedule_actions(schedule, s, p, m, v);
    KILN_CHECK(action_seconds[s].size() == plan[s].size(),
               "replayed_step_time: stage {} has {} action costs, its {} schedule of {} micro-batches {} actions", s,
               action_seconds[s].size(), schedule_name(schedule), m, plan[s].size());
  }
  // When each virtual stage's forward / backward of each micro-batch ends (negative: not yet
  // run); each rank's next action and clock.
  std::vector<std::vector<double>> f_end(n, std::vector<double>(m, -1)), b_end = f_end;
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < plan[s].size()) {
        const PipelineAction& a = plan[s][next[s]];
        const int k = a.chunk * p + s;
        const double ready = a.forward ? (k == 0 ? 0 : f_end[k - 1][a.micro])
                                       : (k == n - 1 ? f_end[k][a.micro] : b_end[k + 1][a.micro]);
        if (ready < 0) break;  // waits for a stage not simulated that far yet
        clock[s] = std::max(clock[s], ready) + action_seconds[s][next[s]];
        (a.forward ? f_end : b_end)[k][a.micro] = clock[s];
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    KILN_ASSERT(next[s] == plan[s].size(), "replayed_step_time: the {} schedule deadlocks at stage {} of {}",
                schedule_name(schedule), s, p);
  return *std::max_element(clock.begin(), clock.end());
}

double simulated_step_time(Schedule schedule, int micro_batches, const std::vector<double>& forward,
                           const std::vector<double>& backward, int chunks) {
  const int n = static_cast<int>(forward.size()), m = micro_batches, v = chunks;
  KILN_CHECK(v >= 1 && n >= 1 && n % v == 0 && backward.size() == forward.size() && m >= 1,
             "simulated_step_time: {} forward and {} backward costs for {} micro-batches and {} chunks per stage (one "
             "per virtual stage each)",
             n, backward.size(), m, v);
  const int p = n / v;
  std::vector<std::vector<double>> costs(p);
  for (int s = 0; s < p; ++s)
    for (const PipelineAction& a : schedule_actions(schedule, s, p, m, v))
      costs[s].push_back(a.forward ? forward[a.chunk * p + s] : backward[a.chunk * p + s]);
  return replayed_step_time(schedule, m, costs, v);
}

}  // namespace kiln::dist
