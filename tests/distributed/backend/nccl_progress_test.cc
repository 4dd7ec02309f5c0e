// The NCCL backend's NCCL-free decisions, without a GPU: bounded polling settles on done or
// failed, gives up (pending) after the timeout instead of waiting forever on a dead peer, a
// failed call throws the typed error its result stands for, and each NCCL group gets a store
// prefix of its own.
#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <string>
#include <type_traits>

#include "distributed/backend/nccl_progress.h"

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

TEST_CASE("a failed NCCL call maps to the typed error callers tell apart") {
  CHECK(classify_nccl_failure(Progress::kPending, kNcclInProgress) == NcclFailure::kTimeout);
  CHECK(classify_nccl_failure(Progress::kPending, kNcclSuccess) == NcclFailure::kTimeout);
  CHECK(classify_nccl_failure(Progress::kFailed, kNcclRemoteError) == NcclFailure::kPeer);
  CHECK(classify_nccl_failure(Progress::kFailed, kNcclInvalidUsage) == NcclFailure::kOther);
  for (int other : {1, 2, 3, 4}) CHECK(classify_nccl_failure(Progress::kFailed, other) == NcclFailure::kOther);
  // Asking about a call that succeeded is a bug in the backend, not a failure to classify.
  CHECK_THROWS_AS(classify_nccl_failure(Progress::kDone, kNcclSuccess), kiln::InternalError);
  CHECK_THROWS_AS(classify_nccl_failure(Progress::kFailed, kNcclSuccess), kiln::InternalError);
}

TEST_CASE("each failure throws its own type, all of them kiln::Errors carrying the message") {
  auto thrown = [](NcclFailure kind) {
    try {
      throw_nccl_failure(kind, "allreduce #3 on cuda:0: ncclAllReduce failed");
    } catch (const kiln::Error& e) {
      CHECK(std::string(e.what()) == "allreduce #3 on cuda:0: ncclAllReduce failed");
      return std::current_exception();
    }
    return std::exception_ptr();
  };
  auto is = [](std::exception_ptr e, auto* type) {
    REQUIRE(e != nullptr);
    try {
      std::rethrow_exception(e);
    } catch (const std::remove_pointer_t<decltype(type)>&) {
      return true;
    } catch (...) {
      return false;
    }
  };
  CHECK(is(thrown(NcclFailure::kTimeout), static_cast<TimeoutError*>(nullptr)));
  CHECK_FALSE(is(thrown(NcclFailure::kTimeout), static_cast<PeerError*>(nullptr)));
  CHECK(is(thrown(NcclFailure::kPeer), static_cast<PeerError*>(nullptr)));
  CHECK_FALSE(is(thrown(NcclFailure::kPeer), static_cast<TimeoutError*>(nullptr)));
  const std::exception_ptr other = thrown(NcclFailure::kOther);
  CHECK(is(other, static_cast<kiln::Error*>(nullptr)));
  CHECK_FALSE(is(other, static_cast<TimeoutError*>(nullptr)));
  CHECK_FALSE(is(other, static_cast<PeerError*>(nullptr)));
}
