// KILN_GEMM chooses the GEMM library once, at the first GEMM; a value Kiln does not know is an
// error that names it. Its own binary: the choice is made once per process.
#include <cstdlib>
#include <string>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "tests/testing/compare.h"

using namespace kiln;

TEST_CASE("an unknown KILN_GEMM is an error naming the value and the accepted ones") {
  ::setenv("KILN_GEMM", "mkl", 1);
  try {
    cpu::sgemm_library();
    FAIL("KILN_GEMM=mkl was accepted");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    CHECK(what.find("KILN_GEMM=mkl") != std::string::npos);
    CHECK(what.find("eigen") != std::string::npos);
    CHECK(what.find("onednn") != std::string::npos);
  }
}
