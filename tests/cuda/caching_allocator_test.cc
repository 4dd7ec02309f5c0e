// The caching allocator's block pool on a fake device (runs everywhere, GPU or not): rounding,
// splitting and merging, per-stream reuse, cross-stream reuse only after the events say so,
// statistics, empty_cache, the out-of-memory message, device errors while freeing (logged and
// the block abandoned, never thrown: free runs in tensors' destructors), and the private pools of
// CUDA graph captures.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"
#include "cuda/caching_allocator.h"

using kiln::cuda::CachingAllocatorCore;
using kiln::cuda::MemoryStats;

namespace {

constexpr size_t MiB = size_t{1} << 20;

/// Host memory standing in for a device with `capacity` bytes; events complete when told to.
class FakeDevice final : public kiln::cuda::MemoryBackend {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override {
    CHECK((live_.empty() || leaks_expected));
    for (auto& [p, n] : live_) std::free(p);
  }

  void* raw_alloc(size_t n) override {
    if (used_ + n > capacity_) return nullptr;
    void* p = std::malloc(n);
    live_[p] = n;
    used_ += n;
    ++raw_allocs;
    return p;
  }
  void raw_free(void* p) override {
    if (fail_frees) throw kiln::Error("cudaFree: an illegal memory access was encountered (fake)");
    auto it = live_.find(p);
    REQUIRE(it != live_.end());
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  void* record_event(kiln::cuda::StreamId s) override {
    if (fail_events) throw kiln::Error("cudaEventRecord: an illegal memory access was encountered (fake)");
    auto* e = new Event{s, false};
    ++events_live;
    return e;
  }
  bool event_done(void* e) override {
    if (fail_queries) throw kiln::Error("cudaEventQuery: an illegal memory access was encountered (fake)");
    ++queries;
    return static_cast<Event*>(e)->done || all_done;
  }
  void destroy_event(void* e) override {
    delete static_cast<Event*>(e);
    --events_live;
  }
  bool memory_info(size_t* free, size_t* total) override {
    *free = capacity_ - used_;
    *total = capacity_;
    return true;
  }

  size_t used() const { return used_; }
  int raw_allocs = 0;
  int events_live = 0;
  int queries = 0;
  bool all_done = false;
  bool fail_events = false, fail_queries = false, fail_frees = false;  // as after a sticky error
  bool leaks_expected = false;  // abandoned blocks are never returned

 private:
  struct Event {
    kiln::cuda::StreamId stream;
    bool done;
  };
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
};

constexpr kiln::cuda::StreamId kS0 = 0, kS1 = 0x1000;

}  // namespace

TEST_CASE("requests are rounded to 512 bytes and segment sizes follow the pools") {
  CHECK(CachingAllocatorCore::round_size(1) == 512);
  CHECK(CachingAllocatorCore::round_size(512) == 512);
  CHECK(CachingAllocatorCore::round_size(513) == 1024);
  CHECK(CachingAllocatorCore::segment_size(512) == 2 * MiB);
  CHECK(CachingAllocatorCore::segment_size(MiB) == 2 * MiB);
  CHECK(CachingAllocatorCore::segment_size(MiB + 512) == 20 * MiB);
  CHECK(CachingAllocatorCore::segment_size(10 * MiB) == 10 * MiB);
  CHECK(CachingAllocatorCore::segment_size(11 * MiB + 1) == 12 * MiB);
}

TEST_CASE("small blocks are split from one 2 MiB segment and merged back when freed") {
  FakeDevice dev(64 * MiB);
  {
    CachingAllocatorCore a(dev, "fake:0");
    char* p = static_cast<char*>(a.allocate(1000, kS0));
    char* q = static_cast<char*>(a.allocate(3000, kS0));
    CHECK(dev.raw_allocs == 1);
    CHECK(a.block_size(p) == 1024);
    CHECK(a.block_size(q) == 3072);
    CHECK(q == p + 1024);  // carved from the same segment, right after p
    MemoryStats s = a.stats();
    CHECK(s.allocated == 4096);
    CHECK(s.reserved == 2 * MiB);
    CHECK(s.cached == 2 * MiB - 4096);
    a.free(p);
    a.free(q);
    s = a.stats();
    CHECK(s.allocated == 0);
    CHECK(s.cached == 2 * MiB);
    // Merged back into one block: a request for the whole segment fits without a new one.
    void* whole = a.allocate(2 * MiB - 512, kS0);  // large pool: needs its own segment
    CHECK(whole != nullptr);
    void* small_whole = a.allocate(MiB, kS0);
    CHECK(small_whole == p);  // the merged small segment serves a 1 MiB request
    a.free(whole);
    a.free(small_whole);
  }
  CHECK(dev.used() == 0);  // the destructor returned every cached segment
}

TEST_CASE("a freed block is reused by the same stream, not by another") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* p = a.allocate(30 * MiB, kS0);
  a.free(p);
  CHECK(a.allocate(30 * MiB, kS0) == p);  // same stream: the cached block comes back
  CHECK(dev.raw_allocs == 1);
  a.free(p);
  void* q = a.allocate(30 * MiB, kS1);  // other stream: a new segment
  CHECK(q != p);
  CHECK(dev.raw_allocs == 2);
  a.free(q);
}

