// graph.hpp — graphs of ops: the recorded autograd graph (for inspection:
// nodes, edges, saved bytes per level, JSON and Graphviz DOT) and traced
// programs (trace(): saved to a file, loaded, replayed on any device, and
// differentiable when replayed).
#pragma once

#include <strata/custom_function.hpp>
#include <strata/tensor.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata {

/// A named op attribute of a traced node ("dim", "dims", "value", ...).
struct GraphAttr {
  /// integer, flag, dtype (its value in i): "int", "bool", "dtype"; real:
  /// "float"; integers: "ints"; reals: "floats"; text: "string"; exact
  /// scalars: "scalar_int" (i) and "scalar_float" (f).
  enum class Kind { integer, real, integers, flag, dtype, reals, text, scalar_int, scalar_real };
  std::string name;
  Kind kind = Kind::integer;
  int64_t i = 0;
  double f = 0.0;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::string text;
};

/// A tensor captured by trace() that does not derive from the inputs (a
/// weight the function closes over, a creation op's result), stored by value.
struct GraphConstant {
  int64_t value = 0;  // the value id it defines
  DType dtype = DType::f32;
  Shape shape;
  std::vector<double> data;  // floating and bool dtypes; complex ones as (real, imaginary) pairs
  std::vector<int64_t> ints;  // i32 and i64 (exact)
};

struct GraphNode {
  uint64_t id = 0;               // creation sequence number
  std::string op;                // "mul", "matmul", "reshape", ...
  /// recorded_graph(): per input, the producer node id, or -1 for a leaf,
  /// -2 for a constant. trace(): the value ids of the inputs.
  std::vector<int64_t> inputs;
  std::vector<uint64_t> levels;  // tapes that recorded it (0: requires_grad)
  uint64_t saved_bytes = 0;      // tensors kept for its derivative
  bool released = false;         // saved tensors already freed by a pass
  // trace() only:
  std::vector<int64_t> outputs;  // value ids this node defines
  std::vector<Shape> output_shapes;
  /// Per output, its dtype: set by trace() and by Graph::load (derived from
  /// the inputs by each op's shape rule, not stored in the file).
  std::vector<DType> output_dtypes;
  std::vector<GraphAttr> attrs;
  /// trace(): the op ran with grad mode off (inside NoGradGuard, or a
  /// backward pass without create_graph, whose results have no history).
  /// A replay runs it with grad mode off too, so its results have no
  /// history there either; the other nodes run in the caller's mode.
  bool no_grad = false;
};

struct Graph {
  /// Only nodes that reach the requested outputs (the rest is pruned), in
  /// creation order.
  std::vector<GraphNode> nodes;
  std::vector<int64_t> outputs;  // producer ids of the requested outputs (-1: a leaf)
  /// Bytes saved for backward, per level.
  std::map<uint64_t, uint64_t> saved_bytes_per_level;
  uint64_t saved_bytes = 0;

  /// trace() graphs: a program over numbered values. Values are defined by
  /// the inputs (ids 0..n-1, in order), constants and nodes, each before use.
  bool traced = false;
  std::vector<DType> input_dtypes;
  std::vector<Shape> input_shapes;
  std::vector<GraphConstant> constants;
  /// For traced graphs, `outputs` holds value ids.
  /// The custom functions its "custom_function" nodes call, by the node's
  /// "function" attribute: the registered name, or for a function not
  /// registered when traced, the name and a number ("softplus#3").
  std::map<std::string, CustomFunction> custom_functions;

  std::string to_json() const;
  std::string to_dot() const;

  /// Writes a traced graph as JSON (format "strata-graph", version 1).
  /// Throws Error naming the path when it cannot be written, or when the
  /// graph came from recorded_graph() (not replayable), or when it calls a
  /// custom function that is not registered under its name
  /// (register_custom_function), naming the function.
  void save(const std::filesystem::path& path) const;
  /// Reads a graph written by save(). Throws Error naming the file and the
  /// JSON path of what is wrong (unknown op, value used before defined, a
  /// custom function not registered in this process, ...).
  static Graph load(const std::filesystem::path& path);
  static Graph from_json(const std::string& text, const std::string& source = "<string>");

  /// Replays a traced graph on `inputs` (dtypes and shapes as traced), on
  /// their device; constants move there too. The ops are recorded like any
  /// other, so the result is differentiable (to any order).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
};

/// The recorded history of `outputs`.
Graph recorded_graph(const std::vector<Tensor>& outputs);

using TraceFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Runs `f` once on `example_inputs` and records the ops it calls as a
/// replayable Graph (like torch.jit.trace): control flow is frozen to the
/// path taken, tensors not computed from the inputs become constants (random
/// numbers drawn inside f are replayed as drawn), and shapes are fixed to
/// the examples'. In-place writes to traced values and moves between
/// devices inside f are rejected with an Error. A custom function call
/// (strata/custom_function.hpp) is recorded as one node, not its own ops;
/// the replay calls the function, so its derivative rules differentiate it.
Graph trace(const TraceFn& f, const std::vector<Tensor>& example_inputs);

}  // namespace strata
