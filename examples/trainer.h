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
};

struct TrainResult {
  std::vector<double> epoch_train_loss;  // mean training loss of each epoch run
  std::vector<double> step_losses;       // every step's loss, in order (for exact-resume checks)
  double test_loss = 0;
  double test_accuracy = 0;
  double samples_per_sec = 0;  // training samples per second of training time
  double wall_seconds = 0;
  int64_t epochs_done = 0;
};

/// Trains as configured, writing progress lines to `log`. Throws kiln::Error on bad data or
/// checkpoints.
TrainResult train(const TrainConfig& config, std::ostream& log);

/// The closing JSON line: model, device, epochs, train_loss, test_accuracy, samples_per_sec, ...
std::string result_json(const TrainConfig& config, const TrainResult& result);

}  // namespace kiln::examples
