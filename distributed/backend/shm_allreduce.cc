#include "distributed/backend/shm_allreduce.h"

#include <fcntl.h>
#include <signal.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "distributed/store/errors.h"
#include "distributed/backend/node_identity.h"

namespace kiln::dist {

struct ShmAllreduce::Header {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  std::atomic<int32_t> aborted_by;  // 0, or 1 + the rank that called abort()
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futexes need plain 32-bit words");

namespace {

constexpr size_t kHeaderBytes = 4096;  // the barrier words, then each rank's pid
constexpr size_t kPidsOffset = 128;
constexpr int kMaxRanks = static_cast<int>((kHeaderBytes - kPidsOffset) / sizeof(int32_t));

static_assert(2 * 64 <= kPidsOffset,
              "the pids follow the two cache-line-aligned barrier words (aborted_by shares the second)");

int32_t* pids(void* base) { return reinterpret_cast<int32_t*>(static_cast<unsigned char*>(base) + kPidsOffset); }

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(Store& store, int rank, int size, Millis timeout) {
  const char* env = std::getenv("KILN_SHM_ALLREDUCE");
  if (size < 2 || size > kMaxRanks || (env != nullptr && std::string(env) == "0")) return nullptr;
  // Same host for everyone?
  store.set(fmt::format("shm/host/{}", rank), node_identity());
  for (int r = 0; r < size; ++r)
    if (store.get_string(fmt::format("shm/host/{}", r)) != node_identity()) return nullptr;

  const size_t bytes = kHeaderBytes + static_cast<size_t>(size + 1) * kChunkBytes;
  // Rank 0 creates and sizes the segment before it publishes the name: a rank that opened it
  // earlier would find nothing, or map a file of length 0.
  std::string name;
  void* base = MAP_FAILED;
  auto map = [&](int flags) {
    int fd = shm_open(name.c_str(), flags, 0600);
    if (fd < 0) return;
    if (!(flags & O_CREAT) || ftruncate(fd, static_cast<off_t>(bytes)) == 0)
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  };
  if (rank == 0) {
    std::random_device rd;
    name = fmt::format("/kiln-allreduce-{}-{:x}", getpid(), (uint64_t{rd()} << 32) | rd());
    map(O_CREAT | O_EXCL | O_RDWR);
    store.set("shm/name", base != MAP_FAILED ? name : std::string());
  } else {
    name = store.get_string("shm/name");
    if (!name.empty()) map(O_RDWR);
  }
  // Everyone reports; shared memory is used only if every rank mapped the segment.
  if (base != MAP_FAILED) pids(base)[rank] = static_cast<int32_t>(getpid());
  store.add(base != MAP_FAILED ? "shm/mapped" : "shm/failed", 1);
  while (store.add("shm/mapped", 0) + store.add("shm/failed", 0) < size)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool ok = store.add("shm/failed", 0) == 0;
  // Every rank has opened the name by now: unlink it, the mappings stay.
  if (rank == 0) shm_unlink(name.c_str());
  if (!ok) {
    if (base != MAP_FAILED) munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(base, bytes, rank, size, timeout));
}

ShmAllreduce::ShmAllreduce(void* base, size_t bytes, int rank, int size, Millis timeout)
    : base_(base), bytes_(bytes), header_(static_cast<Header*>(base)), rank_(rank), size_(size), timeout_(timeout) {}

ShmAllreduce::~ShmAllreduce() { munmap(base_, bytes_); }

unsigned char* ShmAllreduce::slot(int r) const {
  return static_cast<unsigned char*>(base_) + kHeaderBytes + static_cast<size_t>(r) * kChunkBytes;
}
unsigned char* ShmAllreduce::result() const { return slot(size_); }

void ShmAllreduce::barrier() {
  Header& h = *header_;
  const uint32_t gen = h.generation.load(std::memory_order_acquire);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
    h.arrived.store(0, std::memory_order_relaxed);  // published by the generation bump below
    h.generation.fetch_add(1, std::memory_order_release);
    futex(&h.generation, FUTEX_WAKE, INT32_MAX, nullptr);
    return;
  }
  // A short spin (the others are usually a few microseconds behind), then sleep in the kernel.
  for (int i = 0; i < 256; ++i) {
    if (h.generation.load(std::memory_order_acquire) != gen) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (h.generation.load(std::memory_order_acquire) == gen) {
    if (int32_t by = h.aborted_by.load(std::memory_order_acquire); by != 0)
      KILN_DIST_FAIL(PeerError,
                     "shared-memory collective: rank {} of this node gave up (its part of the collective failed)",
                     by - 1);
    if (std::chrono::steady_clock::now() > deadline)
      KILN_DIST_FAIL(TimeoutError, "shared-memory collective: rank {} waited {} ms at a barrier for the other ranks",
                     rank_, timeout_.count());
    // A peer that died will never come: say so now rather than at the timeout.
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && kill(pids(base_)[r], 0) != 0 && errno == ESRCH)
        KILN_DIST_FAIL(PeerError, "shared-memory collective: rank {} (pid {}) has exited", r, pids(base_)[r]);
    const timespec tick{0, 10'000'000};  // wake up now and then to look at the clock
    futex(&h.generation, FUTEX_WAIT, gen, &tick);
  }
}

void ShmAllreduce::allreduce(void* data, size_t count, size_t elem_size, const ReduceFn& reduce) {
  auto* bytes = static_cast<unsigned char*>(data);
  const size_t per_chunk = kChunkBytes / elem_size;
  for (size_t first = 0; first < count; first += per_chunk) {
    const size_t n = std::min(per_chunk, count - first);
    std::memcpy(slot(rank_), bytes + first * elem_size, n * elem_size);
    barrier();  // every slot written
    // This rank's share of the chunk, reduced over every rank's slot.
    const size_t lo = n * static_cast<size_t>(rank_) / static_cast<size_t>(size_);
    const size_t hi = n * static_cast<size_t>(rank_ + 1) / static_cast<size_t>(size_);
    if (hi > lo) {
      unsigned char* out = result() + lo * elem_size;
      reduce(out, slot(0) + lo * elem_size, slot(1) + lo * elem_size, hi - lo);
      for (int r = 2; r < size_; ++r) reduce(out, out, slot(r) + lo * elem_size, hi - lo);
    }
    barrier();  // the whole result written
    std::memcpy(bytes + first * elem_size, result(), n * elem_size);
    barrier();  // everyone has read it: the slots and the result may be reused
  }
}

void ShmAllreduce::abort() {
  header_->aborted_by.store(rank_ + 1, std::memory_order_release);
  futex(&header_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
}

void ShmAllreduce::broadcast(void* data, size_t bytes, int root) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t first = 0; first < bytes; first += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - first);
    if (rank_ == root) std::memcpy(result(), p + first, n);
    barrier();  // the chunk is in the result area
    if (rank_ != root) std::memcpy(p + first, result(), n);
    barrier();  // everyone has read it
  }
}

