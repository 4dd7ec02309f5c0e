// train::Trainer's set-up, strategies, evaluation and checkpoints (the loop is in fit_loop.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/parallel.h"
#include "distributed/backend/init.h"
#include "distributed/backend/job_env.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "nn/functional.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "train/callback.h"
#include "train/distributed_checkpoint.h"
#include "train/fit_impl.h"
#include "train/fit_model_parallel.h"
#include "train/fit_pipeline.h"
#include "train/fit_parts.h"
#include "train/zero_checkpoint.h"

namespace kiln::train {
namespace {

std::unique_ptr<optim::Optimizer> make_optimizer(const FitOptions& o, std::vector<optim::ParamGroup> groups) {
  switch (o.optimizer) {
    case Optimizer::sgd:
      return std::make_unique<optim::SGD>(
          std::move(groups), optim::SGDOptions(o.lr).set_momentum(o.momentum).set_weight_decay(o.weight_decay.value_or(0)));
    case Optimizer::adam:
      return std::make_unique<optim::Adam>(
          std::move(groups),
          optim::AdamOptions(o.lr).set_betas(o.beta1, o.beta2).set_weight_decay(o.weight_decay.value_or(0)));
    case Optimizer::adamw:
      return std::make_unique<optim::AdamW>(
          std::move(groups),
          optim::AdamOptions(o.lr).set_betas(o.beta1, o.beta2).set_weight_decay(o.weight_decay.value_or(0.01)));
  }
  fail("Trainer: unknown optimizer {}", static_cast<int>(o.optimizer));
}

void check_options(const FitOptions& o) {
  KILN_CHECK(o.epochs >= 0 && o.max_steps >= 0 && (o.epochs > 0 || o.max_steps > 0),
             "Trainer: epochs ({}) or max_steps ({}) must be positive, and neither negative", o.epochs, o.max_steps);
  KILN_CHECK(std::isfinite(o.lr) && o.lr >= 0, "Trainer: lr must be finite and >= 0, got {}", o.lr);
  KILN_CHECK(o.grad_accum >= 1, "Trainer: grad_accum must be >= 1, got {}", o.grad_accum);
  KILN_CHECK(std::isfinite(o.clip_grad_norm) && o.clip_grad_norm >= 0,
             "Trainer: clip_grad_norm must be finite and >= 0 (0: off), got {}", o.clip_grad_norm);
  KILN_CHECK(o.log_every >= 0, "Trainer: log_every must be >= 0 (0: no progress lines), got {}", o.log_every);
  KILN_CHECK(o.save_every >= 0, "Trainer: save_every must be >= 0 (0: only at epoch ends), got {}", o.save_every);
  KILN_CHECK(o.save_every == 0 || !o.checkpoint.empty(), "Trainer: save_every {} needs a checkpoint path",
             o.save_every);
  KILN_CHECK(o.threads >= 0, "Trainer: threads must be >= 0 (0: unchanged), got {}", o.threads);
  KILN_CHECK(!o.master_weights || o.precision != Precision::f32,
             "Trainer: master_weights (a 16-bit model with f32 master copies) needs precision f16 or bf16");
  check_schedule_options(o);
  if (const auto* dp = std::get_if<DataParallel>(&o.strategy))
    KILN_CHECK(dp->zero_stage == 0 || dp->zero_stage == 1,
               "Trainer: DataParallel zero_stage {}: only 0 and 1 (optimizer state sharding) exist here", dp->zero_stage);
  KILN_CHECK(o.stop_after_steps >= 0 && o.stop_after_epochs >= 0,
             "Trainer: stop_after_steps ({}) and stop_after_epochs ({}) must be >= 0 (0: never)", o.stop_after_steps,
             o.stop_after_epochs);
  if (const std::string problem = cuda_graph_problem(o); !problem.empty()) fail("Trainer: cuda_graph: {}", problem);
}

/// Indices [lo, hi) of a sampler's epoch-0 order: one part's slice for evaluation (eval_slice).
class SliceSampler : public data::Sampler {
 public:
  SliceSampler(std::vector<int64_t> all, int rank, int world) {
    const auto n = static_cast<int64_t>(all.size());
    const int64_t lo = n * rank / world, hi = n * (rank + 1) / world;
    indices_.assign(all.begin() + lo, all.begin() + hi);
  }
  std::vector<int64_t> indices(int64_t) const override { return indices_; }
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }

