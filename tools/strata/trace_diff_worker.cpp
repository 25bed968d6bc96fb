// trace_diff_worker.cpp — the worker process of `strata trace diff`
// (trace_diff.hpp): loads the graph, computes every value on the reference
// device, then checks each node alone on the device under test, writing one
// JSON line per event to the parent's pipe:
//
//   {"event":"hello","checks":N,"nodes":M,"device":"acme:0","reference":"cpu:0"}   (or "refused")
//   {"event":"start","check":3,"node":3,"op":"add","kernel":"strata::add f32,f32->f32",
//    "direction":"forward","signature":"f32[4, 3], f32[4, 3] -> f32[4, 3]"}
//   {"event":"result","check":3,"status":"depart","message":"...","how":"...","max_error":1.0}
//   {"event":"done"}                     (or {"event":"paused","check":K} before the backward checks)
#include "commands.hpp"
#include "trace_diff.hpp"
#include "worker_process.hpp"

#include <strata/strata.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace strata::cli {

namespace {

// ---- text -------------------------------------------------------------------------------------

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

std::string tensor_text(DType t, const Shape& s) { return std::string(dtype_name(t)) + shape_text(s); }
std::string tensor_text(const Tensor& t) { return tensor_text(t.dtype(), t.sizes()); }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string value_text(std::complex<double> v, bool complex) {
  return complex ? "(" + number(v.real()) + ", " + number(v.imag()) + ")" : number(v.real());
}

/// The multi-index of a row-major flat index.
std::string index_text(const Shape& s, int64_t flat) {
  std::vector<int64_t> idx(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    const int64_t extent = std::max<int64_t>(s[k], 1);
    idx[k] = flat % extent;
    flat /= extent;
  }
  return shape_text(idx);
}

// ---- comparing ---------------------------------------------------------------------------------

struct Tolerance {
  double rtol = 0.0, atol = 0.0;  // both 0: exact (integers, bool)
};

/// Per dtype: about a hundred units in the last place of the dtype's
/// epsilon for the relative part; the absolute part scales with the
/// largest magnitude of the reference tensor (summation order differs
/// between devices).
Tolerance tolerance(DType t, const TraceDiffOptions& o) {
  Tolerance tol;
  switch (t) {
    case DType::f64:
    case DType::c128: tol = {1e-9, 1e-9}; break;
    case DType::f32:
    case DType::c64: tol = {1e-4, 1e-5}; break;
    case DType::f16: tol = {1e-2, 1e-3}; break;
    case DType::bf16: tol = {2e-2, 1e-2}; break;
    default: return tol;
  }
  if (o.rtol >= 0) tol.rtol = o.rtol;
  if (o.atol >= 0) tol.atol = o.atol;
  return tol;
}

std::vector<std::complex<double>> host_values(const Tensor& t) {
  return t.to(Device("cpu:0")).to_vector<std::complex<double>>();
}

struct Comparison {
  bool departs = false;
  std::string text;  // what departs, with the worst element
  int64_t worst = -1;
  double max_error = 0.0;
};

/// `got` (the device's) against `want` (the reference's).
Comparison compare(const std::string& what, const Tensor& got, const Tensor& want, const std::string& device,
                   const std::string& reference, const TraceDiffOptions& options) {
  Comparison c;
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) {
    c.departs = true;
    c.max_error = std::numeric_limits<double>::infinity();
    c.text = what + ": " + device + " gives " + tensor_text(got) + ", " + reference + " " + tensor_text(want);
    return c;
  }
  const std::vector<std::complex<double>> a = host_values(got), b = host_values(want);
  const Tolerance tol = tolerance(want.dtype(), options);
  double scale = 1.0;
  for (const auto& v : b) {
    for (double x : {v.real(), v.imag()}) {
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
    }
  }
  int64_t departing = 0;
  double worst_excess = -1.0, worst_error = 0.0, worst_allowed = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    double error = 0.0, allowed = 0.0;
    for (int part = 0; part < 2; ++part) {
      const double x = part ? a[i].imag() : a[i].real(), y = part ? b[i].imag() : b[i].real();
      double e = 0.0;
      if (std::isnan(x) || std::isnan(y)) {
        e = std::isnan(x) && std::isnan(y) ? 0.0 : std::numeric_limits<double>::infinity();
      } else if (x != y) {
        e = std::abs(x - y);  // infinite when one side is infinite
      }
      const double allow = tol.atol * scale + tol.rtol * (std::isfinite(y) ? std::abs(y) : 0.0);
      if (e - allow > error - allowed) {
        error = e;
        allowed = allow;
      }
    }
    c.max_error = std::max(c.max_error, error);
    if (error > allowed) ++departing;
    const double excess = error - allowed;
    if (excess > worst_excess) {
      worst_excess = excess;
      c.worst = static_cast<int64_t>(i);
      worst_error = error;
      worst_allowed = allowed;
    }
  }
  if (departing == 0) return c;
  c.departs = true;
  const bool complex = is_complex(want.dtype());
  const size_t w = static_cast<size_t>(c.worst);
  c.text = what + " " + tensor_text(want) + ": " + std::to_string(departing) + " of " + std::to_string(a.size()) +
           " elements depart; worst " + index_text(want.sizes(), c.worst) + ": " + device + " gives " +
           value_text(a[w], complex) + ", " + reference + " gives " + value_text(b[w], complex) + " (|difference| " +
           number(worst_error) + ", tolerance " + number(worst_allowed) + ")";
  return c;
}

