// The readers under fuzzing take a path: FuzzFile is one in-memory file (memfd), rewritten for
// every input and opened through /proc/self/fd, so fuzzing touches no disk and leaves nothing.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kiln::fuzz {

class FuzzFile {
 public:
  FuzzFile() : fd_(::memfd_create("kiln-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~FuzzFile() { ::close(fd_); }
  FuzzFile(const FuzzFile&) = delete;
  FuzzFile& operator=(const FuzzFile&) = delete;

  /// Replaces the file's contents with `data`; returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("FuzzFile::write");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace kiln::fuzz
