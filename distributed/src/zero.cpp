// zero.cpp — ShardedOptimizer (zero.hpp): the split of the parameters over
// the ranks, stage 2's reduce-scatter of the gradients, and the exchange of
// the updated parameters.
//
// Layout shared by both exchanges: rank r's parameters, in index order,
// flattened one after another into "section" r of `width` elements (the
// largest section; shorter ones are padded with zeros). A [world, width]
// buffer holds every section: stage 2 reduce-scatters it (rank r receives
// the mean of section r), and step() all-gathers each rank's own section of
// updated values into it.
#include <strata/zero.hpp>

#include "collective_device.hpp"

#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <string>
#include <utility>

namespace strata::nn {

struct ShardedOptimizer::Impl {
  distributed::ProcessGroup* group = nullptr;
  int world = 1;
  int rank = 0;
  int stage = 1;
  std::vector<Tensor> params;
  std::vector<int> owners;                 // per parameter
  std::vector<std::vector<size_t>> owned;  // per rank: its parameters, in order
  std::vector<int64_t> offset;             // per parameter: its place in its owner's section
  int64_t width = 0;                       // elements of the largest section
  std::unique_ptr<Optimizer> local;

  std::string who() const { return "ShardedOptimizer (rank " + std::to_string(rank) + " of " + std::to_string(world) + ")"; }

  /// Rank r's section of `values` (one tensor per parameter), padded to
  /// `width`, on the collective's device.
  Tensor section(int r, const std::function<Tensor(size_t)>& values) const {
    const Tensor& like = params[0];
    Tensor flat = zeros({width}, {.dtype = like.dtype(), .device = like.device()});
    for (size_t i : owned[static_cast<size_t>(r)]) {
      flat.slice(0, offset[i], offset[i] + params[i].numel()).copy_(values(i).reshape({-1}));
    }
    return flat;
  }

