// Pipeline parallel: a Sequential split into consecutive stages, one per rank of a process group.
// Each step splits the batch into micro-batches that flow forward through the stages and whose
// activation gradients flow back (asynchronous send/recv, receives posted at the start of the
// step), under a GPipe, 1F1B or interleaved 1F1B schedule (each rank then holds several
// non-adjacent chunks of the model, Megatron-LM's virtual stages). Gradients accumulate over the micro-batches exactly as
// one backward of the mean loss over the whole batch would give them; the caller then steps its
// optimizer over this stage's parameters on every rank.
//
//   auto pg = dist::init_process_group();
//   dist::PipelineOptions o;
//   o.micro_batches = 8;                                   // o.boundaries = {0, 3, 5} to choose
//   dist::Pipeline pipe(model, pg, o);                     // keeps only this rank's layers
//   optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1));
//   auto ce = [](const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); };
//   opt.zero_grad();
//   double loss = pipe.train_step(x, y, ce);               // x read on stage 0, y on the last
//   opt.step();
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/pipeline/pipeline_schedule.h"
#include "distributed/backend/process_group.h"
#include "nn/sequential.h"

namespace kiln::dist {

struct PipelineOptions {
  /// Micro-batches per batch; the batch's first dimension must divide by it.
  int micro_batches = 1;
  Schedule schedule = Schedule::k1F1B;
  /// Model chunks per rank (Schedule::kInterleaved1F1B only, which needs at least 2): the model is
  /// split into p * virtual_stages virtual stages, and rank r holds virtual stages r, r + p, ...
  int virtual_stages = 1;
  /// Virtual stage k runs layers [boundaries[k], boundaries[k+1]): p * virtual_stages + 1
  /// increasing indices from 0 to the number of layers. Empty: balanced by parameter count
  /// (dist::time_balanced_boundaries in pipeline_balance.h balances by measured forward time).
  std::vector<int> boundaries;
  /// Where this rank's stage lives (inputs and received activations are moved there).
  Device device = kCPU;
  /// Hybrid pipeline x data parallel: the ranks holding this same stage in the other replicas
  /// (see pipeline_groups). The stage is wrapped in DistributedDataParallel over it: gradients
  /// are averaged across replicas during the step's last backward.
  std::shared_ptr<ProcessGroup> data_parallel_group;
  DDPOptions ddp;
};

/// The loss of one micro-batch's output against its targets, as a mean over its rows.
using PipelineLoss = std::function<Tensor(const Tensor& output, const Tensor& target)>;

/// Counters of one rank's stage.
struct PipelineStats {
  int live_activations = 0;   // micro-batches (per chunk, interleaved) whose activations are saved now
  int peak_activations = 0;   // the most at once during the last step
  int steps = 0;
  double step_seconds = 0;    // wall time of the last step
  double wait_seconds = 0;    // of which blocked on receives and sends (the sum of the four below)
  // The last step's time by kind: blocked on the step header, on activations, on gradients, on
  // this step's sends at its end; and computing forwards (with the loss) and backwards.
  double header_wait = 0, activation_wait = 0, gradient_wait = 0, send_wait = 0;
  double forward_seconds = 0, backward_seconds = 0;
  // The same two by model chunk (one entry but for the interleaved schedule).
  std::vector<double> chunk_forward_seconds, chunk_backward_seconds;
  // Each action's compute time, in this stage's schedule order (dist::schedule_actions): what
  // dist::replayed_step_time replays.
  std::vector<double> action_seconds;
};

class Pipeline {
 public:
  /// Splits `model` (every rank passes the same layer list) into pg.size() stages (times
  /// options.virtual_stages) and keeps this rank's layers, moved to options.device; the other
  /// layers are not referenced afterwards. `pg` joins the stages in order (group rank = stage).
  /// Throws naming the counts when there are more stages than layers, the boundaries are
  /// invalid, or the schedule cannot run the micro-batch and chunk counts. Warns on stderr
  /// (stage 0) when micro_batches < stages.
  Pipeline(std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> pg, PipelineOptions options = {});

  /// One batch forward and backward. `input` is read on stage 0 and `target` on the last stage
  /// (elsewhere they may be undefined). Accumulates into this stage's `.grad`: call zero_grad
  /// before and the optimizer after, on every rank. Returns the mean loss over the batch on the
  /// last stage, NaN elsewhere. The first step checks every stage on the first micro-batch's
  /// shapes (the batch split, each stage's output against the next stage's layers, the loss);
  /// any failure throws on every rank, naming the stage, its rank and the shapes. A step whose
  /// batch shape differs from the previous one's (the last, smaller batch of an epoch) checks
  /// again; other steps only pass a small header down the stages.
  double train_step(const Tensor& input, const Tensor& target, const PipelineLoss& loss);

