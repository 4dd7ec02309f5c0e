// The counting allocator wrapper (memory.h) and the Profiler's allocation events. It forwards
// to the allocator that was registered before it; frees of blocks it never saw (allocated
// before it was installed) are forwarded and not counted.
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_map>

#include <unistd.h>

#include "core/allocator.h"
#include "core/error.h"
#include "profiler/hooks.h"
#include "profiler/memory.h"
#include "profiler/profiler.h"

namespace kiln::profiler {
namespace {

struct Live {
  size_t bytes;
  std::string op;  // the innermost profiler scope when it was made
};

class CountingAllocator final : public Allocator {
 public:
  CountingAllocator(Allocator* inner, DeviceType type) : inner_(inner), type_(type) {}

  void* allocate(size_t nbytes, Device device) override {
    void* p = nullptr;
    try {
      p = inner_->allocate(nbytes, device);
    } catch (const Error& e) {
      std::string path = write_memory_snapshot(fmt::format("allocating {} bytes on {}: {}", nbytes, device, e.what()));
      throw Error(fmt::format("{} (live allocations by size and op written to {})", e.what(), path));
    }
    int64_t now = allocated_.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed) +
                  static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
    allocs_.fetch_add(1, std::memory_order_relaxed);
    if (tagging_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = Live{nbytes, detail::current_scope()};
    }
    if (is_recording()) {
      Event e;
      e.name = "alloc";
      e.category = "alloc";
      e.start_ns = e.end_ns = now_ns();
      e.bytes = static_cast<int64_t>(nbytes);
      e.device = device.str();
      record(std::move(e));
    }
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, Device device) override {
    // Frees of blocks allocated before tracking began are counted too: track_memory() belongs
    // at start-up (the trainers call it first thing).
    if (tagging_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(ptr);
    }
    allocated_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
    frees_.fetch_add(1, std::memory_order_relaxed);
    if (is_recording()) {
      Event e;
      e.name = "free";
      e.category = "free";
      e.start_ns = e.end_ns = now_ns();
      e.bytes = -static_cast<int64_t>(nbytes);
      e.device = device.str();
      record(std::move(e));
    }
    inner_->deallocate(ptr, nbytes, device);
  }

  void set_tagging(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!on) live_.clear();
    tagging_.store(on);
  }
  MemoryCounters counters() const {
    return {allocated_.load(), peak_.load(), allocs_.load(), frees_.load()};
  }
  void reset_peak() { peak_.store(allocated_.load()); }
  std::unordered_map<void*, Live> live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  bool tagging() const { return tagging_.load(); }

 private:
  Allocator* inner_;
  DeviceType type_;
  std::atomic<int64_t> allocated_{0}, peak_{0}, allocs_{0}, frees_{0};
  std::atomic<bool> tagging_{false};
  std::mutex mu_;
  std::unordered_map<void*, Live> live_;
};

std::mutex g_mu;
CountingAllocator* g_wrappers[kNumDeviceTypes] = {};
std::string g_snapshot_dir;

std::string human(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (std::abs(b) >= 1 << 30) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (std::abs(b) >= 1 << 20) return fmt::format("{:.2f} MiB", b / (1 << 20));
  if (std::abs(b) >= 1 << 10) return fmt::format("{:.2f} KiB", b / (1 << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace

void track_memory() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int d = 0; d < kNumDeviceTypes; ++d) {
    if (g_wrappers[d] != nullptr) continue;
    auto type = static_cast<DeviceType>(d);
    Allocator* inner = nullptr;
    try {
      inner = &allocator_for(type);
    } catch (const Error&) {
      continue;  // no backend for this device type in this build
    }
    g_wrappers[d] = new CountingAllocator(inner, type);  // lives as long as the process
    register_allocator(type, g_wrappers[d]);
  }
}

void tag_allocations(bool on) {
  track_memory();
  std::lock_guard<std::mutex> lock(g_mu);
  for (CountingAllocator* w : g_wrappers)
    if (w != nullptr) w->set_tagging(on);
}

MemoryCounters memory_counters(DeviceType type) {
  std::lock_guard<std::mutex> lock(g_mu);
  CountingAllocator* w = g_wrappers[static_cast<int>(type)];
  return w != nullptr ? w->counters() : MemoryCounters{};
}

void reset_peak(DeviceType type) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CountingAllocator* w = g_wrappers[static_cast<int>(type)]) w->reset_peak();
}

std::string memory_summary() {
  std::string out = fmt::format("{:=<72}\n{:<24}{:>16}{:>16}{:>16}\n{:-<72}\n", "", "Kiln memory summary",
                                "current", "peak", "allocations", "");
  std::lock_guard<std::mutex> lock(g_mu);
  for (int d = 0; d < kNumDeviceTypes; ++d) {
    CountingAllocator* w = g_wrappers[d];
    std::string dev = Device(static_cast<DeviceType>(d)).str();
    if (w == nullptr) {
      out += fmt::format("{:<24}{:>48}\n", dev, "(not tracked)");
      continue;
    }
    MemoryCounters c = w->counters();
    out += fmt::format("{:<24}{:>16}{:>16}{:>16}\n", dev + " allocated", human(c.allocated), human(c.peak), c.allocs);
    out += fmt::format("{:<24}{:>16}{:>16}{:>16}\n", dev + " live blocks", c.allocs - c.frees, "", "");
  }
  out += fmt::format("{:<24}{:>16}\n{:=<72}\n", "cpu cache (free blocks)", human(static_cast<int64_t>(cpu_cached_bytes())),
                     "");
  return out;
}

void set_oom_snapshot_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_snapshot_dir = std::move(dir);
}

std::string write_memory_snapshot(const std::string& reason) {
  std::string dir;
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;    // op -> (count, bytes)
  std::map<int64_t, int64_t, std::greater<>> by_size;          // bytes -> count
  bool tagged = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    dir = g_snapshot_dir;
    for (CountingAllocator* w : g_wrappers) {
      if (w == nullptr || !w->tagging()) continue;
      tagged = true;
      for (const auto& [p, l] : w->live()) {
        auto& [n, b] = by_op[!l.op.empty() ? l.op : "(no open scope)"];
        ++n;
        b += static_cast<int64_t>(l.bytes);
        ++by_size[static_cast<int64_t>(l.bytes)];
      }
    }
  }
  if (dir.empty()) dir = std::getenv("KILN_OOM_SNAPSHOT_DIR") ? std::getenv("KILN_OOM_SNAPSHOT_DIR")
                                                              : std::filesystem::temp_directory_path().string();
  std::filesystem::create_directories(dir);
  std::string path = fmt::format("{}/kiln_memory_snapshot.{}.txt", dir, ::getpid());
  std::string text = fmt::format("reason: {}\n\n{}\n", reason, memory_summary());
  if (!tagged) {
    text += "live allocations were not tagged (run under the profiler or call profiler::tag_allocations(true))\n";
  } else {
    text += "live allocations by op (op, count, bytes):\n";
    for (const auto& [op, nb] : by_op) text += fmt::format("  {:<28}{:>10}{:>16}\n", op, nb.first, human(nb.second));
    text += "live allocations by size (bytes, count):\n";
    for (const auto& [size, n] : by_size) text += fmt::format("  {:>16}{:>10}\n", human(size), n);
  }
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);
  return path;
}

namespace detail {
void install_allocator_hooks() { tag_allocations(true); }
void remove_allocator_hooks() { tag_allocations(false); }
}  // namespace detail

}  // namespace kiln::profiler
