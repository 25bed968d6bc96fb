// trace.cpp — trace(): recording a function's ops as a replayable Graph;
// saving, loading and replaying it.
#include "trace.hpp"

#include "graph.hpp"

#include "../tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/graph.hpp>
#include <strata/ops.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace strata {

namespace detail {

namespace {

GraphAttr::Kind graph_kind(const detail::Attr& a) {
  switch (a.kind) {
    case STRATA_ATTR_INT: return GraphAttr::Kind::integer;
    case STRATA_ATTR_FLOAT: return GraphAttr::Kind::real;
    case STRATA_ATTR_INTS: return GraphAttr::Kind::integers;
    case STRATA_ATTR_BOOL: return GraphAttr::Kind::flag;
    case STRATA_ATTR_DTYPE: return GraphAttr::Kind::dtype;
    case STRATA_ATTR_FLOATS: return GraphAttr::Kind::reals;
    case STRATA_ATTR_STRING: return GraphAttr::Kind::text;
    case STRATA_ATTR_SCALAR:
      return a.scalar_dtype == STRATA_F64 ? GraphAttr::Kind::scalar_real : GraphAttr::Kind::scalar_int;
    default: return GraphAttr::Kind::integer;  // the core writes only the kinds above
  }
}

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


struct TraceState {
  /// Capture mode (checkpoint): only find the tracked tensors read but not
  /// created; no graph, no copies, nothing kept alive.
  bool capture = false;
  /// Selective checkpointing: keep (capture) or answer (replay) the outputs
  /// of the cache's ops; `suspended` counts nested checkpoints.
  SelectiveCache* keep = nullptr;
  const SelectiveCache* replay = nullptr;
  size_t cursor = 0;
  int suspended = 0;
  std::vector<Tensor> externals;
  Graph graph;
  int depth = 0;
  uint64_t next_node = 0;
  int64_t next_value = 0;
  std::unordered_map<const TensorImpl*, int64_t> ids;
  std::vector<Tensor> alive;  // keeps traced tensors alive so addresses are not reused

  int64_t define(const Tensor& t) {
    int64_t id = next_value++;
    ids[t.impl()] = id;
    if (!capture) alive.push_back(t);
    return id;
  }

  /// The value id of an input: a traced value, or a new constant.
  int64_t value_of(const Tensor& t) {
    auto it = ids.find(t.impl());
    if (it != ids.end()) return it->second;
    if (capture) {
      if (t.impl()->autograd != nullptr && is_floating(t.dtype())) externals.push_back(t);
      return define(t);
    }
    GraphConstant c;
    c.dtype = t.dtype();
    c.shape = t.sizes();
    if (t.dtype() == DType::i32 || t.dtype() == DType::i64) {
      c.ints = t.to_vector<int64_t>();
    } else {
      c.data = t.to_vector<double>();
    }
    c.value = define(t);
    graph.constants.push_back(std::move(c));
    return graph.constants.back().value;
  }

