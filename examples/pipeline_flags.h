// The pipeline schedule's command-line options, as the main job (mnist) and the GPT declare and
// check them: --pipeline-schedule gpipe|1f1b|interleaved and --virtual-stages V.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/cli.h"

namespace kiln::examples {

struct PipelineScheduleOptions {
  CLI::Option* schedule = nullptr;
  CLI::Option* virtual_stages = nullptr;
};

/// Declares the schedule under `names` ("--pipeline-schedule", or "--pipeline-schedule,--schedule"
/// where --schedule names nothing else) and --virtual-stages, bound to `schedule` and `virtual_stages`.
PipelineScheduleOptions add_pipeline_schedule_options(CLI::App& app, const std::string& names, std::string& schedule,
                                                      int& virtual_stages);

/// What is wrong with cutting `model`'s `layers` layers into `stages` stages of `virtual_stages`
/// chunks each under `schedule` with `micro_batches` micro-batches ("" when nothing is): more
/// stages or chunks than layers, or dist::check_schedule's refusals, each naming the flags.
std::string pipeline_split_problem(const std::string& schedule, int stages, int micro_batches, int virtual_stages,
                                   int64_t layers, const std::string& model);

}  // namespace kiln::examples
