// zero.cpp — ShardedOptimizer (zero.hpp): the split of the parameters over
// the ranks, stage 2's reduce-scatter of the gradients, and the exchange of
// the updated parameters.
//
// The exchange of parameters: rank r's parameters, in index order,
// flattened one after another into "section" r of `width` elements (the
// largest section; shorter ones are padded with zeros). step() all-gathers
// each rank's own section of updated values into a [world, width] buffer.
//
// Stage 2 reduces the gradients in buckets: the parameters, in reverse
// order, form buckets of about bucket_bytes, each laid out like the
// sections over its own parameters, and reduce-scattered (rank r receives
// the mean of its row). A gradient-ready hook per parameter collects a
// backward() pass's gradients, and a bucket leaves as soon as it is
// complete, in bucket order (every rank issues the same collectives in the
// same order whatever order its gradients arrive in); step() waits for
// them, or reduces what grad() holds when no backward() pass ran.
#include <strata/zero.hpp>

#include "collective_device.hpp"

#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

namespace strata::nn {

namespace {

/// One bucket's share of the section layout: its parameters (in the order
/// backward produces them), and per rank the ones that rank owns with
/// their offsets in the bucket's row for that rank.
struct ZeroBucket {
  std::vector<size_t> params;
  std::vector<std::vector<std::pair<size_t, int64_t>>> rows;  // per rank: (parameter, offset)
  int64_t width = 1;                                         // elements of the longest row
};

/// A bucket's reduce-scatter in flight, or done: this rank's row of means.
struct Reduced {
  Tensor mine;
  distributed::Work work;
};

/// Stage 2's reduction during backward (shared with the hooks, which hold
/// it weakly: they outlive the optimizer on the parameters).
struct Overlap {
  distributed::ProcessGroup* group = nullptr;
  int world = 1;
  std::vector<Tensor> params;
  std::vector<ZeroBucket> buckets;
  std::vector<size_t> bucket_of;  // per parameter
  ShardedStats stats;

  // The pass being collected.
  bool active = false;
  std::vector<Tensor> grads;  // per parameter: its total in this pass
  std::vector<size_t> ready;  // per bucket: gradients collected
  size_t next_launch = 0;
  // What the passes since the last step() launched, per pass, per bucket.
  std::vector<std::vector<Reduced>> passes;
  // The first pass since step() adds what grad() held before it (as
  // backward() does); later passes do not (grad() then holds the earlier
  // passes' totals, reduced already).
  bool first_since_step = true;

  void begin() {
    active = true;
    grads.assign(params.size(), Tensor());
    ready.assign(buckets.size(), 0);
    next_launch = 0;
    passes.emplace_back();
  }

  void launch(size_t b, bool at_end) {
    NoGradGuard no_grad;
    const ZeroBucket& bucket = buckets[b];
    const Tensor& like = params[0];
    const Device cpu("cpu:0");
    Tensor in = zeros({world, bucket.width}, {.dtype = like.dtype(), .device = like.device()});
    for (int r = 0; r < world; ++r) {
      for (const auto& [i, offset] : bucket.rows[static_cast<size_t>(r)]) {
        const Tensor& g = grads[i];
        in.select(0, r)
            .slice(0, offset, offset + params[i].numel())
            .copy_(g.defined() ? g.reshape({-1}) : zeros({params[i].numel()}, {.dtype = like.dtype(),
                                                                                 .device = like.device()}));
      }
    }
    // Over Gloo on the CPU: device collectives have no reduce-scatter.
    Tensor host_in = in.to(cpu);
    Reduced out;
    out.mine = zeros({bucket.width}, {.dtype = like.dtype(), .device = cpu});
    out.work = group->reduce_scatter(out.mine, host_in, distributed::ReduceOp::mean);
    passes.back().push_back(std::move(out));
    for (size_t i : bucket.params) grads[i] = Tensor();  // the copy holds them now
    ++(at_end ? stats.buckets_at_end : stats.buckets_overlapped);
  }

  void launch_ready() {
    while (next_launch < buckets.size() && ready[next_launch] == buckets[next_launch].params.size()) {
      launch(next_launch, false);
      ++next_launch;
    }
  }

  /// The pass's remaining buckets, in order (a parameter with no gradient
  /// in it counts as zeros).
  void close() {
    if (!active) return;
    while (next_launch < buckets.size()) launch(next_launch++, true);
    active = false;
    first_since_step = false;
    ++stats.reduced_passes;
  }

  void on_ready(size_t i, const Tensor& g, const GradReadyInfo& info) {
    if (!info.accumulates || info.level != 0) return;  // a tape's gradient(): not a training pass
    const size_t b = bucket_of[i];
    if (!active) begin();
    Tensor total = g.detach();
    if (first_since_step) {
      const Tensor prev = params[i].grad();
      if (prev.defined()) {
        NoGradGuard no_grad;
        total = add(prev, total);
      }
    }
    grads[i] = total;
    ++ready[b];
    launch_ready();
  }