  void record(std::string_view op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
              const Attrs* attrs) {
    if (capture) {
      for (const Tensor& t : inputs) value_of(t);
      for (const Tensor& t : outputs) define(t);
      return;
    }
    GraphNode n;
    n.id = next_node++;
    n.op = std::string(op);
    for (const Tensor& t : inputs) n.inputs.push_back(value_of(t));
    for (const Tensor& t : outputs) {
      n.outputs.push_back(define(t));
      n.output_shapes.push_back(t.sizes());
    }
    if (attrs != nullptr) {
      for (const Attr& a : *attrs) {
        GraphAttr g;
        g.name = a.name;
        g.kind = graph_kind(a);
        g.i = a.i;
        g.f = a.f;
        g.ints = a.ints;
        g.reals = a.floats;
        g.text = a.text;
        n.attrs.push_back(std::move(g));
      }
    }
    graph.nodes.push_back(std::move(n));
  }
};

TraceState*& active_trace() {
  thread_local TraceState* state = nullptr;
  return state;
}

namespace {

bool selective_op(const SelectiveCache* cache, const TraceState& s, const OpCall& call) {
  return cache != nullptr && s.suspended == 0 && !call.preset[0].defined() &&
         cache->save_ops.contains(call.op->name);
}

OpResult replay_cached(TraceState& s, OpCall& call) {
  const SelectiveCache& cache = *s.replay;
  std::string where = "checkpoint: recomputing op '" + std::string(call.op->name) + "' (kept output " +
                      std::to_string(s.cursor) + ")";
  if (s.cursor >= cache.entries.size() || cache.entries[s.cursor].op != call.op) {
    throw Error(where + ": the function ran other ops than the first time (it must be deterministic)");
  }
  const SelectiveCache::Entry& e = cache.entries[s.cursor++];
  OpResult result;
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    if (e.outputs[k].impl()->storage->version.load(std::memory_order_relaxed) != e.versions[k]) {
      throw Error(where + ": the kept output was modified in place after the first run; leave '" +
                  std::string(call.op->name) + "' out of save_ops or avoid the in-place write");
    }
    result.push_back(e.outputs[k].detach());  // a fresh handle: each recomputation records its own history
  }
  TraceNested nested;
  OpResult out = dispatch_precomputed(call, std::move(result));
  for (int k = 0; k < out.count; ++k) {
    if (!std::ranges::equal(out[k].sizes(), call.out(k).sizes())) {
      throw Error(where + ": shape " + shape_string(call.out(k).sizes()) + " now, " + shape_string(out[k].sizes()) +
                  " the first time (the function must be deterministic)");
    }
  }
  return out;
}

}  // namespace

OpResult traced_dispatch(OpCall& call, OpResult (*run)(OpCall&)) {
  TraceState& s = *active_trace();
  if (s.depth > 0 || call.n_inputs == 0 || call.op->n_inputs == 0) {  // nested, or a creation op (a constant)
    TraceNested nested;
    return run(call);
  }
  if (selective_op(s.replay, s, call)) return replay_cached(s, call);
  if (s.replay != nullptr) {  // recomputation: nothing else to note
    TraceNested nested;
    return run(call);
  }
  if (!s.capture && call.preset[0].defined() && s.ids.count(call.preset[0].impl()) != 0) {
    trace_unsupported(("in-place op '" + std::string(call.op->name) + "' writing a traced value").c_str());
  }
  // The inputs as the caller passed them (prepare will promote and
  // broadcast them again on replay). copy_ passes its target as input 1
  // only for checks: a copy has one input.
  int n = call.op->n_inputs;
  std::vector<Tensor> inputs(call.inputs.begin(), call.inputs.begin() + n);
  for (const Tensor& t : inputs) s.value_of(t);  // constants are captured before the op runs
  OpResult result;
  {
    TraceNested nested;
    result = run(call);
  }
  if (selective_op(s.keep, s, call)) {
    SelectiveCache::Entry e{call.op, {}, {}};
    for (int k = 0; k < result.count; ++k) {
      e.outputs.push_back(result[k]);
      e.versions.push_back(result[k].impl()->storage->version.load(std::memory_order_relaxed));
    }
    s.keep->entries.push_back(std::move(e));
  }
  s.record(call.op->name, inputs, std::span<const Tensor>(result.tensors.data(), static_cast<size_t>(result.count)),
           call.attrs);
  return result;
}

void trace_op(const OpDef& op, std::span<const Tensor> inputs, const Tensor& output, const Attrs& attrs) {
  TraceState* s = active_trace();
  if (s == nullptr || s->depth > 0 || s->replay != nullptr) return;
  s->record(op.name, inputs, std::span<const Tensor>(&output, 1), &attrs);
}

TraceNested::TraceNested() : state_(active_trace()) {
  if (state_ != nullptr) ++state_->depth;
}
TraceNested::~TraceNested() {
  if (state_ != nullptr) --state_->depth;
}

void trace_unsupported(const char* what) {
  TraceState* s = active_trace();
  if (s == nullptr || s->depth > 0 || s->capture || s->replay != nullptr) return;
  throw Error(std::string("trace: ") + what + " cannot be replayed from a graph; keep it outside the traced function");
}

bool tracing_graph() {
  TraceState* s = active_trace();
  return s != nullptr && !s->capture && s->replay == nullptr;
}

namespace {
/// Makes `state` the thread's active trace for a scope.
class ActiveTrace {
 public:
  explicit ActiveTrace(TraceState& state) : outer_(active_trace()) { active_trace() = &state; }
  ~ActiveTrace() { active_trace() = outer_; }
  ActiveTrace(const ActiveTrace&) = delete;
  ActiveTrace& operator=(const ActiveTrace&) = delete;

