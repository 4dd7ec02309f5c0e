// torch.einsum for the contractions models use (attention's "bhqd,bhkd->bhqk", bilinear
// "bi,oij,bj->bo", batched and plain matrix products, transposes, sums): operands are contracted
// left to right, each pair as one bmm over (batch, kept, contracted) groups of letters, so the
// gradient comes from bmm's and the views'. A letter repeated inside one operand (a diagonal)
// and "..." are not supported and say so.
#include <algorithm>
#include <map>
#include <string>

#include "core/ops.h"

namespace kiln {
namespace {

struct Term {
  Tensor t;
  std::string letters;  // one per dim
};

std::string only_letters(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

/// Sums away the letters of `a` that are in neither `keep`, and permutes the rest into `order`.
Term reduce_to(Term a, const std::string& keep) {
  IntList summed;
  std::string left;
  for (size_t i = 0; i < a.letters.size(); ++i) {
    if (keep.find(a.letters[i]) == std::string::npos) summed.push_back(static_cast<int64_t>(i));
    else left += a.letters[i];
  }
  if (!summed.empty()) a.t = a.t.sum(summed);
  a.letters = left;
  return a;
}

/// Dims of `a` in the order of `order`'s letters (all present in a).
Tensor arrange(const Term& a, const std::string& order) {
  IntList perm;
  for (char c : order) perm.push_back(static_cast<int64_t>(a.letters.find(c)));
  return a.t.permute(perm);
}

int64_t product(const Term& a, const std::string& letters) {
  int64_t n = 1;
  for (char c : letters) n *= a.t.size(static_cast<int64_t>(a.letters.find(c)));
  return n;
}

/// a * b summed over the letters neither `needed` (later operands and the output) asks for.
Term contract(Term a, Term b, const std::string& needed) {
  std::string both_keep = needed;
  for (char c : b.letters) both_keep += c;
  a = reduce_to(a, both_keep);
  both_keep = needed + a.letters;
  b = reduce_to(b, both_keep);
  std::string batch, a_only, b_only, summed;
  for (char c : a.letters) {
    const bool in_b = b.letters.find(c) != std::string::npos, kept = needed.find(c) != std::string::npos;
    if (in_b && kept) batch += c;
    else if (in_b) summed += c;
    else a_only += c;
  }
  for (char c : b.letters)
    if (a.letters.find(c) == std::string::npos) b_only += c;
  for (char c : batch + summed) {
    const int64_t sa = a.t.size(static_cast<int64_t>(a.letters.find(c)));
    const int64_t sb = b.t.size(static_cast<int64_t>(b.letters.find(c)));
    KILN_CHECK(sa == sb, "einsum: subscript '{}' has size {} in one operand and {} in another", c, sa, sb);
  }
  const int64_t nb = product(a, batch), m = product(a, a_only), k = product(a, summed), n = product(b, b_only);
  Tensor am = arrange(a, batch + a_only + summed).reshape({nb, m, k});
  Tensor bm = arrange(b, batch + summed + b_only).reshape({nb, k, n});
  Shape shape;
  for (char c : batch + a_only) shape.push_back(a.t.size(static_cast<int64_t>(a.letters.find(c))));
  for (char c : b_only) shape.push_back(b.t.size(static_cast<int64_t>(b.letters.find(c))));
  return {bmm(am, bm).reshape(shape), batch + a_only + b_only};
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  const std::string eq = only_letters(equation);
  KILN_CHECK(eq.find("...") == std::string::npos, "einsum: '...' is not supported (equation \"{}\")", equation);
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> inputs;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(inputs.size() == operands.size(), "einsum: equation \"{}\" names {} operands but {} were given", equation,
             inputs.size(), operands.size());
  std::map<char, int> count;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(static_cast<int64_t>(inputs[i].size()) == operands[i].dim(),
               "einsum: operand {} has {} dims (shape {}) but its subscripts \"{}\" name {}", i, operands[i].dim(),
               operands[i].sizes(), inputs[i], inputs[i].size());
    for (char c : inputs[i]) {
      KILN_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum: invalid subscript '{}' in \"{}\"", c, equation);
      KILN_CHECK(std::count(inputs[i].begin(), inputs[i].end(), c) == 1,
                 "einsum: subscript '{}' repeats in operand {} (\"{}\"): diagonals are not supported", c, i, inputs[i]);
      ++count[c];
    }
  }
  std::string output;
  if (arrow != std::string::npos) {
    output = eq.substr(arrow + 2);
    for (char c : output)
      KILN_CHECK(count.count(c) && std::count(output.begin(), output.end(), c) == 1,
                 "einsum: output subscript '{}' must appear once, and in an operand (\"{}\")", c, equation);
  } else {
    for (auto [c, n] : count)
      if (n == 1) output += c;  // implicit form: letters seen once, alphabetically
  }
  Term acc{operands[0], inputs[0]};
  for (size_t i = 1; i < operands.size(); ++i) {
    std::string needed = output;
    for (size_t j = i + 1; j < inputs.size(); ++j) needed += inputs[j];
    acc = contract(acc, {operands[i], inputs[i]}, needed);
  }
  acc = reduce_to(acc, output);
  return arrange(acc, output).contiguous();
}

}  // namespace kiln
