// The main job's pipeline flags (see pipeline_trainer.h).
#include "train/pipeline_trainer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/ops.h"
#include "train/pipeline_checkpoint.h"

namespace kiln::train {

void check_pipeline_launch(const TrainConfig& c) {
  const int P = c.pipeline_stages;
  const char* world_env = std::getenv("WORLD_SIZE");
  KILN_CHECK(world_env != nullptr,
             "--pipeline-stages: WORLD_SIZE is not set; start one rank per stage with `tools/bazel run "
             "//distributed/launch -- --nproc-per-node {} -- <mnist binary> --pipeline-stages {} ...`",
             P, P);
  const int world_size = std::atoi(world_env);
  KILN_CHECK(c.ddp ? world_size % P == 0 : world_size == P, "--pipeline-stages {}: {} ranks started; {}", P, world_size,
             c.ddp ? fmt::format("with --ddp the world must be a multiple of {} (stages x replicas)", P)
                   : fmt::format("start exactly {} (one per stage), or add --ddp for stages x replicas", P));
  for (int s = 0; s < P && !c.resume.empty(); ++s)
    KILN_CHECK(std::filesystem::exists(dist::stage_checkpoint_path(c.resume, s, P)), "--resume {}: {} does not exist",
               c.resume, dist::stage_checkpoint_path(c.resume, s, P));
}

Pipeline pipeline_strategy(const TrainConfig& c, std::shared_ptr<dist::ProcessGroup> world,
                           const data::Dataset& train) {
  Pipeline p{.stages = c.pipeline_stages,
             .micro_batches = c.micro_batches,
             .schedule = value_of(kPipelineScheduleNames, c.pipeline_schedule, "--pipeline-schedule"),
             .virtual_stages = c.virtual_stages,
             .balance = value_of(kPipelineBalanceNames, c.pipeline_balance, "--pipeline-balance"),
             .data_parallel = c.ddp,
             .timeout_s = c.timeout_s,
             .group = world};
  if (p.balance == PipelineBalance::time && world->rank() == 0) {  // timed on one micro-batch
    const int64_t rows = std::min<int64_t>(c.batch_size / c.micro_batches, train.size());
    std::vector<int64_t> first(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) first[static_cast<size_t>(i)] = i;
    p.sample = train.get_batch(first).data;
  } else if (p.balance == PipelineBalance::time) {
    p.sample = zeros({1});  // read on rank 0 only
  }
  return p;
}

bool pipeline_drops_last_batch(const TrainConfig& c, int64_t rows) { return rows % c.batch_size % c.micro_batches != 0; }

}  // namespace kiln::train
