#include "distributed/data_parallel/ddp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::dist {
namespace {

std::vector<std::string> describe(const nn::Module& m) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : m.named_parameters())
    lines.push_back(fmt::format("parameter '{}' {} {}", name, t.shape_str(), t.dtype()));
  for (const auto& [name, t] : m.named_buffers())
    lines.push_back(fmt::format("buffer '{}' {} {}", name, t.shape_str(), t.dtype()));
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

/// Rank 0's text on every rank (its length, then its bytes, as integer tensors).
std::string broadcast_text(ProcessGroup& pg, const std::string& text) {
  Tensor len = full({1}, static_cast<int64_t>(text.size()), dtype(kInt64));
  pg.broadcast(len, 0)->wait();
  int64_t n = len.item<int64_t>();
  Tensor bytes = zeros({n}, dtype(kInt32));
  if (pg.rank() == 0)
    for (int64_t i = 0; i < n; ++i) bytes.data_ptr<int32_t>()[i] = static_cast<unsigned char>(text[i]);
  pg.broadcast(bytes, 0)->wait();
  std::string out(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<char>(bytes.data_ptr<int32_t>()[i]);
  return out;
}

std::string first_difference(const std::vector<std::string>& mine, const std::vector<std::string>& root) {
  for (size_t i = 0; i < std::max(mine.size(), root.size()); ++i) {
    std::string a = i < mine.size() ? mine[i] : "nothing";
    std::string b = i < root.size() ? root[i] : "nothing";
    if (a != b) return fmt::format("entry {} is {} here but {} on rank 0", i, a, b);
  }
  return "";
}

}  // namespace

ReducerOptions reducer_options(const DDPOptions& options) {
  ReducerOptions r;
  r.first_bucket_bytes = static_cast<int64_t>(options.first_bucket_mb * (1 << 20));
  r.bucket_cap_bytes = static_cast<int64_t>(options.bucket_cap_mb * (1 << 20));
  r.find_unused_parameters = options.find_unused_parameters;
  r.overlap = options.overlap;
  r.gradient_as_bucket_view = options.gradient_as_bucket_view;
  return r;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                                                 DDPOptions options)
    : nn::Module("DistributedDataParallel"), module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  adopt_model_entries();
  KILN_CHECK(pg_ != nullptr, "DistributedDataParallel: the process group is null");
  KILN_CHECK(options.first_bucket_mb > 0 && options.bucket_cap_mb > 0,
             "DistributedDataParallel: bucket sizes must be positive, got first_bucket_mb={} bucket_cap_mb={}",
             options.first_bucket_mb, options.bucket_cap_mb);
  check_same_model();
  broadcast_state(/*buffers_only=*/false);
  sync_buffers_ = options.broadcast_buffers && pg_->size() > 1 && !module_->buffers().empty();

  for (const auto& [name, p] : module_->named_parameters())
    if (p.requires_grad()) trained_.emplace_back(name, p);
}

GradientReducer& DistributedDataParallel::reducer() const {
  if (reducer_ == nullptr) {
    std::vector<std::string> names;
    std::vector<Tensor> params;
    for (const auto& [name, p] : trained_) {
      names.push_back(name);
      params.push_back(p);
    }
    reducer_ = Reducer::create(std::move(names), std::move(params), pg_, reducer_options(options_));
  }
  return *reducer_;
}

void DistributedDataParallel::set_gradient_reducer(std::shared_ptr<GradientReducer> reducer) {
  KILN_CHECK(reducer != nullptr, "DistributedDataParallel::set_gradient_reducer: the reducer is null");
  reducer_ = std::move(reducer);
}

void DistributedDataParallel::adopt_model_entries() {
  // The same tensors and child objects under the same names: traversal, to(), zero_grad() and
  // the checkpoint functions see exactly the model.
  for (const auto& [name, p] : module_->named_parameters(/*recurse=*/false))
    register_parameter(name, p, p.requires_grad());
  for (const auto& [name, b] : module_->named_buffers(/*recurse=*/false)) register_buffer(name, b);
  for (const auto& [name, child] : module_->named_children()) add_child(name, child);
}

void DistributedDataParallel::train(bool on) {
  nn::Module::train(on);
  module_->train(on);
}

void DistributedDataParallel::check_same_model() {
  std::vector<std::string> mine = describe(*module_);
  std::string diff = first_difference(mine, split_lines(broadcast_text(*pg_, join_lines(mine))));
  Tensor flag = full({1}, diff.empty() ? 0 : 1, dtype(kInt32));
  std::vector<Tensor> flags;
  for (int r = 0; r < pg_->size(); ++r) flags.push_back(zeros({1}, dtype(kInt32)));
  pg_->allgather(flags, flag)->wait();
  std::vector<int> differ;
  for (int r = 0; r < pg_->size(); ++r)
    if (flags[r].item<int32_t>() != 0) differ.push_back(r);
  if (!diff.empty())
    fail("DistributedDataParallel: rank {}'s model differs from rank 0's: {}", pg_->rank(), diff);
  if (!differ.empty())
    fail("DistributedDataParallel: ranks {} hold a different model than rank 0 (each of their errors names "
         "the first difference)",
         differ);
}

void DistributedDataParallel::broadcast_state(bool buffers_only) {
  NoGradGuard no_grad;
  std::vector<WorkPtr> works;
  if (!buffers_only)
    for (const Tensor& p : module_->parameters()) works.push_back(pg_->broadcast(p, 0));
  for (const Tensor& b : module_->buffers()) works.push_back(pg_->broadcast(b, 0));
  for (auto& w : works) w->wait();
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (sync_buffers_) broadcast_state(/*buffers_only=*/true);
  if (GradMode::is_enabled() && sync_)
    reducer().prepare_for_backward();
  else
    reducer().disarm();
  return module_->forward(input);
}

}  // namespace kiln::dist
