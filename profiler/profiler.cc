// The recorder: per-thread event buffers (appends take no lock shared with other threads), the
// clock, and the Profiler session that installs and removes the interposers.
#include "profiler/profiler.h"

#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "profiler/hooks.h"

namespace kiln::profiler {
namespace {

std::atomic<bool> g_recording{false};
std::atomic<bool> g_active{false};  // a Profiler owns the hooks (start() .. stop())
std::atomic<int64_t> g_origin_ns{0};
std::atomic<uint32_t> g_next_thread{0};
DeviceTimer* g_timers[8] = {};

struct ThreadBuffer {
  std::mutex mu;  // taken by the owner on append and by stop() when collecting
  std::vector<Event> events;
};

std::mutex g_buffers_mu;
std::vector<std::shared_ptr<ThreadBuffer>>& buffers() {
  static auto* b = new std::vector<std::shared_ptr<ThreadBuffer>>();
  return *b;
}

ThreadBuffer& my_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> mine = [] {
    auto b = std::make_shared<ThreadBuffer>();
    std::lock_guard<std::mutex> lock(g_buffers_mu);
    buffers().push_back(b);
    return b;
  }();
  return *mine;
}

int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

const char* track_name(Track t) {
  switch (t) {
    case Track::kThread: return "thread";
    case Track::kCollective: return "collectives";
    case Track::kSend: return "p2p send";
    case Track::kRecv: return "p2p recv";
    case Track::kData: return "data loader";
  }
  return "?";
}

int64_t to_profiler_ns(std::chrono::steady_clock::time_point t) {
  return steady_ns(t) - g_origin_ns.load(std::memory_order_relaxed);
}
int64_t now_ns() { return to_profiler_ns(std::chrono::steady_clock::now()); }
void set_clock_origin(std::chrono::steady_clock::time_point local_origin) {
  g_origin_ns.store(steady_ns(local_origin), std::memory_order_relaxed);
}

void register_device_timer(int device_type, DeviceTimer* timer) {
  KILN_CHECK(device_type >= 0 && device_type < 8, "register_device_timer: device type {} is out of range",
             device_type);
  g_timers[device_type] = timer;
}
DeviceTimer* device_timer(int device_type) {
  return device_type >= 0 && device_type < 8 ? g_timers[device_type] : nullptr;
}

bool is_recording() { return g_recording.load(std::memory_order_relaxed); }

uint32_t thread_index() {
  thread_local uint32_t index = g_next_thread.fetch_add(1);
  return index;
}

void record(Event e) {
  if (!is_recording()) return;
  if (e.track == Track::kThread) e.thread = thread_index();
  ThreadBuffer& b = my_buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  b.events.push_back(std::move(e));
}

RecordFunction::RecordFunction(const char* name, const char* category)
    : on_(is_recording()), category_(category) {
  if (!on_) return;
  name_ = name;
  detail::push_scope(name_.c_str());
  start_ = now_ns();
}
RecordFunction::RecordFunction(std::string name, const char* category)
    : on_(is_recording()), category_(category) {
  if (!on_) return;
  name_ = std::move(name);
  detail::push_scope(name_.c_str());
  start_ = now_ns();
}
RecordFunction::~RecordFunction() {
  if (!on_) return;
  detail::pop_scope();
  Event e;
  e.name = std::move(name_);
  e.category = category_;
  e.start_ns = start_;
  e.end_ns = now_ns();
  record(std::move(e));
}

Profiler::Profiler(ProfilerOptions options) : options_(options) {}
Profiler::~Profiler() {
  if (recording_) stop();
}

void Profiler::start() {
  KILN_CHECK(!recording_, "profiler: start() called twice without stop()");
  KILN_CHECK(!g_active.exchange(true), "profiler: another Profiler is already recording in this process");
  events_.clear();
  {
    std::lock_guard<std::mutex> lock(g_buffers_mu);
    for (auto& b : buffers()) {
      std::lock_guard<std::mutex> bl(b->mu);
      b->events.clear();
    }
  }
  detail::install_kernel_hooks(options_.record_shapes);
  if (options_.profile_memory) detail::install_allocator_hooks();
  detail::install_autograd_hook();
  recording_ = true;
  g_recording.store(true);
}

void Profiler::stop() {
  KILN_CHECK(recording_, "profiler: stop() without start()");
  g_recording.store(false);
  detail::remove_autograd_hook();
  if (options_.profile_memory) detail::remove_allocator_hooks();
  detail::remove_kernel_hooks();
  recording_ = false;
  g_active.store(false);
  std::lock_guard<std::mutex> lock(g_buffers_mu);
  for (auto& b : buffers()) {
    std::lock_guard<std::mutex> bl(b->mu);
    for (Event& e : b->events) events_.push_back(std::move(e));
    b->events.clear();
  }
  // Kernel times on the device: every timer answers once its device has finished.
  for (Event& e : events_) {
    if (e.timer_id < 0) continue;
    if (DeviceTimer* t = device_timer(static_cast<int>(Device(e.device).type))) e.device_ms = t->elapsed_ms(e.timer_id);
    e.timer_id = -1;
  }
  for (DeviceTimer* t : g_timers)
    if (t != nullptr) t->reset();
}

}  // namespace kiln::profiler
