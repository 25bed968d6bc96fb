// vmap_transform.cpp — the batching transform (strata/vmap.hpp, docs/vmap.md): the
// mapped inputs become batched tensors of a fresh level, the function runs
// once, and its outputs' lanes are put back along out_dims. The ops in
// between batch through their rules (ops/batching.cpp).
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/vmap.hpp>
#include <string>

#include "autograd/engine/nodes.hpp"
#include "ops/batching.hpp"

namespace strata {

namespace detail {
Tensor tracked_alias(const Tensor& x);  // views.cpp
}  // namespace detail

namespace {

/// `t` with dim `from` moved to `to` (a view).
Tensor move_dim(const Tensor& t, int64_t from, int64_t to) {
  if (from == to) return t;
  Shape order;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != from) order.push_back(d);
  order.insert(order.begin() + to, from);
  return t.permute(order);
}

/// The lane count the mapped inputs agree on; an error naming the inputs otherwise.
int64_t lane_count(const std::vector<Tensor>& args, const std::vector<std::optional<int64_t>>& in_dims) {
  int64_t lanes = -1;
  size_t first = 0;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!in_dims[k]) continue;
    const int64_t d = *in_dims[k];
    if (!args[k].defined()) {
      throw ValueError("vmap: in_dims[" + std::to_string(k) + "] = " + std::to_string(d) + ", but input " +
                       std::to_string(k) +
                       " is not a tensor (undefined); give std::nullopt for an input that is "
                       "not mapped");
    }
    const int64_t rank = args[k].dim();
    if (d < -rank || d >= rank) {
      throw IndexError("vmap: in_dims[" + std::to_string(k) + "] = " + std::to_string(d) +
                       " is outside the rank of input " + std::to_string(k) + " (shape " +
                       shape_string(args[k].shape()) + ", dims " + std::to_string(-rank) + " to " +
                       std::to_string(rank - 1) + ")");
    }
    const int64_t size = args[k].size(d);
    if (lanes < 0) {
      lanes = size;
      first = k;
    } else if (size != lanes) {
      throw ShapeError("vmap: mapped inputs disagree on the batch size: input " + std::to_string(first) + " has " +
                       std::to_string(lanes) + " along its dim " + std::to_string(*in_dims[first]) + ", input " +
                       std::to_string(k) + " has " + std::to_string(size) + " along its dim " + std::to_string(d) +
                       " (shapes " + shape_string(args[first].shape()) + " and " + shape_string(args[k].shape()) + ")");
    }
  }
  if (lanes < 0) throw ValueError("vmap: no input is mapped (every in_dims entry is std::nullopt)");
  return lanes;
}

/// Output k of the function, its lanes moved to `out_dim`.
Tensor unbatch(const Tensor& out, size_t k, int64_t out_dim, uint64_t level, int64_t lanes,
               const VmapOptions& options) {
  if (!out.defined()) return out;
  if (detail::batch_level(out) > level) {
    throw ValueError("vmap: output " + std::to_string(k) + " is batched by an inner vmap that has returned");
  }
  Tensor physical = detail::lanes_of(out, level);
  if (!physical.defined()) {
    if (!options.expand_unbatched_outputs) {
      throw ValueError("vmap: output " + std::to_string(k) + " (" + type_string(out) +
                       ") does not depend on any mapped input, so it has no batch dim, but out_dims[" +
                       std::to_string(k) + "] = " + std::to_string(out_dim) + " asks for one of size " +
                       std::to_string(lanes) + "; set VmapOptions::expand_unbatched_outputs to repeat it");
    }
    Shape shape = out.sizes();
    shape.insert(shape.begin(), lanes);
    physical = out.unsqueeze(0).expand(shape);
  }
  const int64_t rank = physical.dim();
  if (out_dim < -rank || out_dim >= rank) {
    throw IndexError("vmap: out_dims[" + std::to_string(k) + "] = " + std::to_string(out_dim) +
                     " is outside the rank of output " + std::to_string(k) + " with its batch dim (shape " +
                     shape_string(physical.shape()) + ", dims " + std::to_string(-rank) + " to " +
                     std::to_string(rank - 1) + ")");
  }
  return move_dim(physical, 0, out_dim < 0 ? out_dim + rank : out_dim);
}

