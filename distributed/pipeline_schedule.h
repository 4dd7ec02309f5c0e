// Pipeline schedules as plain lists of actions: which micro-batch a stage runs forward or backward
// next. GPipe runs every forward, then every backward; 1F1B warms up with p-1-s forwards, then
// alternates one forward and one backward, then cools down, so a stage never holds more than p
// micro-batches' activations. Every stage of one pipeline uses the same schedule.
#pragma once

#include <string>
#include <vector>

namespace kiln::dist {

/// How the micro-batches of one batch flow through the stages.
enum class Schedule { kGPipe, k1F1B };
const char* schedule_name(Schedule s);
/// "gpipe" or "1f1b" (case-insensitive); throws naming the value otherwise.
Schedule parse_schedule(const std::string& name);

/// One step of a stage's schedule: the forward or the backward of micro-batch `micro`.
struct PipelineAction {
  bool forward = true;
  int micro = 0;
  bool operator==(const PipelineAction&) const = default;
};

/// The actions of stage `stage` (of `stages`) for `micro_batches` micro-batches.
std::vector<PipelineAction> schedule_actions(Schedule schedule, int stage, int stages, int micro_batches);

/// The most micro-batches whose activations the action list keeps alive at once.
int peak_live(const std::vector<PipelineAction>& actions);

/// The step time of a schedule with free communication: stage s spends forward[s] on each
/// micro-batch's forward and backward[s] on its backward, runs its actions in order, and starts
/// one once its input is ready (a forward after the previous stage's forward of that micro-batch,
/// a backward after the next stage's backward of it). With equal stages the idle share of every
/// stage is (p-1)/(m+p-1); with unequal ones this is the bubble the schedule cannot avoid on
/// that model. Throws naming the sizes when the vectors do not have one entry per stage.
double simulated_step_time(Schedule schedule, int micro_batches, const std::vector<double>& forward,
                           const std::vector<double>& backward);

}  // namespace kiln::dist
