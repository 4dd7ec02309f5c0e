// Signal handlers for PreemptionGuard: async-signal-safe (an atomic flag, _exit), nothing more.
#include "distributed/launch/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "core/ops.h"

namespace kiln::dist {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_count{0};
struct sigaction g_old_term {}, g_old_int {};

void on_stop_signal(int sig) {
  if (g_count.fetch_add(1) > 0) _exit(128 + sig);  // the second signal: no more grace
  g_signal.store(sig);
  static const char kMsg[] = "stop signal received: finishing the current step, then saving and exiting "
                             "(send it again to exit at once)\n";
  ssize_t ignored = ::write(2, kMsg, sizeof kMsg - 1);
  (void)ignored;
}

}  // namespace

PreemptionGuard::PreemptionGuard() {
  g_signal = 0;
  g_count = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and collectives continue; the loop checks the flag
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

PreemptionGuard::~PreemptionGuard() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

bool PreemptionGuard::requested() { return g_signal.load() != 0; }
int PreemptionGuard::signal() { return g_signal.load(); }

bool PreemptionGuard::should_stop(ProcessGroup* pg, Device comm) const {
  if (pg == nullptr) return requested();
  Tensor flag = full({1}, requested() ? 1 : 0, dtype(kInt32)).to(comm);
  pg->allreduce(flag, ReduceOp::kMax)->wait();
  return flag.to(kCPU).item<int32_t>() > 0;
}

}  // namespace kiln::dist
