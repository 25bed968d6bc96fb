// trace.hpp — the hooks through which trace() sees the ops a function runs.
//
// While trace() runs a function, every op the function calls directly
// (dispatched ops, views, joins) is appended to the Graph being built; ops
// those ops run internally (casts inserted by type promotion, decompositions
// of composites, the copies inside cat) are not, because replaying the outer
// op runs them again. Nesting depth tells the two apart.
#pragma once

#include "../op.hpp"

#include <functional>
#include <span>
#include <vector>

namespace strata::detail {

struct TraceState;

/// The calling thread's active trace, or null (the only cost when not tracing).
TraceState*& active_trace();

/// Dispatch under an active trace: records the call when it is top level.
OpResult traced_dispatch(OpCall& call, OpResult (*run)(OpCall&));

/// Records a view or join op at top level; `inputs` as the caller passed
/// them, `output` its result.
void trace_op(const OpDef& op, std::span<const Tensor> inputs, const Tensor& output, const Attrs& attrs);

/// Marks the internal work of a join (cat's copies) as nested, so it is not
/// recorded; a no-op without an active trace.
class TraceNested {
 public:
  TraceNested();
  ~TraceNested();
  TraceNested(const TraceNested&) = delete;
  TraceNested& operator=(const TraceNested&) = delete;

 private:
  TraceState* state_;
};

/// Throws when tracing: `what` cannot be replayed from a graph.
void trace_unsupported(const char* what);

/// Whether trace() (not a capture) is active on this thread.
bool tracing_graph();

/// Runs `f`, returning the floating tensors with autograd history that it
/// read without creating them (excluding `known`): the captured weights of
/// a checkpointed function.
std::vector<Tensor> capture_external_reads(const std::vector<Tensor>& known, const std::function<void()>& f);

}  // namespace strata::detail
