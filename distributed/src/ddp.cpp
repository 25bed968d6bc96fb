// ddp.cpp — DistributedDataParallel: gradient buckets reduced from the
// parameters' gradient-ready hooks, the averaged gradients handed back by
// their tensor hooks when the pass ends (see ddp.hpp and docs/distributed.md).
#include <strata/ddp.hpp>

#include "collective_device.hpp"

#include <strata/autograd.hpp>
#include <strata/custom_function.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace strata::nn {

namespace detail {

Device collective_device(const Device& device) {
  const Device cpu("cpu:0");
  return device == cpu || DeviceCommunicator::available(device) ? device : cpu;
}

/// One all-reduce: parameters (indices into DDPState::params) whose
/// gradients are flattened and concatenated, of one dtype and device.
struct Bucket {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
  int64_t numel = 0;
};

/// Buckets and, per parameter, its bucket and slot (npos: not reduced).
struct Plan {
  static constexpr size_t npos = std::numeric_limits<size_t>::max();
  std::vector<Bucket> buckets;
  std::vector<std::pair<size_t, size_t>> where;
};

/// A bucket's state in the current pass.
struct PassBucket {
  std::vector<Tensor> grads;  // per slot: the total to reduce
  size_t ready = 0;
  bool launched = false;
  Tensor flat;  // on the CPU, being reduced in place
  Tensor original;  // the bucket before a communication hook's encode (undefined without one)
  std::optional<distributed::Work> work;
};

/// The mean over the ranks as a differentiable op: forward all-reduces a
/// copy (blocking), and its VJP is the same op applied to the cotangent (the
/// adjoint of y = (1/N) sum_r x_r, when every rank's loss depends on y, is
/// the mean of the ranks' cotangents), so gradients of DDP's averaged
/// gradients work to any order. Every rank runs each of these collectives
/// in the same order, as it runs the same graph.
std::shared_ptr<CustomFunction> mean_over_ranks(distributed::ProcessGroup* group) {
  auto self = std::make_shared<CustomFunction>();
  auto reduce = [group](const Tensor& t) {
    NoGradGuard no_grad;
    Tensor flat = t.contiguous().to(collective_device(t.device())).clone();
    group->all_reduce(flat, distributed::ReduceOp::mean).wait();
    return flat.to(t.device());
  };
  std::weak_ptr<CustomFunction> weak = self;
  *self = custom_vjp([reduce](const std::vector<Tensor>& in) { return std::vector<Tensor>{reduce(in[0])}; },
                     [reduce](const std::vector<Tensor>& in) {
                       return std::make_pair(std::vector<Tensor>{reduce(in[0])}, std::vector<Tensor>{});
                     },
                     [weak](const std::vector<Tensor>&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
                       auto f = weak.lock();
                       if (!f) throw Error("DistributedDataParallel: the wrapper is gone, so its averaged gradients "
                                           "cannot be differentiated again");
                       return (*f)(std::vector<Tensor>{g[0]});
                     },
                     {.name = "ddp_mean_over_ranks", .n_inputs = 1});
  // The rule reaches the function through `weak` (no cycle through the
  // rule); the DDPState keeps `self`.
  return self;
}

struct DDPState {
  distributed::ProcessGroup* group = nullptr;
  int world = 1;
  DDPOptions options;
  /// mean_over_ranks for a pass whose gradients carry history (backward
  /// with create_graph, a higher-order tape): averaged without buckets, as
  /// a differentiable op, so that gradients of the averaged gradients work.
  std::shared_ptr<CustomFunction> differentiable_mean;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  Plan backward_plan;
  int no_sync_depth = 0;
  DDPStats stats;

  // A gradient() call in progress: the tape whose pass is reduced.
  bool tape_armed = false;

  // join(): inside its loop, and the wrapper's steps taken there.
  bool joining = false;
  int64_t join_steps = 0;
  uint64_t tape_level = 0;
  Plan tape_plan;

