// graph.hpp — inspecting the recorded graph: nodes, edges, saved bytes per
// level, exported as JSON or Graphviz DOT.
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata {

struct GraphNode {
  uint64_t id = 0;               // creation sequence number
  std::string op;                // "mul", "matmul", "reshape", ...
  std::vector<int64_t> inputs;   // per input: producer node id, or -1 for a leaf, -2 for a constant
  std::vector<uint64_t> levels;  // tapes that recorded it (0: requires_grad)
  uint64_t saved_bytes = 0;      // tensors kept for its derivative
  bool released = false;         // saved tensors already freed by a pass
};

struct Graph {
  /// Only nodes that reach the requested outputs (the rest is pruned), in
  /// creation order.
  std::vector<GraphNode> nodes;
  std::vector<int64_t> outputs;  // producer ids of the requested outputs (-1: a leaf)
  /// Bytes saved for backward, per level.
  std::map<uint64_t, uint64_t> saved_bytes_per_level;
  uint64_t saved_bytes = 0;

  std::string to_json() const;
  std::string to_dot() const;
};

/// The recorded history of `outputs`.
Graph recorded_graph(const std::vector<Tensor>& outputs);

}  // namespace strata
