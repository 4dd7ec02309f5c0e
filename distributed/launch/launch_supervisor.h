// The launcher's process supervision: fork/exec of the ranks, one poll() loop over their output
// pipes and a signalfd (SIGCHLD and the stop signals), and the stop sequence (SIGTERM, grace,
// SIGKILL). Single-threaded on purpose: fork() is only safe in a process without other threads.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace kiln::dist {

struct RankSpec {
  int rank = 0;
  std::vector<std::string> env;  // "NAME=value", the whole environment
  std::string heartbeat_file;    // watched by the watchdog (also in env as KILN_HEARTBEAT_FILE)
};

/// The launcher's watchdog: once every rank has written its heartbeat file, when none has changed
/// for `timeout_s` seconds (0: off), it names each rank's last step, sends every rank SIGUSR1 (stack dump; the hook for a
/// collective flight recorder), waits `dump_wait_s`, then stops the job (exit status 124).
struct WatchdogOptions {
  double timeout_s = 0;
  double dump_wait_s = 2;
};

class Supervisor {
 public:
  /// `argv[0]` is the absolute path to execute; `cwd` empty keeps the current directory.
  Supervisor(std::vector<std::string> argv, std::vector<RankSpec> ranks, std::string cwd, double kill_grace_s,
             WatchdogOptions watchdog = {});
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Starts every rank, relays their output until all have exited, and returns the launcher's
  /// exit status (see launch()).
  int run();

  /// After run(): what ended the round when a rank failed ("rank 1 (pid 123) was killed by
  /// signal 9 (SIGKILL)"), else empty.
  const std::string& failure() const { return failure_; }
  /// After run(): the stop signal the launcher itself received (0: none).
  int received_signal() const { return received_signal_; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Stream {
    int fd = -1;     // read end of the rank's pipe
    int target = 1;  // the launcher's fd its lines go to
    std::string buf;
  };
  struct Child {
    RankSpec spec;
    pid_t pid = -1;
    bool running = false;
    int status = 0;
    Stream out, err;
    int64_t last_step = -1;  // its heartbeat
  };

  void start(Child& c);
  void loop();
  void on_signal(int sig, int code);
  void reap();
  void pump(Child& c, Stream& s);
  void emit(const Child& c, const Stream& s, const std::string& text);
  void flush_lines(const Child& c, Stream& s, bool eof);
  void close_stream(Child& c, Stream& s);
  void begin_stop(int sig);
  void say(const std::string& line);
  bool any_running() const;
  void watch(Clock::time_point now);
  bool any_stream_open() const;

  std::vector<std::string> argv_;
  std::string cwd_;
  std::chrono::duration<double> grace_;
  std::vector<Child> children_;

  int signal_fd_ = -1;
  sigset_t old_mask_{};
  struct sigaction old_sigchld_ {};
  pid_t self_ = -1;
  bool target_ok_[3] = {true, true, true};

  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_{};
  Clock::time_point all_exited_at_{};
  int received_signal_ = 0;    // a stop signal the launcher got
  int first_failed_ = -1;      // index into children_
  int running_at_failure_ = 0;  // ranks still running when the first one failed
  std::string setup_error_;    // a fork or pipe failure while starting
  std::string failure_;        // see failure()
  WatchdogOptions watchdog_;
  Clock::time_point last_progress_{};  // when a heartbeat last changed (or the start)
  Clock::time_point stall_stop_at_ = Clock::time_point::max();  // SIGUSR1 sent; stop then
  std::string stall_;          // the watchdog's report when it fired
};

}  // namespace kiln::dist
