// trace_run.cpp — Graph::run: replaying a traced (or loaded) Graph on new
// inputs, node by node, through the dispatcher and the public view and join
// functions.
#include "autograd/trace/trace_internal.hpp"

#include "runtime/dispatch/op.hpp"
#include "runtime/tensor/host_data.hpp"

#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/graph.hpp>
#include <strata/ops.hpp>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <complex>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace strata {

namespace detail {

namespace {

strata_attr_kind abi_kind(GraphAttr::Kind k) {
  switch (k) {
    case GraphAttr::Kind::integer: return STRATA_ATTR_INT;
    case GraphAttr::Kind::real: return STRATA_ATTR_FLOAT;
    case GraphAttr::Kind::integers: return STRATA_ATTR_INTS;
    case GraphAttr::Kind::flag: return STRATA_ATTR_BOOL;
    case GraphAttr::Kind::dtype: return STRATA_ATTR_DTYPE;
    case GraphAttr::Kind::reals: return STRATA_ATTR_FLOATS;
    case GraphAttr::Kind::text: return STRATA_ATTR_STRING;
    case GraphAttr::Kind::scalar_int:
    case GraphAttr::Kind::scalar_real: return STRATA_ATTR_SCALAR;
  }
  return STRATA_ATTR_INT;
}

}  // namespace

}  // namespace detail

namespace {

std::string node_name(const GraphNode& n) { return "graph node #" + std::to_string(n.id) + " (" + n.op + ")"; }

const GraphAttr& attr(const GraphNode& n, const char* name) {
  for (const GraphAttr& a : n.attrs)
    if (a.name == name) return a;
  throw Error(node_name(n) + ": missing attribute '" + name + "'");
}
int64_t attr_int(const GraphNode& n, const char* name) { return attr(n, name).i; }

const Tensor& only_input(const GraphNode& n, std::span<const Tensor> in) {
  if (in.size() != 1) throw Error(node_name(n) + ": expected 1 input, got " + std::to_string(in.size()));
  return in.front();
}

}  // namespace

namespace detail {

bool structural_replayable(std::string_view op) {
  for (std::string_view s : {"reshape", "expand", "permute", "select", "slice", "detach", "cat", "pad"})
    if (op == s) return true;
  return false;
}

/// Views and joins by name, through their public functions.
Tensor replay_structural(const GraphNode& n, std::span<const Tensor> in) {
  if (n.output_shapes.size() != 1) throw Error(node_name(n) + ": expected one output shape");
  const Shape& out = n.output_shapes.front();
  if (n.op == "reshape") return only_input(n, in).reshape(out);
  if (n.op == "expand") return only_input(n, in).expand(out);
  if (n.op == "permute") return only_input(n, in).permute(attr(n, "dims").ints);
  if (n.op == "select") return only_input(n, in).select(attr_int(n, "dim"), attr_int(n, "index"));
  if (n.op == "slice") {
    const Tensor& x = only_input(n, in);
    int64_t dim = normalize_dim(attr_int(n, "dim"), x.dim(), "slice");
    int64_t start = attr_int(n, "start");
    int64_t step = attr_int(n, "step");
    if (static_cast<int64_t>(out.size()) != x.dim()) {
      throw ShapeError(node_name(n) + ": output shape " + shape_string(out) + " has another rank than input " +
                       shape_string(x.shape()));
    }
    int64_t len = out[static_cast<size_t>(dim)];
    int64_t end = start;
    if (len > 0 && (__builtin_mul_overflow(len - 1, step, &end) || __builtin_add_overflow(end, start + 1, &end))) {
      throw IndexError(node_name(n) + ": slice of " + std::to_string(len) + " elements from " + std::to_string(start) +
                       " by " + std::to_string(step) + " overflows int64");
    }
    return x.slice(dim, start, end, step);
  }
  if (n.op == "detach") return only_input(n, in).detach();
  if (n.op == "cat") return cat(std::vector<Tensor>(in.begin(), in.end()), attr_int(n, "dim"));
  if (n.op == "pad") return pad(only_input(n, in), attr(n, "pads").ints, attr(n, "value").f);
  throw Error(node_name(n) + ": op '" + n.op + "' cannot be replayed");
}

Attrs node_attrs(const GraphNode& n) {
  Attrs attrs;
  for (const GraphAttr& a : n.attrs) {
    Attr x{nullptr, STRATA_ATTR_INT};
    x.name = a.name.c_str();  // the node outlives the call
    x.kind = abi_kind(a.kind);
    x.scalar_dtype = a.kind == GraphAttr::Kind::scalar_real ? STRATA_F64 : STRATA_I64;
    x.i = a.i;
    x.f = a.f;
    x.ints = a.ints;
    x.floats = a.reals;
    x.text = a.text;
    attrs.push_back(std::move(x));
  }
  return attrs;
}

}  // namespace detail