void ShmAllreduce::reduce_scatter(void* data, size_t count, size_t elem_size, const ReduceFn& reduce) {
  auto* bytes = static_cast<unsigned char*>(data);
  const size_t ranks = static_cast<size_t>(size_);
  // A round moves `per` elements of every chunk: this rank's slot holds them chunk by chunk.
  const size_t per = std::max<size_t>(1, kChunkBytes / (elem_size * ranks));
  for (size_t first = 0; first < count; first += per) {
    const size_t n = std::min(per, count - first);
    const size_t piece = n * elem_size;
    for (size_t d = 0; d < ranks; ++d)
      std::memcpy(slot(rank_) + d * piece, bytes + (d * count + first) * elem_size, piece);
    barrier();  // every slot written
    unsigned char* out = bytes + (static_cast<size_t>(rank_) * count + first) * elem_size;
    const size_t column = static_cast<size_t>(rank_) * piece;
    reduce(out, slot(0) + column, slot(1) + column, n);
    for (int r = 2; r < size_; ++r) reduce(out, out, slot(r) + column, n);
    barrier();  // everyone has read its column: the slots may be reused
  }
}

void ShmAllreduce::allgather(const void* in, size_t bytes, void* out) {
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  for (size_t first = 0; first < bytes; first += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - first);
    std::memcpy(slot(rank_), src + first, n);
    barrier();  // every rank's piece is in its slot
    for (int r = 0; r < size_; ++r) {
      unsigned char* to = dst + static_cast<size_t>(r) * bytes + first;
      if (r != rank_)
        std::memcpy(to, slot(r), n);
      else if (to != src + first)
        std::memmove(to, src + first, n);
    }
    barrier();  // everyone has read every slot
  }
}

}  // namespace kiln::dist