/// "input 0 f32[4, 3] in [0.01, 0.98] (at [1, 2]: 0.5)": what a node saw.
std::string inputs_text(const std::vector<Tensor>& inputs, const Shape& at_shape, int64_t at) {
  std::string out;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    out += (k ? "; " : "") + std::string("input ") + std::to_string(k) + " " + tensor_text(t);
    const std::vector<std::complex<double>> v = host_values(t);
    if (v.empty()) continue;
    double lo = v.front().real(), hi = lo;
    for (const auto& x : v) {
      lo = std::min(lo, x.real());
      hi = std::max(hi, x.real());
    }
    out += " in [" + number(lo) + ", " + number(hi) + "]";
    if (at >= 0 && t.sizes() == at_shape && static_cast<size_t>(at) < v.size()) {
      out += " (at " + index_text(at_shape, at) + ": " + value_text(v[static_cast<size_t>(at)], is_complex(t.dtype())) +
             ")";
    }
  }
  return out;
}

// ---- one node as a program of its own --------------------------------------------------------

/// A node alone: its distinct input values become the inputs of a graph
/// holding only it, so that Graph::run replays it on any tensors.
struct NodeProgram {
  Graph graph;
  std::vector<int64_t> inputs;  // the value ids it reads, distinct, in order
};

NodeProgram single_node(const Graph& g, const GraphNode& n) {
  NodeProgram p;
  p.graph.traced = true;
  GraphNode copy = n;
  std::map<int64_t, int64_t> remap;
  for (int64_t& v : copy.inputs) {
    auto [it, fresh] = remap.try_emplace(v, static_cast<int64_t>(p.inputs.size()));
    if (fresh) p.inputs.push_back(v);
    v = it->second;
  }
  int64_t next = static_cast<int64_t>(p.inputs.size());
  for (int64_t& v : copy.outputs) v = next++;
  p.graph.outputs = copy.outputs;
  p.graph.nodes.push_back(std::move(copy));
  if (auto f = g.custom_functions.find([&] {
        for (const GraphAttr& a : n.attrs)
          if (a.name == "function") return a.text;
        return std::string();
      }());
      f != g.custom_functions.end()) {
    p.graph.custom_functions.insert(*f);
  }
  return p;
}

