// Writes every op database row's f64 inputs, output, upstream gradient weight and input gradients
// to a text file (or stdout), for torch_compare.py to replay in PyTorch. One block per row:
//   row <name> / torch <expression> / flags <differentiable> / in|out|w|grad <ndim> <dims> <values>
// and, for a row with an integer pass, per integer dtype:
//   int <input dtype> <result dtype> / iin|iout <ndim> <dims> <values>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/grad_mode.h"
#include "tests/testing/op_db.h"

using namespace kiln;

namespace {

void write(std::ostream& os, const char* tag, const Tensor& t) {
  os << tag << ' ' << t.dim();
  for (int64_t d : t.sizes()) os << ' ' << d;
  char buf[40];
  for (double v : t.to(kCPU).to(kFloat64).contiguous().to_vector<double>()) {
    std::snprintf(buf, sizeof buf, " %.17g", v);
    os << buf;
  }
  os << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  std::ofstream file;
  if (argc > 1) file.open(argv[1]);
  std::ostream& os = argc > 1 ? file : std::cout;
  const auto& db = test::op_db();
  for (size_t i = 0; i < db.size(); ++i) {
    const test::OpInfo& row = db[i];
    os << "row " << row.name << "\ntorch " << row.torch << "\nflags " << row.differentiable << '\n';
    std::vector<Tensor> in = test::make_inputs(row, i, kFloat64);
    for (Tensor& t : in) {
      write(os, "in", t);
      t = t.detach().set_requires_grad(row.differentiable);
    }
    Tensor y = row.fn(in);
    write(os, "out", y.detach());
    if (row.differentiable) {
      // The upstream gradient: random but seeded, or ones for the pinned rows (their gradients of sum(fn)).
      Generator g(7);
      Tensor w = row.gradcheck ? rand(y.sizes(), kFloat64, &g) : ones(y.sizes(), kFloat64);
      write(os, "w", w);
      if (y.requires_grad()) (y * w).sum().backward();
      for (const Tensor& t : in) write(os, "grad", t.grad().defined() ? t.grad() : zeros_like(t));
    }
    if (row.integers != test::Integers::no) {
      for (DType dt : {kInt32, kInt64}) {
        std::vector<Tensor> ints = test::make_int_inputs(row, i, dt);
        Tensor r = row.fn(ints);
        os << "int " << dtype_name(dt) << ' ' << dtype_name(r.dtype()) << '\n';
        for (const Tensor& t : ints) write(os, "iin", t);
        write(os, "iout", r);
      }
    }
    os << "end\n";
  }
  if (argc > 1 && !file) {
    std::cerr << "op_dump: cannot write " << argv[1] << '\n';
    return 1;
  }
  return 0;
}
