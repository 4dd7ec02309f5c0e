// train::Trainer under Pipeline (see fit_pipeline.h): the stages' parts of the Trainer's one loop
// (fit_loop.cc): each loader batch run by dist::Pipeline::train_step, the loss read on the last
// stage, clipping over all stages, a checkpoint file per stage, evaluation through the stages.
#include "train/fit_pipeline.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "distributed/backend/init.h"
#include "distributed/backend/job_env.h"
#include "distributed/data_parallel/clip_grad_norm.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/pipeline/pipeline_balance.h"
#include "train/pipeline_checkpoint.h"

namespace kiln::train {
namespace {

dist::Schedule dist_schedule(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::gpipe: return dist::Schedule::kGPipe;
    case PipelineSchedule::one_f_one_b: return dist::Schedule::k1F1B;
    case PipelineSchedule::interleaved: return dist::Schedule::kInterleaved1F1B;
  }
  fail("Trainer: Pipeline: unknown schedule {}", static_cast<int>(s));
}

/// What can be checked before joining the job: the model, the counts, the options.
std::shared_ptr<nn::Sequential> check_pipeline(const nn::ModulePtr<>& model, const Pipeline& p, const FitOptions& o) {
  auto seq = std::dynamic_pointer_cast<nn::Sequential>(std::shared_ptr<nn::Module>(model));
  KILN_CHECK(seq != nullptr,
             "Trainer: Pipeline splits an nn::Sequential into stages; the model is a {} (train it with SingleProcess "
             "or DataParallel, or write it as a Sequential)",
             model->type_name());
  KILN_CHECK(p.stages >= 2, "Trainer: Pipeline: stages must be at least 2, got {}", p.stages);
  KILN_CHECK(p.micro_batches >= 1, "Trainer: Pipeline: micro_batches must be at least 1, got {}", p.micro_batches);
  KILN_CHECK(p.virtual_stages >= 1, "Trainer: Pipeline: virtual_stages must be at least 1, got {}", p.virtual_stages);
  try {
    dist::check_schedule(dist_schedule(p.schedule), p.stages, p.micro_batches, p.virtual_stages);
  } catch (const Error& e) {
    fail("Trainer: Pipeline: {}", e.what());
  }
  const auto layers = static_cast<int64_t>(seq->size());
  KILN_CHECK(int64_t{p.stages} * p.virtual_stages <= layers,
             "Trainer: Pipeline: {} stages x {} virtual stages, but the Sequential has only {} layers (each needs at "
             "least one)",
             p.stages, p.virtual_stages, layers);
  KILN_CHECK(p.balance != PipelineBalance::time || p.sample.defined(),
             "Trainer: Pipeline: balance time times the layers on Pipeline::sample (one micro-batch of inputs), which "
             "is not set");
  KILN_CHECK(!p.data_parallel || o.grad_accum == 1,
             "Trainer: Pipeline with data_parallel: grad_accum {} is not supported (the replicas all-reduce after "
             "every pipeline step); raise micro_batches or the batch size instead",
             o.grad_accum);
  KILN_CHECK(std::isfinite(p.timeout_s) && p.timeout_s > 0, "Trainer: Pipeline: timeout_s must be positive, got {}",
             p.timeout_s);
  return seq;
}

/// Before joining, so that a wrong launch fails at once on every rank instead of at rendezvous.
void check_world(int world, const Pipeline& p) {
  KILN_CHECK(p.data_parallel ? world % p.stages == 0 : world == p.stages, "Trainer: Pipeline: {} stages, {} ranks; {}",
             p.stages, world,
             p.data_parallel ? fmt::format("with data_parallel the world must be a multiple of {} (stages x replicas)",
                                           p.stages)
                             : fmt::format("start exactly {} (one per stage), or set data_parallel for stages x "
                                           "replicas",
                                           p.stages));
}

}  // namespace

