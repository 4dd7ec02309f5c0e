#include "distributed/launch/launch_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "distributed/launch/exit_codes.h"

namespace kiln::dist {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// A line longer than this is printed in pieces rather than buffered without bound.
constexpr size_t kMaxLine = 64 * 1024;
// After the last rank exits, how long its pipes may stay open (held by a process it started
// that inherited them) before the launcher stops reading them: nobody hangs on a grandchild.
constexpr std::chrono::seconds kDrainAfterExit{2};

bool is_stop_signal(int sig) {
  return std::find(std::begin(kStopSignals), std::end(kStopSignals), sig) != std::end(kStopSignals);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("signal {} (SIG{})", sig, abbrev) : fmt::format("signal {}", sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by {}", signal_name(WTERMSIG(status)));
  return fmt::format("ended with wait status {:#x}", status);
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Writes all of `s`; false when the reader is gone (EPIPE) or the fd is otherwise unusable.
bool write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, -1);  // an inherited non-blocking stdout: wait until it drains
    } else if (k < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

// Between fork and exec only async-signal-safe calls: no allocation, no stdio.
void child_write(const char* s) {
  ssize_t ignored = ::write(2, s, std::strlen(s));
  (void)ignored;
}

[[noreturn]] void child_fail(const char* what, int err) {
  char digits[16];
  int i = sizeof digits;
  digits[--i] = '\0';
  do {
    digits[--i] = static_cast<char>('0' + err % 10);
    err /= 10;
  } while (err > 0 && i > 0);
  child_write(what);
  child_write(" (errno ");
  child_write(digits + i);
  child_write(")\n");
  _exit(127);
}

[[noreturn]] void exec_child(pid_t launcher, int out_w, int err_w, const char* cwd, const char* exec_error,
                             char* const* argv, char* const* envp, const sigset_t& mask) {
  // The rank must not outlive a launcher that died without stopping it (SIGKILL, a crash).
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) child_fail("launch: prctl(PR_SET_PDEATHSIG) failed", errno);
  if (getppid() != launcher) _exit(1);  // the launcher died before prctl took effect
  if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) child_fail("launch: dup2 onto stdout/stderr failed", errno);
  if (cwd[0] != '\0' && chdir(cwd) != 0) child_fail("launch: cannot enter the working directory", errno);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
  execve(argv[0], argv, envp);
  child_fail(exec_error, errno);
}

}  // namespace

Supervisor::Supervisor(std::vector<std::string> argv, std::vector<RankSpec> ranks, std::string cwd,
                       double kill_grace_s, WatchdogOptions watchdog)
    : argv_(std::move(argv)), cwd_(std::move(cwd)), grace_(kill_grace_s), self_(getpid()), watchdog_(watchdog) {
  // The ranks' pipes must not land on fds 0-2 (a launcher started with one closed), where
  // dup2 in the child would clobber them.
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) < 0)
      fail("launch: cannot open /dev/null for closed fd {}: {}", fd, std::strerror(errno));
  for (auto& r : ranks) children_.push_back(Child{std::move(r), -1, false, 0, {}, {}, -1});

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  // SIGPIPE too: a closed stdout then surfaces as EPIPE from write(), not as death.
  sigaddset(&set, SIGPIPE);
  for (int s : kStopSignals) sigaddset(&set, s);
  if (int rc = pthread_sigmask(SIG_BLOCK, &set, &old_mask_); rc != 0)
    fail("launch: pthread_sigmask failed: {}", std::strerror(rc));
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    fail("launch: signalfd failed: {}", std::strerror(err));
  }
  // With SIGCHLD ignored the kernel would reap the ranks itself and their statuses be lost.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &old_sigchld_);
}

