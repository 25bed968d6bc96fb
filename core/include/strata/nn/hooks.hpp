// nn/hooks.hpp — backward hooks on layers, and gradient accumulation over
// micro-batches.
#pragma once

#include <strata/amp.hpp>
#include <strata/nn/module.hpp>
#include <strata/nn/optim.hpp>
#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>

namespace strata::nn {

/// Identifies one registered hook; a default-constructed handle is none.
struct HookHandle {
  uint64_t id = 0;
  explicit operator bool() const { return id != 0; }
  friend bool operator==(HookHandle, HookHandle) = default;
};

/// Called during backward with the gradient of a layer's output (the
/// gradient flowing into the layer from above). It observes; it cannot
/// change the gradient.
using BackwardHook = std::function<void(Module& layer, const Tensor& grad_output)>;

/// Backward hooks on layers. When a layer with hooks runs (through
/// Module::operator()) while its output is recorded for backward, the hooks
/// registered for it at the time its gradient arrives run, in registration
/// order. Checkpointed layers run once more during backward and their hooks
/// fire once, during that recomputation's backward. Registering and removing
/// are thread safe, also from inside a hook (hooks run outside the lock, on
/// the thread running backward). A manager removes its hooks when it is
/// destroyed, and a layer's hooks go when the layer does.
class BackwardHookManager {
 public:
  BackwardHookManager();
  ~BackwardHookManager();
  BackwardHookManager(const BackwardHookManager&) = delete;
  BackwardHookManager& operator=(const BackwardHookManager&) = delete;

  /// Registers `hook` for `layer`. ValueError for an empty function.
  HookHandle add(Module& layer, BackwardHook hook);
  /// Removes one hook; false when the handle is not (or no longer) this
  /// manager's.
  bool remove(HookHandle handle);
  /// Removes this manager's hooks on `layer`; returns how many.
  size_t remove(const Module& layer);
  /// Removes all of this manager's hooks.
  void clear();
  /// This manager's hooks, in all and on one layer.
  size_t size() const;
  size_t size(const Module& layer) const;

 private:
  uint64_t owner_;
};

/// Gradient accumulation: `steps` micro-batches make one optimizer step.
/// The first micro-batch of a group clears the optimizer's gradients; each
/// backward() adds the gradient of loss / steps to the parameters' grad(),
/// so after `steps` micro-batches of equal size the gradient is the
/// one of the mean loss over the whole batch; then the optimizer steps and
/// the gradients are cleared. Works with checkpointed models and, through
/// the GradScaler overload, with dynamic loss scaling (an overflow in any
/// micro-batch skips the whole step).
class GradientAccumulator {
 public:
  /// ValueError when steps < 1.
  GradientAccumulator(Optimizer& optimizer, int64_t steps);

  /// Backpropagates one micro-batch's loss (a scalar); returns whether this
  /// completed a step (and the optimizer ran).
  bool backward(const Tensor& loss);
  /// The same under loss scaling: scales the loss; at the step boundary
  /// unscales, steps unless a gradient overflowed, and updates the scaler.
  bool backward(const Tensor& loss, GradScaler& scaler);
  /// Steps with the micro-batches accumulated so far (a last, short group),
  /// rescaling the gradients to their mean. Returns false when there were
  /// none.
  bool flush();
  bool flush(GradScaler& scaler);
  /// Drops the accumulated gradients without stepping.
  void reset();

  /// Micro-batches accumulated towards the next step (0 .. steps-1).
  int64_t pending() const { return pending_; }
  int64_t steps() const { return steps_; }
  /// Steps taken (including ones a scaler skipped).
  int64_t step_count() const { return completed_; }

 private:
  bool accumulate(const Tensor& loss, GradScaler* scaler);
  bool finish(GradScaler* scaler);
  bool flush_pending(GradScaler* scaler);

  Optimizer& optimizer_;
  int64_t steps_;
  int64_t pending_ = 0;
  int64_t completed_ = 0;
};

}  // namespace strata::nn
