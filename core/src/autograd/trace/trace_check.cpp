// trace_check.cpp — what Graph::load accepts: a parsed traced graph is checked
// node by node against its op's schema (arity, attributes) and shape rule,
// run shape-only on tensors without storage, so that a file that loads also
// replays (and a file that would not is refused naming the JSON path).
#include "autograd/trace/trace_internal.hpp"

#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/graph.hpp>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

namespace strata::detail {

void graph_load_error(const std::string& source, const std::string& path, const std::string& what) {
  throw Error("graph " + source + ": " + (path.empty() ? "/" : path) + ": " + what);
}

int64_t check_graph_shape(std::span<const int64_t> shape, const std::string& source, const std::string& path) {
  if (shape.size() > STRATA_MAX_RANK) {
    graph_load_error(source, path,
                     "expected at most " + std::to_string(STRATA_MAX_RANK) + " dimensions, found " +
                         std::to_string(shape.size()));
  }
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      graph_load_error(source, path + "/" + std::to_string(d),
                       "expected a size >= 0, found " + std::to_string(shape[d]));
    }
    if (__builtin_mul_overflow(numel, shape[d], &numel)) {
      graph_load_error(source, path, "the element count of shape " + shape_string(shape) + " overflows int64");
    }
  }
  return numel;
}

namespace {

struct Meta {
  DType dtype = DType::f32;
  Shape shape;
};

/// The kind each attribute name of the core's ops must have (names no core
/// op reads are refused; plugin ops check their own schema in prepare).
struct AttrRule {
  std::string_view name;
  GraphAttr::Kind kind;
};
constexpr AttrRule kCoreAttrs[] = {
    {"dim", GraphAttr::Kind::integer},   {"dims", GraphAttr::Kind::integers}, {"dtype", GraphAttr::Kind::dtype},
    {"index", GraphAttr::Kind::integer}, {"start", GraphAttr::Kind::integer}, {"step", GraphAttr::Kind::integer},
    {"pads", GraphAttr::Kind::integers}, {"value", GraphAttr::Kind::real},    {"sizes", GraphAttr::Kind::integers},
};

/// Whether a graph attribute of kind `g` gives an op attribute of kind `k`.
bool kind_matches(strata_attr_kind k, GraphAttr::Kind g) {
  using K = GraphAttr::Kind;
  switch (k) {
    case STRATA_ATTR_INT: return g == K::integer;
    case STRATA_ATTR_FLOAT: return g == K::real;
    case STRATA_ATTR_INTS: return g == K::integers;
    case STRATA_ATTR_BOOL: return g == K::flag;
    case STRATA_ATTR_DTYPE: return g == K::dtype;
    case STRATA_ATTR_FLOATS: return g == K::reals;
    case STRATA_ATTR_STRING: return g == K::text;
    case STRATA_ATTR_SCALAR: return g == K::scalar_int || g == K::scalar_real;
    default: return false;
  }
}

/// What the view and join ops read (dispatched ops read theirs in prepare).
struct Required {
  std::string_view op;
  std::vector<std::string_view> attrs;
};
const std::vector<Required>& structural_attrs() {
  static const std::vector<Required> table = {
      {"permute", {"dims"}}, {"select", {"dim", "index"}}, {"slice", {"dim", "start", "step"}},
      {"cat", {"dim"}},      {"pad", {"pads", "value"}},
  };
  return table;
}

class Checker {
 public:
  Checker(Graph& g, const std::string& source) : g_(g), source_(source) {}

  void run() {
    size_t count = g_.input_dtypes.size() + g_.constants.size();
    for (const GraphNode& n : g_.nodes) count += n.outputs.size();
    values_.resize(count);
    for (size_t k = 0; k < g_.input_dtypes.size(); ++k) {
      check_graph_shape(g_.input_shapes[k], source_, "/inputs/" + std::to_string(k) + "/shape");
      values_[k] = {g_.input_dtypes[k], g_.input_shapes[k]};
    }
    for (const GraphConstant& c : g_.constants) values_[static_cast<size_t>(c.value)] = {c.dtype, c.shape};
    for (size_t k = 0; k < g_.nodes.size(); ++k) node(k);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    graph_load_error(source_, path, what);
  }
  std::string where(size_t k) const { return "node " + std::to_string(k) + " (" + g_.nodes[k].op + "): "; }

