#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace kiln {
namespace {

thread_local int tl_num_threads = 0;
thread_local bool tl_in_region = false;

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int> g_num_threads{default_threads()};

/// One parallel_for's chunks. Shared by the caller and the workers that join it; a worker that
/// wakes after every chunk was claimed just leaves.
struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable finished;
  std::exception_ptr error;

  /// Claims and runs chunks until none are left.
  void work() {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      try {
        (*fn)(c);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!error) error = std::current_exception();
      }
      if (done.fetch_add(1) + 1 == chunks) {
        std::lock_guard<std::mutex> g(mu);
        finished.notify_all();
      }
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  /// Runs a job if the pool is free; returns false (nothing run) when another thread holds it.
  bool try_run(int64_t chunks, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const int helpers = static_cast<int>(std::min<int64_t>(chunks, get_num_threads())) - 1;
    ensure_workers(helpers);
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->chunks = chunks;
    {
      std::lock_guard<std::mutex> g(mu_);
      job_ = job;
      wanted_ = helpers;
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleepers_.load() > 0) wake_.notify_all();
    tl_in_region = true;
    job->work();
    tl_in_region = false;
    // Only chunks already claimed can be outstanding: wait for those alone, spinning briefly
    // first (a chunk in flight usually ends within microseconds of ours).
    if (!spin_until([&] { return job->done.load(std::memory_order_acquire) == job->chunks; })) {
      std::unique_lock<std::mutex> g(job->mu);
      job->finished.wait(g, [&] { return job->done.load() == job->chunks; });
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      job_.reset();
    }
    // Take the exception out of the job before rethrowing it: a worker may still hold the job
    // and drop the last reference to it later, and the exception must not be destroyed there
    // (exception_ptr counts in uninstrumented libstdc++, so TSan would report that release as a
    // race with the caller's what()).
    if (std::exception_ptr error = std::move(job->error)) std::rethrow_exception(error);
    return true;
  }

 private:
  void ensure_workers(int n) {
    std::lock_guard<std::mutex> g(mu_);
    while (static_cast<int>(workers_.size()) < n) {
      int id = static_cast<int>(workers_.size());
      workers_.emplace_back([this, id] { loop(id); });
      workers_.back().detach();
    }
  }

  void loop(int id) {
    tl_in_region = true;
    uint64_t seen = 0;
    for (;;) {
      // Training loops issue parallel regions back to back: spin a little before sleeping so
      // the next one does not pay a futex wake-up.
      if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> g(mu_);
        sleepers_.fetch_add(1);
        wake_.wait(g, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> g(mu_);
        seen = generation_.load();
        if (id >= wanted_ || !job_) continue;
        job = job_;
      }
      job->work();
    }
  }

  /// Polls `ready` for up to ~200 us; true if it became true.
  template <class F> static bool spin_until(const F& ready) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int i = 0;; ++i) {
      if (ready()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

  std::mutex busy_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  int wanted_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace

int get_num_threads() { return tl_num_threads > 0 ? tl_num_threads : g_num_threads.load(); }

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got {}", n);
  g_num_threads.store(n);
}

void set_thread_local_num_threads(int n) {
  KILN_CHECK(n >= 0, "set_thread_local_num_threads: need 0 (process setting) or more, got {}", n);
  tl_num_threads = n;
}

bool in_parallel_region() { return tl_in_region; }

namespace detail {

void run_chunks(int64_t chunks, const std::function<void(int64_t)>& fn) {
  if (chunks <= 1 || !Pool::get().try_run(chunks, fn)) {
    // Serial: one chunk, or the pool is serving another thread (e.g. a data loader worker).
    const bool outer = tl_in_region;
    tl_in_region = true;
    try {
      for (int64_t c = 0; c < chunks; ++c) fn(c);
    } catch (...) {
      tl_in_region = outer;
      throw;
    }
    tl_in_region = outer;
  }
}

}  // namespace detail
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace kiln
