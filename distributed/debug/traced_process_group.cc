#include "distributed/debug/traced_process_group.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "distributed/backend/init.h"
#include "profiler/profiler.h"

namespace kiln::dist {
namespace {

/// The backend's Work, seen through the traced group: waiting records the collective on the
/// profiler's tracks and, on failure, dumps the flight recorder before rethrowing.
class TracedWork final : public Work {
 public:
  TracedWork(WorkPtr inner, TracedProcessGroup* group, profiler::Track track, int64_t bytes, std::string shapes)
      : Work(inner->name(), inner->seq()), inner_(std::move(inner)), group_(group), track_(track), bytes_(bytes),
        shapes_(std::move(shapes)) {}

  bool is_completed() const override { return inner_->is_completed(); }

  void wait() override {
    try {
      inner_->wait();
    } catch (const std::exception& e) {
      group_->on_failure(inner_, e.what());
      throw;
    }
    std::lock_guard<std::mutex> lock(mu_);
    started_ = inner_->started();
    finished_ = inner_->finished();
    done_ = true;
    if (!traced_ && profiler::is_recording()) {
      profiler::Event ev;
      ev.name = name_;  // the sequence number is an argument: the table groups by op
      ev.category = track_ == profiler::Track::kCollective ? "collective" : "p2p";
      ev.track = track_;
      ev.start_ns = profiler::to_profiler_ns(started_);
      ev.end_ns = std::max(profiler::to_profiler_ns(finished_), ev.start_ns);
      ev.bytes = bytes_;
      ev.seq = static_cast<int64_t>(seq_);
      ev.shapes = shapes_;
      profiler::record(std::move(ev));
    }
    traced_ = true;
  }

 private:
  WorkPtr inner_;
  TracedProcessGroup* group_;
  profiler::Track track_;
  int64_t bytes_;
  std::string shapes_;
  bool traced_ = false;
};

// SIGUSR1: the handler only writes a byte to a pipe; a thread reads it and dumps every traced
// group of the process (file I/O and locks are not async-signal-safe).
std::mutex g_groups_mu;
std::vector<TracedProcessGroup*> g_groups;
int g_pipe[2] = {-1, -1};

// The handler installed before ours (the watchdog's stack dump, say), called too.
struct sigaction g_previous_usr1 {};

void on_sigusr1(int sig) {
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(g_pipe[1], &b, 1);
  if (g_previous_usr1.sa_handler != SIG_DFL && g_previous_usr1.sa_handler != SIG_IGN &&
      g_previous_usr1.sa_handler != nullptr && !(g_previous_usr1.sa_flags & SA_SIGINFO))
    g_previous_usr1.sa_handler(sig);
}

void install_sigusr1_dumper() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe(g_pipe) != 0) return;
    std::thread([] {
      char b;
      while (::read(g_pipe[0], &b, 1) == 1) {
        std::lock_guard<std::mutex> lock(g_groups_mu);
        for (TracedProcessGroup* g : g_groups) {
          try {
            std::fprintf(stderr, "flight recorder: SIGUSR1: wrote %s\n", g->dump_flight_recorder().c_str());
          } catch (const std::exception& e) {
            std::fprintf(stderr, "flight recorder: SIGUSR1: dump failed: %s\n", e.what());
          }
        }
      }
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, &g_previous_usr1);
  });
}

std::string shapes_of(const std::vector<int64_t>& numels) {
  std::string s;
  for (int64_t n : numels) s += (s.empty() ? "" : ", ") + fmt::format("[{}]", n);
  return s;
}

}  // namespace

TracedProcessGroup::TracedProcessGroup(std::shared_ptr<ProcessGroup> inner, size_t capacity, std::string dump_dir,
                                       FlightGroup group)
    : ProcessGroup(inner->rank(), inner->size(), inner->timeout()), inner_(std::move(inner)), recorder_(capacity),
      dump_dir_(dump_dir.empty() ? flight_recorder_dir() : std::move(dump_dir)), group_(std::move(group)) {
  install_sigusr1_dumper();
  std::lock_guard<std::mutex> lock(g_groups_mu);
  g_groups.push_back(this);
}

TracedProcessGroup::~TracedProcessGroup() {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  g_groups.erase(std::remove(g_groups.begin(), g_groups.end(), this), g_groups.end());
}

std::string TracedProcessGroup::dump_flight_recorder() const {
  return recorder_.dump(dump_dir_, rank_, size_, inner_->backend(), group_);
}

