// Rows of the op database: views, joins, conversions, rearranging, padding and indexing.
#include "tests/testing/op_db.h"

namespace kiln::test {

std::vector<OpInfo> shape_rows() {
  const Arg x{{2, 3, 4}};
  const Arg m{{3, 4}};
  return {
      // ---- views (their gradients flow back through the view)
      {"reshape", {x}, [](In v) { return v[0].reshape({6, 4}); }, "v[0].reshape(6, 4)"},
      {"reshape of a transposed view", {m}, [](In v) { return reshape(v[0].t(), {12}); }, "v[0].t().reshape(12)"},
      {"reshape after transpose", {x}, [](In v) { return v[0].transpose(0, 1).reshape({3, 8}); },
       "v[0].transpose(0, 1).reshape(3, 8)"},
      {"view", {x}, [](In v) { return v[0].view({-1}); }, "v[0].view(-1)"},
      {"transpose", {m}, [](In v) { return transpose(v[0], 0, 1); }, "v[0].transpose(0, 1)"},
      {"permute", {x}, [](In v) { return v[0].permute({2, 0, 1}); }, "v[0].permute(2, 0, 1)"},
      {"narrow", {x}, [](In v) { return v[0].narrow(1, 1, 2); }, "v[0].narrow(1, 1, 2)"},
      {"slice step 2", {x}, [](In v) { return v[0].slice(2, 0, 4, 2); }, "v[0][:, :, 0:4:2]"},
      {"select", {x}, [](In v) { return v[0].select(1, 2); }, "v[0].select(1, 2)"},
      {"index [1]", {x}, [](In v) { return v[0][1]; }, "v[0][1]"},
      {"expand", {x}, [](In v) { return v[0].unsqueeze(1).expand({2, 5, 3, 4}); }, "v[0].unsqueeze(1).expand(2, 5, 3, 4)"},
      {"squeeze", {{{3, 1, 2}}}, [](In v) { return v[0].squeeze(1); }, "v[0].squeeze(1)"},
      {"squeeze all", {m}, [](In v) { return squeeze(v[0].unsqueeze(0)); }, "v[0].unsqueeze(0).squeeze()"},
      {"unsqueeze", {m}, [](In v) { return unsqueeze(v[0], 1); }, "v[0].unsqueeze(1)"},
      {"flatten", {x}, [](In v) { return v[0].flatten(1); }, "v[0].flatten(1)"},
      {"flatten all", {m}, [](In v) { return flatten(v[0]); }, "v[0].flatten()"},
      {"contiguous", {m}, [](In v) { return v[0].t().contiguous(); }, "v[0].t().contiguous()"},
      {"clone", {x}, [](In v) { return v[0].clone(); }, "v[0].clone()"},
      // Through f32 the finite difference needs a step f32 can resolve.
      {.name = "to f32 and back", .args = {x}, .fn = [](In v) { return v[0].to(kFloat32).to(v[0].dtype()); },
       .torch = "v[0].float().to(v[0].dtype)", .eps = 1e-2},
      // ---- joins and splits
      {"cat", {x, {{2, 2, 4}}}, [](In v) { return cat({v[0], v[1]}, 1); }, "torch.cat([v[0], v[1]], 1)"},
      {"stack", {x}, [](In v) { return stack({v[0], v[0] * 2.0}, 0); }, "torch.stack([v[0], v[0] * 2.0], 0)"},
      {"split", {x}, [](In v) { return v[0].split(2, 2)[1]; }, "v[0].split(2, 2)[1]"},
      {"split_with_sizes", {m}, [](In v) { return split_with_sizes(v[0], {1, 3}, 1)[1]; }, "v[0].split([1, 3], 1)[1]"},
      {"chunk", {x}, [](In v) { return v[0].chunk(3, 1)[2] * 2.0; }, "v[0].chunk(3, 1)[2] * 2.0"},
      {"split, every piece", {x},
       [](In v) {
         std::vector<Tensor> p = v[0].split(3, 2);
         return cat({p[1] * 2.0, p[0]}, 2);
       },
       "torch.cat([v[0].split(3, 2)[1] * 2.0, v[0].split(3, 2)[0]], 2)"},
      // ---- rearranging
      {"flip", {m}, [](In v) { return v[0].flip({0, 1}); }, "v[0].flip((0, 1))"},
      {"flip size-1 dim", {{{1, 4}}}, [](In v) { return v[0].flip({0}); }, "v[0].flip(0)"},
      {"roll", {m}, [](In v) { return v[0].roll({1, -3}, {0, 1}); }, "v[0].roll((1, -3), (0, 1))"},
      {"roll flat", {m}, [](In v) { return v[0].roll({5}); }, "v[0].roll(5)"},
      {"repeat", {{{2, 3}}}, [](In v) { return v[0].repeat({2, 1, 3}); }, "v[0].repeat(2, 1, 3)"},
      {"tile", {{{2, 3}}}, [](In v) { return v[0].tile({2}); }, "v[0].tile((2,))"},
      {"tril", {{{2, 4, 5}}}, [](In v) { return v[0].tril(1); }, "v[0].tril(1)"},
      {"triu", {{{4, 3}}}, [](In v) { return v[0].triu(-1); }, "v[0].triu(-1)"},
      {"pad constant", {x}, [](In v) { return pad(v[0], {1, 2, 0, 1}, PadMode::constant, 0.5); },
       "F.pad(v[0], (1, 2, 0, 1), value=0.5)"},
      {"pad crop", {x}, [](In v) { return pad(v[0], {-1, 1}); }, "F.pad(v[0], (-1, 1))"},
      {"pad reflect", {{{1, 2, 4, 5}}}, [](In v) { return pad(v[0], {2, 3, 1, 2}, PadMode::reflect); },
       "F.pad(v[0], (2, 3, 1, 2), mode='reflect')"},
      {"pad reflect 2-d", {m}, [](In v) { return pad(v[0], {1, 1}, PadMode::reflect); }, "F.pad(v[0], (1, 1), mode='reflect')"},
      {"pad replicate", {{{1, 2, 3, 3}}}, [](In v) { return pad(v[0], {2, 0, 1, 3}, PadMode::replicate); },
       "F.pad(v[0], (2, 0, 1, 3), mode='replicate')"},
      {"pad circular", {{{2, 5}}}, [](In v) { return pad(v[0], {2, 3}, PadMode::circular); },
       "F.pad(v[0].unsqueeze(0), (2, 3), mode='circular').squeeze(0)"},
      // ---- indexing (repeated indices, both dims)
      {"index_select dim 0", {{{4, 3}}}, [](In v) { return v[0].index_select(0, ints(v[0], {2, 0, 2})); },
       "v[0].index_select(0, ints([2, 0, 2]))"},
      {"index_select dim 1", {{{4, 3}}}, [](In v) { return v[0].index_select(1, ints(v[0], {2, 0, 2})); },
       "v[0].index_select(1, ints([2, 0, 2]))"},
      {"index_select repeated rows", {{{5, 4}}}, [](In v) { return v[0].index_select(0, ints(v[0], {4, 0, 2, 0})); },
       "v[0].index_select(0, ints([4, 0, 2, 0]))"},
      {"gather", {{{4, 3}}},
       [](In v) { return v[0].gather(1, ints(v[0], {0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0}, {4, 3})); },
       "v[0].gather(1, ints([0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0], (4, 3)))"},
      {"gather [5, 2]", {{{5, 4}}},
       [](In v) { return v[0].gather(1, ints(v[0], {1, 0, 3, 3, 2, 1, 0, 0, 2, 1}, {5, 2})); },
       "v[0].gather(1, ints([1, 0, 3, 3, 2, 1, 0, 0, 2, 1], (5, 2)))"},
      {"scatter_add", {{{4, 3}}, {{4, 3}}},
       [](In v) { return v[0].scatter_add(1, ints(v[0], {0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0}, {4, 3}), v[1]); },
       "v[0].scatter_add(1, ints([0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0], (4, 3)), v[1])"},
      {"scatter_add smaller index", {{{3, 2}}, {{3, 4}}},
       [](In v) { return v[0].scatter_add(0, ints(v[0], {1, 0, 2, 2}, {2, 2}), v[1]); },
       // torch's backward refuses an index smaller than src; the part it reads is the same op
       "v[0].scatter_add(0, ints([1, 0, 2, 2], (2, 2)), v[1][:2, :2])"},
      {"scatter_add [5, 2]", {{{5, 4}}, {{5, 2}}},
       [](In v) { return scatter_add(v[0], 1, ints(v[0], {1, 0, 3, 3, 2, 1, 0, 0, 2, 1}, {5, 2}), v[1]); },
       "v[0].scatter_add(1, ints([1, 0, 3, 3, 2, 1, 0, 0, 2, 1], (5, 2)), v[1])"},
      {"scatter_add (autocast)", {{{3, 3}, -1, 1, true}, {{2, 3}}},
       [](In v) { return scatter_add(v[0], 0, ints(v[0], {0, 2, 1, 0, 2, 1}, {2, 3}), v[1]); },
       "v[0].scatter_add(0, ints([0, 2, 1, 0, 2, 1], (2, 3)), v[1])", 1e-5, "scatter_add"},
      {"index_add", {{{4, 3}}, {{3, 3}}}, [](In v) { return index_add(v[0], 0, ints(v[0], {2, 0, 2}), v[1]); },
       "v[0].index_add(0, ints([2, 0, 2]), v[1])"},
      {"index_add dim 1", {{{4, 3}}, {{4, 3}}}, [](In v) { return index_add(v[0], 1, ints(v[0], {2, 0, 2}), v[1]); },
       "v[0].index_add(1, ints([2, 0, 2]), v[1])"},
      {"index_add (autocast)", {{{3, 4}, -1, 1, true}, {{2, 4}}},
       [](In v) { return index_add(v[0], 0, ints(v[0], {2, 0}), v[1]); }, "v[0].index_add(0, ints([2, 0]), v[1])", 1e-5,
       "index_add"},
      {"embedding", {{{5, 3}}}, [](In v) { return embedding(v[0], ints(v[0], {4, 0, 4, 1}, {2, 2})); },
       "F.embedding(ints([4, 0, 4, 1], (2, 2)), v[0])"},
      {"embedding repeated rows", {{{4, 3}}}, [](In v) { return embedding(v[0], ints(v[0], {1, 3, 3, 0, 2, 1}, {2, 3})); },
       "F.embedding(ints([1, 3, 3, 0, 2, 1], (2, 3)), v[0])"},
      // A padding index that does not occur changes nothing (the padding row itself: tests/nn/layers_test.cc).
      {"embedding padding_idx absent", {{{4, 3}}},
       [](In v) { return embedding(v[0], ints(v[0], {1, 2, 2, 0, 2, 1}, {2, 3}), /*padding_idx=*/3); },
       "F.embedding(ints([1, 2, 2, 0, 2, 1], (2, 3)), v[0], padding_idx=3)"},
      {"F::embedding", {{{5, 4}}}, [](In v) { return F::embedding(ints(v[0], {4, 0, 2, 0}), v[0]); },
       "F.embedding(ints([4, 0, 2, 0]), v[0])"},
  };
}

}  // namespace kiln::test
