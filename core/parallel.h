// The CPU thread pool: OpenMP's, sized to the machine by default (set_num_threads to change).
// parallel_for splits [begin, end) into contiguous chunks, one per thread, and runs inline when
// the range is smaller than `grain` or we are already inside a parallel region.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace kiln {

int get_num_threads();
void set_num_threads(int n);

/// Elements below which splitting work across threads costs more than it saves.
inline constexpr int64_t kGrainSize = 32768;

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int nt = get_num_threads();
  if (n <= grain || nt == 1 || omp_in_parallel()) {
    f(begin, end);
    return;
  }
  nt = static_cast<int>(std::min<int64_t>(nt, (n + grain - 1) / grain));
  std::exception_ptr err;
#pragma omp parallel num_threads(nt)
  {
    int tid = omp_get_thread_num(), count = omp_get_num_threads();
    int64_t chunk = (n + count - 1) / count;
    int64_t b = begin + tid * chunk, e = std::min(end, b + chunk);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
#pragma omp critical
        err = std::current_exception();
      }
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace kiln