 private:
  TraceState* outer_;
};
}  // namespace

std::vector<Tensor> capture_external_reads(const std::vector<Tensor>& known, const std::function<void()>& f,
                                           SelectiveCache* cache) {
  TraceState state;
  state.capture = true;
  state.keep = cache;
  for (const Tensor& t : known) state.define(t);
  ActiveTrace active(state);
  f();
  return std::move(state.externals);
}

void replay_selective(const SelectiveCache& cache, const std::function<void()>& f) {
  TraceState state;
  state.replay = &cache;
  ActiveTrace active(state);
  f();
  if (state.cursor != cache.entries.size()) {
    throw Error("checkpoint: the recomputation ran " + std::to_string(state.cursor) + " of the " +
                std::to_string(cache.entries.size()) +
                " kept ops of the first run (the function must be deterministic)");
  }
}

SelectiveSuspend::SelectiveSuspend() : state_(active_trace()) {
  if (state_ != nullptr) ++state_->suspended;
}
SelectiveSuspend::~SelectiveSuspend() {
  if (state_ != nullptr) --state_->suspended;
}

}  // namespace detail

namespace {

using Json = nlohmann::json;

const char* attr_kind_name(GraphAttr::Kind k) {
  switch (k) {
    case GraphAttr::Kind::integer: return "int";
    case GraphAttr::Kind::real: return "float";
    case GraphAttr::Kind::integers: return "ints";
    case GraphAttr::Kind::flag: return "bool";
    case GraphAttr::Kind::dtype: return "dtype";
    case GraphAttr::Kind::reals: return "floats";
    case GraphAttr::Kind::text: return "string";
    case GraphAttr::Kind::scalar_int: return "scalar_int";
    case GraphAttr::Kind::scalar_real: return "scalar_float";
  }
  return "int";
}

Json program_json(const Graph& g) {
  Json j{{"format", "strata-graph"}, {"version", 1}, {"traced", true}, {"outputs", g.outputs}};
  Json inputs = Json::array();
  for (size_t k = 0; k < g.input_dtypes.size(); ++k) {
    inputs.push_back({{"dtype", std::string(dtype_name(g.input_dtypes[k]))}, {"shape", g.input_shapes[k]}});
  }
  j["inputs"] = inputs;
  Json constants = Json::array();
  for (const GraphConstant& c : g.constants) {
    Json e{{"value", c.value}, {"dtype", std::string(dtype_name(c.dtype))}, {"shape", c.shape}};
    if (c.dtype == DType::i32 || c.dtype == DType::i64) {
      e["data"] = c.ints;
    } else {
      e["data"] = c.data;
    }
    constants.push_back(std::move(e));
  }
  j["constants"] = constants;
  Json nodes = Json::array();
  for (const GraphNode& n : g.nodes) {
    Json attrs = Json::array();
    for (const GraphAttr& a : n.attrs) {
      Json e{{"name", a.name}, {"kind", attr_kind_name(a.kind)}};
      if (a.kind == GraphAttr::Kind::real || a.kind == GraphAttr::Kind::scalar_real) {
        e["value"] = a.f;
      } else if (a.kind == GraphAttr::Kind::integers) {
        e["value"] = a.ints;
      } else if (a.kind == GraphAttr::Kind::reals) {
        e["value"] = a.reals;
      } else if (a.kind == GraphAttr::Kind::text) {
        e["value"] = a.text;
      } else {
        e["value"] = a.i;
      }
      attrs.push_back(std::move(e));
    }
    nodes.push_back({{"id", n.id},
                     {"op", n.op},
                     {"inputs", n.inputs},
                     {"outputs", n.outputs},
                     {"output_shapes", n.output_shapes},
                     {"attrs", attrs}});
  }
  j["nodes"] = nodes;
  return j;
}

/// Reads JSON with errors that name the source and the JSON path.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error("graph " + source_ + ": " + path + ": " + what);
  }
  const Json& at(const Json& j, const std::string& path, const char* key) const {
    if (!j.is_object() || !j.contains(key)) fail(path, std::string("missing key \"") + key + "\"");
    return j.at(key);
  }
  int64_t integer(const Json& j, const std::string& path) const {
    if (!j.is_number_integer()) fail(path, "expected an integer, found " + j.dump());
    return j.get<int64_t>();
  }
  std::vector<int64_t> integers(const Json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of integers");
    std::vector<int64_t> out;
    for (size_t k = 0; k < j.size(); ++k) out.push_back(integer(j[k], path + "/" + std::to_string(k)));
    return out;
  }
  DType dtype(const Json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a dtype name");
    try {
      return dtype_from_name(j.get<std::string>());
    } catch (const Error& e) {
      fail(path, e.what());
    }
  }

 private:
  std::string source_;
};

}  // namespace