Supervisor::~Supervisor() {
  // Only reached with ranks running if run() threw: leave no orphans behind.
  for (auto& c : children_) {
    if (c.running) {
      ::kill(c.pid, SIGKILL);
      while (waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    for (Stream* s : {&c.out, &c.err})
      if (s->fd >= 0) ::close(s->fd);
  }
  // Consume what is pending so that unblocking delivers nothing stale.
  signalfd_siginfo si;
  while (::read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
  }
  ::close(signal_fd_);
  sigaction(SIGCHLD, &old_sigchld_, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void Supervisor::say(const std::string& line) { write_all(2, line + "\n"); }

bool Supervisor::any_running() const {
  return std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.running; });
}

bool Supervisor::any_stream_open() const {
  return std::any_of(children_.begin(), children_.end(),
                     [](const Child& c) { return c.out.fd >= 0 || c.err.fd >= 0; });
}

void Supervisor::start(Child& c) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    setup_error_ = fmt::format("pipe for rank {} failed: {}", c.spec.rank, std::strerror(errno));
    return;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    setup_error_ = fmt::format("pipe for rank {} failed: {}", c.spec.rank, std::strerror(errno));
    ::close(out[0]);
    ::close(out[1]);
    return;
  }
  // Everything the child touches is prepared here: it may not allocate after fork.
  std::vector<char*> argv, envp;
  for (auto& a : argv_) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : c.spec.env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string exec_error = fmt::format("launch: cannot execute {}", argv_[0]);

  const pid_t pid = fork();
  if (pid == 0)
    exec_child(self_, out[1], err[1], cwd_.c_str(), exec_error.c_str(), argv.data(), envp.data(), old_mask_);
  const int fork_errno = errno;
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    setup_error_ = fmt::format("fork for rank {} failed: {}", c.spec.rank, std::strerror(fork_errno));
    ::close(out[0]);
    ::close(err[0]);
    return;
  }
  c.pid = pid;
  c.running = true;
  c.out = Stream{out[0], 1, {}};
  c.err = Stream{err[0], 2, {}};
  for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void Supervisor::begin_stop(int sig) {
  stopping_ = true;
  // With KILN_FLIGHT_RECORDER_DIR set (the ranks inherit it), first ask every rank still running
  // to dump its collectives' flight recorder (SIGUSR1, handled by a thread of each traced process
  // group) and give them a second to write, so a job that hung can be diagnosed after it is stopped.
  // Opt-in: SIGUSR1 kills a program that does not handle it.
  if (const char* fr = std::getenv("KILN_FLIGHT_RECORDER_DIR"); fr != nullptr && *fr != '\0' && any_running()) {
    say(fmt::format("launch: asking the ranks to dump their flight recorders into {} (SIGUSR1)", fr));
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, SIGUSR1);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace_);
  if (sig == 0) return;
  for (auto& c : children_)
    if (c.running) ::kill(c.pid, sig);  // ESRCH: it just exited, reap() will see it
}

void Supervisor::on_signal(int sig, int code) {
  if (!is_stop_signal(sig)) return;  // SIGCHLD is handled by reap(), SIGPIPE by write_all()
  if (!stopping_) {
    received_signal_ = sig;
    // A terminal's Ctrl-C (SI_KERNEL) already reached the ranks, which share our process
    // group; passing it on would deliver it twice.
    begin_stop(code == SI_KERNEL ? 0 : sig);
  } else if (!killed_) {
    say(fmt::format("launch: received {} while stopping; killing the ranks", signal_name(sig)));
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, SIGKILL);
    killed_ = true;
  }
}

void Supervisor::reap() {
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (!c.running) continue;
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    if (r < 0) {
      say(fmt::format("launch: lost track of rank {} (pid {}): waitpid: {}", c.spec.rank, c.pid, std::strerror(errno)));
      status = 255 << 8;
    }
    c.running = false;
    c.status = status;
    if (!any_running()) all_exited_at_ = Clock::now();
    // A rank preempted by a signal sent to it directly (not through the launcher) stops after
    // agreeing with the others, which stop too: let them finish rather than signal them again.
    const bool preempted = WIFEXITED(status) && WEXITSTATUS(status) == kExitPreempted;
    if (!succeeded(status) && !preempted && !stopping_) {
      first_failed_ = static_cast<int>(i);
      running_at_failure_ = static_cast<int>(std::count_if(children_.begin(), children_.end(),
                                                           [](const Child& o) { return o.running; }));
      begin_stop(SIGTERM);
    }
  }
}

void Supervisor::emit(const Child& c, const Stream& s, const std::string& text) {
  if (!target_ok_[s.target]) return;
  if (!write_all(s.target, fmt::format("[rank {}] {}\n", c.spec.rank, text))) target_ok_[s.target] = false;
}

