// trace_internal.hpp — what the parts of trace() share (trace.hpp is the face
// the rest of autograd sees; this header is for the trace_*.cpp files only):
//   trace_capture.cpp    recording the ops a function runs: trace(), checkpoint's capture
//   trace_selective.cpp  selective checkpointing: keeping ops' outputs, answering the recomputation from them
//   trace_run.cpp        Graph::run: replaying a traced graph
//   trace_format.cpp     the strata-graph JSON file: Graph::save, Graph::load, Graph::from_json
//   trace_check.cpp      what Graph::load accepts: every node checked against its op's schema and shape rule
//   trace_custom.cpp     custom functions in graphs: recorded, replayed, saved and loaded by registered name
#pragma once

#include "autograd/trace/trace.hpp"

#include <strata/graph.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::detail {

struct TraceState {
  /// Capture mode (checkpoint): only find the tracked tensors read but not
  /// created; no graph, no copies, nothing kept alive.
  bool capture = false;
  /// Selective checkpointing: keep (capture) or answer (replay) the outputs
  /// of the cache's ops; `suspended` counts nested checkpoints.
  SelectiveCache* keep = nullptr;
  SelectiveCache* replay = nullptr;  // non-const: output reuse hands its kept output over
  size_t cursor = 0;
  int suspended = 0;
  /// Output reuse, in a recomputation: the count of top-level ops so far,
  /// whether they match the first run's, and the output that answered the
  /// last op (null until then).
  size_t position = 0;
  bool same_ops = true;
  const TensorImpl* reused = nullptr;
  std::vector<Tensor> externals;
  Graph graph;
  int depth = 0;
  uint64_t next_node = 0;
  int64_t next_value = 0;
  std::unordered_map<const TensorImpl*, int64_t> ids;
  /// The traced values by storage: an alias of one (the same storage,
  /// dtype, offset, sizes and strides: a tensor autograd saved for a
  /// backward rule is a detached alias of the op's input or output) is
  /// that value, not a constant. Traced values are never written in place
  /// (the trace refuses it), so an alias holds the same data.
  std::unordered_multimap<const void*, std::pair<const TensorImpl*, int64_t>> by_storage;
  std::vector<Tensor> alive;  // keeps traced tensors alive so addresses are not reused
  /// strata::compile's trace (trace_for_compile): a tensor whose storage is
  /// older than the trace (serial below `first_serial`: a weight the
  /// function closes over) is not a constant but a value read at each call,
  /// kept in `captured` with its id; in-place writes and random draws are
  /// refused, since a replay would not repeat them.
  bool by_reference = false;
  uint64_t first_serial = 0;
  std::vector<std::pair<int64_t, Tensor>> captured;

  int64_t define(const Tensor& t);

  /// The traced value `t` aliases, or -1.
  int64_t alias_of(const Tensor& t);

  /// The value id of an input: a traced value, or a new constant.
  int64_t value_of(const Tensor& t);

  void record(std::string_view op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
              const Attrs* attrs);

  /// strata::compile: the function read `t` (a traced value, or a tensor
  /// made before the call) on the host, whose bytes are `bytes`: a guard
  /// node (kGuardOp) that a replay checks.
  void guard(const Tensor& t, const std::vector<uint8_t>& bytes);
  int guards = 0;
};

/// A guarded value as messages show it: up to 4 elements by value, else
/// dtype and shape (trace_run.cpp).
std::string guard_shown(const Tensor& t);
/// The bytes a guard read, as its "expected" attribute holds them (hex).
std::string guard_hex(const std::vector<uint8_t>& bytes);

/// The thread's trace when it records a graph (trace() or strata::compile,
/// not a checkpoint's capture or recomputation) at the function's top
/// level (not inside an op); null otherwise. One atomic load while nobody
/// traces.
const TraceState* recording_trace();

