// Linking //cuda registers a CUDA kernel for every entry of core's kernel table (checked without
// a GPU: registration happens in static initialisers), and core sees the CUDA allocator.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/kernels.h"

using namespace kiln;

TEST_CASE("every kernel of core's table has a CUDA implementation") {
  std::vector<std::string> missing;
#define KILN_CHECK_CUDA_KERNEL_(NAME, SIG) \
  if (!kernels::NAME.has(DeviceType::CUDA)) missing.push_back(#NAME);
  KILN_KERNEL_LIST(KILN_CHECK_CUDA_KERNEL_)
#undef KILN_CHECK_CUDA_KERNEL_
  CHECK_MESSAGE(missing.empty(), fmt::format("no CUDA kernel for: {}", fmt::join(missing, ", ")));
}

TEST_CASE("the CUDA and pinned allocators are registered") {
  CHECK_NOTHROW(allocator_for(DeviceType::CUDA));
  CHECK(pinned_allocator() != nullptr);
}