  // The pass being reduced.
  std::chrono::steady_clock::time_point pass_start;
  std::vector<double> launch_us;
  bool active = false;
  bool accumulates = false;
  bool differentiable = false;  // its gradients carry history: reduced by differentiable_mean, no buckets
  const Plan* plan = nullptr;
  std::vector<PassBucket> pass;
  size_t next_launch = 0;
  std::vector<char> got;          // the gradient-ready hook delivered its total
  std::vector<char> had_prev;     // grad() held an accumulated gradient (no_sync) that is part of the total
  std::vector<char> unused_here;  // no gradient in this pass on this rank (find_unused_parameters)
  std::vector<Tensor> reduced;    // the averaged gradients, once finalized
  bool finalized = false;
  size_t handed_back = 0;
  size_t to_hand_back = 0;

  bool accepts(const GradReadyInfo& info) const {
    if (no_sync_depth > 0) return false;
    if (tape_armed) return !info.accumulates && info.level == tape_level;
    return info.accumulates && info.level == 0;
  }

  double us_since_start() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - pass_start).count();
  }

  void begin(bool accumulating, bool with_history) {
    pass_start = std::chrono::steady_clock::now();
    launch_us.clear();
    plan = tape_armed ? &tape_plan : &backward_plan;
    accumulates = accumulating;
    differentiable = with_history && world > 1;
    pass.assign(plan->buckets.size(), PassBucket{});
    for (size_t b = 0; b < pass.size(); ++b) pass[b].grads.resize(plan->buckets[b].params.size());
    next_launch = 0;
    got.assign(params.size(), 0);
    had_prev.assign(params.size(), 0);
    unused_here.assign(params.size(), 0);
    reduced.assign(params.size(), Tensor());
    finalized = false;
    handed_back = 0;
    to_hand_back = 0;
    active = true;
  }

  void reset() {
    active = false;
    pass.clear();
    reduced.clear();
    plan = nullptr;
  }

  /// Waits for every launched all-reduce (errors dropped: the pass already
  /// failed) and forgets the pass, so that the group's queue is not left
  /// holding tensors of a pass nobody will finish.
  void drain() noexcept {
    for (PassBucket& b : pass) {
      if (b.work) {
        try {
          b.work->wait();
        } catch (...) {  // NOLINT(bugprone-empty-catch): the pass is being abandoned
        }
      }
    }
    reset();
  }

  void launch(size_t b, bool at_end) {
    NoGradGuard no_grad;
    PassBucket& pb = pass[b];
    std::vector<Tensor> flats;
    flats.reserve(pb.grads.size());
    for (const Tensor& g : pb.grads) flats.push_back(g.reshape({-1}));
    Tensor flat = flats.size() == 1 ? flats[0].clone() : cat(flats, 0);
    if (options.comm_hook && world > 1) {
      pb.original = flat;
      flat = options.comm_hook->encode(flat, world).contiguous();
    }
    pb.flat = flat.to(collective_device(flat.device()));
    if (pb.flat.device() != Device("cpu:0")) ++stats.buckets_on_device;
    stats.bytes_reduced += static_cast<uint64_t>(pb.flat.numel()) * dtype_size(pb.flat.dtype());
    if (world > 1) pb.work = group->all_reduce(pb.flat, distributed::ReduceOp::sum);
    launch_us.push_back(us_since_start());
    pb.launched = true;
    ++(at_end ? stats.buckets_at_end : stats.buckets_overlapped);
  }

  /// Launches the complete buckets in bucket order (every rank issues the
  /// same collectives in the same order, whatever order its gradients
  /// became ready in).
  void launch_ready(bool at_end) {
    if (differentiable) return;  // finalize reduces each gradient itself
    while (next_launch < pass.size() && pass[next_launch].ready == pass[next_launch].grads.size()) {
      launch(next_launch, at_end);
      ++next_launch;
    }
  }

  void on_ready(size_t i, const Tensor& g, const GradReadyInfo& info) {
    if (!accepts(info)) return;
    if (!active) begin(info.accumulates, g.requires_grad());
    auto [b, s] = plan->where[i];
    if (b == Plan::npos || got[i]) return;
    got[i] = 1;
    ++to_hand_back;
    Tensor total = g;
    if (accumulates) {
      Tensor prev = params[i].grad();
      if (prev.defined()) {
        std::optional<NoGradGuard> constant;  // a differentiable pass keeps the sum's history
        if (!differentiable) constant.emplace();
        total = add(prev, g);
        had_prev[i] = 1;
      }
    }
    pass[b].grads[s] = total;
    ++pass[b].ready;
    launch_ready(false);
  }

  /// Completes the pass: the parameters that got no gradient (named in an
  /// error, or zeros / their accumulated gradient under
  /// find_unused_parameters; for a tape, `fill` gives the tape's result),
  /// the remaining launches, the waits, and the averages.
  void finalize(const std::function<Tensor(size_t)>& fill) {
    if (finalized) return;
    const double backward_end = us_since_start();
    std::vector<size_t> missing;
    for (size_t b = 0; b < pass.size(); ++b) {
      for (size_t s = 0; s < pass[b].grads.size(); ++s) {
        size_t i = plan->buckets[b].params[s];
        if (!got[i]) missing.push_back(i);
      }
    }
    if (!missing.empty()) {
      if (fill == nullptr && !options.find_unused_parameters) {
        std::string list;
        for (size_t i : missing) list += (list.empty() ? "'" : ", '") + names[i] + "'";
        drain();
        throw distributed::DistributedError(
            "DistributedDataParallel (rank " + std::to_string(group->rank()) + " of " + std::to_string(world) +
            "): " + std::to_string(missing.size()) + " parameter(s) received no gradient in this backward pass: " +
            list +
            ". Every parameter must take part in the loss on every rank, or construct the wrapper with "
            "DDPOptions{.find_unused_parameters = true} to reduce them as zeros");
      }
      NoGradGuard no_grad;
      for (size_t i : missing) {
        Tensor value;
        if (fill != nullptr) {
          value = fill(i);
        } else {
          Tensor prev = params[i].grad();
          had_prev[i] = prev.defined() ? 1 : 0;
          value = prev.defined() ? prev : zeros_like(params[i].detach());
          unused_here[i] = 1;
        }
        auto [b, s] = plan->where[i];
        pass[b].grads[s] = value;
        ++pass[b].ready;
      }
    }
    if (differentiable) {
      reduce_differentiably();
      ++stats.differentiable_passes;
    } else {
      reduce_buckets();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (unused_here[i]) params[i].set_grad(reduced[i]);  // no tensor hook fires for it
    }
    finalized = true;
    ++stats.reduced_passes;
    stats.last_launch_us = launch_us;
    stats.last_backward_end_us = backward_end;
    stats.last_end_us = us_since_start();
  }

  /// Each gradient of the pass through the differentiable mean, in plan
  /// order (the same on every rank).
  void reduce_differentiably() {
    for (size_t b = 0; b < pass.size(); ++b) {
      for (size_t s = 0; s < pass[b].grads.size(); ++s) {
        reduced[plan->buckets[b].params[s]] = (*differentiable_mean)(pass[b].grads[s]);
      }
      pass[b].grads.clear();
    }
  }

  /// The buckets not launched yet, then every bucket's wait and average.
  void reduce_buckets() {
    launch_ready(true);
    NoGradGuard no_grad;
    for (size_t b = 0; b < pass.size(); ++b) {
      PassBucket& pb = pass[b];
      if (pb.work) {
        try {
          pb.work->wait();
        } catch (...) {
          drain();
          throw;
        }
      }
      const Bucket& bucket = plan->buckets[b];
      const Tensor& like = params[bucket.params[0]];
      Tensor avg = world == 1              ? pb.flat
                   : pb.original.defined() ? options.comm_hook->decode(pb.flat, pb.original, world)
                                           : pb.flat / static_cast<double>(world);
      avg = avg.to(like.device());
      for (size_t s = 0; s < bucket.params.size(); ++s) {
        size_t i = bucket.params[s];
        reduced[i] =
            avg.slice(0, bucket.offsets[s], bucket.offsets[s] + params[i].numel()).reshape(params[i].sizes());
      }
      pb.flat = Tensor();
      pb.original = Tensor();
      pb.grads.clear();
    }
  }

  /// The tensor hook of parameter i at the end of a backward() pass: the
  /// averaged gradient replaces the pass's total.
  Tensor on_end(size_t i) {
    if (!active || !accumulates || tape_armed || !got[i]) return {};
    finalize(nullptr);
    Tensor r = reduced[i];
    // The average already includes what grad() held (no_sync accumulation):
    // clear it so that the engine's grad() + r gives exactly r.
    if (had_prev[i]) params[i].set_grad(Tensor());
    if (++handed_back == to_hand_back) reset();
    return r;
  }
};

