// The model and optimizer the checkpoint fuzzer loads into, shared with checkpoint_seed.cc so
// the seed corpus holds files that load: a parameter, a float and an int64 buffer, a child
// Linear, and Adam after one step (so it has per-parameter state).
#pragma once

#include <memory>

#include "core/ops.h"
#include "nn/linear.h"
#include "optim/adam.h"

namespace kiln::fuzz {

struct Tiny : nn::Module {
  Tiny() : Module("Tiny") {
    weight = register_parameter("weight", full({3, 2}, 0.5));
    running = register_buffer("running", full({3}, 0.25));
    count = register_buffer("count", full({1}, 5, kInt64));
    head = register_module("head", std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return head->forward(x.matmul(weight.t()) + running); }
  Tensor weight, running, count;
  std::shared_ptr<nn::Linear> head;
};

/// One Adam step on a fixed batch.
inline void train_step(Tiny& model, optim::Optimizer& opt) {
  opt.zero_grad();
  model.forward(full({4, 2}, 1.0)).square().sum().backward();
  opt.step();
}

}  // namespace kiln::fuzz
