// What the ZeRO tests (zero_test, zero_parts_test) share: a small MLP whose odd layer widths leave
// buckets that do not divide evenly over the ranks, and bucket sizes small enough that even it
// spans several buckets.
#pragma once

#include <cstdint>
#include <memory>

#include "distributed/data_parallel/ddp.h"
#include "nn/nn.h"

namespace kiln::test {

/// 12 -> hidden -> hidden - 1 -> 5, Tanh and ReLU between.
inline std::shared_ptr<nn::Sequential> zero_test_model(int64_t hidden) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, hidden), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(hidden, hidden - 1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden - 1, 5)});
}

/// Several buckets even for zero_test_model.
inline dist::DDPOptions small_buckets() {
  dist::DDPOptions o;
  o.first_bucket_mb = 0.0005;
  o.bucket_cap_mb = 0.002;
  return o;
}

}  // namespace kiln::test