void TracedProcessGroup::on_failure(const WorkPtr& work, const std::string& error) {
  recorder_.mark_failed(work, error);
  try {
    std::fprintf(stderr, "flight recorder: rank %d (%s): %s #%llu failed; wrote %s\n", group_.global_rank(rank_),
                 group_.name.c_str(), work->name().c_str(), static_cast<unsigned long long>(work->seq()),
                 dump_flight_recorder().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flight recorder: rank %d (%s): dump failed: %s\n", group_.global_rank(rank_),
                 group_.name.c_str(), e.what());
  }
}

WorkPtr TracedProcessGroup::observe(const char* op, WorkPtr inner, std::vector<int64_t> numels, const Tensor& like,
                                    int peer, bool p2p) {
  int64_t bytes = 0;
  for (int64_t n : numels) bytes += n * static_cast<int64_t>(like.defined() ? like.element_size() : 0);
  std::string shapes = shapes_of(numels);
  recorder_.add(FlightEntry{op, p2p, inner->seq(), peer, std::move(numels),
                            like.defined() ? std::string(dtype_name(like.dtype())) : "", Work::Clock::now(), inner, ""});
  profiler::Track track = !p2p ? profiler::Track::kCollective
                          : std::string_view(op) == "send" ? profiler::Track::kSend
                                                           : profiler::Track::kRecv;
  return std::make_shared<TracedWork>(std::move(inner), this, track, bytes, std::move(shapes));
}

WorkPtr TracedProcessGroup::allreduce(Tensor t, ReduceOp op) {
  return observe("allreduce", inner_->allreduce(t, op), {t.defined() ? t.numel() : 0}, t, -1, false);
}
WorkPtr TracedProcessGroup::broadcast(Tensor t, int root) {
  return observe("broadcast", inner_->broadcast(t, root), {t.defined() ? t.numel() : 0}, t, root, false);
}
WorkPtr TracedProcessGroup::reduce(Tensor t, int root, ReduceOp op) {
  return observe("reduce", inner_->reduce(t, root, op), {t.defined() ? t.numel() : 0}, t, root, false);
}
WorkPtr TracedProcessGroup::allgather(std::vector<Tensor> outputs, Tensor input) {
  int64_t n = input.defined() ? input.numel() : 0;
  return observe("allgather", inner_->allgather(std::move(outputs), input), {n}, input, -1, false);
}
WorkPtr TracedProcessGroup::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  int64_t n = output.defined() ? output.numel() : 0;
  return observe("reduce_scatter", inner_->reduce_scatter(output, std::move(inputs), op), {n}, output, -1, false);
}
// The flat forms go to the backend's own (NCCL's direct calls, the shared-memory path), recorded
// as one collective each.
WorkPtr TracedProcessGroup::reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op) {
  int64_t n = output.defined() ? output.numel() : 0;
  return observe("reduce_scatter", inner_->reduce_scatter_tensor(output, input, op), {n}, output, -1, false);
}
WorkPtr TracedProcessGroup::allgather_into_tensor(Tensor output, Tensor input) {
  int64_t n = input.defined() ? input.numel() : 0;
  return observe("allgather", inner_->allgather_into_tensor(output, input), {n}, input, -1, false);
}
WorkPtr TracedProcessGroup::send(Tensor t, int dst, int tag) {
  return observe("send", inner_->send(t, dst, tag), {t.defined() ? t.numel() : 0}, t, dst, true);
}
WorkPtr TracedProcessGroup::recv(Tensor t, int src, int tag) {
  return observe("recv", inner_->recv(t, src, tag), {t.defined() ? t.numel() : 0}, t, src, true);
}
WorkPtr TracedProcessGroup::barrier() { return observe("barrier", inner_->barrier(), {}, Tensor(), -1, false); }

std::shared_ptr<TracedProcessGroup> trace_process_group(std::shared_ptr<ProcessGroup> pg) {
  KILN_CHECK(pg != nullptr, "trace_process_group: the process group is null");
  if (is_initialized() && pg == default_group())
    set_new_group_wrapper([](std::shared_ptr<ProcessGroup> group, int id, const std::vector<int>& ranks) {
      return std::make_shared<TracedProcessGroup>(std::move(group), flight_recorder_capacity(), "",
                                                  FlightGroup{fmt::format("group{}", id), ranks});
    });
  return std::make_shared<TracedProcessGroup>(std::move(pg), flight_recorder_capacity(), "");
}

void align_profiler_clock(ProcessGroup& pg) {
  pg.barrier()->wait();
  profiler::set_clock_origin(Work::Clock::now());
}

}  // namespace kiln::dist
