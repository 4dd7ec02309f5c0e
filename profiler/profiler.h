// kiln::profiler: a scoped recorder of what a run spends its time on. While a Profiler is
// active it records every device kernel call (name, tensor shapes, dtype, device, start/end,
// thread), autograd backward nodes, user ranges (RecordFunction), collectives and point-to-point
// transfers (on their own tracks), data-loader waits and allocator events. When none is active
// nothing is installed: kernels, the autograd engine and the allocators run exactly as without
// it (the only cost is one relaxed atomic load per user range and per backward node).
//
//   profiler::Profiler prof({.record_shapes = true});
//   prof.start();  ...  prof.stop();
//   std::cout << prof.key_averages().table();
//   prof.export_chrome_trace("trace.rank0.json");
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::profiler {

/// Where an event is drawn in the trace: a CPU thread's row, or a track of its own.
enum class Track : uint8_t { kThread, kCollective, kSend, kRecv, kData };
const char* track_name(Track t);

struct Event {
  std::string name;
  /// "kernel", "backward", "user", "collective", "p2p", "data", "alloc", "free".
  std::string category;
  int64_t start_ns = 0, end_ns = 0;  // profiler clock (now_ns)
  uint32_t thread = 0;               // small per-process thread index
  Track track = Track::kThread;
  std::string shapes;                // "[64, 784], [256, 784]" when record_shapes
  std::string dtype, device;
  int64_t bytes = 0;                 // alloc/free size; collective payload
  int64_t seq = -1;                  // collective sequence number
  double device_ms = -1;             // measured kernel time on the device (CUDA events), else -1
  double flops = 0;                  // multiply-adds x 2 of linear, bmm, conv2d and attention kernels (forward)
  int64_t timer_id = -1;             // the DeviceTimer measurement behind device_ms, until stop()
};

/// Times kernels on an accelerator's own clock: begin() before a kernel is queued, end() after;
/// elapsed_ms() waits for the device and answers. A backend registers one per device type
/// (profiler/cuda_timer.cc for CUDA); the profiler resolves every measurement in stop().
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual int64_t begin(int device_index) = 0;
  virtual void end(int64_t id) = 0;
  virtual double elapsed_ms(int64_t id) = 0;
  /// Forgets every measurement (after stop() has read them).
  virtual void reset() = 0;
};
void register_device_timer(int device_type, DeviceTimer* timer);
DeviceTimer* device_timer(int device_type);

/// Nanoseconds on the profiler's clock (steady_clock shifted by the offset set by
/// set_clock_offset_ns, so that ranks share a time origin).
int64_t now_ns();
int64_t to_profiler_ns(std::chrono::steady_clock::time_point t);
/// Shifts every later timestamp so that this process's `local_origin_ns` (steady clock) maps to 0
/// (distributed/debug/traced_process_group.h aligns ranks on a barrier this way).
void set_clock_origin(std::chrono::steady_clock::time_point local_origin);

/// Whether a Profiler is recording now (cheap: a relaxed load).
bool is_recording();
/// Appends an event to this thread's buffer (does nothing unless recording).
void record(Event e);
/// This thread's small index (the `tid` of its row in the trace).
uint32_t thread_index();

/// RAII user range: `{ profiler::RecordFunction r("forward"); ... }`. Costs one atomic load
/// when no profiler is recording.
class RecordFunction {
 public:
  explicit RecordFunction(const char* name, const char* category = "user");
  explicit RecordFunction(std::string name, const char* category = "user");
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  bool on_;
  std::string name_;
  const char* category_;
  int64_t start_ = 0;
};

struct ProfilerOptions {
  bool record_shapes = false;
  /// Allocation and free events (and live-bytes per op for memory snapshots).
  bool profile_memory = true;
  /// This process's rank and the world size (names the trace's process row).
  int rank = 0;
};

class KeyAverages;

/// One recording session. At most one is active per process at a time.
class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();  // stops if still recording
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  /// Installs the kernel and allocator interposers and starts recording; throws if another
  /// Profiler is recording.
  void start();
  /// Stops recording, removes the interposers, and moves what was recorded into events().
  void stop();
  bool recording() const { return recording_; }
  const std::vector<Event>& events() const { return events_; }
  const ProfilerOptions& options() const { return options_; }
  /// Per-name aggregates of the kernel, backward, user, collective and data events.
  KeyAverages key_averages(bool group_by_shape = false) const;
  /// Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev), written to a temporary name
  /// and renamed.
  void export_chrome_trace(const std::string& path) const;

 private:
  ProfilerOptions options_;
  bool recording_ = false;
  std::vector<Event> events_;
};

}  // namespace kiln::profiler
