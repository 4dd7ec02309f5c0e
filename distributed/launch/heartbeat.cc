// Heartbeat files and the SIGUSR1 stack dump (see heartbeat.h).
#include "distributed/launch/heartbeat.h"

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::dist {
namespace {

void write_str(const char* s) {
  ssize_t ignored = ::write(2, s, std::strlen(s));
  (void)ignored;
}

// The SIGUSR1 handler installed before ours (the flight recorder's dumper, say), called after the
// stack is printed, so that one signal gives both.
struct sigaction g_previous_usr1 {};

void on_stall_dump(int sig) {
  // backtrace() is not formally async-signal-safe, but it is the common last-resort dump (its
  // first call may allocate: install_stall_dump_handler warms it up).
  void* frames[64];
  const int n = backtrace(frames, 64);
  write_str("watchdog: SIGUSR1: stack of the thread that received it:\n");
  backtrace_symbols_fd(frames, n, 2);
  if (g_previous_usr1.sa_handler != SIG_DFL && g_previous_usr1.sa_handler != SIG_IGN &&
      g_previous_usr1.sa_handler != nullptr && !(g_previous_usr1.sa_flags & SA_SIGINFO))
    g_previous_usr1.sa_handler(sig);
}

}  // namespace

Heartbeat::Heartbeat() {
  const char* path = std::getenv("KILN_HEARTBEAT_FILE");
  if (path != nullptr && *path != '\0') fd_ = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ >= 0) install_stall_dump_handler();
}

Heartbeat::~Heartbeat() {
  if (fd_ >= 0) ::close(fd_);
}

void Heartbeat::beat(int64_t step) {
  if (fd_ < 0) return;
  char buf[32];
  // Fixed width, so a rewrite never leaves a longer old number's tail behind.
  const int n = std::snprintf(buf, sizeof buf, "%20lld\n", static_cast<long long>(step));
  ssize_t ignored = ::pwrite(fd_, buf, static_cast<size_t>(n), 0);
  (void)ignored;
}

int64_t read_heartbeat(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 0) return -1;
  return std::strtoll(buf, nullptr, 10);
}

void install_stall_dump_handler() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  void* warm[1];
  (void)backtrace(warm, 1);
  struct sigaction sa {};
  sa.sa_handler = on_stall_dump;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, &g_previous_usr1);
}

}  // namespace kiln::dist
