// trace.hpp — the hooks through which trace() sees the ops a function runs.
//
// While trace() runs a function, every op the function calls directly
// (dispatched ops, views, joins) is appended to the Graph being built; ops
// those ops run internally (casts inserted by type promotion, decompositions
// of composites, the copies inside cat) are not, because replaying the outer
// op runs them again. Nesting depth tells the two apart.
#pragma once

#include "runtime/dispatch/op.hpp"

#include <strata/custom_function.hpp>
#include <strata/error.hpp>
#include <strata/graph.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace strata::detail {

struct TraceState;

/// The calling thread's active trace, or null. Set only through
/// ActiveTrace (trace_internal.hpp), which keeps g_active_traces.
TraceState*& active_trace();
/// Trace scopes open in the process, on any thread: while zero, the hot
/// path skips the thread_local read of active_trace().
extern std::atomic<int> g_active_traces;
inline bool tracing_anywhere() { return g_active_traces.load(std::memory_order_relaxed) != 0; }

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

/// A custom function's call: under trace() at top level, runs `run` with the
/// function's own ops kept out of the graph and records the call as one
/// "custom_function" node (the graph keeps the function, so Graph::run
/// replays it and its rules); otherwise just runs `run`.
std::vector<Tensor> trace_custom_call(const CustomFunction& f, const std::vector<Tensor>& inputs,
                                      const FunctionAttrs& attrs, const std::function<std::vector<Tensor>()>& run);

/// What strata::compile traces: `graph` reads the function's inputs, then
/// the tensors it closed over (`captured`, read again at every call, so a
/// weight updated in place is seen); `outputs` is the traced run's result.
struct CompileTrace {
  Graph graph;
  std::vector<Tensor> captured;
  std::vector<Tensor> outputs;
};
/// Traces `f` on `inputs` for strata::compile: like trace(), but tensors
/// made before the trace are captured by reference (graph inputs) rather
/// than copied as constants, and in-place writes and random draws throw
/// (a replay would not repeat them), naming the op.
CompileTrace trace_for_compile(const TraceFn& f, const std::vector<Tensor>& inputs);

/// A traced graph's constants as tensors on `device` (none: the default
/// device), in g.constants' order.
std::vector<Tensor> make_constants(const Graph& g, std::optional<Device> device);
/// A traced graph made ready to replay (trace_run.cpp): each node's op
/// looked up and its attributes built once, the program's values checked to
/// be defined before use, and the point after which each value is read no
/// more, so a replay drops it there (its block goes back to the caching
/// allocator for the next op). strata::compile keeps one per signature;
/// Graph::run makes one per call. It views `graph`, which must outlive it.
struct ReplayPlan {
  struct Step {
    const GraphNode* node = nullptr;
    enum class Kind : uint8_t { kernel, structural, custom, guard } kind = Kind::kernel;
    const OpDef* op = nullptr;     // kernel steps
    Attrs attrs;                   // kernel steps; they view the node's strings
    std::vector<int64_t> release;  // values no later step reads (and not outputs)
  };
  const Graph* graph = nullptr;
  std::vector<Step> steps;
  size_t n_values = 0;
};
/// Throws Error naming the node for an unknown op, a value used before it
/// is defined or a view or join that cannot be replayed.
ReplayPlan plan_replay(const Graph& g);

/// The op of a guard node (strata::compile only): the function read the
/// node's input on the host while it was traced (item(), to_vector(),
/// printing) and took a path or a number from it; attribute "expected"
/// holds the bytes it read (hex), "index" the guard's number. A replay
/// reads the value again and stops with GuardFailure where it differs.
inline constexpr std::string_view kGuardOp = "guard";

/// A replay stopped at a guard whose value differs from the traced one;
/// what() names the guard, its value and the traced one.
class GuardFailure : public Error {
 public:
  using Error::Error;
};

/// Graph::run on a plan, with the constants made beforehand by
/// make_constants (null: made here, on the inputs' device). `any_shape`:
/// the inputs need only the traced ranks (a graph of elementwise ops only,
/// whose shape rules give every value's shape from the inputs':
/// strata::compile's shape-free signatures).
std::vector<Tensor> run_plan(const ReplayPlan& plan, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>* constants, bool any_shape);

/// Throws when tracing: `what` cannot be replayed from a graph.
void trace_unsupported(const char* what);

/// Whether trace() (not a capture) is active on this thread.
bool tracing_graph();