  void node(size_t k) {
    GraphNode& n = g_.nodes[k];
    const std::string p = "/nodes/" + std::to_string(k);
    if (is_custom_node(n)) {
      custom(k, p);
      return;
    }
    const OpDef* op = find_op(n.op);
    if (op == nullptr) fail(p + "/op", "unknown op \"" + n.op + "\"");
    const bool structural = op->kind == OpKind::view || op->kind == OpKind::join;
    if (structural ? !structural_replayable(n.op) : (op->kind == OpKind::transfer || op->n_inputs == 0)) {
      fail(p + "/op", "op \"" + n.op + "\" is never recorded by trace() and cannot be replayed (" +
                          (op->n_inputs == 0 ? "a creation op: its result is a constant" : "not replayable") + ")");
    }
    // Arity, against the op's schema.
    const size_t arity = n.inputs.size();
    if (op->n_inputs < 0 ? arity == 0 : arity != static_cast<size_t>(op->n_inputs)) {
      fail(p + "/inputs", where(k) + "expected " +
                              (op->n_inputs < 0 ? std::string("at least 1 input") :
                                                  std::to_string(op->n_inputs) + " input(s)") +
                              ", found " + std::to_string(arity));
    }
    if (!structural && arity > static_cast<size_t>(kMaxInputs)) fail(p + "/inputs", where(k) + "too many inputs");
    std::vector<Meta> in;
    for (int64_t v : n.inputs) in.push_back(values_[static_cast<size_t>(v)]);
    for (size_t i = 0; i < n.output_shapes.size(); ++i) {
      check_graph_shape(n.output_shapes[i], source_, p + "/output_shapes/" + std::to_string(i));
    }
    attributes(n, k, p, *op, in);
    std::vector<Meta> out = structural ? structural_outputs(n, k, p, in) : dispatched_outputs(n, k, p, *op, in);
    if (out.size() != n.outputs.size()) {
      fail(p + "/outputs", where(k) + "the op makes " + std::to_string(out.size()) + " output(s), found " +
                               std::to_string(n.outputs.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].shape != n.output_shapes[i]) {
        fail(p + "/output_shapes/" + std::to_string(i),
             where(k) + "expected " + shape_string(out[i].shape) + " (the op's shape rule for inputs " +
                 describe(in) + "), found " + shape_string(n.output_shapes[i]));
      }
      values_[static_cast<size_t>(n.outputs[i])] = out[i];
    }
    n.output_dtypes.clear();
    for (const Meta& m : out) n.output_dtypes.push_back(m.dtype);
  }

  /// A custom function's node: its function must be registered here; its
  /// outputs are as the file says (the function's code is not run to check).
  void custom(size_t k, const std::string& p) {
    GraphNode& n = g_.nodes[k];
    for (size_t i = 0; i < n.output_shapes.size(); ++i) {
      check_graph_shape(n.output_shapes[i], source_, p + "/output_shapes/" + std::to_string(i));
    }
    for (size_t i = 0; i < n.attrs.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (n.attrs[j].name == n.attrs[i].name) {
          fail(p + "/attrs/" + std::to_string(i) + "/name", where(k) + "attribute \"" + n.attrs[i].name + "\" given twice");
        }
      }
    }
    std::vector<std::pair<DType, Shape>> out = load_custom_node(g_, n, source_, p);
    n.output_dtypes.clear();
    for (size_t i = 0; i < out.size(); ++i) {
      values_[static_cast<size_t>(n.outputs[i])] = {out[i].first, out[i].second};
      n.output_dtypes.push_back(out[i].first);
    }
  }

  static std::string describe(const std::vector<Meta>& in) {
    std::string s;
    for (const Meta& m : in) s += (s.empty() ? "" : ", ") + std::string(dtype_name(m.dtype)) + shape_string(m.shape);
    return s;
  }