namespace detail {

std::vector<Tensor> make_constants(const Graph& g, std::optional<Device> device) {
  std::vector<Tensor> out;
  for (const GraphConstant& c : g.constants) {
    // Converted on the host straight to the constant's dtype (its values are
    // exact in it), so no f64 or i64 tensor is made on a device that may not
    // store one.
    bool integral = c.dtype == DType::i32 || c.dtype == DType::i64;
    const TensorOptions options{.dtype = c.dtype, .device = device};
    if (is_complex(c.dtype)) {  // (real, imaginary) pairs: std::complex's layout
      std::span<const std::complex<double>> pairs(reinterpret_cast<const std::complex<double>*>(c.data.data()),
                                                  c.data.size() / 2);
      out.push_back(from_data(pairs, c.shape, options));
      continue;
    }
    out.push_back(integral ? from_data(std::span<const int64_t>(c.ints), c.shape, options)
                           : from_data(std::span<const double>(c.data), c.shape, options));
  }
  return out;
}

ReplayPlan plan_replay(const Graph& g) {
  if (!g.traced) throw Error("Graph::run: only graphs made by trace() (or loaded) can be replayed");
  ReplayPlan plan;
  plan.graph = &g;
  // Value ids are dense in graphs trace() makes; a hand-built one is
  // bounded so a stray id cannot size the table.
  constexpr int64_t kMaxValue = int64_t{1} << 40;
  auto grow = [&plan](int64_t id) {
    if (id < 0 || id > kMaxValue) throw Error("Graph::run: value id " + std::to_string(id) + " out of range");
    plan.n_values = std::max(plan.n_values, static_cast<size_t>(id) + 1);
  };
  std::vector<bool> defined;
  auto define = [&](int64_t id) {
    grow(id);
    if (defined.size() < plan.n_values) defined.resize(plan.n_values, false);
    defined[static_cast<size_t>(id)] = true;
  };
  auto require = [&defined](int64_t id, const std::string& where) {
    if (id < 0 || static_cast<size_t>(id) >= defined.size() || !defined[static_cast<size_t>(id)]) {
      throw Error("Graph::run: value " + std::to_string(id) + " is used before it is defined" + where);
    }
  };
  for (size_t k = 0; k < g.input_dtypes.size(); ++k) define(static_cast<int64_t>(k));
  for (const GraphConstant& c : g.constants) define(c.value);
  // The step after which each value is read no more.
  std::vector<int64_t> last_read;
  for (const GraphNode& n : g.nodes) {
    ReplayPlan::Step step;
    step.node = &n;
    for (int64_t v : n.inputs) require(v, " (" + node_name(n) + ")");
    if (n.op == kGuardOp) {
      if (n.inputs.size() != 1 || n.attrs.size() != 3 || n.attrs[0].name != "expected") {
        throw Error("Graph::run: " + node_name(n) + " is not a guard strata::compile made");
      }
      step.kind = ReplayPlan::Step::Kind::guard;
    } else if (detail::is_custom_node(n)) {
      step.kind = ReplayPlan::Step::Kind::custom;
    } else {
      step.op = detail::find_op(n.op);
      if (step.op == nullptr) throw Error("Graph::run: unknown op '" + n.op + "'");
      if (step.op->kind == detail::OpKind::view || step.op->kind == detail::OpKind::join) {
        if (n.outputs.size() != 1) throw Error(node_name(n) + ": a view or join defines one value");
        step.kind = ReplayPlan::Step::Kind::structural;
      } else {
        step.attrs = detail::node_attrs(n);
      }
    }
    for (int64_t v : n.outputs) define(v);
    last_read.resize(plan.n_values, -1);
    for (int64_t v : n.inputs) last_read[static_cast<size_t>(v)] = static_cast<int64_t>(plan.steps.size());
    plan.steps.push_back(std::move(step));
  }
  for (int64_t v : g.outputs) require(v, " (an output of the graph)");
  last_read.resize(plan.n_values, -1);
  for (int64_t v : g.outputs) last_read[static_cast<size_t>(v)] = -1;  // kept to the end
  for (size_t v = 0; v < last_read.size(); ++v) {
    if (last_read[v] >= 0) plan.steps[static_cast<size_t>(last_read[v])].release.push_back(static_cast<int64_t>(v));
  }
  return plan;
}

std::string guard_shown(const Tensor& t) {
  const std::string type = std::string(dtype_name(t.dtype())) + shape_string(t.sizes());
  if (t.numel() > 4 || is_complex(t.dtype())) return type;
  std::string values;
  char buf[32];
  for (double v : t.to_vector<double>()) {
    std::snprintf(buf, sizeof buf, "%.9g", v);
    values += (values.empty() ? "" : ", ") + std::string(buf);
  }
  return type + " " + (t.dim() == 0 ? values : "[" + values + "]");
}

std::string guard_hex(const std::vector<uint8_t>& bytes) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

namespace {

/// A guard: the value read on the host when the function was traced must
/// read the same now.
void check_guard(const GraphNode& n, const Tensor& t) {
  if (guard_hex(read_bytes(t)) == n.attrs[0].text) return;
  throw GuardFailure("guard #" + std::to_string(n.attrs[1].i) + ": the function read " + n.attrs[2].text +
                     " on the host when it was traced; now it reads " + guard_shown(t));
}

/// Runs one step, its results stored in `values`.
void replay_step(const ReplayPlan& plan, const ReplayPlan::Step& step, std::vector<Tensor>& values) {
  const GraphNode& n = *step.node;
  if (step.kind == ReplayPlan::Step::Kind::guard) return check_guard(n, values[static_cast<size_t>(n.inputs[0])]);
  boost::container::small_vector<Tensor, 4> operands;
  for (int64_t v : n.inputs) operands.push_back(values[static_cast<size_t>(v)]);
  const std::span<const Tensor> in(operands.data(), operands.size());
  switch (step.kind) {
    case ReplayPlan::Step::Kind::custom: {
      std::vector<Tensor> out = detail::replay_custom(*plan.graph, n, std::vector<Tensor>(in.begin(), in.end()));
      for (size_t k = 0; k < out.size(); ++k) values[static_cast<size_t>(n.outputs[k])] = std::move(out[k]);
      return;
    }
    case ReplayPlan::Step::Kind::structural:
      values[static_cast<size_t>(n.outputs.front())] = detail::replay_structural(n, in);
      return;
    case ReplayPlan::Step::Kind::kernel:
    case ReplayPlan::Step::Kind::guard:
      break;
  }
  detail::OpResult r = detail::dispatch_span(*step.op, in, step.attrs.empty() ? nullptr : &step.attrs);
  if (r.size() != static_cast<int>(n.outputs.size())) {
    throw Error("Graph::run: node #" + std::to_string(n.id) + " (" + n.op + ") made " + std::to_string(r.size()) +
                " outputs, the graph names " + std::to_string(n.outputs.size()));
  }
  for (int k = 0; k < r.size(); ++k) values[static_cast<size_t>(n.outputs[static_cast<size_t>(k)])] = r[k];
}

}  // namespace

std::vector<Tensor> run_plan(const ReplayPlan& plan, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>* constants, bool any_shape) {
  const Graph& g = *plan.graph;
  const auto& input_dtypes = g.input_dtypes;
  const auto& input_shapes = g.input_shapes;
  if (inputs.size() != input_dtypes.size()) {
    throw Error("Graph::run: expected " + std::to_string(input_dtypes.size()) + " inputs, got " +
                std::to_string(inputs.size()));
  }
  std::vector<Tensor> values(plan.n_values);
  std::optional<Device> device;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (!t.defined()) throw Error("Graph::run: input " + std::to_string(k) + " is undefined");
    if (t.dtype() != input_dtypes[k] ||
        (any_shape ? t.dim() != static_cast<int64_t>(input_shapes[k].size()) : t.sizes() != input_shapes[k])) {
      throw ShapeError("Graph::run: input " + std::to_string(k) + " is " + std::string(dtype_name(t.dtype())) +
                       detail::shape_string(t.shape()) + ", the graph was traced with " +
                       std::string(dtype_name(input_dtypes[k])) + detail::shape_string(input_shapes[k]));
    }
    if (device && *device != t.device()) {
      throw DeviceError("Graph::run: inputs on " + device->str() + " and " + t.device().str());
    }
    device = t.device();
    values[k] = t;
  }
  {
    std::vector<Tensor> made;
    if (constants == nullptr) {
      made = make_constants(g, device);
      constants = &made;
    }
    if (constants->size() != g.constants.size()) throw Error("Graph::run: internal: constants do not match the graph");
    for (size_t k = 0; k < g.constants.size(); ++k) values[static_cast<size_t>(g.constants[k].value)] = (*constants)[k];
  }
  for (const ReplayPlan::Step& step : plan.steps) {
    try {
      if (step.node->no_grad) {
        // Eager ran it with grad mode off (a backward pass without
        // create_graph, a NoGradGuard): its results have no history there,
        // so the replay does not record it either.
        NoGradGuard off;
        replay_step(plan, step, values);
      } else {
        replay_step(plan, step, values);
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // a graph built by hand can reach what load() did not check
      throw Error("Graph::run: " + node_name(*step.node) + ": " + e.what());
    }
    for (int64_t v : step.release) values[static_cast<size_t>(v)] = Tensor();
  }
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (int64_t v : g.outputs) out.push_back(values[static_cast<size_t>(v)]);
  return out;
}

}  // namespace detail

std::vector<Tensor> Graph::run(const std::vector<Tensor>& inputs) const {
  return detail::run_plan(detail::plan_replay(*this), inputs, nullptr, false);
}

}  // namespace strata