TEST_CASE("large blocks split only when more than 1 MiB would be left") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* p = a.allocate(12 * MiB, kS0);  // own 12 MiB segment
  a.free(p);
  void* q = a.allocate(11 * MiB + 512, kS0);  // 12 MiB block, rest < 1 MiB: not split
  CHECK(q == p);
  CHECK(a.block_size(q) == 12 * MiB);
  a.free(q);
  void* r = a.allocate(4 * MiB, kS0);  // fits in the 12 MiB block, split: 8 MiB stay cached
  CHECK(r == p);
  CHECK(a.block_size(r) == 4 * MiB);
  void* s = a.allocate(8 * MiB, kS0);
  CHECK(s == static_cast<char*>(p) + 4 * MiB);
  CHECK(dev.raw_allocs == 1);
  a.free(r);
  a.free(s);
}

TEST_CASE("a block used on another stream waits for that stream's event before reuse") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* p = a.allocate(30 * MiB, kS0);
  a.record_stream(p, kS1);
  a.free(p);
  CHECK(dev.events_live == 1);
  MemoryStats s = a.stats();
  CHECK(s.allocated == 0);
  CHECK(s.pending_free == 30 * MiB);
  CHECK(s.reserved == 30 * MiB);
  CHECK(s.cached == 0);  // waiting bytes are not reusable cache
  void* q = a.allocate(30 * MiB, kS0);  // event pending: not reused
  CHECK(q != p);
  a.free(q);
  dev.all_done = true;
  void* r = a.allocate(30 * MiB, kS0);  // the event completed: p comes back
  CHECK(dev.events_live == 0);
  CHECK((r == p || r == q));
  CHECK(a.stats().pending_free == 0);
  a.free(r);
}

TEST_CASE("peak statistics and reset") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* p = a.allocate(40 * MiB, kS0);
  void* q = a.allocate(20 * MiB, kS0);
  a.free(p);
  MemoryStats s = a.stats();
  CHECK(s.allocated == 20 * MiB);
  CHECK(s.peak_allocated == 60 * MiB);
  CHECK(s.reserved == 60 * MiB);
  CHECK(s.peak_reserved == 60 * MiB);
  CHECK(s.num_allocs == 2);
  CHECK(s.num_frees == 1);
  a.reset_peak_stats();
  CHECK(a.stats().peak_allocated == 20 * MiB);
  a.free(q);
  std::string sum = a.summary();
  CHECK(sum.find("memory summary of fake:0") != std::string::npos);
  CHECK(sum.find("reserved") != std::string::npos);
  CHECK(sum.find("60.00 MiB") != std::string::npos);
}