void Supervisor::flush_lines(const Child& c, Stream& s, bool eof) {
  size_t start = 0;
  for (size_t nl; (nl = s.buf.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(c, s, s.buf.substr(start, nl - start));
  s.buf.erase(0, start);
  if (s.buf.size() >= kMaxLine || (eof && !s.buf.empty())) {
    emit(c, s, s.buf);
    s.buf.clear();
  }
}

void Supervisor::close_stream(Child& c, Stream& s) {
  flush_lines(c, s, /*eof=*/true);
  ::close(s.fd);
  s.fd = -1;
}

void Supervisor::pump(Child& c, Stream& s) {
  char buf[64 * 1024];
  const ssize_t n = ::read(s.fd, buf, sizeof buf);
  if (n > 0) {
    s.buf.append(buf, static_cast<size_t>(n));
    flush_lines(c, s, false);
  } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    close_stream(c, s);
  }
}

void Supervisor::loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, Stream*>> streams;
  while (any_running() || any_stream_open()) {
    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    streams.clear();
    for (auto& c : children_)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.emplace_back(&c, s);
        }
    Clock::time_point wake = Clock::time_point::max();
    if (stopping_ && !killed_ && any_running()) wake = kill_deadline_;
    if (watchdog_.timeout_s > 0 && !stopping_) wake = std::min(wake, Clock::now() + std::chrono::milliseconds(250));
    if (!any_running()) wake = std::min(wake, all_exited_at_ + kDrainAfterExit);
    int timeout = -1;
    if (wake != Clock::time_point::max()) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
      fail("launch: poll failed: {}", std::strerror(errno));

    if (fds[0].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
        on_signal(static_cast<int>(si.ssi_signo), si.ssi_code);
    }
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) pump(*streams[i - 1].first, *streams[i - 1].second);
    reap();

    const Clock::time_point now = Clock::now();
    watch(now);
    if (stopping_ && !killed_ && any_running() && now >= kill_deadline_) {
      for (auto& c : children_) {
        if (!c.running) continue;
        say(fmt::format("launch: rank {} (pid {}) still running {} s after being asked to stop; sending SIGKILL",
                        c.spec.rank, c.pid, grace_.count()));
        ::kill(c.pid, SIGKILL);
      }
      killed_ = true;
    }
    if (!any_running() && now >= all_exited_at_ + kDrainAfterExit)
      for (auto& c : children_)
        for (Stream* s : {&c.out, &c.err})
          if (s->fd >= 0) close_stream(c, *s);
  }
}

int Supervisor::run() {
  last_progress_ = Clock::now();
  for (auto& c : children_) {
    start(c);
    if (!setup_error_.empty()) break;
  }
  if (!setup_error_.empty()) {
    begin_stop(SIGTERM);
    if (!any_running()) all_exited_at_ = Clock::now();
  }
  loop();
  if (!setup_error_.empty()) {
    say(fmt::format("launch: {}; stopped the ranks already started", setup_error_));
    return 1;
  }
  const bool all_preempted = std::all_of(children_.begin(), children_.end(), [](const Child& o) {
    return WIFEXITED(o.status) && WEXITSTATUS(o.status) == kExitPreempted;
  });
  if (!stall_.empty()) {
    failure_ = "watchdog: " + stall_;
    say("launch: stopped the job: " + stall_);
    return kExitStalled;
  }
  if (first_failed_ >= 0) {
    const Child& c = children_[static_cast<size_t>(first_failed_)];
    failure_ = fmt::format("rank {} (pid {}) {}", c.spec.rank, c.pid, describe_status(c.status));
    say(fmt::format("launch: {}{}", failure_, running_at_failure_ > 0 ? "; stopped the other ranks" : ""));
    return exit_code(c.status);
  }
  if (all_preempted) {
    say(fmt::format("launch: {}every rank saved and stopped (exit status {}: preempted)",
                    received_signal_ ? fmt::format("received {}; ", signal_name(received_signal_)) : "",
                    kExitPreempted));
    return kExitPreempted;
  }
  if (received_signal_ != 0) {
    say(fmt::format("launch: received {}; stopped the ranks", signal_name(received_signal_)));
    return 128 + received_signal_;
  }
  return 0;
}

}  // namespace kiln::dist
