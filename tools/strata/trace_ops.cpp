// trace_ops.cpp — `strata trace ops GRAPH [--device D] [--forward-only]
// [--json]`: the ops a traced program (Graph::save, docs/autograd.md) needs
// on a device, and how the device serves each — its plugin's kernel, a
// decomposition into other ops, or the CPU fallback. The program runs once
// forward and, unless --forward-only, once backward (the sum of its floating
// outputs, differentiated with respect to its floating inputs), on inputs
// of the traced shapes and dtypes: random in [0, 1) for floating inputs,
// zeros for the others (valid indices).
#include "commands.hpp"

#include <strata/strata.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

namespace strata::cli {

namespace {

std::vector<Tensor> example_inputs(const Graph& g, Device device, bool grad) {
  std::vector<Tensor> in;
  for (size_t k = 0; k < g.input_dtypes.size(); ++k) {
    const DType t = g.input_dtypes[k];
    const Shape& shape = g.input_shapes[k];
    if (is_floating(t)) {
      in.push_back(rand(shape, {.dtype = t, .device = device, .requires_grad = grad}));
    } else {
      in.push_back(zeros(shape, {.dtype = t, .device = device}));
    }
  }
  return in;
}

}  // namespace

std::optional<Graph> load_traced_graph(const std::string& path, const char* who) {
  Graph graph;
  try {
    graph = Graph::load(path);
  } catch (const Error& e) {  // the file, and the JSON path of what is wrong
    std::cerr << "strata: " << who << ": " << e.what() << "\n";
    return std::nullopt;
  }
  if (!graph.traced) {
    std::cerr << "strata: " << who << ": " << path << " is no traced graph (Graph::save of trace())\n";
    return std::nullopt;
  }
  return graph;
}

int run_trace_ops(const TraceOpsOptions& options) {
  const std::optional<Graph> loaded = load_traced_graph(options.graph, "trace ops");
  if (!loaded) return kBadInput;
  const Graph& graph = *loaded;
  const Device device = options.device.empty() ? runtime().default_device() : Device(options.device);
  std::vector<Tensor> inputs = example_inputs(graph, device, !options.forward_only);
  runtime().start_op_census();
  std::vector<OpUse> uses;
  try {
    std::vector<Tensor> outputs = graph.run(inputs);
    if (!options.forward_only) {
      Tensor loss;
      for (const Tensor& y : outputs) {
        if (!is_floating(y.dtype()) || !y.requires_grad()) continue;
        Tensor s = sum(y.to(DType::f32));
        loss = loss.defined() ? loss + s : s;
      }
      if (loss.defined()) loss.backward();
    }
    runtime().synchronize(device);
    uses = runtime().stop_op_census();
  } catch (...) {
    (void)runtime().stop_op_census();
    throw;
  }
  // The counts that matter to a vendor: on the device under test.
  std::map<std::string, int> by_how;
  for (const OpUse& u : uses) {
    if (u.device == device.str()) ++by_how[u.how];
  }
  if (options.json) {
    nlohmann::json j;
    j["graph"] = options.graph;
    j["device"] = device.str();
    j["backward"] = !options.forward_only;
    j["ops"] = nlohmann::json::array();
    for (const OpUse& u : uses) {
      j["ops"].push_back({{"device", u.device}, {"op", u.op}, {"signature", u.signature}, {"how", u.how},
                          {"count", u.count}});
    }
    j["summary"] = by_how;
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << "Ops of " << options.graph << " on " << device.str()
            << (options.forward_only ? " (forward)" : " (forward and backward)") << ":\n";
  size_t width = 10;
  for (const OpUse& u : uses) width = std::max(width, u.op.size() + u.signature.size() + 1);
  for (const OpUse& u : uses) {
    const std::string name = u.op + " " + u.signature;
    std::printf("  %-*s  %-8s  %6llu x  %s\n", static_cast<int>(width), name.c_str(), u.device.c_str(),
                static_cast<unsigned long long>(u.count), u.how.c_str());
  }
  std::printf("%d on kernels of %s, %d decomposed, %d fall back to the CPU\n", by_how["kernel"],
              device.str().c_str(), by_how["decomposition"],
              by_how["fallback"] + by_how["fallback (kernel set aside)"]);
  return kOk;
}

}  // namespace strata::cli
