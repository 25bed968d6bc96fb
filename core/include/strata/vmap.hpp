// vmap.hpp — the batching transform (docs/vmap.md).
//
// vmap(fn) runs a function written for one example on a batch of them in
// one pass: inside fn each mapped input looks like one example (its mapped
// dim is hidden), and every op fn calls runs once on the whole batch through
// the op's batching rule. It is a level like a gradient tape's, so it nests
// with tapes, forward mode, grad, jvp, checkpointing, autocast, custom
// functions and itself, in any order:
//
//   // per-sample gradients: one gradient per row of x
//   auto per_sample = strata::vmap(strata::grad(loss_of_one_example));
//   Tensor grads = per_sample(x);  // x: [batch, features]
//
// A level opened inside fn (a tape, a forward level, an inner vmap) sees
// one example; a level opened outside sees the batch (grad of vmap
// differentiates the batched computation).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <strata/tensor.hpp>
#include <string>
#include <vector>

namespace strata {

/// What a random op (rand, randn, bernoulli, dropout) does inside vmap.
enum class Randomness : uint8_t {
  /// Refused, naming the op and this option (the default: whether the lanes
  /// should share their draws is the caller's decision).
  error,
  /// Each lane draws its own numbers: one draw of the lanes' shape, so lane
  /// b's numbers are those a draw of [lanes, ...] gives at index b —
  /// reproducible from the seed and identical on every device.
  different,
  /// Every lane sees the same draw (one draw of one lane's shape).
  same,
};
/// "error", "different", "same".
const char* randomness_name(Randomness randomness);

struct VmapOptions {
  Randomness randomness = Randomness::error;
  /// An op without a batching rule of its own (a plugin op that declares
  /// none) runs once per lane and its results are stacked; the loop is
  /// counted in vmap_fallback_stats(). Strict makes it an error instead.
  bool strict = false;
  /// An output that does not depend on any mapped input has no batch dim:
  /// by default that is an error naming the output; with this set it is
  /// expanded along out_dims (JAX's behaviour; jacfwd and friends set it).
  bool expand_unbatched_outputs = false;
  /// Writing a batched value in place into an unbatched tensor is an error
  /// by default (every lane would write its own value into one tensor).
  /// With this set, a target the function made itself — not one it closed
  /// over, and not a view of another tensor (nor viewed by one) — becomes
  /// batched first: its values are copied into every lane, then each lane
  /// takes its own write (docs/vmap.md, "In place").
  bool batch_inplace_targets = false;
};

/// A function of several tensors to several tensors.
using TensorsFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Maps `fn` over dim in_dims[k] of input k (std::nullopt: input k is not
/// mapped, every lane sees all of it) and stacks output k along
/// out_dims[k]. Empty in_dims maps dim 0 of every input; empty out_dims
/// puts the batch dim first in every output. Every mapped input must have
/// the same size along its mapped dim (the lanes). Errors name the
/// argument and the sizes: mismatched lane counts, a dim outside an
/// input's rank, a dim given for an undefined tensor, an output without
/// a batch dim (see VmapOptions::expand_unbatched_outputs).
TensorsFn vmap(TensorsFn fn, std::vector<std::optional<int64_t>> in_dims = {}, std::vector<int64_t> out_dims = {},
               VmapOptions options = {});
/// One tensor to one tensor, mapped over `in_dim`, stacked along `out_dim`.
std::function<Tensor(const Tensor&)> vmap(std::function<Tensor(const Tensor&)> fn, int64_t in_dim = 0,
                                          int64_t out_dim = 0, VmapOptions options = {});

/// A scalar loss of `params` on one example (its tensors as one lane of `batch`).
using ExampleLoss = std::function<Tensor(const std::vector<Tensor>& params, const std::vector<Tensor>& example)>;
/// Per-sample gradients in one batched pass: for every example of `batch`
/// (dim 0 of each of its tensors) the gradient of loss(params, example)
/// with respect to each of `params`; returns one tensor per parameter,
/// [examples] + its shape. The batched rules turn the per-example outer
/// products of a linear layer into one batched GEMM (differential privacy,
/// influence functions; docs/vmap.md). Differentiable: a tape opened outside
/// differentiates the per-sample gradients with respect to `params`.
std::vector<Tensor> per_sample_grad(const ExampleLoss& loss, const std::vector<Tensor>& params,
                                    const std::vector<Tensor>& batch);

/// An op vmap ran lane by lane (no batching rule applied): which op, why,
/// how many calls and lanes.
struct VmapFallback {
  std::string op;
  std::string reason;
  uint64_t calls = 0;
  uint64_t lanes = 0;
};
/// Every op vmap ran as a loop since the process started (or the last
/// reset), all threads. Also shown by `strata devices --stats`.
std::vector<VmapFallback> vmap_fallback_stats();
void reset_vmap_fallback_stats();

/// Whether `t` is a batched tensor (inside a vmapped function).
bool is_batched(const Tensor& t);

}  // namespace strata
