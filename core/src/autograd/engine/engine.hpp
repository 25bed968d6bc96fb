// engine.hpp — the reverse-mode pass shared by GradientTape and backward().
#pragma once

#include "autograd/engine/nodes.hpp"

#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace strata::detail {

struct BackwardRequest {
  uint64_t level = 0;               // which tape's nodes to traverse (0: backward())
  std::vector<Tensor> roots;        // targets
  std::vector<Tensor> root_grads;   // their output gradients (defined, same shapes)
  std::vector<Tensor> sources;      // gradients wanted for these (may be empty)
  bool accumulate_leaves = false;   // backward(): add into .grad of requires_grad leaves and of
                                    // the retained intermediates, all at once when the pass ends
  bool create_graph = false;        // record the pass itself (higher order)
  bool release = false;             // free saved tensors of nodes no other live level needs
  bool unconnected_zeros = true;    // unconnected source: zeros (else DeviceError... see tape)
  /// Intermediate gradients to hand back in `retained`.
  GradRetention retention = GradRetention::discard;
  /// selective: the tensors a tape marked; null: those with
  /// AutogradMeta::retains_grad (backward()).
  const std::vector<const AutogradMeta*>* marked = nullptr;
  /// Out (when retention is not discard): each retained intermediate and
  /// its gradient (after the tensor hooks).
  std::vector<std::pair<std::shared_ptr<AutogradMeta>, Tensor>>* retained = nullptr;
};

/// Runs the pass; returns one gradient per source (undefined when
/// unconnected and !unconnected_zeros). It lets go of `request.roots` once
/// their nodes are seeded (the vector is cleared), so that a root nothing
/// else holds goes with its node's saved tensors, early in the pass.
std::vector<Tensor> run_backward(BackwardRequest& request);

/// meta->grad += g for each pair, all or nothing (if a sum fails no grad()
/// changes), serialised across threads: passes over a shared graph
/// (backward(retain_graph) from several threads) may accumulate into the
/// same leaf at once.
void accumulate_grads(std::span<const std::pair<AutogradMeta*, Tensor>> grads);

/// What a tensor hook (Tensor::register_hook) returned in place of `grad`:
/// `replaced` itself when it has grad's shape, dtype and device; otherwise
/// an error naming the difference — a hook that changed any of them would
/// give grad() (or the rest of the pass) a gradient that does not fit.
const Tensor& checked_hook_gradient(const Tensor& replaced, const Tensor& grad);

/// Whether level `id` belongs to a tape that is still alive (level 0 always).
bool level_alive(uint64_t id);
void set_level_alive(uint64_t id, bool alive);

}  // namespace strata::detail