 private:
  std::vector<int64_t> indices_;
};

data::DataLoaderOptions loader_options(const data::DataLoaderOptions& o, std::shared_ptr<data::Sampler> sampler) {
  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.drop_last = o.drop_last;
  lo.num_workers = o.num_workers;
  lo.prefetch = o.prefetch;
  lo.collate = o.collate;
  lo.pin_memory = o.pin_memory;
  lo.sampler = std::move(sampler);
  return lo;
}

}  // namespace

std::string cuda_graph_problem(const FitOptions& o) {
  if (!o.cuda_graph) return {};
  if (!o.device.is_cuda()) return fmt::format("needs a CUDA device; this run is on {}", o.device);
  if (!std::holds_alternative<SingleProcess>(o.strategy))
    return "runs in one process (a replay does not capture the strategy's communication)";
  if (o.precision == Precision::f16)
    return "f16 loss scaling decides on the host whether to skip each step; use bf16 or f32";
  if (o.optimizer != Optimizer::sgd)
    return "the optimizer counts its steps on the host (bias correction), which a replay would freeze; use sgd";
  if (o.schedule != Schedule::constant) return "a replay keeps the captured learning rate; use Schedule::constant";
  if (o.grad_accum != 1 || o.clip_grad_norm > 0)
    return fmt::format("grad_accum ({}) must be 1 and clip_grad_norm ({}) 0 (the captured step is one whole step)",
                       o.grad_accum, o.clip_grad_norm);
  return {};
}

Device rank_device(Device d) {
  if (!d.is_cuda()) return d;
  const char* local = std::getenv("LOCAL_RANK");
  Device mine(DeviceType::CUDA, local ? std::atoi(local) : 0);
  KILN_CHECK(mine.index < device_count(DeviceType::CUDA),
             "Trainer: LOCAL_RANK {} has no GPU of its own ({} CUDA devices here)", mine.index,
             device_count(DeviceType::CUDA));
  return mine;
}

Tensor fit_loss(const FitOptions& o, const Tensor& output, const Tensor& target) {
  return o.loss ? o.loss(output, target) : nn::functional::cross_entropy(output, target);
}

double fit_loss_sum(const FitOptions& o, const Tensor& output, const Tensor& target) {
  if (!o.loss) return nn::functional::cross_entropy(output, target, nn::functional::Reduction::sum).item<double>();
  return o.loss(output, target).item<double>() * static_cast<double>(output.dim() > 0 ? output.size(0) : 1);
}

Trainer::Impl::Impl(const FitOptions& o)
    : mp(o.precision, o.master_weights ? AmpMode::o2 : AmpMode::o1, o.loss_scale) {}

