#include "cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace kiln::cuda {

std::string format_bytes(size_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) { v /= 1024; ++u; }
  return fmt::format("{:.2f} {}", v, units[u]);
}

CachingAllocatorCore::CachingAllocatorCore(MemoryBackend& backend, std::string device_name)
    : backend_(backend), device_name_(std::move(device_name)) {}

CachingAllocatorCore::~CachingAllocatorCore() {
  std::lock_guard<std::mutex> g(mu_);
  for (PendingEvent& e : pending_) backend_.destroy_event(e.event);
  pending_.clear();
  release_cached();
}

size_t CachingAllocatorCore::round_size(size_t nbytes) {
  if (nbytes < kMinBlock) return kMinBlock;
  return (nbytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

size_t CachingAllocatorCore::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocatorCore::Block* CachingAllocatorCore::find_free(size_t size, StreamId stream, bool small,
                                                             PoolId private_pool) {
  Pool& pool = pool_of(small);
  Block key{nullptr, size, stream, small, private_pool};
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->pool != private_pool || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void* CachingAllocatorCore::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> g(mu_);
  // Querying events is illegal while a stream captures: pending blocks wait for the capture's end.
  if (capturing_ == 0) process_events();
  const PoolId private_pool = capturing_ != 0 && private_pools_.at(capturing_).stream == stream ? capturing_ : 0;
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Block* b = find_free(size, stream, small, private_pool);
  if (b == nullptr) {
    const size_t seg = segment_size(size);
    void* p = backend_.raw_alloc(seg);
    if (p == nullptr && capturing_ == 0) {  // freeing device memory is illegal during a capture
      release_cached();
      p = backend_.raw_alloc(seg);
    }
    if (p == nullptr) throw_oom(nbytes, size, seg);
    ++stats_.num_raw_allocs;
    ++stats_.segments;
    stats_.reserved += seg;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    b = new Block{static_cast<char*>(p), seg, stream, small, private_pool};
    if (private_pool != 0) {
      private_pools_.at(private_pool).segments.push_back(b);
      stats_.private_reserved += seg;
    }
  }
  // Split off the rest when it can serve another request of this pool: any 512 bytes in the
  // small pool; more than 1 MiB in the large one (smaller tails would only fragment it).
  const size_t rest = b->size - size;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    Block* r = new Block{b->ptr + size, rest, stream, small, b->pool};
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool_of(small).insert(r);
  }
  b->allocated = true;
  active_[b->ptr] = b;
  ++stats_.num_allocs;
  ++stats_.active_blocks;
  stats_.allocated += b->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return b->ptr;
}

void CachingAllocatorCore::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> g(mu_);
  auto it = active_.find(ptr);
  KILN_CHECK(it != active_.end(), "{} caching allocator: free of {} which it did not allocate", device_name_, ptr);
  Block* b = it->second;
  active_.erase(it);
  ++stats_.num_frees;
  --stats_.active_blocks;
  stats_.allocated -= b->size;
  if (capturing_ != 0) {
    PrivatePool& capture = private_pools_.at(capturing_);
    if (b->pool != capturing_) {
      // The capture may have read it: the graph's replays will, so nothing else may reuse it
      // (a block of another graph's pool too: that pool may be released before this graph).
      capture.held.push_back(b);
      stats_.graph_held += b->size;
      return;
    }
    if (!b->stream_uses.empty()) {
      // Its other streams' events cannot be recorded and polled as usual while capturing.
      capture.deferred.push_back(b);
      stats_.pending_free += b->size;
      return;
    }
  }
  free_block(b);
}

void CachingAllocatorCore::free_block(Block* b) {
  if (!b->stream_uses.empty()) {
    // Other streams may still read or write it: reuse waits for their queued work.
    stats_.pending_free += b->size;
    try {
      for (StreamId s : b->stream_uses) {
        void* event = backend_.record_event(s);
        pending_.push_back({event, b});
        ++b->pending_events;
      }
    } catch (const std::exception& e) {
      // Called from tensors' destructors: throwing here would terminate the program.
      stats_.pending_free -= b->size;
      abandon(b, "recording the event of a stream that used it", e);
    }
    b->stream_uses.clear();
    return;
  }
  return_block(b);
}

void CachingAllocatorCore::abandon(Block* b, const char* what, const std::exception& e) {
  if (b->abandoned) return;
  b->abandoned = true;
  stats_.abandoned += b->size;
  std::fprintf(stderr, "kiln %s caching allocator: %s failed (%s); the block of %s at %p is never reused\n",
               device_name_.c_str(), what, e.what(), format_bytes(b->size).c_str(), static_cast<void*>(b->ptr));
}