/// Makes `state` the thread's active trace for a scope.
class ActiveTrace {
 public:
  explicit ActiveTrace(TraceState& state) : outer_(active_trace()) {
    active_trace() = &state;
    g_active_traces.fetch_add(1, std::memory_order_relaxed);
  }
  ~ActiveTrace() {
    g_active_traces.fetch_sub(1, std::memory_order_relaxed);
    active_trace() = outer_;
  }
  ActiveTrace(const ActiveTrace&) = delete;
  ActiveTrace& operator=(const ActiveTrace&) = delete;

 private:
  TraceState* outer_;
};

/// The error of every problem Graph::load finds: "graph <source>: <path>: <what>",
/// `path` the JSON pointer of the offending value.
[[noreturn]] void graph_load_error(const std::string& source, const std::string& path, const std::string& what);

/// A shape a graph file may hold: at most STRATA_MAX_RANK sizes, none
/// negative, their product within int64. Returns the element count.
int64_t check_graph_shape(std::span<const int64_t> shape, const std::string& source, const std::string& path);

/// Checks a parsed traced graph so that what Graph::load accepts replays:
/// each node's arity, attributes (kinds, presence, dims in range and not
/// repeated) and recorded output shapes against its op's schema and shape
/// rule, run shape-only on the recorded input shapes (trace_check.cpp).
/// Negative dims are wrapped and reduction dims sorted, as the public API
/// does before it records them.
void check_graph_program(Graph& g, const std::string& source);

/// A node's attributes as an op call takes them; they view the node's
/// strings, so the node must outlive the call (trace_run.cpp).
Attrs node_attrs(const GraphNode& n);

/// Whether `op` is a view or join that replay_structural runs.
bool structural_replayable(std::string_view op);

/// What a dtype attribute of a graph file must hold (the values are the
/// ABI's, sparse: 7 to 10 are reserved).
inline constexpr std::string_view kDTypeValuesExpected =
    "expected a dtype of the op set (0 to 6, 11 for c64 or 12 for c128)";

/// Replays a view or join node through its public function (trace_run.cpp).
Tensor replay_structural(const GraphNode& n, std::span<const Tensor> in);

/// Whether `n` calls a custom function (trace_custom.cpp).
bool is_custom_node(const GraphNode& n);

/// Replays a custom function's node: calls the function the graph holds
/// for it (so the replay is recorded as one node with the function's
/// rules); checks the outputs against the node (trace_custom.cpp).
std::vector<Tensor> replay_custom(const Graph& g, const GraphNode& n, const std::vector<Tensor>& inputs);

/// A copy of `g` to save: custom function nodes name their functions by
/// registered name. Throws naming the node and the function when one is
/// not registered (trace_custom.cpp).
Graph savable_graph(const Graph& g);

/// Checks a loaded custom function node (its function registered in this
/// process, one output dtype per output, attributes of kinds functions
/// take), adds the function to `g`, and returns the outputs' dtypes and
/// shapes (trace_custom.cpp).
std::vector<std::pair<DType, Shape>> load_custom_node(Graph& g, const GraphNode& n, const std::string& source,
                                                      const std::string& path);

/// Whether `call` is one of `cache`'s ops, called outside a nested
/// checkpoint and not in place (trace_selective.cpp).
bool selective_op(const SelectiveCache* cache, const TraceState& s, const OpCall& call);

/// Answers `call` from the next kept output of the replayed cache; throws
/// when the recomputation differs from the first run (trace_selective.cpp).
OpResult replay_cached(TraceState& s, OpCall& call);

/// Keeps `result`, the outputs `call` just made, in the capture's cache
/// with their storage versions (trace_selective.cpp).
void keep_cached(TraceState& s, const OpCall& call, OpResult& result);

/// Output reuse, first run: notes `call`, a top-level op that just made
/// `result`, as the latest op (trace_selective.cpp).
void note_top_level(TraceState& s, const OpCall& call, OpResult& result);

/// Output reuse, recomputation: counts `call` against the first run's ops;
/// answers it with the kept output and returns true when it is the first
/// run's last op, every op before it matched, its attributes are the same
/// and the kept output was not written since (trace_selective.cpp).
bool reuse_last(TraceState& s, OpCall& call, OpResult& out);

}  // namespace strata::detail
