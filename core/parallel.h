// The CPU thread pool behind every multi-threaded kernel, sized to the machine by default
// (KILN_NUM_THREADS or set_num_threads to change).
//
// parallel_for splits [begin, end) into one chunk per thread (each at least `grain` long) and
// runs them on the pool. The calling thread takes part: it claims chunks like any worker and
// waits only for chunks a worker has already started, never for a worker that has not woken
// up yet. On a busy machine (another process on the cores, several training ranks per host) a
// fork-join therefore costs at worst the serial time, not a scheduler slice per join.
// Nested calls, and calls while the pool serves another thread, run inline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace kiln {

/// Threads a parallel_for may use, including the caller.
int get_num_threads();
/// Sets the pool size for the whole process (at least 1).
void set_num_threads(int n);
/// Limits parallel_for to `n` threads for calls made on this thread only (0: the process
/// setting); data loader workers use 1 so they do not compete with the training loop.
void set_thread_local_num_threads(int n);
/// True inside a parallel_for chunk.
bool in_parallel_region();
/// The CPUs this process may run on (its affinity mask; all of the machine's where that cannot be
/// read), at least 1.
int usable_cores();

/// Elements below which splitting work across threads costs more than it saves.
inline constexpr int64_t kGrainSize = 32768;

namespace detail {
/// Runs fn(0) .. fn(chunks - 1) on the pool and the calling thread; rethrows the first
/// exception a chunk threw.
void run_chunks(int64_t chunks, const std::function<void(int64_t)>& fn);
}  // namespace detail

/// f(b, e) over contiguous sub-ranges of [begin, end), in parallel when worth it.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int nt = get_num_threads();
  if (n <= grain || nt == 1 || in_parallel_region()) {
    f(begin, end);
    return;
  }
  const int64_t chunks = std::min<int64_t>(nt, (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1));
  const int64_t size = (n + chunks - 1) / chunks;
  detail::run_chunks(chunks, [&](int64_t c) {
    const int64_t b = begin + c * size, e = std::min(end, b + size);
    if (b < e) f(b, e);
  });
}

}  // namespace kiln
