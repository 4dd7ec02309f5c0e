// Streams and events (RAII) and each thread's current stream per device. Kernels and copies
// run on the current stream; StreamGuard changes it for a scope. Includes no CUDA header:
// CUstream_st/CUevent_st are the types behind cudaStream_t/cudaEvent_t.
#pragma once

#include <cstdint>

#include "core/device.h"

struct CUstream_st;
struct CUevent_st;

namespace kiln::cuda {

using RawStream = CUstream_st*;  // cudaStream_t
using RawEvent = CUevent_st*;    // cudaEvent_t

class Event;

/// A non-owning handle to a CUDA stream on one device; Stream(d) is device d's default
/// (legacy) stream. OwnedStream creates and destroys one.
class Stream {
 public:
  explicit Stream(int device = 0, RawStream raw = nullptr) : device_(device), raw_(raw) {}
  RawStream raw() const { return raw_; }
  int device() const { return device_; }
  uintptr_t id() const { return reinterpret_cast<uintptr_t>(raw_); }
  /// Waits on the host until all work queued on the stream has finished.
  void synchronize() const;
  /// True when all queued work has finished.
  bool query() const;
  /// Makes work queued on this stream after the call wait for `event`.
  void wait(const Event& event) const;
  bool operator==(const Stream& o) const { return device_ == o.device_ && raw_ == o.raw_; }

 private:
  int device_;
  RawStream raw_;
};

/// An owned stream (cudaStreamNonBlocking), destroyed with this object.
class OwnedStream {
 public:
  explicit OwnedStream(int device = 0, int priority = 0);
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  const Stream& stream() const { return stream_; }
  operator const Stream&() const { return stream_; }  // NOLINT

 private:
  Stream stream_;
};

/// A CUDA event, created on first record (timing events when asked), destroyed with the object.
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;

  /// Captures the work queued on `stream` so far.
  void record(const Stream& stream);
  /// Waits on the host until the recorded work has finished (no-op if never recorded).
  void synchronize() const;
  /// True when the recorded work has finished (or nothing was recorded).
  bool query() const;
  /// Milliseconds between this event and `end` (both recorded, timing enabled).
  float elapsed_ms(const Event& end) const;
  RawEvent raw() const { return raw_; }
  bool recorded() const { return raw_ != nullptr; }

 private:
  RawEvent raw_ = nullptr;
  int device_ = -1;
  bool timing_;
};

/// The calling thread's current stream on `device` (the default stream until changed).
Stream current_stream(int device);
/// The current stream of the current device.
Stream current_stream();
/// Makes `stream` the calling thread's current stream on its device.
void set_current_stream(const Stream& stream);

/// Sets the current stream (and device) for a scope; restores both after.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int previous_device_;
};

}  // namespace kiln::cuda
