// Rows of the op database: reductions, softmax family, norms, sorting and scans.
#include <cmath>

#include "tests/testing/op_db.h"

namespace kiln::test {

std::vector<OpInfo> reduction_rows() {
  const Arg x{{2, 3, 4}};
  const Arg x34{{3, 4}, 0.1, 1.1};  // positive
  return {
      {"sum", {x}, [](In v) { return v[0].sum(); }, "v[0].sum()"},
      {"sum dim 1", {x}, [](In v) { return v[0].sum({1}); }, "v[0].sum(1)"},
      {"sum dims 0 2 keepdim", {x}, [](In v) { return v[0].sum({0, 2}, true); }, "v[0].sum((0, 2), keepdim=True)"},
      {"sum over a size-0 dim", {{{0, 3}}}, [](In v) { return v[0].sum({0}); }, "v[0].sum(0)"},
      {"sum of a transposed view", {x34}, [](In v) { return sum(v[0].t(), {1}); }, "v[0].t().sum(1)"},
      {"mean", {x34}, [](In v) { return mean(v[0]); }, "v[0].mean()", 1e-5, "mean"},
      {"mean last dim", {x}, [](In v) { return v[0].mean({-1}); }, "v[0].mean(-1)"},
      {"prod dim 1", {{{2, 3}, 0.5, 2}}, [](In v) { return prod(v[0], {1}); }, "v[0].prod(1)"},
      {"prod dim 0", {{{4, 5}, 0.5, 2}}, [](In v) { return prod(v[0], {0}); }, "v[0].prod(0)", 1e-5, "prod"},
      {"amax dim 1", {x}, [](In v) { return v[0].amax({1}); }, "v[0].amax(1)"},
      {"amin dim 2 keepdim", {x}, [](In v) { return v[0].amin({2}, true); }, "v[0].amin(2, keepdim=True)"},
      {"max all", {x}, [](In v) { return v[0].max(); }, "v[0].max()"},
      {"max(dim)", {x}, [](In v) { return std::get<0>(max(v[0], 1)); }, "torch.max(v[0], 1)[0]"},
      {"min(dim) keepdim", {x}, [](In v) { return std::get<0>(min(v[0], 2, true)); }, "torch.min(v[0], 2, keepdim=True)[0]"},
      {"var", {x}, [](In v) { return v[0].var({1}); }, "v[0].var(1)"},
      {"var dim 1", {{{4, 5}}}, [](In v) { return var(v[0], {1}); }, "v[0].var(1)", 1e-5, "var"},
      {"std correction 0", {x}, [](In v) { return v[0].std({2}, 0); }, "v[0].std(2, correction=0)"},
      {"std", {{{4, 5}}}, [](In v) { return kiln::std(v[0], {1}); }, "v[0].std(1)", 1e-5, "std"},
      {"logsumexp", {x}, [](In v) { return v[0].logsumexp({1}); }, "v[0].logsumexp(1)"},
      {"logsumexp of large values", {{{4, 3}}}, [](In v) { return logsumexp(v[0] + 500.0, {1}); },
       "torch.logsumexp(v[0] + 500.0, 1)"},
      {"logsumexp dim 1", {{{4, 5}}}, [](In v) { return logsumexp(v[0], {1}); }, "torch.logsumexp(v[0], 1)", 1e-5,
       "logsumexp"},
      {"sum dim 1 (autocast)", {{{4, 5}}}, [](In v) { return sum(v[0], {1}); }, "v[0].sum(1)", 1e-5, "sum"},
      // ---- softmax family
      {"softmax", {x}, [](In v) { return v[0].softmax(1); }, "torch.softmax(v[0], 1)"},
      {"softmax dim 1", {{{4, 5}}}, [](In v) { return softmax(v[0], 1); }, "torch.softmax(v[0], 1)", 1e-5, "softmax"},
      {"softmax of a transposed view", {x}, [](In v) { return v[0].transpose(0, 2).softmax(0); },
       "torch.softmax(v[0].transpose(0, 2), 0)"},
      {"softmax of large values", {{{3, 5}}}, [](In v) { return softmax(v[0] * 300.0, 1); }, "torch.softmax(v[0] * 300.0, 1)",
       1e-4},
      {"log_softmax", {x}, [](In v) { return v[0].log_softmax(-1); }, "torch.log_softmax(v[0], -1)"},
      {"log_softmax dim 1", {{{4, 5}}}, [](In v) { return log_softmax(v[0], 1); }, "torch.log_softmax(v[0], 1)", 1e-5,
       "log_softmax"},
      {"log_softmax dim 0", {{{3, 5}}}, [](In v) { return log_softmax(v[0], 0); }, "torch.log_softmax(v[0], 0)"},
      // ---- norms
      {"vector_norm 2", {{{3, 4}}}, [](In v) { return linalg::vector_norm(v[0], 2, {1}); },
       "torch.linalg.vector_norm(v[0], 2, dim=1)"},
      {"vector_norm 1", {{{3, 4}}}, [](In v) { return linalg::vector_norm(v[0], 1); }, "torch.linalg.vector_norm(v[0], 1)"},
      {"vector_norm 3", {{{3, 4}}}, [](In v) { return linalg::vector_norm(v[0], 3, {0}, true); },
       "torch.linalg.vector_norm(v[0], 3, dim=0, keepdim=True)"},
      {"vector_norm inf", {{{3, 4}}}, [](In v) { return linalg::vector_norm(v[0], INFINITY, {1}); },
       "torch.linalg.vector_norm(v[0], float('inf'), dim=1)"},
      {"norm", {x34}, [](In v) { return norm(v[0]); }, "torch.norm(v[0])"},
      // ---- sorting and scans
      {"sort values", {{{3, 5}}}, [](In v) { return std::get<0>(sort(v[0], 1)); }, "torch.sort(v[0], 1)[0]"},
      {"sort descending dim 0", {{{4, 3}}}, [](In v) { return std::get<0>(sort(v[0], 0, true)); },
       "torch.sort(v[0], 0, descending=True)[0]"},
      {"topk", {{{3, 6}}}, [](In v) { return std::get<0>(topk(v[0], 2)); }, "torch.topk(v[0], 2)[0]"},
      {"topk smallest", {{{5, 2}}}, [](In v) { return std::get<0>(topk(v[0], 3, 0, false)); },
       "torch.topk(v[0], 3, 0, largest=False)[0]"},
      {"cumsum", {{{3, 5}}}, [](In v) { return cumsum(v[0], 1); }, "torch.cumsum(v[0], 1)"},
      {"cumsum dim 0", {{{7, 2}}}, [](In v) { return cumsum(v[0], 0); }, "torch.cumsum(v[0], 0)"},
      {"cumprod", {{{2, 6}, 0.5, 1.5}}, [](In v) { return cumprod(v[0], 1); }, "torch.cumprod(v[0], 1)"},
      {"cumprod through a zero", {{{2, 5}, 0.5, 1.5}},
       [](In v) { return cumprod(v[0] * ints(v[0], {1, 1, 0, 1, 1}).to(v[0].dtype()), 1); },
       "torch.cumprod(v[0] * ints([1, 1, 0, 1, 1]).to(v[0].dtype), 1)"},
      // ---- integer results
      {"argmax", {x34}, [](In v) { return argmax(v[0], 1); }, "torch.argmax(v[0], 1)", 0, {}, false},
      {"argmin", {x34}, [](In v) { return argmin(v[0], 1); }, "torch.argmin(v[0], 1)", 0, {}, false},
      {"max(dim) indices", {x34}, [](In v) { return std::get<1>(max(v[0], 1)); }, "torch.max(v[0], 1)[1]", 0, {}, false},
      {"argsort", {x34}, [](In v) { return argsort(v[0], 1); }, "torch.argsort(v[0], 1)", 0, {}, false},
      {"topk indices", {x34}, [](In v) { return std::get<1>(topk(v[0], 2)); }, "torch.topk(v[0], 2)[1]", 0, {}, false},
      {"one_hot", {x34}, [](In v) { return one_hot(argmax(v[0], 1), 4); }, "F.one_hot(torch.argmax(v[0], 1), 4)", 0, {},
       false},
  };
}

}  // namespace kiln::test
