// The main job (//examples:mnist, //examples:resnet) as one call: the flags' settings in
// TrainConfig (typed: the flag parser converts the names once, with the tables below), turned into
// train::Trainer options, a strategy (one process, --ddp, --zero 1, --pipeline-stages with
// train/pipeline_trainer.h's flags), callbacks and loaders (train/fit.h), and trained there.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "train/fit.h"

namespace kiln::train {

/// The flag spellings of the typed settings: one table per enum, which the flag parser and the
/// closing JSON line both read.
template <class E>
using NameTable = std::vector<std::pair<std::string, E>>;
inline const NameTable<Optimizer> kOptimizerNames = {
    {"sgd", Optimizer::sgd}, {"adam", Optimizer::adam}, {"adamw", Optimizer::adamw}};
inline const NameTable<Schedule> kScheduleNames = {{"cosine", Schedule::cosine}, {"constant", Schedule::constant}};
inline const NameTable<Precision> kAmpNames = {
    {"none", Precision::f32}, {"f16", Precision::f16}, {"bf16", Precision::bf16}};
inline const NameTable<AmpMode> kAmpModeNames = {{"o1", AmpMode::o1}, {"o2", AmpMode::o2}};
inline const NameTable<ZeroCheckpoint> kZeroCheckpointNames = {
    {"consolidated", ZeroCheckpoint::consolidated}, {"sharded", ZeroCheckpoint::sharded}};
inline const NameTable<PipelineSchedule> kPipelineScheduleNames = {{"gpipe", PipelineSchedule::gpipe},
                                                                   {"1f1b", PipelineSchedule::one_f_one_b},
                                                                   {"interleaved", PipelineSchedule::interleaved}};
inline const NameTable<PipelineBalance> kPipelineBalanceNames = {{"params", PipelineBalance::params},
                                                                 {"time", PipelineBalance::time}};

/// The value named `name` in `table`; kiln::Error naming `what` (a flag) and the choices otherwise.
template <class E>
E value_of(const NameTable<E>& table, const std::string& name, const char* what) {
  std::string choices;
  for (const auto& [n, v] : table) {
    if (n == name) return v;
    choices += (choices.empty() ? "" : ", ") + n;
  }
  fail("{} {}: the choices are {}", what, name, choices);
}

/// The name of `value` in `table`.
template <class E>
const std::string& name_of(const NameTable<E>& table, E value) {
  for (const auto& [name, v] : table)
    if (v == value) return name;
  fail("name_of: value {} is not in the table", static_cast<int>(value));
}

struct TrainConfig {
  /// "mlp", "cnn" or "resnet18" (models/build_model.h; ResNet-18 gets the images padded to 32x32).
  std::string model = "mlp";
  /// ResNet-18's base width: the channels of layer1, doubled by each later stage (torchvision: 64).
  int64_t width = 16;
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.05;
  Optimizer optimizer = Optimizer::sgd;  // sgd: with momentum 0.9; adamw: weight decay 0.01
  /// cosine: lr decays from `lr` to 0 over the whole run, per step.
  Schedule schedule = Schedule::cosine;
  int64_t seed = 0;
  int threads = 0;  // 0: all cores
  Device device;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string save, resume;
  int64_t limit_train = 0;  // 0: the whole training set
  /// Stop after this many epochs of this invocation (0: run to `epochs`); the schedule still
  /// spans `epochs`, so a later --resume continues the same run (time-sliced or pre-emptible jobs).
  int64_t stop_after_epochs = 0;
  /// Also checkpoint (to `save`) every N optimizer steps, mid-epoch included (0: only per epoch).
  /// The checkpoint holds the position in the epoch, so --resume continues exactly there.
  int64_t save_every = 0;
  /// Resume from `save` when that checkpoint exists (a restarted job picks up its latest one; the
  /// launcher's --max-restarts relies on it); start afresh otherwise.
  bool auto_resume = false;
  /// Stop (saving first when `save` is set) after N steps of this invocation (0: never); as a
  /// SIGTERM would, but deterministically (tests, time-sliced jobs).
  int64_t stop_after_steps = 0;
  /// Collective (and rendezvous) timeout in seconds under --ddp and the pipeline.
  double timeout_s = 300;
  /// Dropout probability after each hidden ReLU of the MLP (0: none).
  double dropout = 0;
  int64_t log_every = 100;
  /// DataLoader worker threads. 0 (the default) gathers each batch in the training thread: the
  /// data set is in memory and a batch is one index_select, while a worker thread would compete
  /// with the compute threads for the cores.
  int workers = 0;
  /// Mixed precision (train/mixed_precision.h): f16 adds dynamic loss scaling.
  Precision amp = Precision::f32;
  /// o1: the f32 model under autocast; o2: the model in f16/bf16 with f32 master weights.
  AmpMode amp_mode = AmpMode::o1;
  /// Data parallel over the ranks of the job (started by //distributed/launch): each rank
  /// trains on its DistributedSampler shard with `batch_size` per rank, gradients all-reduced
  /// by DistributedDataParallel (Gloo on CPU). Rank 0 logs, evaluates the reduced test metrics
  /// and writes checkpoints.
  bool ddp = false;
  /// ZeRO stage under `ddp`: 0 (off) or 1, each rank keeping 1/N of the optimizer state
  /// (dist::ZeroRedundancyOptimizer: gradients reduce-scattered, parameters all-gathered).
  /// Checkpoints are saved consolidated, so an unsharded run resumes them and vice versa.
  int zero = 0;
  /// How --zero 1 saves: consolidated (one ordinary checkpoint) or sharded (each rank writes its
  /// part of the optimizer state beside the file; resumes only at the same world size).
  ZeroCheckpoint zero_checkpoint = ZeroCheckpoint::consolidated;
  /// Pipeline parallel (train/pipeline_trainer.h): the model split into this many stages, one
  /// per rank of the job (with `ddp`, world = stages x replicas); 1: no pipeline.
  int pipeline_stages = 1;
  /// Micro-batches per batch in the pipeline; `batch_size` must divide by it.
  int micro_batches = 1;
  std::string pipeline_schedule = "1f1b";  // or "gpipe", or "interleaved" (with virtual_stages >= 2)
  /// Model chunks per rank for the interleaved schedule (Megatron-LM's virtual stages).
  int virtual_stages = 1;
  /// How the stages are cut: "params" (equal parameter counts) or "time" (equal forward time,
  /// measured on rank 0 on one micro-batch of training images before training).
  std::string pipeline_balance = "params";
  /// Observability (train/run_monitor.h): profile into this directory ("" : off) on the
  /// steps wait/warmup/active of profile_schedule; TensorBoard scalars into logdir (rank 0);
  /// the peak GFLOP/s MFU is computed against (0: measured on CPU, unknown on CUDA).
  std::string profile_dir;
  int64_t profile_wait = 5, profile_warmup = 2, profile_active = 5;
  std::string logdir;
  double peak_gflops = 0;
  /// Capture one whole training step as a CUDA graph after a few eager steps and replay it for
  /// every full batch (train/graph_step.h: CUDA device, SGD, constant learning rate, no
  /// dropout, one process). The loss is read only when a line is logged.
  bool cuda_graph = false;
};

struct TrainResult {
  std::vector<double> epoch_train_loss;  // mean training loss of each epoch run
  std::vector<double> step_losses;       // every step's loss, in order (for exact-resume checks);
                                         // empty under cuda_graph, which reads losses only to log
  int64_t graph_replays = 0;             // steps run by replaying the captured step (cuda_graph)
  double test_loss = 0;
  double test_accuracy = 0;
  double samples_per_sec = 0;  // training samples per second of training time
  double wall_seconds = 0;
  int64_t epochs_done = 0;
  int64_t skipped_steps = 0;  // optimizer steps skipped by loss scaling (inf/NaN gradients)
  int rank = 0;        // this process's rank (0 without --ddp)
  int world_size = 1;  // ranks that trained together
  int dropped_batches = 0;  // pipeline: each epoch's last batch when it does not split into micro-batches
  /// The run stopped early on SIGTERM/SIGINT, after saving (main exits with dist::kExitPreempted).
  bool preempted = false;
  int64_t steps = 0;  // the global step reached
  int64_t checkpoints = 0;          // checkpoints written (per epoch, --save-every, on stopping)
  double checkpoint_seconds = 0;    // wall time spent writing them (rank 0's, waits included)
  int64_t peak_memory_bytes = 0;  // the training device's peak bytes allocated (tensors, not caches)
  double mfu = -1;                // model FLOPs utilisation of the last logging interval (-1: unknown)
};

/// The MonitorConfig of a TrainConfig (run_monitor.h).
struct MonitorConfig;
MonitorConfig monitor_config(const TrainConfig& c);

/// Why `c` cannot train with --cuda-graph ("" when it can, or when --cuda-graph is off), naming
/// the flags.
std::string cuda_graph_problem(const TrainConfig& c);

/// Trains as configured through train::Trainer, writing progress lines to `log`: one process,
/// --ddp, --zero 1, or --pipeline-stages (one checkpoint file per stage; --resume X --save Y
/// continues from X's stage files and writes Y's). Throws kiln::Error on bad data, checkpoints or
/// a launch that does not fit the flags.
TrainResult train(const TrainConfig& config, std::ostream& log);

/// The closing JSON line: model, device, epochs, train_loss, test_accuracy, samples_per_sec, ...
std::string result_json(const TrainConfig& config, const TrainResult& result);

}  // namespace kiln::train