  /// Parameter i's part of a row of sections.
  Tensor part(const Tensor& sections_row, size_t i) const {
    return sections_row.slice(0, offset[i], offset[i] + params[i].numel()).reshape(params[i].sizes());
  }
};

ShardedOptimizer::ShardedOptimizer(std::vector<Tensor> params, Factory make, ShardedOptions options,
                                   distributed::ProcessGroup* group)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.group = group != nullptr ? group : &distributed::group();
  s.world = s.group->size();
  s.rank = s.group->rank();
  s.stage = options.stage;
  s.params = std::move(params);
  if (s.stage != 1 && s.stage != 2) {
    throw ValueError(s.who() + ": stage " + std::to_string(s.stage) + " (ShardedOptions::stage must be 1 or 2)");
  }
  if (s.params.empty()) throw ValueError(s.who() + ": no parameters");
  if (!make) throw ValueError(s.who() + ": no optimizer factory");
  for (size_t i = 0; i < s.params.size(); ++i) {
    const Tensor& p = s.params[i];
    if (!p.defined()) throw ValueError(s.who() + ": parameter " + std::to_string(i) + " is undefined");
    if (p.dtype() != s.params[0].dtype() || p.device() != s.params[0].device()) {
      throw ValueError(s.who() + ": parameter " + std::to_string(i) + " is " + type_string(p) + " on " +
                       p.device().str() + ", parameter 0 " + type_string(s.params[0]) + " on " +
                       s.params[0].device().str() +
                       ": the parameters must share one dtype and device (one ShardedOptimizer per kind)");
    }
  }
  // The split: each parameter, in order, to the rank with the fewest
  // elements so far (the lowest such rank on a tie): the same on every rank.
  std::vector<int64_t> load(static_cast<size_t>(s.world), 0);
  s.owned.assign(static_cast<size_t>(s.world), {});
  s.offset.assign(s.params.size(), 0);
  for (size_t i = 0; i < s.params.size(); ++i) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    s.owners.push_back(static_cast<int>(r));
    s.offset[i] = load[r];
    load[r] += s.params[i].numel();
    s.owned[r].push_back(i);
  }
  s.width = std::max<int64_t>(1, *std::max_element(load.begin(), load.end()));
  std::vector<Tensor> mine;
  for (size_t i : s.owned[static_cast<size_t>(s.rank)]) mine.push_back(s.params[i]);
  if (!mine.empty()) {
    s.local = make(std::move(mine));
    if (s.local == nullptr) throw ValueError(s.who() + ": the factory returned no optimizer");
  }
  // Every rank starts from rank 0's values.
  if (s.world > 1) {
    NoGradGuard no_grad;
    for (Tensor& p : s.params) {
      Tensor host = p.detach().contiguous().to(detail::collective_device(p.device())).clone();
      s.group->broadcast(host, 0).wait();
      p.detach().copy_(host.to(p.device()));
    }
  }
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step() {
  Impl& s = *impl_;
  NoGradGuard no_grad;
  const Device cpu("cpu:0");
  if (s.stage == 2 && s.world > 1) {
    // The mean of every rank's local gradients, rank r receiving section r
    // (over Gloo on the CPU: device collectives have no reduce-scatter).
    std::vector<Tensor> rows;
    for (int r = 0; r < s.world; ++r) {
      rows.push_back(s.section(r, [&](size_t i) {
        Tensor g = s.params[i].grad();
        return g.defined() ? g : zeros_like(s.params[i].detach());
      }));
    }
    Tensor in = stack(rows, 0).to(cpu);
    Tensor out = zeros({s.width}, {.dtype = in.dtype(), .device = cpu});
    s.group->reduce_scatter(out, in, distributed::ReduceOp::mean).wait();
    Tensor averaged = out.to(s.params[0].device());
    for (size_t i = 0; i < s.params.size(); ++i) {
      // This rank keeps its shard's averaged gradients; the others' local
      // gradients are released.
      s.params[i].set_grad(s.owners[i] == s.rank ? s.part(averaged, i).clone() : Tensor());
    }
  }
  if (s.local != nullptr) s.local->step();
  if (s.world == 1) return;
  // Every rank's updated section to every rank.
  Tensor mine = s.section(s.rank, [&](size_t i) { return s.params[i].detach(); });
  const Device where = detail::collective_device(mine.device());
  Tensor in = mine.to(where);
  Tensor all = zeros({s.world, s.width}, {.dtype = mine.dtype(), .device = where});
  s.group->all_gather(all, in).wait();
  Tensor back = all.to(s.params[0].device());
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.owners[i] == s.rank) continue;
    s.params[i].detach().copy_(s.part(back.select(0, s.owners[i]), i));
  }
}

void ShardedOptimizer::zero_grad() {
  for (Tensor& p : impl_->params) p.set_grad(Tensor());
}

int ShardedOptimizer::owner(size_t index) const {
  if (index >= impl_->owners.size()) {
    throw IndexError(impl_->who() + ": parameter " + std::to_string(index) + " of " +
                     std::to_string(impl_->owners.size()));
  }
  return impl_->owners[index];
}

const std::vector<size_t>& ShardedOptimizer::shard() const { return impl_->owned[static_cast<size_t>(impl_->rank)]; }

Optimizer* ShardedOptimizer::local_optimizer() { return impl_->local.get(); }

size_t ShardedOptimizer::state_bytes() const {
  if (impl_->local == nullptr) return 0;
  size_t bytes = 0;
  for (const auto& [name, t] : impl_->local->state_dict()) {
    if (name.rfind("param.", 0) == 0) bytes += static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  }
  return bytes;
}

int ShardedOptimizer::stage() const { return impl_->stage; }

distributed::ProcessGroup& ShardedOptimizer::process_group() const { return *impl_->group; }

const std::vector<Tensor>& ShardedOptimizer::params() const { return impl_->params; }

}  // namespace strata::nn
