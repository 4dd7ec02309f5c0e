// distributed/distributed.h, the one include for distributed training: it compiles alone (its
// headers do not collide) and names a type or function from each of distributed/'s packages.
#include "distributed/distributed.h"

#include <doctest/doctest.h>

#include <type_traits>

namespace dist = kiln::dist;

TEST_CASE("the umbrella header reaches every distributed package") {
  CHECK(std::is_base_of_v<kiln::Error, dist::TimeoutError>);            // store
  CHECK(std::is_polymorphic_v<dist::Store>);                               // store
  CHECK(std::is_polymorphic_v<dist::ProcessGroup>);                        // backend
  CHECK(dist::get_world_size() == 1);                                   // backend: not initialised
  CHECK(dist::kExitPreempted == 75);                                    // launch
  CHECK(std::is_class_v<dist::DistributedDataParallel>);                // data_parallel
  CHECK(std::is_class_v<dist::ZeroRedundancyOptimizer>);                // data_parallel (ZeRO)
  CHECK(std::is_class_v<dist::Pipeline>);                               // pipeline
  CHECK(std::is_class_v<dist::FlightRecorder>);                         // debug
}
