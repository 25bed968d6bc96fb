// trace_custom.cpp — custom functions in traced graphs: recorded as one
// "custom_function" node (the graph keeps the function), replayed by calling
// the function (so its rules differentiate the replay), and saved and loaded
// by registered name only, since a file cannot hold code.
#include "autograd/trace/trace_internal.hpp"

#include "autograd/custom/custom_internal.hpp"

#include <strata/error.hpp>
#include <strata/graph.hpp>

#include <string>
#include <variant>

namespace strata::detail {

namespace {

constexpr const char* kCustomOp = "custom_function";

GraphAttr graph_attr(const std::string& name, const FunctionAttr& value) {
  GraphAttr a;
  a.name = name;
  std::visit(
      [&a](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          a.kind = GraphAttr::Kind::integer;
          a.i = v;
        } else if constexpr (std::is_same_v<T, double>) {
          a.kind = GraphAttr::Kind::real;
          a.f = v;
        } else if constexpr (std::is_same_v<T, bool>) {
          a.kind = GraphAttr::Kind::flag;
          a.i = v ? 1 : 0;
        } else if constexpr (std::is_same_v<T, std::string>) {
          a.kind = GraphAttr::Kind::text;
          a.text = v;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          a.kind = GraphAttr::Kind::integers;
          a.ints = v;
        } else {
          a.kind = GraphAttr::Kind::reals;
          a.reals = v;
        }
      },
      value);
  return a;
}

bool reserved(const std::string& name) { return name == "function" || name == "output_dtypes"; }

/// The call's attributes back from a node (the reserved ones left out).
FunctionAttrs function_attrs(const GraphNode& n, const std::string& where) {
  FunctionAttrs attrs;
  for (const GraphAttr& a : n.attrs) {
    if (reserved(a.name)) continue;
    switch (a.kind) {
      case GraphAttr::Kind::integer: attrs.emplace_back(a.name, a.i); break;
      case GraphAttr::Kind::real: attrs.emplace_back(a.name, a.f); break;
      case GraphAttr::Kind::flag: attrs.emplace_back(a.name, a.i != 0); break;
      case GraphAttr::Kind::text: attrs.emplace_back(a.name, a.text); break;
      case GraphAttr::Kind::integers: attrs.emplace_back(a.name, a.ints); break;
      case GraphAttr::Kind::reals: attrs.emplace_back(a.name, a.reals); break;
      default: throw Error(where + ": attribute '" + a.name + "' has a kind custom functions do not take");
    }
  }
  return attrs;
}

const GraphAttr* find_attr(const GraphNode& n, std::string_view name) {
  for (const GraphAttr& a : n.attrs)
    if (a.name == name) return &a;
  return nullptr;
}

std::string node_where(const GraphNode& n) { return "graph node #" + std::to_string(n.id) + " (custom_function)"; }

}  // namespace

bool is_custom_node(const GraphNode& n) { return n.op == kCustomOp; }

std::vector<Tensor> trace_custom_call(const CustomFunction& f, const std::vector<Tensor>& inputs,
                                      const FunctionAttrs& attrs, const std::function<std::vector<Tensor>()>& run) {
  if (!tracing_graph() || active_trace()->depth > 0) return run();
  TraceState& s = *active_trace();
  for (const Tensor& t : inputs) s.value_of(t);  // constants are captured before the call runs
  std::vector<Tensor> outputs;
  {
    TraceNested nested;  // the function's own ops belong to it, not to the graph
    outputs = run();
  }
  std::string key = f.name();
  if (std::optional<CustomFunction> registered = find_custom_function(key); !registered || !registered->same_as(f)) {
    key += "#" + std::to_string(CustomAccess::rule_of(f)->id);
  }
  s.graph.custom_functions[key] = f;
  GraphNode n;
  n.id = s.next_node++;
  n.op = kCustomOp;
  for (const Tensor& t : inputs) n.inputs.push_back(s.value_of(t));
  GraphAttr dtypes;
  dtypes.name = "output_dtypes";
  dtypes.kind = GraphAttr::Kind::integers;
  for (const Tensor& t : outputs) {
    n.outputs.push_back(s.define(t));
    n.output_shapes.push_back(t.sizes());
    n.output_dtypes.push_back(t.dtype());
    dtypes.ints.push_back(static_cast<int64_t>(t.dtype()));
  }
  n.attrs.push_back(graph_attr("function", key));
  n.attrs.push_back(std::move(dtypes));
  for (const auto& [name, value] : attrs) n.attrs.push_back(graph_attr(name, value));
  s.graph.nodes.push_back(std::move(n));
  return outputs;
}

