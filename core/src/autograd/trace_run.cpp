// trace_run.cpp — Graph::run: replaying a traced (or loaded) Graph on new
// inputs, node by node, through the dispatcher and the public view and join
// functions.
#include "../op.hpp"

#include <strata/error.hpp>
#include <strata/graph.hpp>
#include <strata/ops.hpp>

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

int64_t attr_int(const GraphNode& n, const char* name) {
  for (const GraphAttr& a : n.attrs)
    if (a.name == name) return a.i;
  throw Error("graph node #" + std::to_string(n.id) + " (" + n.op + "): missing attribute '" + name + "'");
}
const GraphAttr& attr(const GraphNode& n, const char* name) {
  for (const GraphAttr& a : n.attrs)
    if (a.name == name) return a;
  throw Error("graph node #" + std::to_string(n.id) + " (" + n.op + "): missing attribute '" + name + "'");
}

/// Views and joins by name, through their public functions.
Tensor replay_structural(const GraphNode& n, const std::vector<Tensor>& in) {
  const Shape& out = n.output_shapes.at(0);
  if (n.op == "reshape") return in.at(0).reshape(out);
  if (n.op == "expand") return in.at(0).expand(out);
  if (n.op == "permute") return in.at(0).permute(attr(n, "dims").ints);
  if (n.op == "select") return in.at(0).select(attr_int(n, "dim"), attr_int(n, "index"));
  if (n.op == "slice") {
    int64_t dim = attr_int(n, "dim");
    int64_t start = attr_int(n, "start");
    int64_t step = attr_int(n, "step");
    int64_t len = out.at(static_cast<size_t>(dim));
    return in.at(0).slice(dim, start, len == 0 ? start : start + (len - 1) * step + 1, step);
  }
  if (n.op == "detach") return in.at(0).detach();
  if (n.op == "cat") return cat(in, attr_int(n, "dim"));
  if (n.op == "pad") return pad(in.at(0), attr(n, "pads").ints, attr(n, "value").f);
  throw Error("graph node #" + std::to_string(n.id) + ": op '" + n.op + "' cannot be replayed");
}

}  // namespace

std::vector<Tensor> Graph::run(const std::vector<Tensor>& inputs) const {
  if (!traced) throw Error("Graph::run: only graphs made by trace() (or loaded) can be replayed");
  if (inputs.size() != input_dtypes.size()) {
    throw Error("Graph::run: expected " + std::to_string(input_dtypes.size()) + " inputs, got " +
                std::to_string(inputs.size()));
  }
  std::vector<Tensor> values;
  auto set = [&values](int64_t id, Tensor t) {
    if (static_cast<size_t>(id) >= values.size()) values.resize(static_cast<size_t>(id) + 1);
    values[static_cast<size_t>(id)] = std::move(t);
  };
  std::optional<Device> device;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (!t.defined()) throw Error("Graph::run: input " + std::to_string(k) + " is undefined");
    if (t.dtype() != input_dtypes[k] || t.sizes() != input_shapes[k]) {
      throw ShapeError("Graph::run: input " + std::to_string(k) + " is " + std::string(dtype_name(t.dtype())) +
                       detail::shape_string(t.shape()) + ", the graph was traced with " +
                       std::string(dtype_name(input_dtypes[k])) + detail::shape_string(input_shapes[k]));
    }
    if (device && *device != t.device()) {
      throw DeviceError("Graph::run: inputs on " + device->str() + " and " + t.device().str());
    }
    device = t.device();
    set(static_cast<int64_t>(k), t);
  }
  for (const GraphConstant& c : constants) {
    bool integral = c.dtype == DType::i32 || c.dtype == DType::i64;
    Tensor t = integral ? from_data(std::span<const int64_t>(c.ints), c.shape, {.dtype = DType::i64, .device = device})
                        : from_data(std::span<const double>(c.data), c.shape, {.dtype = DType::f64, .device = device});
    set(c.value, cast(t, c.dtype));
  }
  for (const GraphNode& n : nodes) {
    std::vector<Tensor> in;
    for (int64_t v : n.inputs) in.push_back(values.at(static_cast<size_t>(v)));
    const detail::OpDef* op = detail::find_op(n.op);
    if (op == nullptr) throw Error("Graph::run: unknown op '" + n.op + "'");
    if (op->kind == detail::OpKind::view || op->kind == detail::OpKind::join) {
      set(n.outputs.at(0), replay_structural(n, in));
      continue;
    }
    detail::Attrs attrs;
    for (const GraphAttr& a : n.attrs) {
      detail::Attr x{nullptr, STRATA_ATTR_INT};
      x.name = a.name.c_str();  // the node outlives the call
      x.kind = detail::abi_kind(a.kind);
      x.scalar_dtype = a.kind == GraphAttr::Kind::scalar_real ? STRATA_F64 : STRATA_I64;
      x.i = a.i;
      x.f = a.f;
      x.ints = a.ints;
      x.floats = a.reals;
      x.text = a.text;
      attrs.push_back(std::move(x));
    }
    detail::OpResult r = detail::dispatch_span(*op, in, attrs.empty() ? nullptr : &attrs);
    if (r.count != static_cast<int>(n.outputs.size())) {
      throw Error("Graph::run: node #" + std::to_string(n.id) + " (" + n.op + ") made " + std::to_string(r.count) +
                  " outputs, the graph names " + std::to_string(n.outputs.size()));
    }
    for (int k = 0; k < r.count; ++k) set(n.outputs[static_cast<size_t>(k)], r[k]);
  }
  std::vector<Tensor> out;
  for (int64_t v : outputs) out.push_back(values.at(static_cast<size_t>(v)));
  return out;
}

}  // namespace strata