/// Whether strata::compile traces a function on this thread, at its top
/// level (not inside an op, a capture or a recomputation): host reads of
/// values are refused there, so checks that read values on the host (a
/// label range) are left to the kernels, which check them on every run.
bool compile_tracing();

/// Throws when trace() or strata::compile records at top level: the
/// function reads or writes a tensor's .grad (`what`), which is autograd
/// state, not an op: a replay would neither write it nor read its new
/// value. A no-op otherwise (one atomic load while nobody traces).
void refuse_grad_access(const char* what);

/// What a checkpointed function's first run leaves for its recomputation.
///
/// Selective checkpointing: the outputs of the listed ops, kept in the order
/// the function ran them.
///
/// Output reuse (`reuse_output`, checkpoint_sequential's segments): the
/// function's last op is not run again when its single output is what the
/// function returned. That output is the next segment's input, kept anyway,
/// so the recomputation answers the last op with it (recorded as usual)
/// and saves that op's work: a whole layer where the layer is one op (a
/// Linear, a fused Linear+ReLU).
struct SelectiveCache {
  std::set<std::string, std::less<>> save_ops;  // transparent: looked up by op name without a copy
  struct Entry {
    const OpDef* op = nullptr;
    std::vector<Tensor> outputs;
    std::vector<uint32_t> versions;  // storage versions when kept: in-place writes are caught
  };
  std::vector<Entry> entries;

  bool reuse_output = false;
  /// Output reuse: the first run's top-level ops in order (the recomputation
  /// must run the same ones up to the last for it to be answered).
  std::vector<const OpDef*> ops;
  /// The last top-level op of the first run, while it runs: its attributes,
  /// its output (not kept alive) and that output's storage version; `single`
  /// when it ran a kernel itself (not decomposed: recording it as one node
  /// is what an uncheckpointed run does) with one output, not in place.
  struct Last {
    Attrs attrs;
    std::weak_ptr<TensorImpl> output;
    uint32_t version = 0;
    bool single = false;
  } last;
  /// Set by settle_reuse when the function returned the last op's output:
  /// that output (an alias without history) and its storage version; taken
  /// by the recomputation that answers the last op with it.
  Tensor output;
  uint32_t output_version = 0;

  /// After the first run: keeps `outputs[0]` as the answer to the last op
  /// when the function returned exactly that op's unmodified output.
  void settle_reuse(const std::vector<Tensor>& outputs);
};

/// Runs `f`, returning the floating tensors with autograd history that it
/// read without creating them (excluding `known`): the captured weights of
/// a checkpointed function. With `cache`, also keeps the outputs of the ops
/// on its list that `f` calls directly.
std::vector<Tensor> capture_external_reads(const std::vector<Tensor>& known, const std::function<void()>& f,
                                           SelectiveCache* cache = nullptr);

/// Runs `f` (the recomputation) with the ops on the cache's list answered
/// from the cache instead of run, in order, and with the last op answered
/// by the kept output (output reuse) when the ops before it are the first
/// run's and it still holds the value it had; they are recorded as usual.
/// The kept output is handed over to the recomputation (the cache lets go
/// of it, so it is freed once its op's node has run backward; a second pass
/// over a retained graph runs the last op). Returns f's outputs. Throws when
/// `f` calls the listed ops in a different order or with other shapes, or
/// runs other ops after an answered last op.
std::vector<Tensor> replay_selective(SelectiveCache& cache, const std::function<std::vector<Tensor>()>& f);

/// checkpoint(fn, inputs[, save_ops]) (checkpoint.cpp); with `reuse_output`
/// (checkpoint_sequential's segments, whose output the next segment keeps
/// anyway) the node also keeps the function's output, so the recomputation
/// need not run its last op (SelectiveCache::reuse_output).
std::vector<Tensor> checkpoint_impl(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                                    const std::vector<Tensor>& inputs, const std::set<std::string>* save_ops,
                                    bool reuse_output);

/// Keeps the ops of a nested checkpoint out of an enclosing selective
/// cache (the nested checkpoint caches its own); a no-op otherwise.
class SelectiveSuspend {
 public:
  SelectiveSuspend();
  ~SelectiveSuspend();
  SelectiveSuspend(const SelectiveSuspend&) = delete;
  SelectiveSuspend& operator=(const SelectiveSuspend&) = delete;

 private:
  TraceState* state_;
};

/// Records `precomputed` as the result of `call` (autocast and prepare
/// still apply) without running a kernel: selective recomputation.
OpResult dispatch_precomputed(OpCall& call, OpResult precomputed);

}  // namespace strata::detail