Trainer::Trainer(nn::ModulePtr<> model, FitOptions options) : model_(std::move(model)), options_(std::move(options)) {
  KILN_CHECK(model_ != nullptr, "Trainer: the model is null");
  check_options(options_);
  if (options_.threads > 0) set_num_threads(options_.threads);
  impl_ = std::make_unique<Impl>(options_);
  Impl& m = *impl_;
  if (std::holds_alternative<Pipeline>(options_.strategy)) {  // train/fit_pipeline.cc
    m.pipeline = std::make_unique<PipelineRun>(model_, options_, m);
    model_ = m.pipeline->stage_module();
    opt_ = make_optimizer(options_, {optim::ParamGroup(model_->parameters())});
    m.mp.prepare_optimizer(*opt_);
    return;
  }
  const auto* dp = std::get_if<DataParallel>(&options_.strategy);
  if (dp != nullptr) {
    options_.device = rank_device(options_.device);
    m.pg = dp->group;
    if (!m.pg) {
      dist::apply_scheduler_env();  // srun / mpirun: their variables give RANK, WORLD_SIZE, ...
      KILN_CHECK(std::getenv("WORLD_SIZE") != nullptr,
                 "Trainer: DataParallel: WORLD_SIZE is not set; start the ranks with //distributed/launch "
                 "(or srun, or mpirun), or pass DataParallel::group");
      m.pg = dist::init_process_group(
          {.backend = options_.device.is_cuda() ? "nccl" : "gloo",
           .timeout = std::chrono::milliseconds(static_cast<int64_t>(dp->timeout_s * 1000))});
    }
    m.rank = m.pg->rank();
    m.world = m.pg->size();
  }
  if (const auto* parts = std::get_if<ModelParallel>(&options_.strategy))  // train/fit_model_parallel.cc
    model_ = place_model_parallel(model_, *parts, options_.device);
  else
    model_->to(options_.device);
  m.mp.prepare_model(*model_);
  if (m.pg) m.ddp = std::make_unique<dist::DistributedDataParallel>(model_, m.pg);
  if (dp != nullptr && dp->zero_stage == 1) {
    auto make = [this](std::vector<optim::ParamGroup> groups) { return make_optimizer(options_, std::move(groups)); };
    auto z = options_.decay
                 ? std::make_unique<dist::ZeroRedundancyOptimizer>(*m.ddp, fit_param_groups(options_, *model_), make)
                 : std::make_unique<dist::ZeroRedundancyOptimizer>(*m.ddp, make);
    m.mp.prepare_optimizer(z->inner());         // master weights of this rank's shards only
    dist::share_found_inf(m.mp.scaler(), m.pg);  // each rank checks only its shard's gradients
    m.zero = z.get();
    opt_ = std::move(z);
  } else {
    opt_ = make_optimizer(options_, fit_param_groups(options_, *model_));
    m.mp.prepare_optimizer(*opt_);
  }
}

Trainer::~Trainer() = default;

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  KILN_CHECK(callback != nullptr, "Trainer::add_callback: the callback is null");
  callbacks_.push_back(std::move(callback));
}

int Trainer::rank() const { return impl_->rank; }
int Trainer::world_size() const { return impl_->world; }
int64_t Trainer::step() const { return impl_->state.step; }
int64_t Trainer::epoch() const { return impl_->state.epoch; }
dist::ProcessGroup* Trainer::process_group() const { return impl_->pg.get(); }
dist::DistributedDataParallel* Trainer::ddp() const { return impl_->ddp.get(); }
double Trainer::last_loss() const { return impl_->graphed ? impl_->graphed->last_loss() : impl_->last_loss; }
amp::GradScaler& Trainer::loss_scaler() { return impl_->mp.scaler(); }

EvalMetrics Trainer::evaluate(data::DataLoader& loader) {
  Impl& m = *impl_;
  if (m.pipeline) return m.pipeline->evaluate(*this, loader);
  NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  std::unique_ptr<data::DataLoader> slice = m.pg ? eval_slice(loader, m.rank, m.world) : nullptr;
  EvalSums sums;
  for (data::Example& b : slice ? *slice : loader) {
    Tensor x = b.data.to(options_.device), y = b.target.to(options_.device);
    amp::AutocastGuard autocast = m.mp.autocast();
    sums.add(options_, model_->forward(x), y);
  }
  model_->train(was_training);
  if (!m.pg) return EvalSums::metrics(sums.values());
  Tensor t = tensor(sums.values()).to(m.comm_device(options_));  // f64
  m.pg->allreduce(t)->wait();
  return EvalSums::metrics(t.to(kCPU).to_vector<double>());
}

void EvalSums::add(const FitOptions& o, const Tensor& output, const Tensor& target) {
  const int64_t n = output.dim() > 0 ? output.size(0) : 1;
  loss += fit_loss_sum(o, output, target);
  if (output.dim() == 2 && target.dim() == 1 && !is_floating(target.dtype()) && target.size(0) == n)
    correct += static_cast<double>((output.argmax(1) == target).sum().item<int64_t>());
  else
    unscored += 1;
  samples += static_cast<double>(n);
}

