// dispatch_hooks.hpp — how the layers above dispatch take part in every op
// without dispatch (or the tensor and op code below them) including them.
//
// Dispatch runs one op call as
//
//   around(call, run)            trace: records top-level calls, then run
//     run: before_prepare(call)  autocast: casts inputs per the policy
//          op.prepare(call)      the op's shape rule
//          execute               kernel, decomposition or CPU fallback
//          after(call, outputs)  autograd: anomaly check, graph node,
//                                forward-mode tangents (primitives only:
//                                a decomposition's ops record themselves)
//
// and code that makes a result without a kernel — a view, a join such as cat
// that runs other ops internally, a move between devices — reports it whole
// with record_external, running its internal work inside an InternalWork
// scope (nothing recorded, nothing traced).
//
// The autograd layer (core/src/autograd/engine/hooks.cpp) registers the hooks once,
// at static initialisation; every one may be null (then nothing happens:
// the layers below work on their own).
#pragma once

#include "runtime/dispatch/op.hpp"

#include <memory>
#include <span>

namespace strata::detail {

struct DispatchHooks {
  /// Wraps a whole call; calls `run(call)` itself (trace).
  OpResult (*around)(OpCall& call, OpResult (*run)(OpCall& call)) = nullptr;
  /// Before the shape rule: may rewrite the call's inputs (autocast).
  void (*before_prepare)(OpCall& call) = nullptr;
  /// After a primitive ran (autograd); `computed` is false for outputs
  /// computed earlier and handed in (dispatch_precomputed: no anomaly check).
  void (*after)(const OpCall& call, OpResult& outputs, bool computed) = nullptr;
  /// Whether results made outside dispatch from `inputs` must be reported
  /// (an input is tracked by autograd, or a trace is active): lets views
  /// skip building attributes when nothing will read them.
  bool (*wants_external)(std::span<const Tensor> inputs) = nullptr;
  /// A result made outside dispatch, recorded as one node of `op` (and
  /// traced at top level).
  void (*record_external)(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                          const Attrs* attrs) = nullptr;
  /// Opens a scope of internal work (see InternalWork); the returned object
  /// restores the previous state when destroyed.
  std::shared_ptr<void> (*internal_scope)() = nullptr;
  /// Runs body(context) in the scope a batching rule of vmap `level` runs
  /// its ops on the lanes in: only the derivative levels opened before that
  /// vmap record them (docs/vmap.md).
  void (*in_lanes)(uint64_t level, void (*body)(void*), void* context) = nullptr;
  /// Throws when a trace is being built: `what` cannot be replayed.
  void (*unsupported_in_trace)(const char* what) = nullptr;
  /// The runtime's configuration changed (autocast re-reads its policy).
  void (*configured)() = nullptr;
};

/// The registered hooks (all null until the autograd layer registers them).
const DispatchHooks& dispatch_hooks();
/// Registers `hooks` (once, at static initialisation).
void set_dispatch_hooks(const DispatchHooks& hooks);

/// Internal work of an op that records itself whole (cat's copies, the CPU
/// fallback's transfers): neither recorded by autograd nor traced.
class InternalWork {
 public:
  InternalWork() {
    if (dispatch_hooks().internal_scope != nullptr) state_ = dispatch_hooks().internal_scope();
  }
  InternalWork(const InternalWork&) = delete;
  InternalWork& operator=(const InternalWork&) = delete;

 private:
  std::shared_ptr<void> state_;
};

/// Reports a result made outside dispatch (see record_external).
inline void record_external(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                            const Attrs* attrs) {
  if (dispatch_hooks().record_external != nullptr) dispatch_hooks().record_external(op, inputs, outputs, attrs);
}

/// Whether a result made outside dispatch from `inputs` must be reported.
inline bool wants_external(std::span<const Tensor> inputs) {
  return dispatch_hooks().wants_external != nullptr && dispatch_hooks().wants_external(inputs);
}

}  // namespace strata::detail
