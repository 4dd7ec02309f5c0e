// Pipeline schedules as plain lists of actions: which micro-batch a stage runs forward or backward
// next, and (interleaved) through which of its model chunks. GPipe runs every forward, then every
// backward; 1F1B warms up with p-1-s forwards, then alternates one forward and one backward, then
// cools down, so a stage never holds more than p micro-batches' activations. Interleaved 1F1B
// (Megatron-LM's virtual stages) gives each rank v chunks of the model, rank r holding virtual
// stages r, r+p, ..., and runs the micro-batches through them p at a time: the bubble shrinks to
// (p-1)/(v*m+p-1) of the step, for v times the point-to-point messages. Every stage of one
// pipeline uses the same schedule.
#pragma once

#include <string>
#include <vector>

namespace kiln::dist {

/// How the micro-batches of one batch flow through the stages.
enum class Schedule { kGPipe, k1F1B, kInterleaved1F1B };
const char* schedule_name(Schedule s);
/// "gpipe", "1f1b" or "interleaved" (case-insensitive); throws naming the value otherwise.
Schedule parse_schedule(const std::string& name);

/// One step of a stage's schedule: the forward or the backward of micro-batch `micro` through
/// this rank's model chunk `chunk` (always 0 but for the interleaved schedule).
struct PipelineAction {
  bool forward = true;
  int micro = 0;
  int chunk = 0;
  bool operator==(const PipelineAction&) const = default;
};

/// Checks that `schedule` can run `micro_batches` micro-batches on `stages` ranks of `chunks`
/// model chunks each (1 for GPipe and 1F1B; at least 2, and micro_batches a multiple of
/// stages, for the interleaved schedule); throws naming the values otherwise.
void check_schedule(Schedule schedule, int stages, int micro_batches, int chunks);

/// The actions of stage `stage` (of `stages`) for `micro_batches` micro-batches, with `chunks`
/// model chunks per stage.
std::vector<PipelineAction> schedule_actions(Schedule schedule, int stage, int stages, int micro_batches,
                                             int chunks = 1);

/// The most micro-batch activations (one per chunk a micro-batch is inside) the action list
/// keeps alive at once.
int peak_live(const std::vector<PipelineAction>& actions);

/// The step time of a schedule with free communication: virtual stage k (chunk k / p of rank
/// k % p; with one chunk, stage k) spends forward[k] on each micro-batch's forward and
/// backward[k] on its backward; each rank runs its actions in order and starts one once its
/// input is ready (a forward after the previous virtual stage's forward of that micro-batch, a
/// backward after the next one's backward of it). With equal stages the idle share of every
/// stage is (p-1)/(v*m+p-1); with unequal ones this is the bubble the schedule cannot avoid on
/// that model. Throws naming the sizes when the vectors do not have one entry per virtual stage.
double simulated_step_time(Schedule schedule, int micro_batches, const std::vector<double>& forward,
                           const std::vector<double>& backward, int chunks = 1);

/// The same replay with every action's own cost: stage s's i-th action (in schedule_actions
/// order) takes action_seconds[s][i] (a measured step's PipelineStats::action_seconds gathered
/// from every stage). What a step with these compute times would take if every transfer were free
/// and instant: the measured step's excess over it is communication and bookkeeping. Throws
/// naming the stage and the counts when a stage's list does not match its schedule.
double replayed_step_time(Schedule schedule, int micro_batches, const std::vector<std::vector<double>>& action_seconds,
                          int chunks = 1);

}  // namespace kiln::dist