std::vector<Tensor> run_node(NodeProgram& p, const std::vector<Tensor>& inputs) {
  p.graph.input_dtypes.clear();
  p.graph.input_shapes.clear();
  for (const Tensor& t : inputs) {
    p.graph.input_dtypes.push_back(t.dtype());
    p.graph.input_shapes.push_back(t.sizes());
  }
  return p.graph.run(inputs);
}

// ---- the checks ---------------------------------------------------------------------------------

struct Outcome {
  std::string status = "pass";  // pass depart n/a error
  std::string message;
  std::string how;
  double max_error = 0.0;
};

class Differ {
 public:
  Differ(const Graph& g, Device device, Device reference, const TraceDiffOptions& options)
      : graph_(g), device_(device), reference_(reference), options_(options) {
    for (DType t : runtime().device_info(device).dtypes) stored_.insert(t);
    for (OpInfo& op : runtime().ops()) {
      // Where the op's own derived gradient checks apply (docs/ops.md, "test domain").
      const bool checked = op.differentiable && op.domain.orders > 0;
      if (!checked) unchecked_rules_.insert(std::move(op.name));
    }
    reference_pass();
  }

  size_t nodes() const { return graph_.nodes.size(); }
  const GraphNode& node(size_t i) const { return graph_.nodes[i]; }

  /// Whether node i has a gradient to check: a floating input and output.
  bool differentiable(size_t i) const {
    if (!failed_[i].empty()) return false;
    bool in = false, out = false;
    for (int64_t v : programs_[i].inputs) in = in || is_floating(values_.at(v).dtype());
    for (int64_t v : graph_.nodes[i].outputs) out = out || (values_.contains(v) && is_floating(values_.at(v).dtype()));
    return in && out;
  }

  /// "f32[4, 3], f32[3, 2] -> f32[4, 2]" (the reference's values).
  std::string signature(size_t i) const {
    // Appended piece by piece (GCC 12 warns -Wrestrict on "x" + string at -O3).
    auto text = [this](int64_t v) { return values_.contains(v) ? tensor_text(values_.at(v)) : std::string("?"); };
    std::string s;
    for (int64_t v : graph_.nodes[i].inputs) s.append(s.empty() ? "" : ", ").append(text(v));
    s += " ->";
    for (int64_t v : graph_.nodes[i].outputs) s.append(" ").append(text(v));
    return s;
  }

  /// The kernel the node's op would run on the device: "strata::mul
  /// f32,f32->f32" (its name in exclude_kernels).
  std::string kernel(size_t i) const {
    const GraphNode& n = graph_.nodes[i];
    std::string s = n.op.find("::") == std::string::npos ? "strata::" + n.op : n.op;
    std::string sig;
    for (int64_t v : n.inputs) sig += (sig.empty() ? "" : ",") + dtype_of(v);
    sig += "->";
    for (size_t k = 0; k < n.outputs.size(); ++k) sig += (k ? "," : "") + dtype_of(n.outputs[k]);
    return s + " " + sig;
  }

