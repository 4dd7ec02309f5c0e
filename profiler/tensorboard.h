// TensorBoard event files: scalars as TensorBoard's own SummaryWriter writes them, without
// TensorFlow or protobuf. Each record is TFRecord-framed (length, masked CRC-32C of the length,
// the bytes, masked CRC-32C of the bytes) and holds an Event message (wall_time, step, and a
// Summary of one simple_value); the few protobuf fields are encoded by hand (tensorboard.cc).
// The file grows as the run goes, as TensorBoard expects to read it live: each add_scalar is
// written and flushed whole (a reader never sees a torn record except at the very end).
//
//   profiler::SummaryWriter tb("runs/exp1");       // runs/exp1/events.out.tfevents.<t>.<host>.<pid>
//   tb.add_scalar("train/loss", 0.42, step);
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace kiln::profiler {

/// CRC-32C (Castagnoli), and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class SummaryWriter {
 public:
  /// Creates `logdir` if needed and a new event file in it; throws naming the path on failure.
  explicit SummaryWriter(const std::string& logdir);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  void add_scalar(std::string_view tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace kiln::profiler
