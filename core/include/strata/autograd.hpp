// autograd.hpp — reverse-mode differentiation: gradient tapes, grad-mode
// scopes and hooks. (Tensor::backward/grad/requires_grad live in tensor.hpp.)
//
// A GradientTape records the ops run on the tensors it watches while it is
// alive (tensors with requires_grad are watched by every tape). Tapes nest;
// each is a derivative level with its own identity, so gradients of
// different levels never mix. With `higher_order`, the ops a tape runs to
// compute a gradient are themselves recorded on the enclosing tapes, so the
// gradient can be differentiated again, to any order.
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata {

namespace detail {
struct AutogradMeta;  // internal
}  // namespace detail

/// What gradient() returns for a source the target does not depend on.
enum class Unconnected { zero, error };

struct TapeOptions {
  /// Allow several gradient() calls; otherwise the graph is freed after one.
  bool persistent = false;
  /// Record the gradient computation on enclosing tapes (TensorFlow's
  /// higher-order tapes; PyTorch's create_graph).
  bool higher_order = false;
  Unconnected unconnected = Unconnected::zero;
  /// Which intermediate gradients gradient() keeps for retained_gradient():
  /// selective (the default) keeps those of tensors passed to retain().
  GradRetention retention = GradRetention::selective;
};

class GradientTape {
 public:
  explicit GradientTape(TapeOptions options = {});
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  /// Records ops on `t` from now on (a no-op for non-floating tensors is an
  /// error: only floating tensors have gradients).
  void watch(const Tensor& t);

  /// d target / d sources. A non-scalar target needs `output_grad`, a
  /// tensor of the target's shape (the vector of a vector-Jacobian product).
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_grad = Tensor());
  /// The same, taking the target: a target nothing else holds (a
  /// temporary) is freed during the pass, once the op that produced it has
  /// run backward, rather than when gradient() returns.
  std::vector<Tensor> gradient(Tensor&& target, const std::vector<Tensor>& sources,
                               const Tensor& output_grad = Tensor());
  /// The full Jacobian of `target` with respect to `source`: shape
  /// target.shape + source.shape. Needs a persistent tape.
  Tensor jacobian(const Tensor& target, const Tensor& source);

  /// Marks `t`, a result of an op this tape recorded, so that gradient()
  /// keeps its gradient under GradRetention::selective. Error for a tensor
  /// this tape did not record.
  void retain(const Tensor& t);
  /// d target / d t of the latest gradient() call, for an intermediate `t`
  /// the retention policy kept; undefined otherwise (not retained, or not
  /// on a path from the target to a source).
  Tensor retained_gradient(const Tensor& t) const;

  /// The level id of this tape.
  uint64_t id() const { return id_; }

  /// Bytes of tensors currently saved for backward by ops this tape
  /// recorded (shared with enclosing tapes that recorded the same ops). Drops
  /// when a non-persistent gradient() frees the graph or the tensors holding
  /// it die.
  uint64_t saved_bytes() const;

 private:
  uint64_t id_;
  TapeOptions options_;
  bool used_ = false;
  std::vector<std::weak_ptr<detail::AutogradMeta>> marked_;  // retain()
  /// Gradients kept by the latest gradient(), by the tensor's metadata
  /// (the weak pointer tells a live tensor from a reused address).
  std::unordered_map<const detail::AutogradMeta*, std::pair<std::weak_ptr<detail::AutogradMeta>, Tensor>> retained_;
};

/// Disables recording on this thread for a scope (nothing is recorded; the
/// results of ops have no gradient history).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Re-enables recording inside a no_grad scope.
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

bool is_grad_enabled();

/// Bytes saved for backward by the graph of `requires_grad` tensors (the
/// implicit level of Tensor::backward()); see GradientTape::saved_bytes.
uint64_t implicit_graph_saved_bytes();

/// Anomaly mode: the backward pass checks every gradient it produces and
/// names the op whose backward first made a NaN or Inf.
void set_anomaly_mode(bool enabled);
bool anomaly_mode();

}  // namespace strata