  /// Kinds, duplicates and presence; dims wrapped (and reduction dims
  /// sorted) as the public API does before recording them.
  void attributes(GraphNode& n, size_t k, const std::string& p, const OpDef& op, const std::vector<Meta>& in) {
    const bool core = op.plugin_op == nullptr;
    const int64_t rank = in.empty() ? 0 : static_cast<int64_t>(in.front().shape.size());
    for (size_t i = 0; i < n.attrs.size(); ++i) {
      GraphAttr& a = n.attrs[i];
      const std::string pa = p + "/attrs/" + std::to_string(i);
      for (size_t j = 0; j < i; ++j) {
        if (n.attrs[j].name == a.name) fail(pa + "/name", where(k) + "attribute \"" + a.name + "\" given twice");
      }
      if (!core) continue;
      // The op's own declaration first (linear's "activation", ...), then
      // the attributes the public functions record for the rest.
      const AttrDecl* decl = nullptr;
      for (const AttrDecl& d : op.attrs)
        if (a.name == d.name) decl = &d;
      const AttrRule* rule = nullptr;
      for (const AttrRule& r : kCoreAttrs)
        if (r.name == a.name) rule = &r;
      if (decl == nullptr && rule == nullptr) {
        fail(pa + "/name", where(k) + "no op of the core reads an attribute \"" + a.name + "\"");
      }
      if (decl != nullptr ? !kind_matches(decl->kind, a.kind) : rule->kind != a.kind) {
        fail(pa + "/kind", where(k) + "attribute \"" + a.name + "\" has the wrong kind");
      }
      if (a.kind == GraphAttr::Kind::dtype && !is_dtype_value(a.i)) {
        fail(pa + "/value", where(k) + std::string(kDTypeValuesExpected));
      }
      if (a.name == "dim") a.i = wrap_dim(a.i, rank, pa + "/value", k);
      if (a.name == "dims" && n.op != "permute") reduction_dims(a, rank, pa + "/value", k);
    }
    for (const Required& r : structural_attrs()) {
      if (r.op != n.op) continue;
      for (std::string_view name : r.attrs) {
        bool found = std::any_of(n.attrs.begin(), n.attrs.end(), [&](const GraphAttr& a) { return a.name == name; });
        if (!found) fail(p + "/attrs", where(k) + "missing attribute \"" + std::string(name) + "\"");
      }
    }
  }

  /// A dim as normalize_dim takes it (a scalar accepts 0 and -1), wrapped.
  int64_t wrap_dim(int64_t d, int64_t rank, const std::string& path, size_t k) const {
    const int64_t bound = std::max<int64_t>(rank, 1);
    if (d < -bound || d >= bound) {
      fail(path, where(k) + "expected a dimension of the rank-" + std::to_string(rank) + " input (" +
                     std::to_string(-bound) + " to " + std::to_string(bound - 1) + "), found " + std::to_string(d));
    }
    return d < 0 ? d + bound : d;
  }

  /// Reduction dims: each within the input's rank, wrapped, sorted, no repeats.
  void reduction_dims(GraphAttr& a, int64_t rank, const std::string& path, size_t k) const {
    for (size_t e = 0; e < a.ints.size(); ++e) {
      int64_t d = a.ints[e];
      if (d < -rank || d >= rank) {
        fail(path + "/" + std::to_string(e), where(k) + "expected a dimension of the rank-" + std::to_string(rank) +
                                                 " input (" + std::to_string(-rank) + " to " +
                                                 std::to_string(rank - 1) + "), found " + std::to_string(d));
      }
      if (d < 0) a.ints[e] = d + rank;
      for (size_t f = 0; f < e; ++f) {
        if (a.ints[f] == a.ints[e]) {
          fail(path + "/" + std::to_string(e), where(k) + "dimension " + std::to_string(a.ints[e]) + " repeated");
        }
      }
    }
    std::sort(a.ints.begin(), a.ints.end());
  }

