// Fd: owns one POSIX file descriptor and closes it exactly once. Kiln's only such class: files
// (safetensors) and sockets (the TCP store) both use it.
#pragma once

#include <unistd.h>

namespace kiln {

/// Owns a file descriptor (-1: none); closes it on destruction. Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  /// Gives up ownership without closing.
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the current descriptor (if any) and owns `fd` instead. Returns close()'s result
  /// (0 when there was nothing to close): a deferred write error can surface here. close() is
  /// not retried on EINTR: on Linux the descriptor is released either way.
  int reset(int fd = -1) {
    int r = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = fd;
    return r;
  }

 private:
  int fd_ = -1;
};

}  // namespace kiln
