// The Trainer's progress line: where the run stands, how fast it goes and when it will end, as
//   step 120/1407 epoch 1/3 loss 0.5123 6532 samples/s elapsed 0:18 eta 3:14
// The ETA assumes the remaining steps run at the average speed of this invocation's steps.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::train {

/// "m:ss", or "h:mm:ss" from an hour on (negative or non-finite: "?").
std::string format_duration(double seconds);

struct Progress {
  int64_t step = 0, total_steps = 0;  // global optimizer steps done / planned
  int64_t epoch = 0, epochs = 0;      // 1-based epoch in progress / planned
  double loss = 0;                    // mean loss of the interval
  double samples_per_sec = 0;         // over the interval
  double elapsed_s = 0;               // training time of this invocation so far
  int64_t run_steps = 0;              // steps of this invocation (the ETA's rate)
};

/// Seconds left: elapsed / run_steps per step for the steps up to total_steps.
double eta_seconds(const Progress& p);
std::string progress_line(const Progress& p);

}  // namespace kiln::train