  /// Waits for every pass's buckets and returns this rank's averaged
  /// section per bucket, the passes added up. With no backward() pass since
  /// the last step (gradients set by hand, or a tape's), what grad() holds
  /// is reduce-scattered now, in the same buckets.
  std::vector<Tensor> finish() {
    if (passes.empty() && !active) {
      begin();
      for (size_t i = 0; i < params.size(); ++i) grads[i] = params[i].grad();
      for (size_t b = 0; b < buckets.size(); ++b) launch(b, true);
      active = false;
      ++stats.steps_reduced_at_step;
    }
    close();
    std::vector<Tensor> sums(buckets.size());
    for (std::vector<Reduced>& pass : passes) {
      for (size_t b = 0; b < pass.size(); ++b) {
        pass[b].work.wait();
        NoGradGuard no_grad;
        sums[b] = sums[b].defined() ? add(sums[b], pass[b].mine) : pass[b].mine;
      }
    }
    passes.clear();
    first_since_step = true;
    return sums;
  }

  /// Waits for what was launched, errors dropped (the step failed).
  void drain() noexcept {
    for (std::vector<Reduced>& pass : passes) {
      for (Reduced& r : pass) {
        try {
          r.work.wait();
        } catch (...) {  // NOLINT(bugprone-empty-catch): abandoned
        }
      }
    }
    passes.clear();
    active = false;
    first_since_step = true;
  }
};

}  // namespace

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
  std::shared_ptr<Overlap> overlap;  // stage 2 on several ranks

  /// Stage 2's buckets over the parameters in reverse order, and the hooks
  /// that collect each backward() pass's gradients into them.
  void start_overlap(size_t bucket_bytes) {
    auto o = std::make_shared<Overlap>();
    o->group = group;
    o->world = world;
    o->params = params;
    o->bucket_of.assign(params.size(), 0);
    const size_t element = dtype_size(params[0].dtype());
    size_t bytes = 0;
    for (size_t k = params.size(); k-- > 0;) {
      if (o->buckets.empty() || (bytes > 0 && bytes + static_cast<size_t>(params[k].numel()) * element > bucket_bytes)) {
        o->buckets.emplace_back();
        o->buckets.back().rows.assign(static_cast<size_t>(world), {});
        bytes = 0;
      }
      ZeroBucket& b = o->buckets.back();
      o->bucket_of[k] = o->buckets.size() - 1;
      b.params.push_back(k);
      bytes += static_cast<size_t>(params[k].numel()) * element;
    }
    for (ZeroBucket& b : o->buckets) {
      std::vector<int64_t> used(static_cast<size_t>(world), 0);
      for (size_t i : b.params) {
        const auto r = static_cast<size_t>(owners[i]);
        b.rows[r].emplace_back(i, used[r]);
        used[r] += params[i].numel();
      }
      b.width = std::max<int64_t>(1, *std::max_element(used.begin(), used.end()));
    }
    // The gradient-ready hook collects; the tensor hook, which backward()
    // runs for every parameter that got a gradient once the whole pass has
    // ended, closes the pass (launching the buckets still incomplete) and
    // leaves the gradient as it is.
    std::weak_ptr<Overlap> weak = o;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].register_grad_ready_hook([weak, i](const Tensor& g, const GradReadyInfo& info) {
        if (auto s = weak.lock()) s->on_ready(i, g, info);
      });
      params[i].register_hook([weak](const Tensor&) -> Tensor {
        if (auto s = weak.lock()) s->close();
        return {};
      });
    }
    overlap = std::move(o);
  }

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
  if (options.bucket_bytes == 0) throw ValueError(s.who() + ": ShardedOptions::bucket_bytes must be positive");
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
  if (s.stage == 2 && s.world > 1) s.start_overlap(options.bucket_bytes);
}

ShardedOptimizer::~ShardedOptimizer() {
  if (impl_ && impl_->overlap) impl_->overlap->drain();
}

void ShardedOptimizer::step() {
  Impl& s = *impl_;
  NoGradGuard no_grad;
  if (s.overlap) {  // stage 2 on several ranks
    std::vector<Tensor> bucketed;
    try {
      bucketed = s.overlap->finish();
    } catch (...) {
      s.overlap->drain();
      throw;
    }
    // This rank keeps its shard's averaged gradients; the others' local
    // gradients are released.
    for (size_t b = 0; b < bucketed.size(); ++b) {
      const Tensor section = bucketed[b].to(s.params[0].device());
      for (const auto& [i, offset] : s.overlap->buckets[b].rows[static_cast<size_t>(s.rank)]) {
        s.params[i].set_grad(section.slice(0, offset, offset + s.params[i].numel()).reshape(s.params[i].sizes()).clone());
      }
    }
    for (size_t i = 0; i < s.params.size(); ++i)
      if (s.owners[i] != s.rank) s.params[i].set_grad(Tensor());
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

ShardedStats ShardedOptimizer::stats() const { return impl_->overlap ? impl_->overlap->stats : ShardedStats{}; }

distributed::ProcessGroup& ShardedOptimizer::process_group() const { return *impl_->group; }

const std::vector<Tensor>& ShardedOptimizer::params() const { return impl_->params; }

}  // namespace strata::nn