std::vector<Tensor> replay_custom(const Graph& g, const GraphNode& n, const std::vector<Tensor>& inputs) {
  const std::string where = node_where(n);
  const GraphAttr* function = find_attr(n, "function");
  if (function == nullptr) throw Error(where + ": missing attribute 'function'");
  auto it = g.custom_functions.find(function->text);
  if (it == g.custom_functions.end()) {
    throw Error(where + ": the graph does not hold custom function '" + function->text + "'");
  }
  std::vector<Tensor> outputs = it->second(inputs, function_attrs(n, where));
  if (outputs.size() != n.outputs.size()) {
    throw Error(where + ": custom function '" + it->second.name() + "' returned " + std::to_string(outputs.size()) +
                " outputs, the graph names " + std::to_string(n.outputs.size()));
  }
  for (size_t k = 0; k < outputs.size() && k < n.output_shapes.size(); ++k) {
    if (outputs[k].sizes() != n.output_shapes[k]) {
      throw ShapeError(where + ": custom function '" + it->second.name() + "' returned output " + std::to_string(k) +
                       " of shape " + shape_string(outputs[k].shape()) + ", traced as " +
                       shape_string(n.output_shapes[k]));
    }
  }
  return outputs;
}

Graph savable_graph(const Graph& g) {
  Graph out = g;
  out.custom_functions.clear();
  for (GraphNode& n : out.nodes) {
    if (!is_custom_node(n)) continue;
    for (GraphAttr& a : n.attrs) {
      if (a.name != "function") continue;
      auto it = g.custom_functions.find(a.text);
      const std::string name = it != g.custom_functions.end() ? it->second.name() : a.text;
      std::optional<CustomFunction> registered = find_custom_function(name);
      if (it == g.custom_functions.end() || !registered || !registered->same_as(it->second)) {
        throw Error("Graph::save: graph node #" + std::to_string(n.id) + " calls custom function '" + name +
                    "', which is not registered under that name; a file cannot hold code, so a graph calling a "
                    "custom function can be saved (and loaded) only when the function is registered with "
                    "register_custom_function");
      }
      a.text = name;
      out.custom_functions[name] = *registered;
    }
  }
  return out;
}

std::vector<std::pair<DType, Shape>> load_custom_node(Graph& g, const GraphNode& n, const std::string& source,
                                                      const std::string& path) {
  const GraphAttr* function = find_attr(n, "function");
  if (function == nullptr || function->kind != GraphAttr::Kind::text) {
    graph_load_error(source, path + "/attrs", "a custom_function node needs a string attribute \"function\"");
  }
  std::optional<CustomFunction> f = find_custom_function(function->text);
  if (!f) {
    graph_load_error(source, path + "/attrs",
                     "custom function '" + function->text +
                         "' is not registered in this process (register_custom_function before loading)");
  }
  const GraphAttr* dtypes = find_attr(n, "output_dtypes");
  if (dtypes == nullptr || dtypes->kind != GraphAttr::Kind::integers || dtypes->ints.size() != n.outputs.size()) {
    graph_load_error(source, path + "/attrs",
                     "a custom_function node needs an integer list \"output_dtypes\" with one dtype per output (" +
                         std::to_string(n.outputs.size()) + ")");
  }
  if (n.inputs.empty()) graph_load_error(source, path + "/inputs", "a custom_function node needs at least one input");
  try {
    function_attrs(n, "custom function '" + function->text + "'");
  } catch (const Error& e) {
    graph_load_error(source, path + "/attrs", e.what());
  }
  std::vector<std::pair<DType, Shape>> outputs;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    int64_t d = dtypes->ints[k];
    if (!is_dtype_value(d)) {
      graph_load_error(source, path + "/attrs", "output_dtypes: " + std::to_string(d) + " is not a dtype of the op set");
    }
    outputs.emplace_back(static_cast<DType>(d), n.output_shapes[k]);
  }
  g.custom_functions[function->text] = *f;
  return outputs;
}

}  // namespace strata::detail
