// What the NCCL backend decides without NCCL, so CPU tests check it: bounded polling of work
// that may never finish (a non-blocking communicator's set-up, an operation reported "in
// progress", a dead peer's collective), and a store prefix of its own for each NCCL group.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "distributed/store.h"

namespace kiln::dist {

/// Where a polled operation stands.
enum class Progress { kPending, kDone, kFailed };

/// Calls `step` every `interval` until it reports kDone or kFailed and returns that, or returns
/// kPending once `timeout` has passed (checked after each call, so `step` runs at least once).
Progress poll_until_settled(const std::function<Progress()>& step, Millis timeout,
                            std::chrono::microseconds interval = std::chrono::microseconds(50));

/// "nccl/0", "nccl/1", ...: the n-th NCCL group this process creates keeps its unique id (and
/// progress log) under its own prefix, so a later group never reads an earlier group's id. Every
/// rank must create its NCCL groups in the same order (as with torch.distributed).
std::string next_nccl_group_prefix();

}  // namespace kiln::dist
