// trace_internal.hpp — what the parts of trace() share (trace.hpp is the face
// the rest of autograd sees; this header is for the trace_*.cpp files only):
//   trace_capture.cpp    recording the ops a function runs: trace(), checkpoint's capture
//   trace_selective.cpp  selective checkpointing: keeping ops' outputs, answering the recomputation from them
//   trace_run.cpp        Graph::run: replaying a traced graph
//   trace_format.cpp     the strata-graph JSON file: Graph::save, Graph::load, Graph::from_json
#pragma once

#include "trace.hpp"

#include <strata/graph.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
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
  const SelectiveCache* replay = nullptr;
  size_t cursor = 0;
  int suspended = 0;
  std::vector<Tensor> externals;
  Graph graph;
  int depth = 0;
  uint64_t next_node = 0;
  int64_t next_value = 0;
  std::unordered_map<const TensorImpl*, int64_t> ids;
  std::vector<Tensor> alive;  // keeps traced tensors alive so addresses are not reused

  int64_t define(const Tensor& t);

  /// The value id of an input: a traced value, or a new constant.
  int64_t value_of(const Tensor& t);

  void record(std::string_view op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
              const Attrs* attrs);
};

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

/// Whether `call` is one of `cache`'s ops, called outside a nested
/// checkpoint and not in place (trace_selective.cpp).
bool selective_op(const SelectiveCache* cache, const TraceState& s, const OpCall& call);

/// Answers `call` from the next kept output of the replayed cache; throws
/// when the recomputation differs from the first run (trace_selective.cpp).
OpResult replay_cached(TraceState& s, OpCall& call);

/// Keeps `result`, the outputs `call` just made, in the capture's cache
/// with their storage versions (trace_selective.cpp).
void keep_cached(TraceState& s, const OpCall& call, OpResult& result);

}  // namespace strata::detail
