// Kiln's error types: KILN_CHECK names the failed check's file:line, KILN_ASSERT is an
// InternalError (a Kiln bug, not bad input), and a kernel missing for a device is a
// NotImplementedError; all of them are kiln::Errors.
#include <doctest/doctest.h>

#include <string>

#include "core/kernels.h"
#include "core/op.h"

namespace kiln {
namespace {

void check_positive(int x) { KILN_CHECK(x > 0, "check_positive: expected a positive value, got {}", x); }

void assert_sorted(int a, int b) { KILN_ASSERT(a <= b, "assert_sorted: {} > {}", a, b); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("KILN_CHECK throws kiln::Error naming the values and the file:line of the check") {
  CHECK_NOTHROW(check_positive(1));
  try {
    check_positive(-3);
    FAIL("no error");
  } catch (const InternalError&) {
    FAIL("a user-input check must not be an InternalError");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(contains(msg, "check_positive: expected a positive value, got -3"), msg);
    CHECK_MESSAGE(contains(msg, "tests/core/error_test.cc:14]"), msg);
  }
}

TEST_CASE("KILN_ASSERT throws InternalError with the condition and the file:line") {
  CHECK_NOTHROW(assert_sorted(1, 2));
  try {
    assert_sorted(5, 2);
    FAIL("no error");
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(contains(msg, "internal error: a <= b: assert_sorted: 5 > 2"), msg);
    CHECK_MESSAGE(contains(msg, "tests/core/error_test.cc:16]"), msg);
    CHECK_MESSAGE(contains(msg, "a bug in Kiln"), msg);
  }
  CHECK_THROWS_AS(assert_sorted(5, 2), Error);  // existing catch sites still catch it
}

TEST_CASE("a missing kernel is a NotImplementedError naming the kernel and the device") {
  // This test links //core only, so no CUDA kernel is registered: the CPU one is found, the
  // CUDA one is not.
  CHECK_NOTHROW(kernels::fill[Device(DeviceType::CPU, 0)]);
  try {
    kernels::fill[Device(DeviceType::CUDA, 0)];
    FAIL("no error");
  } catch (const NotImplementedError& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(contains(msg, "fill: no kernel registered for device cuda:0"), msg);
    CHECK_MESSAGE(contains(msg, "core/op.h:"), msg);
  }
  KernelStub<void(int)> stub("test_kernel");
  CHECK_THROWS_AS(stub[Device(DeviceType::CPU, 0)], NotImplementedError);
  CHECK_THROWS_AS(stub[Device(DeviceType::CPU, 0)], Error);
}

TEST_CASE("messages show shapes, dtypes and devices as PyTorch users read them, with format specs") {
  // core/error.h formats std::vector<int64_t> itself (fmt/ranges.h's "[2, 3]" without its header).
  CHECK(fmt::format("{}", Shape{2, 3}) == "[2, 3]");
  CHECK(fmt::format("{}", Shape{}) == "[]");
  CHECK(fmt::format("{} x {}", Shape{-1}, IntList{4, 0, 7}) == "[-1] x [4, 0, 7]");
  CHECK(fmt::format("{}|{:>5}|", kFloat32, kFloat16) == "f32|  f16|");
  CHECK(fmt::format("{}|{:<6}|", kCPU, Device(DeviceType::CPU)) == "cpu|cpu   |");
}

}  // namespace
}  // namespace kiln
