// batching.hpp — vmap's batching rules (docs/vmap.md): how an op runs when
// some of its operands are batched tensors.
//
// A batched tensor of vmap level V is one lane of its physical tensor
// (runtime/tensor/tensor_impl.hpp, BatchLevel), whose dim 0 runs over the
// lanes. An op call with a batched operand comes here from dispatch with its
// operands as the vmapped function sees them; after the op's shape rule
// (run on those, so its errors name one lane's shapes), the op's batching
// rule runs the op once on the lanes: BatchCall gives each operand's
// lanes, and the rule returns outputs with the lanes in dim 0. Its own ops
// run in the lanes scope, where only the derivative levels opened outside
// the vmap record them; the call's node is recorded on the batched results
// for the levels opened inside it.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "runtime/dispatch/vmap_state.hpp"
#include "runtime/dispatch/dispatch_hooks.hpp"
#include "runtime/dispatch/op.hpp"

namespace strata::detail {

/// What a batching rule sees: the call as prepared on the batched tensors
/// (one lane's shapes and dtypes, its attributes) and each operand's lanes.
struct BatchCall {
  const OpCall& call;
  uint64_t level = 0;
  int64_t lanes = 0;
  /// Input k's lanes ([lanes] + its shape) when batched; the input itself when not.
  std::array<Tensor, kMaxInputs> input{};
  std::array<bool, kMaxInputs> batched{};
  /// Preset outputs' lanes (in-place updates: every preset is batched).
  std::array<Tensor, kMaxOutputs> preset{};

  const OpDef& op() const { return *call.op; }
  int n_inputs() const { return call.n_inputs; }
  /// Input k with the lanes in dim 0; an unbatched input is expanded (a view).
  Tensor lanes_first(int k) const;
  /// Input k as an operand that broadcasts against lanes of rank `rank`
  /// ([lanes] + `rank` dims): the lanes, or the unbatched input with a
  /// leading 1; in either case dims of size 1 in front up to `rank`.
  Tensor aligned(int k, int64_t rank) const;
  /// Runs `op` on `inputs` (the lanes) with `attrs` and this call's presets.
  OpResult run(const OpDef& op, std::span<const Tensor> inputs, const Attrs* attrs) const;
  /// The call's attributes with the integer attribute `name` (a dim of an
  /// input of rank `rank`) normalised and moved past the lanes.
  Attrs shifted_dim(std::string_view name, int64_t rank) const;
};

/// The rules the op families share (OpDef::batch left null picks them by tag).
OpResult batch_pointwise(const BatchCall& c);     // align the lanes, same op
OpResult batch_reduction(const BatchCall& c);     // "dims" moved past the lanes
OpResult batch_along_dim(const BatchCall& c);     // "dim" moved past the lanes, every operand's lanes first
OpResult batch_leading_dims(const BatchCall& c);  // every operand's lanes first, the same call (plugin ops, ABI 2.5)

/// The lanes of `t` at vmap `level` (dim 0), or when `t` is not batched
/// there, `t` expanded along a new dim 0 to that vmap's lane count (a view).
Tensor lanes_first(const Tensor& t, uint64_t level);

/// Runs `on_lanes()` in the lanes scope of vmap `level` (only derivative
/// levels opened outside that vmap record its ops).
template <typename F>
void in_lanes_scope(uint64_t level, F&& on_lanes) {
  using Body = std::remove_reference_t<F>;
  if (dispatch_hooks().in_lanes == nullptr) return on_lanes();
  dispatch_hooks().in_lanes(
      level, [](void* f) { (*static_cast<Body*>(f))(); }, static_cast<void*>(&on_lanes));
}
/// The result of a view or join function whose operand `base` is batched at
/// `level`: `on_lanes` applied to base's lanes, batched again.
Tensor batched_view(const Tensor& base, uint64_t level, const std::function<Tensor(const Tensor&)>& on_lanes);

/// A random draw of `shape` inside the vmaps of this thread, by their
/// randomness: `draw(shape)` makes one unbatched draw.
Tensor draw_in_vmap(std::string_view op, std::span<const int64_t> shape,
                    const std::function<Tensor(std::span<const int64_t>)>& draw);

}  // namespace strata::detail
