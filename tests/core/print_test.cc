// Tensor printing follows PyTorch's layout: shared widths, float styles, nesting, summaries of
// large tensors, and a suffix for dtype / size / autograd state.
#include <limits>
#include <sstream>

#include "tests/testing/compare.h"

using namespace kiln;

TEST_CASE("floats print with 4 decimals, aligned, and a dtype suffix when not f32") {
  Tensor x = tensor({1.0, -2.5, 3.0, 4.0}, kFloat64).view({2, 2});
  CHECK(x.str() ==
        "tensor([[ 1.0000, -2.5000],\n"
        "        [ 3.0000,  4.0000]], dtype=f64)");
  CHECK(tensor({0.25, 10.5}).str() == "tensor([ 0.2500, 10.5000])");
  CHECK(scalar_tensor(3.5, {}).str() == "tensor(3.5000)");
  CHECK(tensor({0.5, 1.25}, kFloat16).str() == "tensor([0.5000, 1.2500], dtype=f16)");
  CHECK(tensor({0.5}, kBFloat16).str() == "tensor([0.5000], dtype=bf16)");
}

TEST_CASE("whole-valued floats print as '1.' and spread-out values in scientific notation") {
  CHECK(tensor({1.0, 2.0, -30.0}).str() == "tensor([  1.,   2., -30.])");
  CHECK(zeros({3}).str() == "tensor([0., 0., 0.])");
  CHECK(tensor({1e-5, 1.0}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(tensor({1e9, 2.0}).str() == "tensor([1.0000e+09, 2.0000e+00])");
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(tensor({1.5, nan, -inf}).str() == "tensor([1.5000,    nan,   -inf])");
  CHECK(tensor({2.0, inf}).str() == "tensor([2., inf])");
}

TEST_CASE("integers and booleans print plainly") {
  CHECK(tensor(std::vector<int64_t>{-5, 10, 3}).str() == "tensor([-5, 10,  3])");
  CHECK(tensor(std::vector<int32_t>{7, 8}).str() == "tensor([7, 8], dtype=i32)");
  CHECK(tensor(std::vector<bool>{true, false}).str() == "tensor([ True, False])");
  CHECK(scalar_tensor(42, kInt64).str() == "tensor(42)");
  CHECK(arange(8).view({2, 2, 2}).str() ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]])");
}

TEST_CASE("strided views print their logical order") {
  Tensor x = arange(6).view({2, 3}).t();
  CHECK(x.str() ==
        "tensor([[0, 3],\n"
        "        [1, 4],\n"
        "        [2, 5]])");
  CHECK(arange(6).slice(0, 1, 6, 2).str() == "tensor([1, 3, 5])");
  CHECK(tensor({2.0}).expand({2, 2}).str() == "tensor([[2., 2.],\n        [2., 2.]])");
}

TEST_CASE("empty tensors show their size and any dtype but f32") {
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({2, 0}).str() == "tensor([], size=[2, 0])");
  CHECK(zeros({0}, kInt64).str() == "tensor([], dtype=i64)");
}

TEST_CASE("large tensors are summarised with the first and last 3 entries per dim") {
  CHECK(arange(2000).view({2, 1000}).str() ==
        "tensor([[   0,    1,    2,  ...,  997,  998,  999],\n"
        "        [1000, 1001, 1002,  ..., 1997, 1998, 1999]])");
  Tensor cube = arange(20 * 20 * 20).view({20, 20, 20});
  std::string s = cube.str();
  CHECK(s.find("...") != std::string::npos);
  CHECK(s.rfind("tensor([[[   0,    1,    2,  ...,   17,   18,   19],", 0) == 0);
  CHECK(s.find("7999]]])") != std::string::npos);
  CHECK(s.size() < 3000);  // 7 x 7 rows of 7 values, not 8000 values
  // 1000 elements exactly are still printed in full.
  CHECK(arange(1000).str().find("...") == std::string::npos);
}

TEST_CASE("long rows wrap at 80 columns") {
  std::string s = arange(40).str();
  std::string want = "tensor([";
  for (int i = 0; i < 40; ++i) {
    if (i > 0) want += i % 18 == 0 ? ",\n        " : ", ";
    if (i < 10) want += " ";
    want += std::to_string(i);
  }
  want += "])";
  CHECK(s == want);
}

TEST_CASE("autograd state and undefined tensors") {
  Tensor w = ones({2});
  w.set_requires_grad(true);
  CHECK(w.str() == "tensor([1., 1.], requires_grad)");
  CHECK(Tensor().str() == "tensor(undefined)");
  std::ostringstream os;
  os << arange(3);
  CHECK(os.str() == "tensor([0, 1, 2])");
}