void CachingAllocatorCore::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = active_.find(ptr);
  KILN_CHECK(it != active_.end(), "{} caching allocator: record_stream on {} which it did not allocate",
             device_name_, ptr);
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

void CachingAllocatorCore::return_block(Block* b) {
  b->allocated = false;
  Pool& pool = pool_of(b->small);
  if (Block* p = b->prev; p != nullptr && !p->allocated) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n != nullptr && !n->allocated) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocatorCore::process_events() {
  if (pending_.empty()) return;
  std::vector<PendingEvent> still;
  for (PendingEvent& e : pending_) {
    bool done = false;
    try {
      done = backend_.event_done(e.event);
    } catch (const std::exception& err) {
      if (!e.block->abandoned) stats_.pending_free -= e.block->size;
      abandon(e.block, "querying the event of a stream that used it", err);
      done = true;
    }
    if (!done) {
      still.push_back(e);
      continue;
    }
    backend_.destroy_event(e.event);
    if (--e.block->pending_events == 0 && !e.block->abandoned) {
      stats_.pending_free -= e.block->size;
      return_block(e.block);
    }
  }
  pending_.swap(still);
}

size_t CachingAllocatorCore::release_cached() {
  size_t released = 0;
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->pool == 0 && b->prev == nullptr && b->next == nullptr) {  // private pools: at their release
        try {
          backend_.raw_free(b->ptr);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "kiln %s caching allocator: freeing a segment of %s failed (%s); it is forgotten\n",
                       device_name_.c_str(), format_bytes(b->size).c_str(), e.what());
        }
        released += b->size;
        stats_.reserved -= b->size;
        --stats_.segments;
        ++stats_.num_raw_frees;
        delete b;
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
  return released;
}

void CachingAllocatorCore::empty_cache() {
  std::lock_guard<std::mutex> g(mu_);
  KILN_CHECK(capturing_ == 0,
             "{} caching allocator: empty_cache during a CUDA graph capture (private pool {}): memory cannot be "
             "given back to the device while a stream captures; call it after the capture ends",
             device_name_, capturing_);
  process_events();
  release_cached();
}

void CachingAllocatorCore::throw_oom(size_t nbytes, size_t rounded, size_t segment) {
  ++stats_.num_ooms;
  const size_t cached = stats_.reserved - stats_.allocated - stats_.pending_free - stats_.abandoned;
  std::string device;
  size_t free_mem = 0, total = 0;
  if (backend_.memory_info(&free_mem, &total))
    device = fmt::format("; the device has {} in total, {} free", format_bytes(total), format_bytes(free_mem));
  fail("{}: out of memory: tried to allocate {} (rounded to {}, a new segment of {}); {} is allocated by "
       "tensors and {} is reserved by the caching allocator ({} of it cached, in blocks too small or "
       "fragmented to use; unsplit cached segments were released and the allocation retried){}. Free "
       "tensors you no longer need, or reduce the batch size",
       device_name_, format_bytes(nbytes), format_bytes(rounded), format_bytes(segment),
       format_bytes(stats_.allocated), format_bytes(stats_.reserved), format_bytes(cached), device);
}

MemoryStats CachingAllocatorCore::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  MemoryStats s = stats_;
  size_t private_free = 0;  // free, but only for the capture that owns it
  for (const Pool* pool : {&small_pool_, &large_pool_})
    for (const Block* b : *pool)
      if (b->pool != 0) private_free += b->size;
  s.cached = s.reserved - s.allocated - s.pending_free - s.abandoned - s.graph_held - private_free;
  s.private_pools = static_cast<int64_t>(private_pools_.size());
  return s;
}

void CachingAllocatorCore::begin_private_pool(PoolId id, StreamId stream) {
  std::lock_guard<std::mutex> g(mu_);
  KILN_CHECK(id != 0, "{} caching allocator: private pool id 0 is the shared pool", device_name_);
  KILN_CHECK(capturing_ == 0,
             "{} caching allocator: begin_private_pool({}) while pool {} is capturing: one CUDA graph capture per "
             "device at a time",
             device_name_, id, capturing_);
  KILN_CHECK(private_pools_.count(id) == 0,
             "{} caching allocator: private pool {} already exists: each capture needs a new pool", device_name_, id);
  private_pools_[id] = PrivatePool{stream};
  capturing_ = id;
}