  Outcome forward(size_t i) {
    Outcome o;
    if (std::optional<Outcome> na = not_applicable(i)) return *na;
    NodeProgram& p = programs_[i];
    std::vector<Tensor> ref_in = inputs_of(i), dev_in;
    for (const Tensor& t : ref_in) dev_in.push_back(t.to(device_));
    std::vector<Tensor> got;
    if (std::optional<Outcome> refused = on_device(o, [&] { got = run_node(p, dev_in); })) return *refused;
    const GraphNode& n = graph_.nodes[i];
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Tensor& want = values_.at(n.outputs[k]);
      Comparison c = compare("output " + std::to_string(k), got[k], want, device_.str(), reference_.str(), options_);
      o.max_error = std::max(o.max_error, c.max_error);
      if (!c.departs) continue;
      o.status = "depart";
      o.message = c.text + "; it saw " + inputs_text(ref_in, want.sizes(), c.worst);
      break;
    }
    return o;
  }

  Outcome backward(size_t i) {
    Outcome o;
    if (std::optional<Outcome> na = not_applicable(i)) return *na;
    const GraphNode& n = graph_.nodes[i];
    std::vector<Tensor> ref_in = inputs_of(i);
    // One fixed cotangent per floating output, in [-1, 1).
    std::vector<Tensor> cotangents;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Tensor& y = values_.at(n.outputs[k]);
      if (!is_floating(y.dtype())) {
        cotangents.emplace_back();
        continue;
      }
      manual_seed(0x5eed0000u + n.id * 64 + k);
      cotangents.push_back(rand(y.sizes(), {.dtype = y.dtype(), .device = reference_}) * 2.0 - 1.0);
    }
    std::vector<std::vector<Tensor>> want;
    try {
      want = vjp(i, ref_in, cotangents);
    } catch (const Error& e) {
      return {"n/a", "the reference " + reference_.str() + " cannot differentiate it: " + e.what(), "", 0.0};
    }
    std::vector<Tensor> dev_in, dev_cot;
    for (const Tensor& t : ref_in) dev_in.push_back(t.to(device_));
    for (const Tensor& t : cotangents) dev_cot.push_back(t.defined() ? t.to(device_) : Tensor());
    std::vector<std::vector<Tensor>> got;
    if (std::optional<Outcome> refused = on_device(o, [&] { got = vjp(i, dev_in, dev_cot); })) {
      return *refused;
    }
    for (size_t k = 0; k < want.size(); ++k) {
      for (size_t j = 0; j < want[k].size(); ++j) {
        if (!want[k][j].defined()) continue;
        const std::string what = "gradient of input " + std::to_string(j) + " through output " + std::to_string(k) +
                                 " (a fixed random cotangent)";
        Comparison c = compare(what, got[k][j], want[k][j], device_.str(), reference_.str(), options_);
        o.max_error = std::max(o.max_error, c.max_error);
        if (!c.departs || o.status == "depart") continue;
        o.status = "depart";
        o.message = c.text + "; it saw " + inputs_text(ref_in, want[k][j].sizes(), c.worst);
      }
    }
    if (o.status == "pass") {
      if (std::optional<std::string> wrong = rule_departs(i, ref_in, cotangents, want)) {
        o.status = "depart";
        o.message = *wrong;
      }
    }
    return o;
  }

 private:
  /// Every value on the reference, node by node. A node the reference
  /// cannot run is run on the device instead (its values feed the nodes
  /// after it) and its own checks are not applicable.
  void reference_pass() {
    // The inputs and constants: a graph without nodes returns them.
    Graph leaves;
    leaves.traced = true;
    leaves.input_dtypes = graph_.input_dtypes;
    leaves.input_shapes = graph_.input_shapes;
    leaves.constants = graph_.constants;
    std::vector<Tensor> inputs;
    manual_seed(0x5eed);
    for (size_t k = 0; k < graph_.input_dtypes.size(); ++k) {
      const DType t = graph_.input_dtypes[k];
      leaves.outputs.push_back(static_cast<int64_t>(k));
      inputs.push_back(is_floating(t) ? rand(graph_.input_shapes[k], {.dtype = t, .device = reference_})
                                      : zeros(graph_.input_shapes[k], {.dtype = t, .device = reference_}));
    }
    for (const GraphConstant& c : graph_.constants) leaves.outputs.push_back(c.value);
    NoGradGuard no_grad;
    std::vector<Tensor> leaf_values = leaves.run(inputs);
    for (size_t k = 0; k < leaf_values.size(); ++k) values_[leaves.outputs[k]] = leaf_values[k];

    failed_.assign(graph_.nodes.size(), "");
    for (const GraphNode& n : graph_.nodes) {
      programs_.push_back(single_node(graph_, n));
      const size_t i = programs_.size() - 1;
      std::vector<Tensor> out;
      for (int64_t v : programs_[i].inputs) {
        if (!values_.contains(v)) failed_[i] = "an input (value " + std::to_string(v) + ") was computed nowhere";
      }
      if (!failed_[i].empty()) continue;
      try {
        out = run_node(programs_[i], inputs_of(i));
      } catch (const Error& e) {
        failed_[i] = "the reference " + reference_.str() + " cannot run it: " + e.what();
        try {
          std::vector<Tensor> dev_in;
          for (const Tensor& t : inputs_of(i)) dev_in.push_back(t.to(device_));
          for (const Tensor& t : run_node(programs_[i], dev_in)) out.push_back(t.to(reference_));
        } catch (const Error&) {
          out.clear();
        }
      }
      for (size_t k = 0; k < out.size() && k < n.outputs.size(); ++k) values_[n.outputs[k]] = out[k];
    }
  }

  /// The derivative rule itself, on the reference: the VJP's <x̄, v> for a
  /// random direction v against central differences of the forward,
  /// <ȳ, (f(x + hv) - f(x - hv)) / 2h>, in f64 (h = 1e-6). Catches a rule
  /// that is wrong on every device (which comparing devices cannot). Not
  /// checked where the node does not compute in f64 on the reference, or
  /// its outputs are not then f64 (a cast), or an input is complex, or the
  /// op's registry entry says its derivative is not checked that way (no
  /// VJP — detach, whose zero derivative is its definition — or test
  /// orders 0: floor, round and the other flat ops).
  std::optional<std::string> rule_departs(size_t i, const std::vector<Tensor>& in, const std::vector<Tensor>& cot,
                                          const std::vector<std::vector<Tensor>>& vjp) {
    constexpr double h = 1e-6;
    const std::string& op = graph_.nodes[i].op;
    if (unchecked_rules_.contains(op.find("::") == std::string::npos ? "strata::" + op : op)) return std::nullopt;
    for (const Tensor& t : in) {
      if (is_complex(t.dtype())) return std::nullopt;
    }
    std::vector<Tensor> plus, minus, direction(in.size());
    double numeric = 0.0, analytic = 0.0, scale = 0.0;
    try {
      NoGradGuard no_grad;
      manual_seed(0x5eed1000u + graph_.nodes[i].id);
      for (size_t j = 0; j < in.size(); ++j) {
        if (!is_floating(in[j].dtype())) {
          plus.push_back(in[j]);
          minus.push_back(in[j]);
          continue;
        }
        const Tensor x = in[j].to(DType::f64);
        direction[j] = rand(x.sizes(), {.dtype = DType::f64, .device = reference_}) * 2.0 - 1.0;
        plus.push_back(x + direction[j] * h);
        minus.push_back(x - direction[j] * h);
      }
      const std::vector<Tensor> up = run_node(programs_[i], plus), down = run_node(programs_[i], minus);
      for (size_t k = 0; k < up.size(); ++k) {
        if (!cot[k].defined()) continue;
        if (up[k].dtype() != DType::f64) return std::nullopt;
        numeric += sum((up[k] - down[k]) * cot[k].to(DType::f64)).item<double>() / (2 * h);
      }
      for (size_t k = 0; k < vjp.size(); ++k) {
        for (size_t j = 0; j < in.size(); ++j) {
          if (!vjp[k][j].defined() || !direction[j].defined()) continue;
          const Tensor g = vjp[k][j].to(DType::f64);
          analytic += sum(g * direction[j]).item<double>();
          scale += sum(abs(g) * abs(direction[j])).item<double>();
        }
      }
    } catch (const Error&) {
      return std::nullopt;  // no f64 on the reference (or for this op there)
    }
    const bool f64 = std::all_of(in.begin(), in.end(), [](const Tensor& t) { return t.dtype() == DType::f64; });
    const double allowed = (f64 ? 1e-6 : 1e-4) * scale + 1e-6;
    if (std::abs(analytic - numeric) <= allowed) return std::nullopt;
    return "its VJP rule departs from central differences of the forward on " + reference_.str() +
           " (f64, h 1e-6): for a random direction v, <VJP, v> = " + number(analytic) +
           ", the differences give " + number(numeric) + " (|difference| " + number(std::abs(analytic - numeric)) +
           ", tolerance " + number(allowed) + "); a rule is the same on every device, so it departs everywhere";
  }

  std::string dtype_of(int64_t v) const {
    return values_.contains(v) ? std::string(dtype_name(values_.at(v).dtype())) : std::string("?");
  }

  std::vector<Tensor> inputs_of(size_t i) const {
    std::vector<Tensor> in;
    for (int64_t v : programs_[i].inputs) in.push_back(values_.at(v).detach());
    return in;
  }

  std::optional<Outcome> not_applicable(size_t i) const {
    if (!failed_[i].empty()) return Outcome{"n/a", failed_[i], "", 0.0};
    std::set<DType> dtypes;
    for (int64_t v : programs_[i].inputs) dtypes.insert(values_.at(v).dtype());
    for (int64_t v : graph_.nodes[i].outputs) dtypes.insert(values_.at(v).dtype());
    for (DType t : dtypes) {
      if (!stored_.contains(t)) {
        return Outcome{"n/a", device_.str() + " does not store " + std::string(dtype_name(t)), "", 0.0};
      }
    }
    return std::nullopt;
  }

  /// Runs `body` on the device under the op census; an Error becomes an
  /// "error" outcome. Sets o.how to what the device ran.
  template <typename Body>
  std::optional<Outcome> on_device(Outcome& o, Body body) {
    runtime().start_op_census();
    std::vector<OpUse> uses;
    try {
      body();
      runtime().synchronize(device_);
      uses = runtime().stop_op_census();
    } catch (const Error& e) {
      (void)runtime().stop_op_census();
      return Outcome{"error", device_.str() + ": " + e.what(), "", 0.0};
    } catch (...) {
      (void)runtime().stop_op_census();
      throw;
    }
    for (const OpUse& u : uses) {
      if (u.device != device_.str()) continue;
      o.how += (o.how.empty() ? "" : ", ") + u.op + " " + u.how;
    }
    return std::nullopt;
  }

  /// Per floating output k: the gradients of the node's inputs for its
  /// cotangent (undefined for non-floating inputs).
  std::vector<std::vector<Tensor>> vjp(size_t i, const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& cotangents) {
    GradientTape tape({.persistent = true});
    std::vector<Tensor> sources;
    std::vector<size_t> source_of;
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (!is_floating(inputs[j].dtype())) continue;
      tape.watch(inputs[j]);
      sources.push_back(inputs[j]);
      source_of.push_back(j);
    }
    std::vector<Tensor> outs = run_node(programs_[i], inputs);
    std::vector<std::vector<Tensor>> grads(outs.size(), std::vector<Tensor>(inputs.size()));
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!cotangents[k].defined()) continue;
      std::vector<Tensor> g = tape.gradient(outs[k], sources, cotangents[k]);
      for (size_t s = 0; s < g.size(); ++s) grads[k][source_of[s]] = g[s];
    }
    return grads;
  }

  const Graph& graph_;
  Device device_, reference_;
  const TraceDiffOptions& options_;
  std::set<DType> stored_;
  std::set<std::string> unchecked_rules_;  // ops whose rule finite differences do not check
  std::map<int64_t, Tensor> values_;     // every value, on the reference
  std::vector<NodeProgram> programs_;    // per node
  std::vector<std::string> failed_;      // per node: why its checks are not applicable
};

