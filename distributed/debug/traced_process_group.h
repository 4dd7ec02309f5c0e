// A ProcessGroup that observes another: every collective and transfer goes into the group's
// flight recorder, and, while a kiln::profiler::Profiler records, onto the trace's collective
// and send/receive tracks (start and end as the backend ran it). A wait that throws dumps the
// flight recorder before rethrowing; so does SIGUSR1 (every traced group of the process).
// Tracing the default group traces every group new_group makes after it (the pipeline's stage
// and replica groups, say): each keeps its own ring and dumps to its own file.
//
//   auto pg = dist::trace_process_group(dist::init_process_group());
//   dist::align_profiler_clock(*pg);  // the ranks' traces share a time origin
#pragma once

#include <memory>
#include <string>

#include "distributed/debug/flight_recorder.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

class TracedProcessGroup final : public ProcessGroup {
 public:
  /// `dump_dir` "": flight_recorder_dir(); capacity: flight_recorder_capacity() when 0 is not meant;
  /// `group`: which group this is, for the dump (the default group unless new_group made it).
  TracedProcessGroup(std::shared_ptr<ProcessGroup> inner, size_t capacity, std::string dump_dir,
                     FlightGroup group = {});
  ~TracedProcessGroup() override;

  std::string backend() const override { return inner_->backend(); }
  WorkPtr allreduce(Tensor t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr broadcast(Tensor t, int root) override;
  WorkPtr reduce(Tensor t, int root, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr allgather(std::vector<Tensor> outputs, Tensor input) override;
  WorkPtr reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr allgather_into_tensor(Tensor output, Tensor input) override;
  WorkPtr send(Tensor t, int dst, int tag = 0) override;
  WorkPtr recv(Tensor t, int src, int tag = 0) override;
  WorkPtr barrier() override;

  ProcessGroup& inner() { return *inner_; }
  const FlightRecorder& flight_recorder() const { return recorder_; }
  const FlightGroup& flight_group() const { return group_; }
  /// Writes this rank's flight recorder dump; returns its path.
  std::string dump_flight_recorder() const;
  /// A wait on `work` threw: marks it failed in the recorder and dumps (TracedWork calls it).
  void on_failure(const WorkPtr& work, const std::string& error);

 private:
  WorkPtr observe(const char* op, WorkPtr inner, std::vector<int64_t> numels, const Tensor& like, int peer, bool p2p);
  std::shared_ptr<ProcessGroup> inner_;
  FlightRecorder recorder_;
  std::string dump_dir_;
  FlightGroup group_;
};

/// Wraps `pg` with the flight recorder sized by $KILN_FLIGHT_RECORDER_ENTRIES (default 2000),
/// dumping to flight_recorder_dir(). When `pg` is the default group, every later new_group is
/// wrapped too (until destroy_process_group).
std::shared_ptr<TracedProcessGroup> trace_process_group(std::shared_ptr<ProcessGroup> pg);

/// A barrier, then every rank sets its profiler clock's origin to the moment it left it: the
/// ranks' traces share a time axis (to within the barrier's exit skew, microseconds on a host).
void align_profiler_clock(ProcessGroup& pg);

}  // namespace kiln::dist
