#include "core/parallel.h"

#include "core/error.h"

namespace kiln {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got {}", n);
  omp_set_num_threads(n);
}

}  // namespace kiln