Graph trace(const TraceFn& f, const std::vector<Tensor>& example_inputs) {
  if (detail::active_trace() != nullptr) throw Error("trace: already tracing on this thread (trace does not nest)");
  detail::TraceState state;
  for (const Tensor& t : example_inputs) {
    if (!t.defined()) throw Error("trace: example input " + std::to_string(state.next_value) + " is undefined");
    state.graph.input_dtypes.push_back(t.dtype());
    state.graph.input_shapes.push_back(t.sizes());
    state.define(t);
  }
  std::vector<Tensor> outputs;
  {
    detail::ActiveTrace active(state);
    outputs = f(example_inputs);
  }
  state.depth = 0;
  for (const Tensor& t : outputs) {
    if (!t.defined()) throw Error("trace: the function returned an undefined tensor");
    state.graph.outputs.push_back(state.value_of(t));
  }
  state.graph.traced = true;
  return std::move(state.graph);
}

namespace detail {
std::string program_to_json(const Graph& g) { return program_json(g).dump(1); }
}  // namespace detail

void Graph::save(const std::filesystem::path& path) const {
  if (!traced) throw Error("Graph::save: only graphs made by trace() can be saved and replayed");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("Graph::save: cannot open " + path.string() + " for writing");
  out << program_json(*this).dump(1) << '\n';
  out.close();
  if (!out) throw Error("Graph::save: writing " + path.string() + " failed");
}

Graph Graph::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("Graph::load: cannot open " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path.string());
}