/// The configuration the worker runs: --config's file or the one the
/// runtime would find, with the kernels the parent sets aside added to the
/// device's exclude_kernels (read when the device opens: before any use).
Config worker_config(const TraceDiffWorkerOptions& options) {
  const TraceDiffOptions& o = options.diff;
  Config config = o.config.empty() ? Config::find() : Config::from_file(o.config);
  if (options.exclude_kernels.empty()) return config;
  const size_t colon = o.device.rfind(':');
  if (colon == std::string::npos) throw ValueError("--exclude-kernel needs --device backend:index");
  DeviceConfig d = config.device(o.device.substr(0, colon), std::stoi(o.device.substr(colon + 1)));
  d.exclude_kernels.insert(d.exclude_kernels.end(), options.exclude_kernels.begin(), options.exclude_kernels.end());
  config.devices[o.device] = d;
  return config;
}

Device device_named(const std::string& id, const char* flag) {
  for (const DeviceInfo& d : runtime().devices()) {
    if (d.id == id) return d.device;
  }
  std::string ids;
  for (const DeviceInfo& d : runtime().devices()) ids += (ids.empty() ? "" : ", ") + d.id;
  throw ValueError(std::string(flag) + " " + id + " is no device here (devices: " + ids + ")");
}

}  // namespace

