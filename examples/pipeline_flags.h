// The pipeline schedule's command-line options, as the main job (mnist) and the GPT declare and
// check them: --pipeline-schedule gpipe|1f1b|interleaved and --virtual-stages V. Header-only: its
// two users parse CLI11 anyway, and a translation unit of its own cost a CLI11 parse (5 s of the
// main job's cold build).
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "core/util/cli.h"
#include "distributed/pipeline/pipeline_schedule.h"

namespace kiln::examples {

struct PipelineScheduleOptions {
  CLI::Option* schedule = nullptr;
  CLI::Option* virtual_stages = nullptr;
};

/// Declares the schedule under `names` ("--pipeline-schedule", or "--pipeline-schedule,--schedule"
/// where --schedule names nothing else) and --virtual-stages, bound to `schedule` and `virtual_stages`.
inline PipelineScheduleOptions add_pipeline_schedule_options(CLI::App& app, const std::string& names,
                                                             std::string& schedule, int& virtual_stages) {
  PipelineScheduleOptions o;
  o.schedule = app.add_option(names, schedule,
                              "pipeline: gpipe (all forwards, then all backwards), 1f1b (bounded memory) or "
                              "interleaved (1f1b over --virtual-stages chunks per rank: a smaller bubble)")
                   ->check(cli::one_of({"gpipe", "1f1b", "interleaved"}));
  o.virtual_stages = app.add_option("--virtual-stages", virtual_stages,
                                    "pipeline, --pipeline-schedule interleaved: model chunks per rank (at least 2)")
                         ->check(cli::range(1, 64));
  return o;
}

/// What is wrong with cutting `model`'s `layers` layers into `stages` stages of `virtual_stages`
/// chunks each under `schedule` with `micro_batches` micro-batches ("" when nothing is): more
/// stages or chunks than layers, or dist::check_schedule's refusals, each naming the flags.
inline std::string pipeline_split_problem(const std::string& schedule, int stages, int micro_batches,
                                          int virtual_stages, int64_t layers, const std::string& model) {
  if (stages > layers)
    return fmt::format("--pipeline-stages {}: the {} has only {} layers (each stage needs at least one)", stages,
                       model, layers);
  try {
    dist::check_schedule(dist::parse_schedule(schedule), stages, micro_batches, virtual_stages);
  } catch (const std::exception& e) {
    return fmt::format("--pipeline-schedule {} --virtual-stages {}: {}", schedule, virtual_stages, e.what());
  }
  if (static_cast<int64_t>(stages) * virtual_stages > layers)
    return fmt::format("--pipeline-stages {} x --virtual-stages {}: the {} has only {} layers (each virtual stage "
                       "needs at least one)",
                       stages, virtual_stages, model, layers);
  return {};
}

}  // namespace kiln::examples