PipelineRun::PipelineRun(const nn::ModulePtr<>& model, FitOptions& o, Trainer::Impl& m) : m_(m) {
  const Pipeline& p = std::get<Pipeline>(o.strategy);
  std::shared_ptr<nn::Sequential> seq = check_pipeline(model, p, o);
  o.device = rank_device(o.device);
  std::shared_ptr<dist::ProcessGroup> world = p.group;
  if (!world) {
    dist::apply_scheduler_env();  // srun / mpirun: their variables give RANK, WORLD_SIZE, ...
    const char* env = std::getenv("WORLD_SIZE");
    KILN_CHECK(env != nullptr,
               "Trainer: Pipeline: WORLD_SIZE is not set; start one rank per stage with //distributed/launch (or "
               "srun, or mpirun), or pass Pipeline::group");
    check_world(std::atoi(env), p);
    world = dist::init_process_group(
        {.backend = o.device.is_cuda() ? "nccl" : "gloo",
         .timeout = std::chrono::milliseconds(static_cast<int64_t>(p.timeout_s * 1000))});
  }
  check_world(world->size(), p);
  m.pg = world;
  m.rank = world->rank();
  m.world = world->size();
  replicas_ = world->size() / p.stages;
  std::shared_ptr<dist::ProcessGroup> stages = world;
  if (p.data_parallel) {
    KILN_CHECK(dist::is_initialized() && dist::get_world_size() == world->size(),
               "Trainer: Pipeline with data_parallel makes its groups from the default process group; Pipeline::group "
               "must be that group (or null, or its traced wrapper)");
    dist::PipelineGroups g = dist::pipeline_groups(p.stages);
    stages = g.pipeline;
    data_ = g.data;
    replica_ = g.replica;
  }

  // Every rank casts the whole model as one process would, then keeps its stage.
  m.mp.prepare_model(*seq);
  dist::PipelineOptions po;
  po.micro_batches = p.micro_batches;
  po.schedule = dist_schedule(p.schedule);
  po.virtual_stages = p.virtual_stages;
  po.device = o.device;
  if (replicas_ > 1) po.data_parallel_group = data_;
  if (p.balance == PipelineBalance::time) {
    // Timed where the stages will run; over the world group, so every replica cuts alike.
    seq->to(o.device);
    po.boundaries = dist::time_balanced_boundaries(*seq, m.rank == 0 ? p.sample.to(o.device) : Tensor(),
                                                   p.stages * p.virtual_stages, *world);
  }
  pipe_ = std::make_unique<dist::Pipeline>(seq, stages, po);
  stage_ = nn::ModulePtr<>(std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>(), &pipe_->stage_module()));
  // Agreed over the world, so that every rank fails alike (a rank left alone would wait for the
  // stage that gave up).
  const Device comm = world->backend() == "nccl" ? o.device : kCPU;
  std::vector<double> empty(static_cast<size_t>(world->size()), 0.0);
  empty[static_cast<size_t>(m.rank)] = pipe_->parameters().empty() ? 1 : 0;
  Tensor flags = tensor(empty).to(comm);  // f64
  world->allreduce(flags)->wait();
  empty = flags.to(kCPU).to_vector<double>();
  for (size_t r = 0; r < empty.size(); ++r)
    KILN_CHECK(empty[r] == 0,
               "Trainer: Pipeline: stage {}'s layers hold no parameters (split at [{}]), so it has nothing to train; "
               "use fewer stages{}",
               static_cast<int>(r) % p.stages, fmt::join(pipe_->boundaries(), ", "),
               p.virtual_stages > 1 ? " or virtual stages" : "");
  dist::share_found_inf(m.mp.scaler(), world);  // a skip on any stage or replica is a skip on all
  m.out(o) << fmt::format("pipeline: {} stages ({}), {} micro-batches, {}{}, layers split at [{}] (by {}){}\n",
                          p.stages, world->backend(), p.micro_batches, dist::schedule_name(po.schedule),
                          p.virtual_stages > 1 ? fmt::format(" x {} virtual stages", p.virtual_stages) : "",
                          fmt::join(pipe_->boundaries(), ", "),
                          p.balance == PipelineBalance::time ? "time" : "params",
                          replicas_ > 1 ? fmt::format(", {} data-parallel replicas", replicas_) : "");
}

bool PipelineRun::stage_files_exist(const std::string& path) const {
  std::vector<std::string> missing;
  for (int s = 0; s < pipe_->num_stages(); ++s)
    if (const std::string f = dist::stage_checkpoint_path(path, s, pipe_->num_stages()); !std::filesystem::exists(f))
      missing.push_back(f);
  KILN_CHECK(missing.empty() || static_cast<int>(missing.size()) == pipe_->num_stages(),
             "Trainer: Pipeline: resuming {}: {} of its {} stage files are missing ({}); resume from a complete set",
             path, missing.size(), pipe_->num_stages(), fmt::join(missing, ", "));
  return missing.empty();
}

void PipelineRun::write(optim::Optimizer& opt, const std::string& path) {
  // One file per stage ("run.stage1-of-2.safetensors"), written by the first replica only.
  if (replica_ == 0) dist::save_stage_checkpoint(*pipe_, path, &opt, m_.state);
}