namespace {

/// Buckets over `order` (parameter indices, in the order their gradients
/// become ready), each at most `bucket_bytes` unless one parameter alone is
/// larger, and each of one dtype and device.
Plan make_plan(const std::vector<Tensor>& params, const std::vector<size_t>& order, size_t bucket_bytes) {
  Plan plan;
  plan.where.assign(params.size(), {Plan::npos, 0});
  size_t bytes = 0;
  for (size_t i : order) {
    const Tensor& p = params[i];
    size_t nbytes = static_cast<size_t>(p.numel()) * dtype_size(p.dtype());
    bool fresh = plan.buckets.empty() || bytes + nbytes > bucket_bytes;
    if (!fresh) {
      const Tensor& first = params[plan.buckets.back().params[0]];
      fresh = first.dtype() != p.dtype() || first.device() != p.device();
    }
    if (fresh) {
      plan.buckets.emplace_back();
      bytes = 0;
    }
    Bucket& b = plan.buckets.back();
    plan.where[i] = {plan.buckets.size() - 1, b.params.size()};
    b.params.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    bytes += nbytes;
  }
  return plan;
}

std::string rank_text(int r) { return "rank " + std::to_string(r); }

/// Every rank's model must have the parameters rank 0 has: same count, and
/// the same dtype and shape for each. One all-gather of the counts, one of
/// a fixed-width descriptor per parameter.
void check_same_parameters(distributed::ProcessGroup& group, const std::vector<Tensor>& params,
                           const std::vector<std::string>& names) {
  const int world = group.size();
  Tensor count = full({1}, static_cast<double>(params.size()), {.dtype = DType::i64, .device = Device("cpu:0")});
  Tensor counts = zeros({world, 1}, {.dtype = DType::i64, .device = Device("cpu:0")});
  group.all_gather(counts, count).wait();
  std::vector<int64_t> c = counts.to_vector<int64_t>();
  for (int r = 1; r < world; ++r) {
    if (c[static_cast<size_t>(r)] != c[0]) {
      std::string all;
      for (int k = 0; k < world; ++k) {
        all += (k ? ", " : "") + rank_text(k) + ": " + std::to_string(c[static_cast<size_t>(k)]);
      }
      throw distributed::DistributedError("DistributedDataParallel: the ranks' models have different numbers of "
                                          "parameters (" +
                                          all + ")");
    }
  }
  if (params.empty()) return;
  constexpr int64_t kWidth = 10;  // dtype, rank, up to 8 dims
  std::vector<int64_t> desc(params.size() * kWidth, -1);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (p.dim() > kWidth - 2) {
      throw distributed::DistributedError("DistributedDataParallel: parameter '" + names[i] + "' (" +
                                          type_string(p) + ") has more than 8 dimensions");
    }
    desc[i * kWidth] = static_cast<int64_t>(p.dtype());
    desc[i * kWidth + 1] = p.dim();
    for (int64_t d = 0; d < p.dim(); ++d) desc[i * kWidth + 2 + static_cast<size_t>(d)] = p.size(d);
  }
  const auto n = static_cast<int64_t>(params.size());
  Tensor mine = from_data(desc, {n, kWidth}, {.dtype = DType::i64, .device = Device("cpu:0")});
  Tensor all = zeros({world, n, kWidth}, {.dtype = DType::i64, .device = Device("cpu:0")});
  group.all_gather(all, mine).wait();
  std::vector<int64_t> v = all.to_vector<int64_t>();
  auto describe = [&](int r, size_t i) {
    const int64_t* d = &v[(static_cast<size_t>(r) * params.size() + i) * kWidth];
    Shape shape(d + 2, d + 2 + d[1]);
    return std::string(dtype_name(static_cast<DType>(d[0]))) + shape_string(shape);
  };
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < params.size(); ++i) {
      std::string a = describe(0, i);
      std::string b = describe(r, i);
      if (a != b) {
        throw distributed::DistributedError("DistributedDataParallel: parameter " + std::to_string(i) + " ('" +
                                            names[i] + "' here) is " + a + " on rank 0 but " + b + " on " +
                                            rank_text(r) + ": every rank must wrap the same model");
      }
    }
  }
}