EvalMetrics EvalSums::metrics(const std::vector<double>& v) {
  KILN_CHECK(v[2] > 0, "Trainer::evaluate: the loader yielded no samples");
  EvalMetrics r{.loss = v[0] / v[2], .samples = static_cast<int64_t>(v[2])};
  if (v[3] == 0) r.accuracy = v[1] / v[2];
  return r;
}

std::unique_ptr<data::DataLoader> eval_slice(data::DataLoader& loader, int part, int parts) {
  // A loader with a DistributedSampler already holds this part's share.
  if (parts <= 1 || dynamic_cast<const data::DistributedSampler*>(loader.options().sampler.get()) != nullptr)
    return nullptr;
  auto sampler = std::make_shared<SliceSampler>(loader.sampler().indices(0), part, parts);
  return std::make_unique<data::DataLoader>(loader.dataset(), loader_options(loader.options(), sampler));
}

void save_fit_checkpoint(Trainer& t, Trainer::Impl& m, const std::vector<std::shared_ptr<Callback>>& callbacks,
                         int64_t epoch, int64_t batch) {
  const auto start = std::chrono::steady_clock::now();
  const std::string& path = t.options().checkpoint;
  m.state.epoch = epoch;
  m.state.batch = batch;
  m.state.rng = default_generator().state();
  m.mp.save(m.state);
  for (auto& cb : callbacks) cb->save_state(path, m.state, m.rank);
  if (m.pipeline)
    m.pipeline->write(t.optimizer(), path);  // a file per stage
  else if (m.zero)
    dist::save_zero_checkpoint(path, t.model(), *m.zero, m.state,
                               std::get<DataParallel>(t.options().strategy).zero_checkpoint == ZeroCheckpoint::sharded
                                   ? dist::ZeroCheckpointKind::kSharded
                                   : dist::ZeroCheckpointKind::kConsolidated);
  else if (m.pg)
    dist::save_checkpoint(*m.pg, path, t.model(), &t.optimizer(), m.state);  // rank 0 writes, the others wait
  else
    save_checkpoint(path, t.model(), &t.optimizer(), m.state);
  ++m.checkpoints;
  m.checkpoint_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void load_fit_checkpoint(Trainer& t, Trainer::Impl& m, const std::vector<std::shared_ptr<Callback>>& callbacks,
                         const std::string& path) {
  if (m.pipeline)
    m.state = m.pipeline->read(t.options(), t.optimizer(), path);
  else if (m.zero)
    m.state = dist::load_zero_checkpoint(path, t.model(), *m.zero);
  else if (m.pg)
    m.state = dist::load_checkpoint(*m.pg, path, t.model(), &t.optimizer());
  else
    m.state = load_checkpoint(path, t.model(), &t.optimizer());
  m.mp.load(m.state);
  for (auto& cb : callbacks) cb->load_state(path, m.state);
  m.out(t.options()) << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", path, m.state.epoch,
                                    m.state.batch, m.state.step);
}

std::unique_ptr<data::DataLoader> shard_loader(data::DataLoader& loader, int rank, int world) {
  const data::DataLoaderOptions& o = loader.options();
  if (o.sampler) {
    const auto* ds = dynamic_cast<const data::DistributedSampler*>(o.sampler.get());
    KILN_CHECK(ds != nullptr && ds->rank() == rank && ds->world_size() == world,
               "Trainer: DataParallel: the training loader has a sampler of its own that is not this rank's "
               "data::DistributedSampler (rank {} of {}); give it none (the Trainer shards the data set) or that one",
               rank, world);
    return nullptr;
  }
  auto sampler = std::make_shared<data::DistributedSampler>(loader.dataset()->size(), rank, world, o.shuffle,
                                                            o.seed.value_or(0), o.drop_last);
  return std::make_unique<data::DataLoader>(loader.dataset(), loader_options(o, sampler));
}

}  // namespace kiln::train