  /// The op's own prepare, run shape-only on storage-less inputs.
  std::vector<Meta> dispatched_outputs(const GraphNode& n, size_t k, const std::string& p, const OpDef& op,
                                       const std::vector<Meta>& in) const {
    Attrs attrs = node_attrs(n);
    OpCall call;
    call.op = &op;
    call.attrs = attrs.empty() ? nullptr : &attrs;
    call.n_outputs = op.n_outputs;
    std::vector<Meta> out;
    try {
      for (const Meta& m : in) call.inputs[static_cast<size_t>(call.n_inputs++)] = meta_tensor(m.dtype, m.shape);
      if (op.prepare == nullptr) throw Error("the op has no shape rule");
      ShapeOnlyScope shape_only;
      op.prepare(call);
      for (int i = 0; i < call.n_outputs; ++i) {
        auto s = call.out(i).sizes();
        out.push_back({call.out(i).dtype, Shape(s.begin(), s.end())});
      }
    } catch (const std::exception& e) {
      fail(p, where(k) + "inputs " + describe(in) + " are refused by the op's shape rule: " + e.what());
    }
    return out;
  }

  /// Views run their public functions on storage-less inputs; joins are
  /// checked here as cat and pad check their arguments.
  std::vector<Meta> structural_outputs(const GraphNode& n, size_t k, const std::string& p,
                                       const std::vector<Meta>& in) const {
    if (n.output_shapes.size() != 1) fail(p + "/output_shapes", where(k) + "expected one output");
    try {
      if (n.op == "cat") return {cat_output(n, in)};
      if (n.op == "pad") return {pad_output(n, in)};
      std::vector<Tensor> tensors;
      for (const Meta& m : in) tensors.push_back(meta_tensor(m.dtype, m.shape));
      TraceNested not_traced;  // loading inside a traced function records nothing
      Tensor t = replay_structural(n, tensors);
      return {Meta{t.dtype(), t.sizes()}};
    } catch (const std::exception& e) {
      fail(p, where(k) + "inputs " + describe(in) + " are refused: " + e.what());
    }
  }

  static int64_t attr_int(const GraphNode& n, std::string_view name) {
    for (const GraphAttr& a : n.attrs)
      if (a.name == name) return a.i;
    return 0;  // presence was checked
  }

  static Meta cat_output(const GraphNode& n, const std::vector<Meta>& in) {
    const auto d = static_cast<size_t>(attr_int(n, "dim"));  // wrapped against input 0
    Meta out = in.front();
    if (out.shape.empty()) throw ShapeError("cat: zero-dimensional tensors cannot be concatenated");
    out.shape[d] = 0;
    for (size_t t = 0; t < in.size(); ++t) {
      bool fits = in[t].shape.size() == in.front().shape.size();
      for (size_t j = 0; fits && j < in[t].shape.size(); ++j) fits = j == d || in[t].shape[j] == in.front().shape[j];
      if (!fits) {
        throw ShapeError("cat: input " + std::to_string(t) + " has shape " + shape_string(in[t].shape) +
                         ", incompatible with " + shape_string(in.front().shape) + " along dim " + std::to_string(d));
      }
      out.dtype = promote_types(out.dtype, in[t].dtype);
      if (__builtin_add_overflow(out.shape[d], in[t].shape[d], &out.shape[d])) throw ShapeError("cat: size overflow");
    }
    return out;
  }

  static Meta pad_output(const GraphNode& n, const std::vector<Meta>& in) {
    const std::vector<int64_t>* pads = nullptr;
    for (const GraphAttr& a : n.attrs)
      if (a.name == "pads") pads = &a.ints;
    Meta out = in.front();
    if (pads->size() % 2 != 0 || pads->size() > 2 * out.shape.size()) {
      throw ValueError("pad: expected an even number of paddings, at most 2 per dim, got " +
                       std::to_string(pads->size()));
    }
    for (size_t i = 0; i < pads->size(); ++i) {
      int64_t& size = out.shape[out.shape.size() - 1 - i / 2];
      if ((*pads)[i] < 0) throw ValueError("pad: padding " + std::to_string(i) + " is negative");
      if (__builtin_add_overflow(size, (*pads)[i], &size)) throw ShapeError("pad: size overflow");
    }
    return out;
  }

  Graph& g_;
  const std::string& source_;
  std::vector<Meta> values_;
};

}  // namespace

void check_graph_program(Graph& g, const std::string& source) { Checker(g, source).run(); }

}  // namespace strata::detail