/// Broadcasts `tensors` from rank 0 in place, coalesced per bucket of the
/// plan (parameters) or one by one (buffers).
void broadcast_in_place(distributed::ProcessGroup& group, std::vector<Tensor> tensors, int root = 0) {
  NoGradGuard no_grad;
  for (Tensor& t : tensors) {
    Tensor host = t.detach().contiguous().to(collective_device(t.device())).clone();
    group.broadcast(host, root).wait();
    t.copy_(host.to(t.device()));
  }
}

void broadcast_parameters(distributed::ProcessGroup& group, const std::vector<Tensor>& params, const Plan& plan,
                          int root = 0) {
  NoGradGuard no_grad;
  for (const Bucket& b : plan.buckets) {
    std::vector<Tensor> flats;
    for (size_t i : b.params) flats.push_back(params[i].detach().reshape({-1}));
    Tensor flat = flats.size() == 1 ? flats[0].clone() : cat(flats, 0);
    flat = flat.to(collective_device(flat.device()));
    group.broadcast(flat, root).wait();
    Tensor back = flat.to(params[b.params[0]].device());
    for (size_t s = 0; s < b.params.size(); ++s) {
      Tensor p = params[b.params[s]];
      p.copy_(back.slice(0, b.offsets[s], b.offsets[s] + p.numel()).reshape(p.sizes()));
    }
  }
}

}  // namespace

}  // namespace detail

