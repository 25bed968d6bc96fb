// inspect.cpp — the recorded graph as data, JSON and DOT.
#include "autograd/engine/nodes.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/graph.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>

namespace strata {

Graph recorded_graph(const std::vector<Tensor>& outputs) {
  Graph g;
  std::vector<std::shared_ptr<detail::Node>> stack;
  std::unordered_set<const detail::Node*> seen;
  for (const Tensor& t : outputs) {
    const detail::AutogradMeta* m = detail::meta_if(t);
    if (m == nullptr || m->grad_fn == nullptr) {
      g.outputs.push_back(-1);
      continue;
    }
    g.outputs.push_back(static_cast<int64_t>(m->grad_fn->sequence));
    if (seen.insert(m->grad_fn.get()).second) stack.push_back(m->grad_fn);
  }
  while (!stack.empty()) {  // iterative: graphs can be very deep
    std::shared_ptr<detail::Node> node = stack.back();
    stack.pop_back();
    GraphNode n;
    n.id = node->sequence;
    n.op = std::string(node->op->name);
    n.released = node->released;
    n.saved_bytes = node->saved_bytes();
    for (uint8_t k = 0; k < node->levels.count; ++k) n.levels.push_back(node->levels.ids[k]);
    std::sort(n.levels.begin(), n.levels.end());
    for (const detail::Edge& e : node->next) {
      if (e.node != nullptr) {
        n.inputs.push_back(static_cast<int64_t>(e.node->sequence));
        if (seen.insert(e.node.get()).second) stack.push_back(e.node);
      } else {
        n.inputs.push_back(e.leaf != nullptr ? -1 : -2);
      }
    }
    for (uint64_t level : n.levels) g.saved_bytes_per_level[level] += n.saved_bytes;
    g.saved_bytes += n.saved_bytes;
    g.nodes.push_back(std::move(n));
  }
  std::sort(g.nodes.begin(), g.nodes.end(), [](const GraphNode& a, const GraphNode& b) { return a.id < b.id; });
  return g;
}

namespace detail {
std::string program_to_json(const Graph& g);  // trace_format.cpp
}  // namespace detail

std::string Graph::to_json() const {
  if (traced) return detail::program_to_json(*this);
  nlohmann::json j{{"format", "strata-graph"}, {"version", 1}, {"outputs", outputs}, {"saved_bytes", saved_bytes}};
  j["nodes"] = nlohmann::json::array();
  for (const GraphNode& n : nodes) {
    j["nodes"].push_back({{"id", n.id},
                          {"op", n.op},
                          {"inputs", n.inputs},
                          {"levels", n.levels},
                          {"saved_bytes", n.saved_bytes},
                          {"released", n.released}});
  }
  nlohmann::json per_level = nlohmann::json::object();
  for (const auto& [level, bytes] : saved_bytes_per_level) per_level[std::to_string(level)] = bytes;
  j["saved_bytes_per_level"] = per_level;
  return j.dump(2);
}

std::string Graph::to_dot() const {
  std::string dot = "digraph strata {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n";
  bool leaf = false;
  bool constant = false;
  for (const GraphNode& n : nodes) {
    dot += "  n" + std::to_string(n.id) + " [label=\"" + n.op + "\\n#" + std::to_string(n.id) + " " +
           std::to_string(n.saved_bytes) + " B\"" + (n.released ? ", style=dashed" : "") + "];\n";
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int64_t in = n.inputs[k];
      // Appended, not "n" + to_string(in): GCC 12 warns -Wrestrict on
      // operator+(const char*, string&&) at -O3 (a false positive).
      std::string from = in >= 0 ? std::string("n").append(std::to_string(in)) : in == -1 ? "leaf" : "constant";
      leaf = leaf || in == -1;
      constant = constant || in == -2;
      dot += "  " + from + " -> n" + std::to_string(n.id) + " [label=\"" + std::to_string(k) + "\"];\n";
    }
  }
  if (leaf) dot += "  leaf [shape=ellipse, label=\"leaf\"];\n";
  if (constant) dot += "  constant [shape=ellipse, style=dotted, label=\"constant\"];\n";
  return dot + "}\n";
}

}  // namespace strata
