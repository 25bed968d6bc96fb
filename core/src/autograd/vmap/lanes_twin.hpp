// lanes_twin.hpp — the autograd layer's own nodes (custom functions,
// checkpoints) on batched tensors, for the levels opened outside their vmap
// (lanes_twin.cpp; docs/vmap.md, "Levels").
#pragma once

#include <memory>
#include <span>

#include "runtime/dispatch/vmap_state.hpp"
#include "runtime/dispatch/op.hpp"

namespace strata::detail {

/// Whether `t` or the lanes behind it, at every vmap level, carry autograd
/// metadata (some level may want to record what is computed from it).
bool history_through_lanes(const Tensor& t);

/// For a node of `op` (tagged autograd) recorded on batched tensors of vmap
/// `level`: its twin on the lanes, recorded for the levels opened before
/// that vmap, whose rules run `op`'s on the lanes as batched tensors of a
/// fresh vmap. Nothing when no input's history reaches an outer level.
void record_lanes_twin(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs,
                       const std::shared_ptr<const void>& closure, uint64_t level);

}  // namespace strata::detail