  /// Inference through the stages (evaluation): the whole batch forward without recording and
  /// without micro-batches; each activation's shape travels ahead of it, so any batch size
  /// works. `input` is read on stage 0. Returns the last stage's output there, undefined
  /// elsewhere. Runs the stage as it is: call stage_module().eval() first for eval mode. A stage
  /// whose forward throws tells the later stages, which throw naming it. Every stage must call it.
  Tensor forward(const Tensor& input);

  /// The last stage's `values` (a loss, metric sums) on every stage: a broadcast from the last
  /// stage. Hybrid (a data_parallel_group of several replicas): the last stages first reduce them
  /// by `op` over the replicas, so every rank of the job gets the same numbers. Every stage must
  /// call it; only the last stage's values count.
  std::vector<double> from_last_stage(const std::vector<double>& values, ReduceOp op = ReduceOp::kSum);

  /// This rank's stage: its layers, named "0", "1", ... in stage order (interleaved: chunk 0's
  /// layers, then chunk 1's, ...).
  nn::Sequential& stage_module() { return *stage_; }
  std::vector<Tensor> parameters() const { return stage_->parameters(); }
  int stage() const { return pg_->rank(); }
  int num_stages() const { return pg_->size(); }
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == num_stages() - 1; }
  /// Model chunks on this rank (options.virtual_stages).
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  /// The layer range [first, last) of every virtual stage (with one chunk per rank, of every
  /// stage), as p * chunks + 1 boundaries.
  const std::vector<int>& boundaries() const { return boundaries_; }
  /// A stage-local parameter/buffer name ("1.weight") as in the unsplit model ("4.weight").
  std::string global_name(const std::string& local) const;
  /// The inverse of global_name; "" when the name belongs to another stage.
  std::string local_name(const std::string& global) const;
  const PipelineOptions& options() const { return options_; }
  ProcessGroup& process_group() { return *pg_; }
  const PipelineStats& stats() const { return stats_; }

 private:
  struct Micro;
  /// What crosses into and out of one chunk, as the first step negotiated it.
  struct ChunkIO {
    Shape in_shape, out_shape;  // one micro-batch's received input / sent output
    DType in_dtype = kFloat32, out_dtype = kFloat32;
  };
  void negotiate(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const PipelineLoss& loss,
                 std::string err, const Tensor& header);
  /// Chunk c's virtual stage, and its neighbours' ranks.
  int virtual_stage(int chunk) const { return chunk * num_stages() + stage(); }
  /// Which chunk of its rank virtual stage k is (where a message for it is tagged).
  int chunk_of(int k) const { return k / num_stages(); }
  int num_virtual() const { return num_stages() * num_chunks(); }
  int prev_rank() const { return (stage() + num_stages() - 1) % num_stages(); }
  int next_rank() const { return (stage() + 1) % num_stages(); }
  std::string describe(int chunk) const;
  /// Where control messages travel: NCCL moves device tensors only.
  Device comm_device() const { return pg_->backend() == "nccl" ? options_.device : kCPU; }

  std::shared_ptr<ProcessGroup> pg_;
  PipelineOptions options_;
  std::vector<int> boundaries_;
  std::shared_ptr<nn::Sequential> stage_;                 // every layer of this rank
  std::vector<std::shared_ptr<nn::Sequential>> chunks_;   // the same layers, by virtual stage
  std::vector<int> layers_;                               // stage_'s layer i is the model's layers_[i]
  std::vector<std::unique_ptr<DistributedDataParallel>> ddps_;  // hybrid only: one per chunk
  bool negotiated_ = false;
  std::vector<ChunkIO> io_;     // per chunk
  Shape first_input_shape_;     // stage 0: the micro-batch shape the stages last negotiated
  PipelineStats stats_;
};

/// The groups of a hybrid job of world = stages x replicas ranks, rank = replica * stages + stage:
/// `pipeline` joins the stages of this rank's replica, `data` the ranks holding this rank's stage.
/// Calls new_group for every group (a collective over the default group).
struct PipelineGroups {
  std::shared_ptr<ProcessGroup> pipeline, data;
  int stage = 0, replica = 0;
};
PipelineGroups pipeline_groups(int stages);

/// Balanced stage boundaries: contiguous ranges of at least one layer each that minimise the
/// largest stage's parameter count. `layer_params[i]` is layer i's parameter count. (By measured
/// forward time instead: time_balanced_boundaries in pipeline_balance.h.)
std::vector<int> balanced_boundaries(const std::vector<int64_t>& layer_params, int stages);

}  // namespace kiln::dist