TEST_CASE("empty_cache returns free segments to the device and keeps used ones") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* p = a.allocate(40 * MiB, kS0);
  void* q = a.allocate(100, kS0);
  void* r = a.allocate(100, kS0);
  a.free(p);
  a.free(q);
  CHECK(dev.used() == 42 * MiB);
  a.empty_cache();
  CHECK(dev.used() == 2 * MiB);  // the small segment still holds r
  CHECK(a.stats().reserved == 2 * MiB);
  a.free(r);
  a.empty_cache();
  CHECK(dev.used() == 0);
  CHECK(a.stats().reserved == 0);
  CHECK(a.stats().num_raw_frees == 2);
}

TEST_CASE("out of memory: the cache is released and retried, then the message says what and why") {
  FakeDevice dev(100 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* p = a.allocate(60 * MiB, kS1);
  a.free(p);  // cached on stream 1: unusable for stream 0 as is
  void* q = a.allocate(70 * MiB, kS0);  // fits only after the cached 60 MiB is released
  CHECK(q != nullptr);
  CHECK(a.stats().reserved == 70 * MiB);
  std::string msg;
  try {
    a.allocate(50 * MiB, kS0);
  } catch (const kiln::Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("fake:0: out of memory: tried to allocate 50.00 MiB") != std::string::npos);
  CHECK(msg.find("70.00 MiB is allocated by tensors") != std::string::npos);
  CHECK(msg.find("70.00 MiB is reserved") != std::string::npos);
  CHECK(msg.find("100.00 MiB in total, 30.00 MiB free") != std::string::npos);
  CHECK(a.stats().num_ooms == 1);
  a.free(q);
}

TEST_CASE("freeing a pointer the allocator never gave out is an error") {
  FakeDevice dev(16 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  int x;
  CHECK_THROWS_WITH_AS(a.free(&x), doctest::Contains("did not allocate"), kiln::Error);
}

/// A 30 MiB block also used on kS1 (so freeing it records an event), on a device whose
/// abandoned blocks are never returned.
struct CrossStreamBlock {
  FakeDevice dev{256 * MiB};
  CachingAllocatorCore a{dev, "fake:0"};
  void* p = nullptr;
  CrossStreamBlock() {
    dev.leaks_expected = true;
    p = a.allocate(30 * MiB, kS0);
    a.record_stream(p, kS1);
  }
};

TEST_CASE("a device error while freeing abandons the block instead of throwing") {
  CrossStreamBlock c;
  c.dev.fail_events = true;
  CHECK_NOTHROW(c.a.free(c.p));
  MemoryStats s = c.a.stats();
  CHECK(s.allocated == 0);
  CHECK(s.abandoned == 30 * MiB);
  CHECK(s.pending_free == 0);
  CHECK(s.cached == 0);
  CHECK(c.a.summary().find("abandoned") != std::string::npos);
  c.dev.fail_events = false;
  void* q = c.a.allocate(30 * MiB, kS1);  // never handed out again, on any stream
  CHECK(q != c.p);
  c.a.free(q);
}

TEST_CASE("an event that cannot be queried abandons its block; the allocator goes on") {
  CrossStreamBlock c;
  c.a.free(c.p);
  CHECK(c.a.stats().pending_free == 30 * MiB);
  c.dev.fail_queries = true;
  void* q = nullptr;
  CHECK_NOTHROW(q = c.a.allocate(30 * MiB, kS0));  // processes the pending event
  CHECK(q != c.p);
  CHECK(c.dev.events_live == 0);
  CHECK(c.a.stats().pending_free == 0);
  CHECK(c.a.stats().abandoned == 30 * MiB);
  c.a.free(q);
}

TEST_CASE("a segment the device refuses to free is logged and forgotten, not thrown") {
  FakeDevice dev(256 * MiB);
  dev.leaks_expected = true;
  CachingAllocatorCore a(dev, "fake:0");
  a.free(a.allocate(30 * MiB, kS0));
  dev.fail_frees = true;
  CHECK_NOTHROW(a.empty_cache());
  CHECK(a.stats().reserved == 0);
}

// ---- private pools (CUDA graph capture)

namespace {
constexpr kiln::cuda::StreamId kCapture = 0x2000;
constexpr kiln::cuda::PoolId kGraph = 1;
}  // namespace

TEST_CASE("a capture never reuses blocks freed outside its pool, and nothing else reuses the pool's") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* before = a.allocate(1000, kCapture);  // eager work on the capture stream, freed before it
  a.free(before);
  a.begin_private_pool(kGraph, kCapture);
  CHECK(a.capturing_pool() == kGraph);
  void* inside = a.allocate(1000, kCapture);
  CHECK(inside != before);  // a segment of its own
  CHECK(dev.raw_allocs == 2);
  void* other = a.allocate(1000, kS0);  // another stream during the capture: the shared pool
  CHECK(dev.raw_allocs == 3);
  a.free(other);  // freed during the capture, which may have read it: held until the release
  a.end_private_pool(kGraph);
  CHECK(a.stats().graph_held == 1024);
  CHECK(a.capturing_pool() == 0);
  a.free(inside);  // the graph lives: its block stays out of eager use
  void* after = a.allocate(1000, kCapture);
  CHECK(after == before);
  void* after2 = a.allocate(1000, kCapture);
  CHECK(after2 != inside);
  MemoryStats s = a.stats();
  CHECK(s.private_pools == 1);
  CHECK(s.private_reserved == 2 * MiB);
  // The pool's free bytes and the held block are no cache for others.
  CHECK(s.cached == 2 * MiB * 3 - 2 * 1024 - 2 * MiB - 1024);
  a.free(after);
  a.free(after2);
  a.release_private_pool(kGraph);
}

TEST_CASE("blocks freed during a capture are reused by the same capture") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  a.begin_private_pool(kGraph, kCapture);
  void* p = a.allocate(30 * MiB, kCapture);
  a.free(p);
  void* q = a.allocate(30 * MiB, kCapture);
  CHECK(q == p);
  CHECK(dev.raw_allocs == 1);
  a.free(q);
  a.end_private_pool(kGraph);
  a.release_private_pool(kGraph);
}

