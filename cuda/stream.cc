#include "cuda/stream.h"

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "cuda/device.h"
#include "cuda/error.h"

namespace kiln::cuda {

void Stream::synchronize() const {
  DeviceGuard g(device_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(raw_));
}

bool Stream::query() const {
  DeviceGuard g(device_);
  cudaError_t e = cudaStreamQuery(raw_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(e);
  return true;
}

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;
  DeviceGuard g(device_);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(raw_, event.raw(), 0));
}

OwnedStream::OwnedStream(int device, int priority) : stream_(device) {
  DeviceGuard g(device);
  RawStream s = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  stream_ = Stream(device, s);
}

OwnedStream::~OwnedStream() {
  // Never throws: at process exit the CUDA runtime may already be unloading (cudaGetDevice then
  // fails), and the stream goes with the context anyway.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != stream_.device()) cudaSetDevice(stream_.device());
  cudaStreamDestroy(stream_.raw());  // queued work still completes
  if (previous != stream_.device()) cudaSetDevice(previous);
}

Event::~Event() {
  if (raw_ != nullptr) cudaEventDestroy(raw_);
}

Event::Event(Event&& o) noexcept
    : raw_(std::exchange(o.raw_, nullptr)), device_(o.device_), timing_(o.timing_) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (raw_ != nullptr) cudaEventDestroy(raw_);
    raw_ = std::exchange(o.raw_, nullptr);
    device_ = o.device_;
    timing_ = o.timing_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  DeviceGuard g(stream.device());
  if (raw_ == nullptr) {
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&raw_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = stream.device();
  }
  KILN_CHECK(device_ == stream.device(), "Event::record: event of cuda:{} recorded on a stream of cuda:{}", device_,
             stream.device());
  KILN_CUDA_CHECK(cudaEventRecord(raw_, stream.raw()));
}

void Event::synchronize() const {
  if (raw_ != nullptr) KILN_CUDA_CHECK(cudaEventSynchronize(raw_));
}

bool Event::query() const {
  if (raw_ == nullptr) return true;
  cudaError_t e = cudaEventQuery(raw_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(e);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  KILN_CHECK(timing_ && end.timing_, "Event::elapsed_ms: both events need enable_timing");
  KILN_CHECK(recorded() && end.recorded(), "Event::elapsed_ms: both events must be recorded first");
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, raw_, end.raw_));
  return ms;
}

namespace {
/// The calling thread's current stream per device (nullptr: the default stream).
std::vector<RawStream>& thread_streams() {
  thread_local std::vector<RawStream> streams;
  return streams;
}
}  // namespace

Stream current_stream(int device) {
  auto& v = thread_streams();
  return Stream(device, device < static_cast<int>(v.size()) ? v[device] : nullptr);
}

Stream current_stream() { return current_stream(current_device()); }

void set_current_stream(const Stream& stream) {
  auto& v = thread_streams();
  if (static_cast<int>(v.size()) <= stream.device()) v.resize(stream.device() + 1, nullptr);
  v[stream.device()] = stream.raw();
}

StreamGuard::StreamGuard(const Stream& stream)
    : previous_(current_stream(stream.device())), previous_device_(current_device()) {
  set_current_stream(stream);
  if (previous_device_ != stream.device()) set_device(stream.device());
}

StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
  if (previous_device_ != previous_.device()) cudaSetDevice(previous_device_);
}

}  // namespace kiln::cuda
