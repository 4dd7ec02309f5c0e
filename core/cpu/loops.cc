// StridedIter's walk over threads and innermost runs, compiled once per operand count (see
// StridedIter::run_loop).
#include "core/cpu/loops.h"

namespace kiln::cpu {

template <int N>
void StridedIter<N>::run_loop(LoopRef loop, int64_t grain) const {
  parallel_for(0, numel_, grain, [&](int64_t begin, int64_t end) {
    for_range(begin, end, [&](const int64_t* off, const int64_t* inner_strides, int64_t n) {
      std::array<char*, N> ptrs;
      for (int k = 0; k < N; ++k) ptrs[k] = base_[k] + off[k];
      loop.call(loop.loop, ptrs.data(), inner_strides, n);
    });
  });
}

template class StridedIter<1>;
template class StridedIter<2>;
template class StridedIter<3>;
template class StridedIter<4>;

}  // namespace kiln::cpu