void CachingAllocatorCore::end_private_pool(PoolId id) {
  std::lock_guard<std::mutex> g(mu_);
  KILN_CHECK(capturing_ == id && id != 0,
             "{} caching allocator: end_private_pool({}) but the pool capturing is {} (0: none)", device_name_, id,
             capturing_);
  capturing_ = 0;
  std::vector<Block*> deferred;
  deferred.swap(private_pools_.at(id).deferred);
  for (Block* b : deferred) {
    stats_.pending_free -= b->size;
    free_block(b);  // records its other streams' events now that none captures
  }
  std::vector<PoolId> released;
  for (auto& [pid, p] : private_pools_)
    if (p.release_pending) released.push_back(pid);
  for (PoolId pid : released) release_pool_now(pid);
}

void CachingAllocatorCore::release_private_pool(PoolId id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = private_pools_.find(id);
  KILN_CHECK(it != private_pools_.end(), "{} caching allocator: release_private_pool({}): no such pool", device_name_,
             id);
  KILN_CHECK(capturing_ != id,
             "{} caching allocator: release_private_pool({}) during its own capture: end the capture first",
             device_name_, id);
  // Another pool's capture forbids freeing device memory and recording events: finish at its end.
  if (capturing_ != 0) it->second.release_pending = true;
  else release_pool_now(id);
}

void CachingAllocatorCore::release_pool_now(PoolId id) {
  PrivatePool& pool = private_pools_.at(id);
  for (Block* b : pool.held) {
    stats_.graph_held -= b->size;
    free_block(b);
  }
  for (Block* head : pool.segments) {
    size_t seg = 0;
    for (const Block* b = head; b != nullptr; b = b->next) seg += b->size;
    stats_.private_reserved -= seg;
    if (head->next == nullptr && !head->allocated) {  // wholly free: back to the device
      pool_of(head->small).erase(head);
      try {
        backend_.raw_free(head->ptr);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln %s caching allocator: freeing a graph's segment of %s failed (%s); it is forgotten\n",
                     device_name_.c_str(), format_bytes(seg).c_str(), e.what());
      }
      stats_.reserved -= seg;
      --stats_.segments;
      ++stats_.num_raw_frees;
      delete head;
      continue;
    }
    // Tensors made by the capture still live here: the segment joins the shared pool of its stream.
    for (Block* b = head; b != nullptr; b = b->next) {
      const bool is_free = !b->allocated;
      if (is_free) pool_of(b->small).erase(b);
      b->pool = 0;
      if (is_free) pool_of(b->small).insert(b);
    }
  }
  private_pools_.erase(id);
}

PoolId CachingAllocatorCore::capturing_pool() const {
  std::lock_guard<std::mutex> g(mu_);
  return capturing_;
}

void CachingAllocatorCore::reset_peak_stats() {
  std::lock_guard<std::mutex> g(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

size_t CachingAllocatorCore::block_size(void* ptr) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = active_.find(ptr);
  return it == active_.end() ? 0 : it->second->size;
}

std::string CachingAllocatorCore::summary() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t small_free = 0, large_free = 0;
  for (const Block* b : small_pool_) small_free += b->size;
  for (const Block* b : large_pool_) large_free += b->size;
  std::string s = fmt::format("memory summary of {}\n", device_name_);
  s += fmt::format("  allocated     {:>12}  (peak {}) in {} blocks\n", format_bytes(stats_.allocated),
                   format_bytes(stats_.peak_allocated), stats_.active_blocks);
  s += fmt::format("  reserved      {:>12}  (peak {}) in {} segments\n", format_bytes(stats_.reserved),
                   format_bytes(stats_.peak_reserved), stats_.segments);
  s += fmt::format("  cached free   {:>12}  ({} blocks of <= 1 MiB requests: {}; {} blocks of larger: {})\n",
                   format_bytes(small_free + large_free), small_pool_.size(), format_bytes(small_free),
                   large_pool_.size(), format_bytes(large_free));
  s += fmt::format("  waiting       {:>12}  (freed, in use by another stream until its event)\n",
                   format_bytes(stats_.pending_free));
  if (!private_pools_.empty() || stats_.graph_held > 0)
    s += fmt::format("  CUDA graphs   {:>12}  in {} private pools; {} freed but held while a graph may read it\n",
                     format_bytes(stats_.private_reserved), private_pools_.size(), format_bytes(stats_.graph_held));
  if (stats_.abandoned > 0)
    s += fmt::format("  abandoned     {:>12}  (freed after a device error: never reused)\n",
                     format_bytes(stats_.abandoned));
  s += fmt::format("  calls         {} allocations, {} frees, {} device allocations, {} device frees, {} out of memory\n",
                   stats_.num_allocs, stats_.num_frees, stats_.num_raw_allocs, stats_.num_raw_frees,
                   stats_.num_ooms);
  return s;
}

}  // namespace kiln::cuda