/// vmap's call. With `one_lane_direct` and a single lane, the function runs
/// on the lane itself (the mapped dims selected, nothing batched) inside the
/// vmap's frame, so random ops still follow `options.randomness`: at one
/// lane the loop is the best plan, and the batched ops' own cost (each
/// prepared on one lane, then run on the lanes) would make vmap slower than
/// the loop it replaces. Only for callers whose outputs are expanded anyway
/// (expand_unbatched_outputs): an output that does not depend on the lane
/// cannot be told from one that does.
std::vector<Tensor> run_vmap(const TensorsFn& fn, const std::vector<std::optional<int64_t>>& in_dims,
                             const std::vector<int64_t>& out_dims, const VmapOptions& options,
                             const std::vector<Tensor>& args, bool one_lane_direct) {
  std::vector<std::optional<int64_t>> dims = in_dims;
  if (dims.empty()) dims.assign(args.size(), 0);
  if (dims.size() != args.size()) {
    throw ValueError("vmap: in_dims has " + std::to_string(dims.size()) + " entries for " +
                     std::to_string(args.size()) + " inputs");
  }
  const int64_t lanes = lane_count(args, dims);
  const bool direct = one_lane_direct && lanes == 1 && options.expand_unbatched_outputs;
  const uint64_t level = detail::new_level_id();
  std::vector<Tensor> outputs;
  {
    detail::VmapFrameScope frame({level, lanes, options});
    std::vector<Tensor> batched;
    for (size_t k = 0; k < args.size(); ++k) {
      if (!dims[k]) {
        batched.push_back(args[k]);
        continue;
      }
      const int64_t rank = args[k].dim();
      const int64_t d = *dims[k] < 0 ? *dims[k] + rank : *dims[k];
      batched.push_back(direct ? args[k].select(d, 0) : detail::make_batched(move_dim(args[k], d, 0), level));
    }
    outputs = fn(batched);
  }
  if (!out_dims.empty() && out_dims.size() != outputs.size()) {
    throw ValueError("vmap: out_dims has " + std::to_string(out_dims.size()) + " entries for " +
                     std::to_string(outputs.size()) + " outputs of the function");
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    outputs[k] = unbatch(outputs[k], k, out_dims.empty() ? 0 : out_dims[k], level, lanes, options);
  }
  return outputs;
}

}  // namespace

TensorsFn vmap(TensorsFn fn, std::vector<std::optional<int64_t>> in_dims, std::vector<int64_t> out_dims,
               VmapOptions options) {
  if (!fn) throw ValueError("vmap: the function is empty");
  return [fn = std::move(fn), in_dims = std::move(in_dims), out_dims = std::move(out_dims),
          options](const std::vector<Tensor>& args) { return run_vmap(fn, in_dims, out_dims, options, args, false); };
}

std::function<Tensor(const Tensor&)> vmap(std::function<Tensor(const Tensor&)> fn, int64_t in_dim, int64_t out_dim,
                                          VmapOptions options) {
  if (!fn) throw ValueError("vmap: the function is empty");
  TensorsFn mapped = vmap([fn = std::move(fn)](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x[0])}; },
                          {in_dim}, {out_dim}, options);
  return [mapped = std::move(mapped)](const Tensor& x) { return mapped({x})[0]; };
}

std::vector<Tensor> per_sample_grad(const ExampleLoss& loss, const std::vector<Tensor>& params,
                                    const std::vector<Tensor>& batch) {
  if (!loss) throw ValueError("per_sample_grad: the loss is empty");
  if (batch.empty()) throw ValueError("per_sample_grad: the batch has no tensor");
  for (size_t k = 0; k < params.size(); ++k) {
    if (!params[k].defined()) throw ValueError("per_sample_grad: params[" + std::to_string(k) + "] is undefined");
  }
  std::vector<std::optional<int64_t>> in_dims(params.size(), std::nullopt);
  in_dims.resize(params.size() + batch.size(), 0);
  std::vector<Tensor> args = params;
  args.insert(args.end(), batch.begin(), batch.end());
  const size_t n = params.size();
  auto one_example = [&](const std::vector<Tensor>& in) {
    GradientTape tape({.persistent = false, .higher_order = true, .unconnected = Unconnected::zero});
    std::vector<Tensor> watched;
    for (size_t k = 0; k < n; ++k) {
      // An alias keeps the parameter's history: levels opened outside (a
      // tape around per_sample_grad) differentiate through the gradients.
      watched.push_back(detail::tracked_alias(in[k]));
      tape.watch(watched.back());
    }
    Tensor value = loss(watched, std::vector<Tensor>(in.begin() + static_cast<std::ptrdiff_t>(n), in.end()));
    if (!value.defined() || value.numel() != 1) {
      throw ValueError("per_sample_grad: the loss of one example must be a scalar, got " +
                       (value.defined() ? type_string(value) : std::string("an undefined tensor")));
    }
    return tape.gradient(value, watched);
  };
  // One example: its gradient directly (run_vmap's one-lane path).
  return run_vmap(one_example, in_dims, {}, {.expand_unbatched_outputs = true}, args, true);
}

}  // namespace strata
