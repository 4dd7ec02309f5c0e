// The NCCL backend's NCCL-free decisions, without a GPU: bounded polling settles on done or
// failed, gives up (pending) after the timeout instead of waiting forever on a dead peer, and
// each NCCL group gets a store prefix of its own.
#include <doctest/doctest.h>

#include <chrono>

#include "distributed/nccl_progress.h"

using namespace kiln::dist;
using namespace std::chrono_literals;

TEST_CASE("polling returns as soon as the operation settles") {
  int calls = 0;
  CHECK(poll_until_settled([&] { return ++calls < 5 ? Progress::kPending : Progress::kDone; }, 10s) == Progress::kDone);
  CHECK(calls == 5);
  calls = 0;
  CHECK(poll_until_settled([&] { return ++calls < 3 ? Progress::kPending : Progress::kFailed; }, 10s) ==
        Progress::kFailed);
  CHECK(calls == 3);
}

TEST_CASE("an operation that never settles is given up after the timeout") {
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  CHECK(poll_until_settled([&] { ++calls; return Progress::kPending; }, 50ms, 1000us) == Progress::kPending);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 50ms);
  CHECK(took < 5s);
  CHECK(calls >= 2);
}

TEST_CASE("a zero timeout still looks once") {
  int calls = 0;
  CHECK(poll_until_settled([&] { ++calls; return Progress::kDone; }, 0ms) == Progress::kDone);
  CHECK(calls == 1);
}

TEST_CASE("each NCCL group of a process gets its own store prefix, in creation order") {
  const std::string a = next_nccl_group_prefix(), b = next_nccl_group_prefix();
  CHECK(a != b);
  CHECK(a.rfind("nccl/", 0) == 0);
  CHECK(b.rfind("nccl/", 0) == 0);
  CHECK(std::stoi(b.substr(5)) == std::stoi(a.substr(5)) + 1);
}