Graph Graph::from_json(const std::string& text, const std::string& source) {
  Reader r(source);
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) r.fail("", "not valid JSON");
  if (!j.is_object() || j.value("format", "") != "strata-graph") r.fail("/format", "not a strata-graph file");
  if (r.integer(r.at(j, "", "version"), "/version") != 1) r.fail("/version", "unsupported version (this build reads 1)");
  if (!j.value("traced", false)) r.fail("/traced", "an inspection graph, not a traced program");
  Graph g;
  g.traced = true;
  int64_t defined = 0;  // values are numbered in definition order
  const Json& inputs = r.at(j, "", "inputs");
  if (!inputs.is_array()) r.fail("/inputs", "expected an array");
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string p = "/inputs/" + std::to_string(k);
    g.input_dtypes.push_back(r.dtype(r.at(inputs[k], p, "dtype"), p + "/dtype"));
    g.input_shapes.push_back(r.integers(r.at(inputs[k], p, "shape"), p + "/shape"));
    ++defined;
  }
  const Json& constants = r.at(j, "", "constants");
  const Json& nodes = r.at(j, "", "nodes");
  if (!constants.is_array()) r.fail("/constants", "expected an array");
  if (!nodes.is_array()) r.fail("/nodes", "expected an array");
  std::vector<bool> is_defined(static_cast<size_t>(defined), true);
  auto define = [&](int64_t id, const std::string& p) {
    if (id < 0 || id > 1'000'000'000) r.fail(p, "value id " + std::to_string(id) + " out of range");
    if (static_cast<size_t>(id) >= is_defined.size()) is_defined.resize(static_cast<size_t>(id) + 1, false);
    if (is_defined[static_cast<size_t>(id)]) r.fail(p, "value " + std::to_string(id) + " defined twice");
    is_defined[static_cast<size_t>(id)] = true;
  };
  for (size_t k = 0; k < constants.size(); ++k) {
    std::string p = "/constants/" + std::to_string(k);
    GraphConstant c;
    c.value = r.integer(r.at(constants[k], p, "value"), p + "/value");
    c.dtype = r.dtype(r.at(constants[k], p, "dtype"), p + "/dtype");
    c.shape = r.integers(r.at(constants[k], p, "shape"), p + "/shape");
    const Json& data = r.at(constants[k], p, "data");
    int64_t numel = 1;
    for (int64_t d : c.shape) numel *= d;
    if (!data.is_array() || static_cast<int64_t>(data.size()) != numel) {
      r.fail(p + "/data", "expected " + std::to_string(numel) + " numbers for shape " + detail::shape_string(c.shape));
    }
    for (const Json& v : data) {
      if (!v.is_number()) r.fail(p + "/data", "expected numbers");
      if (c.dtype == DType::i32 || c.dtype == DType::i64) {
        c.ints.push_back(v.get<int64_t>());
      } else {
        c.data.push_back(v.get<double>());
      }
    }
    define(c.value, p + "/value");
    g.constants.push_back(std::move(c));
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    std::string p = "/nodes/" + std::to_string(k);
    const Json& jn = nodes[k];
    GraphNode n;
    n.id = static_cast<uint64_t>(k);
    const Json& op = r.at(jn, p, "op");
    if (!op.is_string()) r.fail(p + "/op", "expected an op name");
    n.op = op.get<std::string>();
    if (detail::find_op(n.op) == nullptr) r.fail(p + "/op", "unknown op \"" + n.op + "\" (not in this build's op set)");
    n.inputs = r.integers(r.at(jn, p, "inputs"), p + "/inputs");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int64_t v = n.inputs[i];
      if (v < 0 || static_cast<size_t>(v) >= is_defined.size() || !is_defined[static_cast<size_t>(v)]) {
        r.fail(p + "/inputs/" + std::to_string(i), "value " + std::to_string(v) + " is used before it is defined");
      }
    }
    n.outputs = r.integers(r.at(jn, p, "outputs"), p + "/outputs");
    for (size_t i = 0; i < n.outputs.size(); ++i) define(n.outputs[i], p + "/outputs/" + std::to_string(i));
    const Json& shapes = r.at(jn, p, "output_shapes");
    if (!shapes.is_array() || shapes.size() != n.outputs.size()) r.fail(p + "/output_shapes", "one shape per output");
    for (size_t i = 0; i < shapes.size(); ++i) {
      n.output_shapes.push_back(r.integers(shapes[i], p + "/output_shapes/" + std::to_string(i)));
    }
    const Json& attrs = r.at(jn, p, "attrs");
    if (!attrs.is_array()) r.fail(p + "/attrs", "expected an array");
    for (size_t i = 0; i < attrs.size(); ++i) {
      std::string pa = p + "/attrs/" + std::to_string(i);
      GraphAttr a;
      const Json& name = r.at(attrs[i], pa, "name");
      const Json& kind = r.at(attrs[i], pa, "kind");
      const Json& value = r.at(attrs[i], pa, "value");
      if (!name.is_string()) r.fail(pa + "/name", "expected a string");
      a.name = name.get<std::string>();
      std::string kn = kind.is_string() ? kind.get<std::string>() : "";
      if (kn == "int" || kn == "bool" || kn == "dtype" || kn == "scalar_int") {
        a.kind = kn == "int"    ? GraphAttr::Kind::integer
                 : kn == "bool" ? GraphAttr::Kind::flag
                 : kn == "dtype" ? GraphAttr::Kind::dtype
                                 : GraphAttr::Kind::scalar_int;
        a.i = r.integer(value, pa + "/value");
      } else if (kn == "float" || kn == "scalar_float") {
        a.kind = kn == "float" ? GraphAttr::Kind::real : GraphAttr::Kind::scalar_real;
        if (!value.is_number()) r.fail(pa + "/value", "expected a number");
        a.f = value.get<double>();
      } else if (kn == "ints") {
        a.kind = GraphAttr::Kind::integers;
        a.ints = r.integers(value, pa + "/value");
      } else if (kn == "floats") {
        a.kind = GraphAttr::Kind::reals;
        if (!value.is_array()) r.fail(pa + "/value", "expected an array of numbers");
        for (size_t e = 0; e < value.size(); ++e) {
          if (!value[e].is_number()) r.fail(pa + "/value/" + std::to_string(e), "expected a number");
          a.reals.push_back(value[e].get<double>());
        }
      } else if (kn == "string") {
        a.kind = GraphAttr::Kind::text;
        if (!value.is_string()) r.fail(pa + "/value", "expected a string");
        a.text = value.get<std::string>();
      } else {
        r.fail(pa + "/kind",
               "expected \"int\", \"float\", \"ints\", \"bool\", \"dtype\", \"floats\", \"string\", "
               "\"scalar_int\" or \"scalar_float\"");
      }
      n.attrs.push_back(std::move(a));
    }
    g.nodes.push_back(std::move(n));
  }
  g.outputs = r.integers(r.at(j, "", "outputs"), "/outputs");
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int64_t v = g.outputs[i];
    if (v < 0 || static_cast<size_t>(v) >= is_defined.size() || !is_defined[static_cast<size_t>(v)]) {
      r.fail("/outputs/" + std::to_string(i), "value " + std::to_string(v) + " is never defined");
    }
  }
  return g;
}

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
