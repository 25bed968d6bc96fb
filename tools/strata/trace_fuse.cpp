// trace_fuse.cpp — `strata trace --explain-fusion GRAPH [--json]
// [--fused-output FILE] [--save-for-backward]`: runs the fusion pass (strata::fuse, docs/compile.md)
// over a traced program and lists each fused region (its ops, inputs, dtype
// and shape) and why each elementwise op at a region's border stayed out;
// optionally writes the fused graph (Graph::save) for `strata trace ops` or
// Graph::load.
#include <iostream>
#include <nlohmann/json.hpp>
#include <strata/strata.hpp>

#include "commands.hpp"

namespace strata::cli {

int run_trace_fuse(const TraceFuseOptions& options) {
  const std::optional<Graph> loaded = load_traced_graph(options.graph, "trace --explain-fusion");
  if (!loaded) return kBadInput;
  const Graph& graph = *loaded;
  FusionReport report;
  const Graph fused = fuse(graph, &report, {.save_for_backward = options.save_for_backward});
  if (!options.output.empty()) fused.save(options.output);
  if (options.json) {
    nlohmann::json j;
    j["graph"] = options.graph;
    j["nodes"] = graph.nodes.size();
    j["fused_nodes"] = fused.nodes.size();
    j["regions"] = nlohmann::json::array();
    for (const FusionRegion& r : report.regions) {
      j["regions"].push_back({{"node", r.node},
                              {"nodes", r.nodes},
                              {"ops", r.ops},
                              {"inputs", r.inputs},
                              {"outputs", r.outputs},
                              {"saved", r.saved},
                              {"dtype", dtype_name(r.dtype)},
                              {"shape", r.shape},
                              {"program", r.program}});
    }
    j["notes"] = nlohmann::json::array();
    for (const FusionNote& n : report.notes)
      j["notes"].push_back({{"node", n.node}, {"op", n.op}, {"reason", n.reason}});
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << "Fusion of " << options.graph << ": " << graph.nodes.size() << " nodes -> " << fused.nodes.size() << " ("
            << report.regions.size() << " fused region" << (report.regions.size() == 1 ? "" : "s") << ")\n"
            << report.text();
  if (!options.output.empty()) std::cout << "fused graph written to " << options.output << "\n";
  return kOk;
}

}  // namespace strata::cli
