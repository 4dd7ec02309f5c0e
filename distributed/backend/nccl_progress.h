// What the NCCL backend decides without NCCL, so CPU tests check it: bounded polling of work
// that may never finish (a non-blocking communicator's set-up, an operation reported "in
// progress", a dead peer's collective), which typed error a failed NCCL call throws, and a store
// prefix of its own for each NCCL group.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "distributed/store/errors.h"
#include "distributed/store/store.h"

namespace kiln::dist {

/// Where a polled operation stands.
enum class Progress { kPending, kDone, kFailed };

/// Calls `step` every `interval` until it reports kDone or kFailed and returns that, or returns
/// kPending once `timeout` has passed (checked after each call, so `step` runs at least once).
Progress poll_until_settled(const std::function<Progress()>& step, Millis timeout,
                            std::chrono::microseconds interval = std::chrono::microseconds(50));

/// ncclResult_t codes the classification needs (nccl.h's values; nccl_backend.cc static_asserts
/// that they match the header it is built with).
inline constexpr int kNcclSuccess = 0;
inline constexpr int kNcclInvalidUsage = 5;
inline constexpr int kNcclRemoteError = 6;
inline constexpr int kNcclInProgress = 7;

/// How an NCCL call that did not succeed failed, and so which error it throws.
enum class NcclFailure {
  kTimeout,  // still in progress when the group's timeout passed: dist::TimeoutError
  kPeer,     // ncclRemoteError, a peer exited, aborted or lost its network: dist::PeerError
  kOther,    // any other NCCL error (usage, system, CUDA, internal): kiln::Error
};

/// The failure for a call that settled as `p` (kPending: the timeout passed) with `result`, an
/// ncclResult_t code (the call's own, or ncclCommGetAsyncError's). Not for kDone.
NcclFailure classify_nccl_failure(Progress p, int result);

/// Throws `message` as the error `kind` stands for (see NcclFailure).
[[noreturn]] void throw_nccl_failure(NcclFailure kind, std::string message);

/// "nccl/0", "nccl/1", ...: the n-th NCCL group this process creates keeps its unique id (and
/// progress log) under its own prefix, so a later group never reads an earlier group's id. Every
/// rank must create its NCCL groups in the same order (as with torch.distributed).
std::string next_nccl_group_prefix();

}  // namespace kiln::dist