int run_trace_diff_worker(const TraceDiffWorkerOptions& options) {
  const int fd = options.event_fd;
  const TraceDiffOptions& o = options.diff;
  Graph graph;
  Device device, reference;
  try {
    runtime().configure(worker_config(options));
    graph = Graph::load(o.graph);
    if (!graph.traced) throw ValueError(o.graph + " is no traced graph (Graph::save of trace())");
    device = o.device.empty() ? runtime().default_device() : device_named(o.device, "--device");
    reference = device_named(o.reference, "--reference");
    if (device == reference) {
      throw ValueError("the device under test and the reference are both " + device.str() +
                       " (name another with --device or --reference)");
    }
  } catch (const Error& e) {
    emit_event(fd, {{"event", "refused"}, {"reason", e.what()}});
    return kOk;
  }
  std::optional<Differ> differ;
  try {
    differ.emplace(graph, device, reference, o);
  } catch (const Error& e) {
    emit_event(fd, {{"event", "refused"}, {"reason", std::string("the reference pass failed: ") + e.what()}});
    return kOk;
  }
  struct Check {
    size_t node;
    bool backward;
  };
  std::vector<Check> checks;
  for (size_t i = 0; i < differ->nodes(); ++i) checks.push_back({i, false});
  for (size_t i = differ->nodes(); !o.forward_only && i-- > 0;) {
    if (differ->differentiable(i)) checks.push_back({i, true});
  }
  emit_event(fd, {{"event", "hello"},
                  {"checks", checks.size()},
                  {"nodes", differ->nodes()},
                  {"device", device.str()},
                  {"reference", reference.str()}});
  for (size_t c = static_cast<size_t>(std::max(options.resume, 0)); c < checks.size(); ++c) {
    if (checks[c].backward && options.pause_before_backward) {
      emit_event(fd, {{"event", "paused"}, {"check", c}});
      return kOk;
    }
    const size_t i = checks[c].node;
    const GraphNode& n = differ->node(i);
    emit_event(fd, {{"event", "start"},
                    {"check", c},
                    {"node", n.id},
                    {"op", n.op},
                    {"kernel", differ->kernel(i)},
                    {"direction", checks[c].backward ? "backward" : "forward"},
                    {"signature", differ->signature(i)}});
    Outcome out;
    const bool skip = checks[c].backward && std::find(options.skip_nodes.begin(), options.skip_nodes.end(), n.id) !=
                                                options.skip_nodes.end();
    try {
      if (skip) {
        out = {"skip", "not run: its forward check failed (its kernel is set aside for the backward checks)", "", 0.0};
      } else {
        out = checks[c].backward ? differ->backward(i) : differ->forward(i);
      }
    } catch (const std::exception& e) {
      out = {"error", e.what(), "", 0.0};
    }
    emit_event(fd, {{"event", "result"},
                    {"check", c},
                    {"status", out.status},
                    {"message", out.message},
                    {"how", out.how},
                    {"max_error", std::isfinite(out.max_error) ? nlohmann::json(out.max_error) : nlohmann::json("inf")}});
  }
  emit_event(fd, {{"event", "done"}});
  return kOk;
}

}  // namespace strata::cli
