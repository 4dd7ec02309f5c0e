// The caching allocator's block pool, kept apart from CUDA so its logic runs (and is tested) on
// any machine: the real allocator (cuda/allocator.cc) plugs cudaMalloc/cudaFree and CUDA events
// into MemoryBackend, tests plug a fake. Promises: requests are rounded to 512 bytes; requests
// of up to 1 MiB share 2 MiB segments, larger ones come from 20 MiB segments (under 10 MiB) or
// their own segment rounded to 2 MiB; a free block is split when the rest is worth keeping and
// merged with free neighbours on free; a freed block is reused only by its own stream, and a
// block also used on other streams (record_stream) only once events on those streams say they
// are done; on out-of-memory the cache is released and the allocation retried before the error.
// A private pool (CUDA graph capture, cuda/graph.h) keeps what a capture allocates apart from all
// other work until the pool is released, and the pool never frees or polls events while capturing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::cuda {

/// A stream as the allocator sees it: the cudaStream_t's value (0 = the default stream).
using StreamId = uintptr_t;
/// A private pool's id (0 is the shared pool every allocation outside a capture uses).
using PoolId = uint64_t;

/// What the block pool needs from a device: raw memory and events.
class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  /// `nbytes` of fresh device memory, or nullptr when the device has none left.
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  /// An event recorded now on `stream` (owned by the caller until destroy_event).
  virtual void* record_event(StreamId stream) = 0;
  /// Whether the work before the event has finished.
  virtual bool event_done(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
  /// Free and total device memory, for the out-of-memory message; false when unknown.
  virtual bool memory_info(size_t* free, size_t* total) { (void)free; (void)total; return false; }
};

struct MemoryStats {
  size_t allocated = 0;       ///< bytes in blocks handed out (rounded sizes)
  size_t peak_allocated = 0;
  size_t reserved = 0;        ///< bytes obtained from the device (allocated + cached)
  size_t peak_reserved = 0;
  size_t cached = 0;          ///< reserved bytes in free blocks ready for reuse
  size_t pending_free = 0;    ///< freed bytes waiting on another stream's event
  size_t abandoned = 0;       ///< freed bytes given up after a device error (never reused)
  size_t private_reserved = 0;  ///< bytes of segments owned by private pools (CUDA graphs)
  size_t graph_held = 0;      ///< freed bytes kept out of use while a graph may still read them
  int64_t private_pools = 0;  ///< private pools alive (captured graphs not yet destroyed)
  int64_t active_blocks = 0;
  int64_t segments = 0;
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
  int64_t num_raw_allocs = 0;
  int64_t num_raw_frees = 0;
  int64_t num_ooms = 0;
};

class CachingAllocatorCore {
 public:
  static constexpr size_t kMinBlock = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;      // small pool: requests <= 1 MiB
  static constexpr size_t kSmallBuffer = size_t{2} << 20;    // segment size of the small pool
  static constexpr size_t kLargeBuffer = size_t{20} << 20;   // segment for requests < 10 MiB
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;
  static constexpr size_t kRoundLarge = size_t{2} << 20;

  /// `device_name` ("cuda:0") appears in messages.
  CachingAllocatorCore(MemoryBackend& backend, std::string device_name);
  /// Returns every cached segment to the backend (blocks still handed out are leaked).
  ~CachingAllocatorCore();
  CachingAllocatorCore(const CachingAllocatorCore&) = delete;
  CachingAllocatorCore& operator=(const CachingAllocatorCore&) = delete;

  /// A block of at least `nbytes` for use on `stream`; nullptr for 0 bytes. Throws kiln::Error
  /// (the out-of-memory message) when the device cannot supply it even after emptying the cache.
  void* allocate(size_t nbytes, StreamId stream);
  /// Returns a block to its stream's pool (after the events of its other streams, if any).
  /// A device error on the way (an event that cannot be recorded or queried after a sticky
  /// error) does not throw: it is logged and the block abandoned, since its last use is unknown.
  /// Throws only for a pointer this allocator did not hand out.
  void free(void* ptr);
  /// Marks a block as used on `stream` too: when freed it is not reused until the work queued
  /// on `stream` by then has finished.
  void record_stream(void* ptr, StreamId stream);
  /// Gives every fully free segment back to the device (one the device refuses is logged and
  /// forgotten: after a device error its memory is gone with the context).
  void empty_cache();

