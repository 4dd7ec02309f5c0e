// Thread-local switch for recording the autograd tape; NoGradGuard turns it off in a scope.
#pragma once

namespace kiln {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Disables recording until the end of the scope (as torch.no_grad()), restoring the old mode.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Re-enables recording in a scope (e.g. inside a NoGradGuard region).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
