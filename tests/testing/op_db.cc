// The database's assembly and the helpers its rows share.
#include "tests/testing/op_db.h"

#include <cmath>
#include <set>

#include "core/error.h"

namespace kiln::test {

const std::vector<OpInfo>& op_db() {
  static const std::vector<OpInfo> rows = [] {
    std::vector<OpInfo> all;
    for (auto family : {elementwise_rows, reduction_rows, shape_rows, nn_rows})
      for (OpInfo& r : family()) all.push_back(std::move(r));
    std::set<std::string> names;
    for (const OpInfo& r : all) KILN_CHECK(names.insert(r.name).second, "op_db: two rows named '{}'", r.name);
    return all;
  }();
  return rows;
}

std::vector<Tensor> make_inputs(const OpInfo& row, size_t index, DType dtype, std::optional<DType> as) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < row.args.size(); ++i) {
    const Arg& a = row.args[i];
    const DType dt = a.keep_f32 && dtype != kFloat64 ? kFloat32 : dtype;
    Tensor x;
    if (!a.values.empty()) {
      x = tensor(a.values, a.shape, kFloat64);
    } else {
      Generator g((index + 2) * 31 + i);
      x = rand(a.shape, kFloat64, &g) * (a.hi - a.lo) + a.lo;
    }
    x = x.to(dt);
    if (as && !a.keep_f32) x = x.to(*as);
    in.push_back(x.contiguous());
  }
  return in;
}

std::vector<Tensor> make_int_inputs(const OpInfo& row, size_t index, DType dtype) {
  std::vector<Tensor> in;
  for (const Tensor& x : make_inputs(row, index, kFloat64)) {
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) e = std::round(e);
    in.push_back(tensor(v, x.sizes(), kFloat64).to(dtype));
  }
  return in;
}

Tensor ints(const Tensor& like, std::vector<int64_t> v, const Shape& shape) {
  return tensor(v, shape).to(like.device());
}

Tensor constant(const Tensor& like, const Shape& shape, double value) {
  return full(shape, value, TensorOptions(like.dtype()).device(like.device()));
}

DType stat_dtype(const Tensor& like) { return like.dtype() == kFloat64 ? kFloat64 : kFloat32; }

}  // namespace kiln::test
