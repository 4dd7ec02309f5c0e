// The main job's training loop, apart from flag parsing so tests can run it directly.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"

namespace kiln::examples {

struct TrainConfig {
  std::string model = "mlp";
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.05;
  std::string optimizer = "sgd";
  /// "cosine": lr decays from `lr` to 0 over the whole run, per step; "constant".
  std::string schedule = "cosine";
  int64_t seed = 0;
  int threads = 0;  // 0: all cores
  Device device;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string save, resume;
  int64_t limit_train = 0;  // 0: the whole training set
  /// Stop after this many epochs of this invocation (0: run to `epochs`); the schedule still
  /// spans `epochs`, so a later --resume continues the same run (time-sliced or pre-emptible jobs).
  int64_t stop_after_epochs = 0;
  int64_t log_every = 100;
  /// DataLoader worker threads. 0 (the default) gathers each batch in the training thread: the
  /// data set is in memory and a batch is one index_select, while a worker thread would compete
  /// with the compute threads for the cores.
  int workers = 0;
  /// Mixed precision: "none", "f16" or "bf16" (examples/mixed_precision.h). f16 adds dynamic
  /// loss scaling.
  std::string amp = "none";
  /// "o1": the f32 model under autocast; "o2": the model in f16/bf16 with f32 master weights.
  std::string amp_mode = "o1";
  /// Data parallel over the ranks of the job (started by //distributed:launch): each rank
  /// trains on its DistributedSampler shard with `batch_size` per rank, gradients all-reduced
  /// by DistributedDataParallel (Gloo on CPU). Rank 0 logs, evaluates the reduced test metrics
  /// and writes checkpoints.
  bool ddp = false;
  /// With ddp: seconds a collective (or the rendezvous) may take before the job fails naming
  /// the ranks that did not arrive.
  double dist_timeout_s = 300;
  /// Pipeline parallel (examples/pipeline_trainer.h): the model split into this many stages, one
  /// per rank of the job (with `ddp`, world = stages x replicas); 1: no pipeline.
  int pipeline_stages = 1;
  /// Micro-batches per batch in the pipeline; `batch_size` must divide by it.
  int micro_batches = 1;
  std::string pipeline_schedule = "1f1b";  // or "gpipe"
  /// How the stages are cut: "params" (equal parameter counts) or "time" (equal forward time,
  /// measured on rank 0 on one micro-batch of training images before training).
  std::string pipeline_balance = "params";
};

struct TrainResult {
  std::vector<double> epoch_train_loss;  // mean training loss of each epoch run
  std::vector<double> step_losses;       // every step's loss, in order (for exact-resume checks)
  double test_loss = 0;
  double test_accuracy = 0;
  double samples_per_sec = 0;  // training samples per second of training time
  double wall_seconds = 0;
  int64_t epochs_done = 0;
  int64_t skipped_steps = 0;  // optimizer steps skipped by loss scaling (inf/NaN gradients)
  int rank = 0;        // this process's rank (0 without --ddp)
  int world_size = 1;  // ranks that trained together
  int dropped_batches = 0;  // pipeline: each epoch's last batch when it does not split into micro-batches
};

/// Trains as configured, writing progress lines to `log`. Throws kiln::Error on bad data or
/// checkpoints.
TrainResult train(const TrainConfig& config, std::ostream& log);

/// The closing JSON line: model, device, epochs, train_loss, test_accuracy, samples_per_sec, ...
std::string result_json(const TrainConfig& config, const TrainResult& result);

}  // namespace kiln::examples