TEST_CASE("releasing a private pool returns its free segments; live blocks join the shared pool") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  a.begin_private_pool(kGraph, kCapture);
  void* tmp = a.allocate(30 * MiB, kCapture);
  void* out = a.allocate(100, kCapture);  // a tensor the caller keeps after the graph is gone
  a.free(tmp);
  a.end_private_pool(kGraph);
  CHECK(dev.used() == 32 * MiB);
  CHECK(a.stats().private_reserved == 32 * MiB);
  a.release_private_pool(kGraph);
  MemoryStats s = a.stats();
  CHECK(dev.used() == 2 * MiB);  // the 30 MiB segment went back to the device
  CHECK(s.private_reserved == 0);
  CHECK(s.private_pools == 0);
  CHECK(s.reserved == 2 * MiB);
  CHECK(s.num_raw_frees == 1);
  void* eager = a.allocate(100, kCapture);  // the surviving segment now serves eager work
  CHECK(eager == static_cast<char*>(out) + 512);
  CHECK(dev.raw_allocs == 2);
  a.free(out);
  a.free(eager);
  a.empty_cache();
  CHECK(dev.used() == 0);
}

TEST_CASE("nothing of a private pool is freed while it lives, nor any memory during a capture") {
  FakeDevice dev(100 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* cached = a.allocate(60 * MiB, kS1);
  a.free(cached);
  a.begin_private_pool(kGraph, kCapture);
  void* p = a.allocate(20 * MiB, kCapture);
  CHECK_THROWS_WITH_AS(a.empty_cache(), doctest::Contains("empty_cache during a CUDA graph capture"), kiln::Error);
  // Out of memory during the capture: the cached 60 MiB would have to be freed; that is illegal now.
  CHECK_THROWS_WITH_AS(a.allocate(30 * MiB, kCapture), doctest::Contains("out of memory"), kiln::Error);
  CHECK(dev.used() == 80 * MiB);
  a.free(p);
  a.end_private_pool(kGraph);
  a.empty_cache();  // the shared 60 MiB goes; the graph's 20 MiB stays
  CHECK(dev.used() == 20 * MiB);
  a.release_private_pool(kGraph);
  CHECK(dev.used() == 0);
}

TEST_CASE("a block from outside the pool freed during a capture is held until the pool's release") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* input = a.allocate(30 * MiB, kS0);  // read by the captured work, then dropped
  a.begin_private_pool(kGraph, kCapture);
  a.free(input);
  a.end_private_pool(kGraph);
  CHECK(a.stats().graph_held == 30 * MiB);
  CHECK(a.stats().cached == 0);
  void* q = a.allocate(30 * MiB, kS0);  // the replays may still read `input`: not handed out
  CHECK(q != input);
  a.free(q);
  a.release_private_pool(kGraph);
  CHECK(a.stats().graph_held == 0);
  void* r = a.allocate(30 * MiB, kS0);
  void* r2 = a.allocate(30 * MiB, kS0);
  CHECK((r == input || r2 == input));
  a.free(r);
  a.free(r2);
}

