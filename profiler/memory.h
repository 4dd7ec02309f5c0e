// Memory accounting above the device allocators: a counting wrapper per device type (bytes
// allocated now and at peak, allocation counts), a PyTorch-like memory_summary(), and, while a
// Profiler records (or tag_allocations is on), every live allocation tagged with the kernel
// that made it, so an out-of-memory error can write a snapshot of live memory grouped by size
// and by op to a file its message names.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"

namespace kiln::profiler {

struct MemoryCounters {
  int64_t allocated = 0, peak = 0;  // bytes requested and not yet freed (since tracking began)
  int64_t allocs = 0, frees = 0;
};

/// Installs the counting wrappers over the allocators registered now (idempotent; CPU always,
/// CUDA when a backend is linked). Cheap: two relaxed atomic adds per allocation.
void track_memory();
/// Also keep a table of live allocations and the kernel that made each (for OOM snapshots).
void tag_allocations(bool on);
MemoryCounters memory_counters(DeviceType type);
/// Starts a new peak at the current allocation.
void reset_peak(DeviceType type);

/// A table per tracked device: allocated now / peak, allocation counts, the CPU allocator's
/// cache; "" lines for device types not tracked.
std::string memory_summary();

/// Where out-of-memory snapshots go (default: $KILN_OOM_SNAPSHOT_DIR, else the temp dir).
void set_oom_snapshot_dir(std::string dir);
/// Writes the live allocations (grouped by size and by op) to a new file; returns its path.
std::string write_memory_snapshot(const std::string& reason);

}  // namespace kiln::profiler
