#include "core/error.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

Work::Clock::time_point Work::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

Work::Clock::time_point Work::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void Work::mark_started() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = Clock::now();
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
    finished_ = Clock::now();
  }
  cv_.notify_all();
}

}  // namespace kiln::dist