  MemoryStats stats() const;
  void reset_peak_stats();
  /// A readable account of the allocator's memory (allocated, reserved, cached, call counts).
  std::string summary() const;
  /// The rounded size of a block handed out by allocate (0 if `ptr` is not one).
  size_t block_size(void* ptr) const;

  /// Private pools, for capturing a CUDA graph on `stream` (one capture per device at a time):
  /// from begin_private_pool until end_private_pool, allocations on `stream` are served from
  /// segments of pool `id` alone, and blocks of that pool freed meanwhile are reused by the same
  /// capture (its work is one ordered stream). A block allocated outside the pool and freed during
  /// the capture may still be read by the graph's replays: it is held until the pool's release.
  /// While capturing, no event is queried and no memory is given back to the device (both are
  /// illegal in a capture); out of memory then fails without emptying the cache. After the
  /// capture the pool's blocks stay out of every other allocation until release_private_pool,
  /// which returns its fully free segments to the device, gives the held blocks back to their
  /// pools, and hands segments still holding live tensors to the shared pool. The caller must
  /// have waited for the graph's last replay first. `id` must be new and non-zero.
  void begin_private_pool(PoolId id, StreamId stream);
  void end_private_pool(PoolId id);
  void release_private_pool(PoolId id);
  /// The pool being captured into (0: none).
  PoolId capturing_pool() const;

  static size_t round_size(size_t nbytes);
  /// The segment size requested from the device for a rounded request.
  static size_t segment_size(size_t rounded);

 private:
  struct Block {
    char* ptr;
    size_t size;
    StreamId stream;
    bool small;
    PoolId pool = 0;         // the private pool owning its segment (0: shared)
    bool allocated = false;  // handed out, or freed but waiting on events
    int pending_events = 0;
    bool abandoned = false;  // a device error made its last use unknowable: never reused
    Block* prev = nullptr;   // neighbours within one segment
    Block* next = nullptr;
    std::set<StreamId> stream_uses;
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const {
      if (a->pool != b->pool) return a->pool < b->pool;
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, BlockLess>;
  struct PendingEvent {
    void* event;
    Block* block;
  };
  struct PrivatePool {
    StreamId stream;
    std::vector<Block*> segments;  // first block of each segment (stable: merges keep the first)
    std::vector<Block*> held;      // shared-pool blocks freed during the capture
    std::vector<Block*> deferred;  // its blocks freed during the capture while other streams used them
    bool release_pending = false;  // released during another pool's capture: done when it ends
  };

  Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }
  Block* find_free(size_t size, StreamId stream, bool small, PoolId pool);
  /// A freed block back to its pool, after events on the other streams that used it.
  void free_block(Block* b);
  void return_block(Block* b);  // merges with free neighbours and puts it in its pool
  void release_pool_now(PoolId id);
  void process_events();
  void abandon(Block* b, const char* what, const std::exception& e);  // logs; counts it abandoned
  size_t release_cached();  // frees unsplit free segments; returns bytes released
  [[noreturn]] void throw_oom(size_t nbytes, size_t rounded, size_t segment);

  MemoryBackend& backend_;
  std::string device_name_;
  mutable std::mutex mu_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> active_;
  std::vector<PendingEvent> pending_;
  std::map<PoolId, PrivatePool> private_pools_;
  PoolId capturing_ = 0;
  MemoryStats stats_;
};

/// "1.50 GiB", "512 B": the unit the allocator's messages use.
std::string format_bytes(size_t n);

}  // namespace kiln::cuda
