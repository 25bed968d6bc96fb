// hooks.cpp — the autograd layer's part in every op call: autocast before
// the shape rule, trace capture around the call, anomaly checks, graph nodes
// and forward-mode tangents after it (dispatch_hooks.hpp says when each
// runs). Registered once, at static initialisation; dispatch includes none
// of this.
#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace.hpp"

#include "autograd/autocast.hpp"
#include "runtime/dispatch/vmap_state.hpp"
#include "runtime/dispatch/dispatch_hooks.hpp"

#include <strata/error.hpp>

#include <cmath>
#include <string>

namespace strata::detail {
namespace {

/// Whether this thread has a trace open (one atomic load while nobody traces).
bool tracing_here() { return tracing_anywhere() && active_trace() != nullptr; }

OpResult around(OpCall& call, OpResult (*run)(OpCall&)) {
  if (tracing_here()) return traced_dispatch(call, run);
  return run(call);
}

void before_prepare(OpCall& call) {
  if (autocast_anywhere() && autocast_active()) apply_autocast(call);
}

/// Anomaly mode, forward side: the first op whose output holds a NaN or Inf
/// is named, with its operands, before anything downstream uses the value.
void check_outputs_finite(const OpCall& call, OpResult& result) {
  for (int k = 0; k < result.size(); ++k) {
    const Tensor& t = result[k];
    if (!is_differentiable(t.dtype()) || t.numel() == 0) continue;
    if (std::optional<double> v = first_non_finite(t)) {
      throw Error("anomaly: op " + call.describe() + " produced " + (std::isnan(*v) ? "NaN" : "Inf") + " in output " +
                  std::to_string(k));
    }
  }
}

void after(const OpCall& call, OpResult& outputs, bool computed) {
  // A batched call (vmap) was checked on its lanes, op by op, when they ran.
  if (computed && g_anomaly_threads.load(std::memory_order_relaxed) != 0 && autograd_state().anomaly &&
      top_batch_level(outputs.span()) == 0) {
    check_outputs_finite(call, outputs);
  }
  record_op(call, outputs);
}

bool wants_external(std::span<const Tensor> inputs) {
  if (tracing_here()) return true;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.impl()->autograd != nullptr) return true;
  }
  return false;
}

/// Transfers are recorded but never traced: a trace refuses them
/// (unsupported_in_trace) and a capture does not replay them.
void record_external(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs) {
  record_node(op, inputs, outputs, attrs);
  // A batched result (vmap) is traced as the ops on its lanes that made it.
  if (op.kind != OpKind::transfer && !outputs.empty() && top_batch_level(std::span<const Tensor>(outputs)) == 0 &&
      tracing_here()) {
    trace_op(op, inputs, outputs.front(), attrs != nullptr ? *attrs : Attrs{});
  }
}

/// Recording and forward mode off, and trace capture nested.
struct Internal {
  AutogradOff off;
  TraceNested nested;
};
std::shared_ptr<void> internal_scope() { return std::make_shared<Internal>(); }

void in_lanes(uint64_t level, void (*body)(void*), void* context) {
  LevelWindow window(level, LevelWindow::Keep::below);
  body(context);
}

const bool kRegistered = [] {
  set_dispatch_hooks({.around = around,
                      .before_prepare = before_prepare,
                      .after = after,
                      .wants_external = wants_external,
                      .record_external = record_external,
                      .internal_scope = internal_scope,
                      .in_lanes = in_lanes,
                      .unsupported_in_trace = trace_unsupported,
                      .configured = invalidate_autocast_policy});
  return true;
}();

}  // namespace
}  // namespace strata::detail