TrainingState PipelineRun::read(const FitOptions& o, optim::Optimizer& opt, const std::string& path) {
  TrainingState state = dist::load_stage_checkpoint(*pipe_, path, &opt);  // every replica reads the first's
  // Each stage writes its own file: a job killed while they saved can leave them at different
  // steps, and resuming from such a set would train a model no run ever had.
  const Device comm = m_.comm_device(o);
  Tensor steps = tensor({static_cast<double>(state.step), -static_cast<double>(state.step)}, dtype(kFloat64)).to(comm);
  m_.pg->allreduce(steps, dist::ReduceOp::kMax)->wait();
  const auto range = steps.to(kCPU).to_vector<double>();
  KILN_CHECK(range[0] == -range[1],
             "Trainer: Pipeline: resuming {}: the stage files hold different steps (from {} to {}; this stage's is "
             "{}): the run was stopped while its stages saved; resume from a complete set",
             path, static_cast<int64_t>(-range[1]), static_cast<int64_t>(range[0]), state.step);
  return state;
}

EvalMetrics PipelineRun::evaluate(Trainer& t, data::DataLoader& loader) {
  NoGradGuard no_grad;
  nn::Module& stage = pipe_->stage_module();
  const bool was_training = stage.is_training();
  stage.eval();
  std::unique_ptr<data::DataLoader> slice = eval_slice(loader, replica_, replicas_);  // each replica its part
  EvalSums sums;  // on the last stage
  for (data::Example& b : slice ? *slice : loader) {
    amp::AutocastGuard autocast = m_.mp.autocast();
    Tensor out = pipe_->forward(pipe_->is_first() ? b.data : Tensor());
    if (pipe_->is_last()) sums.add(t.options(), out, b.target.to(out.device()));
  }
  stage.train(was_training);
  return EvalSums::metrics(pipe_->from_last_stage(sums.values()));
}

std::unique_ptr<data::DataLoader> PipelineRun::prepare_loader(const FitOptions& o, data::DataLoader& train) {
  const Pipeline& p = std::get<Pipeline>(o.strategy);
  // Every rank of a pipeline reads the same batches; each replica its share of the data set.
  std::unique_ptr<data::DataLoader> shard = replicas_ > 1 ? shard_loader(train, replica_, replicas_) : nullptr;
  const data::DataLoader& loader = shard ? *shard : train;
  const int64_t batch_size = loader.options().batch_size;
  KILN_CHECK(batch_size % p.micro_batches == 0,
             "Trainer: Pipeline: the training loader's batch size {} does not split into {} micro-batches (make it a "
             "multiple)",
             batch_size, p.micro_batches);
  const int64_t last = loader.sampler().size() % batch_size;
  KILN_CHECK(loader.options().drop_last || last % p.micro_batches == 0,
             "Trainer: Pipeline: each epoch's last batch of {} samples does not split into {} micro-batches; give the "
             "loader drop_last, or a data set size that splits",
             last, p.micro_batches);
  return shard;
}

double PipelineRun::train_step(const FitOptions& o, const data::Example& batch, int64_t group_n) {
  const double scale = m_.mp.scaler().scale() * (group_n > 1 ? 1.0 / static_cast<double>(group_n) : 1.0);
  const dist::PipelineLoss loss = [&](const Tensor& output, const Tensor& target) {
    Tensor l = fit_loss(o, output, target);
    return m_.mp.scaler().scale(group_n > 1 ? l / static_cast<double>(group_n) : l);
  };
  amp::AutocastGuard autocast = m_.mp.autocast();
  const double l = pipe_->train_step(pipe_->is_first() ? batch.data : Tensor(),
                                     pipe_->is_last() ? batch.target : Tensor(), loss);
  return pipe_->is_last() ? l / scale : std::numeric_limits<double>::quiet_NaN();
}

double PipelineRun::step_loss(double mine) {
  // The loss lives on the last stage: every rank gets it (averaged over the replicas), so every
  // rank's callbacks see the same step.
  return pipe_->from_last_stage({pipe_->is_last() ? mine : 0.0}, dist::ReduceOp::kAvg)[0];
}

double PipelineRun::clip_grad_norm(double max_norm) {
  // Over every stage (the replicas hold the same averaged gradients).
  return dist::clip_grad_norm_(pipe_->parameters(), max_norm, pipe_->process_group());
}

}  // namespace kiln::train