namespace {

CommHook compress_hook(DType wire, const char* name) {
  return {.name = name,
          .encode = [wire](const Tensor& flat, int world) { return cast(flat / static_cast<double>(world), wire); },
          .decode = [](const Tensor& reduced, const Tensor& flat, int) {
            return cast(reduced, flat.dtype()).to(flat.device());
          }};
}

}  // namespace

CommHook bf16_compress_hook() { return compress_hook(DType::bf16, "bf16_compress"); }
CommHook f16_compress_hook() { return compress_hook(DType::f16, "f16_compress"); }

DistributedDataParallel::DistributedDataParallel(Module& module, DDPOptions options,
                                                 distributed::ProcessGroup* group)
    : module_(&module),
      options_(options),
      group_(group != nullptr ? group : &distributed::group()),
      state_(std::make_shared<detail::DDPState>()) {
  for (auto& [name, p] : module.named_parameters()) {  // the module's own tensors, each once
    state_->names.push_back(name);
    state_->params.push_back(p);
  }
  setup();
}

DistributedDataParallel::DistributedDataParallel(NamedTensors parameters, NamedTensors buffers, DDPOptions options,
                                                 distributed::ProcessGroup* group)
    : options_(options),
      group_(group != nullptr ? group : &distributed::group()),
      state_(std::make_shared<detail::DDPState>()) {
  std::set<const TensorImpl*> seen;
  for (auto& [name, p] : parameters) {
    if (!p.defined()) throw ValueError("DistributedDataParallel: parameter '" + name + "' is undefined");
    if (!p.requires_grad()) {
      throw ValueError("DistributedDataParallel: parameter '" + name + "' (" + type_string(p) +
                       ") does not require grad, so backward gives it no gradient to average");
    }
    if (!seen.insert(p.impl()).second) continue;
    state_->names.push_back(name);
    state_->params.push_back(p);
  }
  for (auto& [name, b] : buffers) {
    if (!b.defined()) throw ValueError("DistributedDataParallel: buffer '" + name + "' is undefined");
    if (seen.insert(b.impl()).second) buffers_.emplace_back(name, b);
  }
  setup();
}