TEST_CASE("no event is polled or recorded during a capture; waiting blocks resume after it") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  void* shared = a.allocate(30 * MiB, kS0);
  a.record_stream(shared, kS1);
  a.free(shared);  // waits on an event of kS1
  dev.all_done = true;
  a.begin_private_pool(kGraph, kCapture);
  const int queries = dev.queries;
  void* p = a.allocate(1000, kCapture);
  a.record_stream(p, kS1);
  a.free(p);  // a pool block used on another stream: its event is recorded after the capture
  CHECK(dev.queries == queries);
  CHECK(dev.events_live == 1);
  a.end_private_pool(kGraph);
  CHECK(dev.events_live == 2);
  void* again = a.allocate(30 * MiB, kS0);  // polls both events now
  CHECK(again == shared);
  CHECK(dev.events_live == 0);
  a.free(again);
  a.release_private_pool(kGraph);
  CHECK(a.stats().pending_free == 0);
}

TEST_CASE("private pool misuse is an error naming the pools") {
  FakeDevice dev(64 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  CHECK_THROWS_WITH_AS(a.begin_private_pool(0, kCapture), doctest::Contains("id 0 is the shared pool"), kiln::Error);
  a.begin_private_pool(kGraph, kCapture);
  CHECK_THROWS_WITH_AS(a.begin_private_pool(2, kS1), doctest::Contains("one CUDA graph capture per device"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(a.release_private_pool(kGraph), doctest::Contains("during its own capture"), kiln::Error);
  CHECK_THROWS_WITH_AS(a.end_private_pool(2), doctest::Contains("the pool capturing is 1"), kiln::Error);
  a.end_private_pool(kGraph);
  CHECK_THROWS_WITH_AS(a.begin_private_pool(kGraph, kCapture), doctest::Contains("already exists"), kiln::Error);
  CHECK_THROWS_WITH_AS(a.release_private_pool(7), doctest::Contains("no such pool"), kiln::Error);
  a.release_private_pool(kGraph);
}

TEST_CASE("a pool released during another capture is released when that capture ends") {
  FakeDevice dev(256 * MiB);
  CachingAllocatorCore a(dev, "fake:0");
  a.begin_private_pool(kGraph, kCapture);
  a.free(a.allocate(30 * MiB, kCapture));
  a.end_private_pool(kGraph);
  a.begin_private_pool(2, kCapture);
  a.release_private_pool(kGraph);
  CHECK(dev.used() == 30 * MiB);  // no cudaFree while capturing
  a.end_private_pool(2);
  CHECK(dev.used() == 0);
  CHECK(a.stats().private_pools == 1);
  a.release_private_pool(2);
}
