// The model and data the FSDP tests share: a root (an input Linear and a head) around a
// Sequential "h" of residual MLP blocks, and a batch of which each rank takes its slice.
#pragma once

#include <memory>

#include "core/generator.h"
#include "core/ops.h"
#include "nn/nn.h"

namespace kiln::test {

class FsdpBlock : public nn::Module {
 public:
  explicit FsdpBlock(int64_t c) {
    fc = register_module("fc", nn::Linear(c, 2 * c));
    proj = register_module("proj", nn::Linear(2 * c, c));
  }
  Tensor forward(const Tensor& x) override { return x + proj->forward(nn::functional::gelu(fc->forward(x))); }
  std::shared_ptr<nn::Linear> fc, proj;
};

class FsdpNet : public nn::Module {
 public:
  /// `blocks` residual blocks of width `c` (c 7: flat sizes that do not divide by 2, 3 or 4).
  explicit FsdpNet(int64_t blocks = 3, int64_t c = 7) {
    in = register_module("in", nn::Linear(5, c));
    h = register_module("h", nn::Sequential());
    for (int64_t i = 0; i < blocks; ++i) h->push_back(std::make_shared<FsdpBlock>(c));
    head = register_module("head", nn::Linear(c, 4));
  }
  Tensor forward(const Tensor& x) override { return head->forward(h->forward(in->forward(x))); }
  std::shared_ptr<nn::Linear> in, head;
  std::shared_ptr<nn::Sequential> h;
};

struct FsdpBatch {
  Tensor x, y;
};

/// Step `step`'s whole batch (4 rows per rank of `world`), or rank `rank`'s slice of it.
inline FsdpBatch fsdp_batch(int step, int world, int rank = -1) {
  Generator g(900 + static_cast<uint64_t>(step));
  Tensor x = randn({4 * world, 5}, {}, &g), y = randint(0, 4, {4 * world}, kInt64, &g);
  if (rank < 0) return {x, y};
  return {x.narrow(0, 4 * rank, 4), y.narrow(0, 4 * rank, 4)};
}

}  // namespace kiln::test