std::vector<Tensor> DistributedDataParallel::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, b] : module_ != nullptr ? module_->named_buffers() : buffers_) out.push_back(b);
  return out;
}

Module& DistributedDataParallel::module() {
  if (module_ == nullptr) throw Error("DistributedDataParallel::module: this wrapper was made from parameter lists");
  return *module_;
}

const Module& DistributedDataParallel::module() const {
  if (module_ == nullptr) throw Error("DistributedDataParallel::module: this wrapper was made from parameter lists");
  return *module_;
}

void DistributedDataParallel::setup() {
  if (options_.bucket_bytes == 0) throw ValueError("DistributedDataParallel: bucket_bytes must be positive");
  if (options_.comm_hook && (!options_.comm_hook->encode || !options_.comm_hook->decode)) {
    throw ValueError("DistributedDataParallel: the communication hook \"" + options_.comm_hook->name +
                     "\" needs both encode and decode");
  }
  detail::DDPState& st = *state_;
  st.group = group_;
  st.world = group_->size();
  st.options = options_;
  st.differentiable_mean = detail::mean_over_ranks(group_);
  std::vector<size_t> reverse(st.params.size());
  for (size_t i = 0; i < reverse.size(); ++i) reverse[i] = reverse.size() - 1 - i;
  st.backward_plan = detail::make_plan(st.params, reverse, options_.bucket_bytes);

  if (st.world > 1) {
    detail::check_same_parameters(*group_, st.params, st.names);
    detail::broadcast_parameters(*group_, st.params, st.backward_plan);
    if (options_.broadcast_buffers) {
      std::vector<Tensor> all = buffers();
      detail::broadcast_in_place(*group_, all);
    }
  }

  std::weak_ptr<detail::DDPState> weak = state_;
  for (size_t i = 0; i < st.params.size(); ++i) {
    Tensor& p = st.params[i];
    p.register_grad_ready_hook([weak, i](const Tensor& g, const GradReadyInfo& info) {
      if (auto s = weak.lock()) s->on_ready(i, g, info);
    });
    p.register_hook([weak, i](const Tensor&) -> Tensor {
      auto s = weak.lock();
      return s ? s->on_end(i) : Tensor();
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  if (state_ && state_->active) state_->drain();
}

Tensor DistributedDataParallel::operator()(const Tensor& input) {
  Module& m = module();
  before_forward();
  return m(input);
}

void DistributedDataParallel::before_forward() {
  detail::DDPState& st = *state_;
  if (st.active) {
    st.drain();
    throw Error("DistributedDataParallel: the previous reduced backward pass did not complete on rank " +
                std::to_string(group_->rank()) +
                " (it failed half-way); the ranks' collectives are out of step, so restart the process group");
  }
  if (st.joining && st.no_sync_depth > 0) {
    throw Error("DistributedDataParallel::join: a step inside no_sync() cannot be shadowed (the ranks whose loops "
                "ended would all-reduce gradients this step does not send); accumulate outside join()");
  }
  if (st.joining && st.world > 1) {
    // join(): tell the ranks whose loops ended that this one still trains.
    Tensor training = ones({1}, {.dtype = DType::f32, .device = Device("cpu:0")});
    group_->all_reduce(training).wait();
    ++st.join_steps;
  }
  if (options_.broadcast_buffers && st.world > 1) {
    std::vector<Tensor> all = buffers();
    if (!all.empty()) detail::broadcast_in_place(*group_, all);
  }
}

void DistributedDataParallel::join(const std::function<void()>& loop) {
  detail::DDPState& st = *state_;
  if (st.joining) throw Error("DistributedDataParallel::join: already inside join()");
  st.joining = true;
  st.join_steps = 0;
  try {
    loop();
  } catch (...) {
    st.joining = false;
    throw;
  }
  st.joining = false;
  if (st.world == 1) return;
  const int rank = group_->rank();
  std::vector<Tensor> buffers = this->buffers();
  // Shadow the steps of the ranks still training, until none is.
  while (true) {
    Tensor training = zeros({1}, {.dtype = DType::f32, .device = Device("cpu:0")});
    group_->all_reduce(training).wait();
    if (training.item<double>() == 0.0) break;
    NoGradGuard no_grad;
    if (options_.broadcast_buffers && !buffers.empty()) detail::broadcast_in_place(*group_, buffers);
    for (const detail::Bucket& b : st.backward_plan.buckets) {
      const Tensor& like = st.params[b.params[0]];
      Tensor zero = zeros({b.numel}, {.dtype = like.dtype(), .device = like.device()});
      if (options_.comm_hook) zero = options_.comm_hook->encode(zero, st.world).contiguous();
      zero = zero.to(detail::collective_device(zero.device()));
      group_->all_reduce(zero).wait();
    }
    ++st.stats.shadowed_steps;
  }
  // The rank that trained the most steps (the highest such rank) holds the
  // final model: every rank takes its parameters and buffers.
  Tensor key = full({1}, static_cast<double>(st.join_steps * st.world + rank),
                    {.dtype = DType::i64, .device = Device("cpu:0")});
  group_->all_reduce(key, distributed::ReduceOp::max).wait();
  const int last = static_cast<int>(key.item<int64_t>() % st.world);
  detail::broadcast_parameters(*group_, st.params, st.backward_plan, last);
  if (!buffers.empty()) detail::broadcast_in_place(*group_, buffers, last);
}

std::vector<Tensor> DistributedDataParallel::gradient(GradientTape& tape, const Tensor& target,
                                                      const std::vector<Tensor>& sources, const Tensor& output_grad) {
  detail::DDPState& st = *state_;
  if (st.no_sync_depth > 0) return tape.gradient(target, sources, output_grad);
  if (st.active) {
    st.drain();
    throw Error("DistributedDataParallel::gradient: a reduced pass is still open on rank " +
                std::to_string(group_->rank()) + " (an earlier backward failed half-way)");
  }
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < st.params.size(); ++i) index.emplace(st.params[i].impl(), i);
  std::vector<size_t> source_of(st.params.size(), detail::Plan::npos);  // parameter -> position in sources
  std::vector<size_t> chosen;
  for (size_t k = 0; k < sources.size(); ++k) {
    auto it = sources[k].defined() ? index.find(sources[k].impl()) : index.end();
    if (it == index.end() || source_of[it->second] != detail::Plan::npos) continue;
    source_of[it->second] = k;
    chosen.push_back(it->second);
  }
  if (chosen.empty()) return tape.gradient(target, sources, output_grad);
  std::sort(chosen.rbegin(), chosen.rend());  // reverse registration order
  st.tape_plan = detail::make_plan(st.params, chosen, options_.bucket_bytes);
  st.tape_armed = true;
  st.tape_level = tape.id();
  struct Disarm {
    detail::DDPState& st;
    ~Disarm() {
      if (st.active) st.drain();
      st.tape_armed = false;
      st.tape_plan = {};
    }
  } disarm{st};
  std::vector<Tensor> results = tape.gradient(target, sources, output_grad);
  if (!st.active) {
    bool with_history = false;
    for (size_t i : chosen) with_history = with_history || results[source_of[i]].requires_grad();
    st.begin(false, with_history);
  }
  st.finalize([&](size_t i) { return results[source_of[i]]; });
  // Every occurrence of a parameter among the sources gets its average.
  for (size_t k = 0; k < sources.size(); ++k) {
    auto it = sources[k].defined() ? index.find(sources[k].impl()) : index.end();
    if (it != index.end()) results[k] = st.reduced[it->second];
  }
  st.reset();
  return results;
}

DistributedDataParallel::NoSync::NoSync(std::shared_ptr<detail::DDPState> state) : state_(std::move(state)) {
  ++state_->no_sync_depth;
}

DistributedDataParallel::NoSync::~NoSync() { --state_->no_sync_depth; }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(state_); }

bool DistributedDataParallel::sync_enabled() const { return state_->no_sync_depth == 0; }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const detail::Bucket& b : state_->backward_plan.buckets) {
    auto& names = out.emplace_back();
    for (size_t i : b.params) names.push_back(state_->names[i]);
  }
  return out;
}

DDPStats DistributedDataParallel::stats() const { return state_->stats; }

}  // namespace strata::nn
