// trace_capture.cpp — recording the ops a function runs: trace() builds a
// replayable Graph from them; checkpoint's capture finds the weights a function
// reads. Selective checkpointing lives in trace_selective.cpp, the graph's
// replay in trace_run.cpp, its file format in trace_format.cpp.
#include <algorithm>
#include <complex>
#include <strata/error.hpp>
#include <strata/graph.hpp>
#include <string>

#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace_internal.hpp"
#include "runtime/tensor/host_data.hpp"
#include "runtime/tensor/tensor_impl.hpp"

namespace strata {

namespace detail {

namespace {

GraphAttr::Kind graph_kind(const detail::Attr& a) {
  switch (a.kind) {
    case STRATA_ATTR_INT:
      return GraphAttr::Kind::integer;
    case STRATA_ATTR_FLOAT:
      return GraphAttr::Kind::real;
    case STRATA_ATTR_INTS:
      return GraphAttr::Kind::integers;
    case STRATA_ATTR_BOOL:
      return GraphAttr::Kind::flag;
    case STRATA_ATTR_DTYPE:
      return GraphAttr::Kind::dtype;
    case STRATA_ATTR_FLOATS:
      return GraphAttr::Kind::reals;
    case STRATA_ATTR_STRING:
      return GraphAttr::Kind::text;
    case STRATA_ATTR_SCALAR:
      return a.scalar_dtype == STRATA_F64 ? GraphAttr::Kind::scalar_real : GraphAttr::Kind::scalar_int;
    default:
      return GraphAttr::Kind::integer;  // the core writes only the kinds above
  }
}

}  // namespace

int64_t TraceState::define(const Tensor& t) {
  int64_t id = next_value++;
  ids[t.impl()] = id;
  if (!capture) {
    alive.push_back(t);
    if (t.impl()->storage != nullptr) by_storage.emplace(t.impl()->storage.get(), std::make_pair(t.impl(), id));
  }
  return id;
}

int64_t TraceState::alias_of(const Tensor& t) {
  const TensorImpl* a = t.impl();
  if (a->storage == nullptr) return -1;
  auto [from, to] = by_storage.equal_range(a->storage.get());
  for (auto it = from; it != to; ++it) {
    const TensorImpl* b = it->second.first;
    if (b->dtype == a->dtype && b->offset == a->offset && b->rank == a->rank &&
        std::ranges::equal(b->sizes(), a->sizes()) && std::ranges::equal(b->stride_span(), a->stride_span())) {
      return it->second.second;
    }
  }
  return -1;
}

int64_t TraceState::value_of(const Tensor& t) {
  auto it = ids.find(t.impl());
  if (it != ids.end()) return it->second;
  if (!capture) {
    if (int64_t id = alias_of(t); id >= 0) {
      ids[t.impl()] = id;
      alive.push_back(t);  // its address stays this value's
      return id;
    }
  }
  if (capture) {
    if (t.impl()->autograd != nullptr && is_differentiable(t.dtype())) externals.push_back(t);
    return define(t);
  }
  if (by_reference && t.impl()->storage != nullptr && t.impl()->storage->serial < first_serial) {
    int64_t id = define(t);
    captured.emplace_back(id, t);
    return id;
  }
  GraphConstant c;
  c.dtype = t.dtype();
  c.shape = t.sizes();
  if (t.dtype() == DType::i32 || t.dtype() == DType::i64) {
    c.ints = t.to_vector<int64_t>();
  } else if (is_complex(t.dtype())) {
    for (std::complex<double> v : t.to_vector<std::complex<double>>())
      c.data.insert(c.data.end(), {v.real(), v.imag()});
  } else {
    c.data = t.to_vector<double>();
  }
  c.value = define(t);
  graph.constants.push_back(std::move(c));
  return graph.constants.back().value;
}

void TraceState::record(std::string_view op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                        const Attrs* attrs) {
  if (capture) {
    for (const Tensor& t : inputs) value_of(t);
    for (const Tensor& t : outputs) define(t);
    return;
  }
  GraphNode n;
  n.id = next_node++;
  n.op = std::string(op);
  n.no_grad = !autograd_state().grad_enabled;
  for (const Tensor& t : inputs) n.inputs.push_back(value_of(t));
  for (const Tensor& t : outputs) {
    n.outputs.push_back(define(t));
    n.output_shapes.push_back(t.sizes());
    n.output_dtypes.push_back(t.dtype());
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

void TraceState::guard(const Tensor& t, const std::vector<uint8_t>& bytes) {
  GraphNode n;
  n.id = next_node++;
  n.op = std::string(kGuardOp);
  n.inputs.push_back(value_of(t));
  GraphAttr expected;
  expected.name = "expected";
  expected.kind = GraphAttr::Kind::text;
  expected.text = guard_hex(bytes);
  GraphAttr index;
  index.name = "index";
  index.i = ++guards;
  GraphAttr shown;
  shown.name = "shown";
  shown.kind = GraphAttr::Kind::text;
  shown.text = guard_shown(t);
  n.attrs = {std::move(expected), std::move(index), std::move(shown)};
  graph.nodes.push_back(std::move(n));
}

std::atomic<int> g_active_traces{0};

const TraceState* recording_trace() {
  if (!tracing_anywhere()) return nullptr;
  const TraceState* s = active_trace();
  return s != nullptr && s->depth == 0 && !s->capture && s->replay == nullptr ? s : nullptr;
}

namespace {

/// strata::compile's trace guards what the function reads on the host of a
/// value it computed or of a tensor made before the call: what it does
/// with the number (a branch, a loop bound, a scalar operand) is frozen
/// into the graph, so the replay reads the value again at the guard and
/// stops where it differs (compile then takes another trace). Tensors the
/// function made from constants may be read freely.
void guard_host_read(const Tensor& t) {
  thread_local bool reading = false;  // the guard's own read comes back here
  if (reading || recording_trace() == nullptr) return;
  TraceState& s = *active_trace();
  if (!s.by_reference) return;
  const bool computed = s.ids.count(t.impl()) != 0;
  if (!computed && (t.impl()->storage == nullptr || t.impl()->storage->serial >= s.first_serial)) return;
  reading = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{reading};
  s.guard(t, read_bytes(t));
}

const bool g_host_read_hook_set = (set_host_read_hook(&guard_host_read), true);

}  // namespace

TraceState*& active_trace() {
  thread_local TraceState* state = nullptr;
  return state;
}

OpResult traced_dispatch(OpCall& call, OpResult (*run)(OpCall&)) {
  TraceState& s = *active_trace();
  if (s.by_reference && s.replay == nullptr) {
    if ((call.op->tags & op_tag::random) != 0) {
      throw Error("compile: op '" + std::string(call.op->name) +
                  "' draws random numbers; a replay would repeat the same draw");
    }
    if (s.depth == 0 && call.preset[0].defined()) {
      throw Error("compile: in-place op '" + std::string(call.op->name) + "' writes " +
                  (call.preset[0].impl()->storage->serial < s.first_serial ? "a tensor made outside the function"
                                                                           : "a tensor the function made") +
                  "; a replay would not write it");
    }
  }
  if (s.depth > 0 || call.n_inputs == 0 || call.op->n_inputs == 0) {  // nested, or a creation op (a constant)
    TraceNested nested;
    return run(call);
  }
  if (s.replay != nullptr) {  // recomputation: answer from the first run where it can, else run
    if (OpResult out; s.replay->reuse_output && reuse_last(s, call, out)) return out;
    if (selective_op(s.replay, s, call)) return replay_cached(s, call);
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
  if (selective_op(s.keep, s, call)) keep_cached(s, call, result);
  if (s.keep != nullptr && s.keep->reuse_output && s.suspended == 0) note_top_level(s, call, result);
  s.record(call.op->name, inputs, result.span(), call.attrs);
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
  if (recording_trace() == nullptr) return;
  throw Error(std::string("trace: ") + what + " cannot be replayed from a graph; keep it outside the traced function");
}

bool tracing_graph() {
  TraceState* s = active_trace();
  return s != nullptr && !s->capture && s->replay == nullptr;
}

bool compile_tracing() {
  const TraceState* s = recording_trace();
  return s != nullptr && s->by_reference;
}

void refuse_grad_access(const char* what) {
  const TraceState* s = recording_trace();
  if (s == nullptr) return;
  throw Error(std::string(s->by_reference ? "compile" : "trace") + ": the function " + what +
              ", autograd state that a replay would neither write nor read again; take gradients with "
              "GradientTape::gradient (or grad()) and return them, and keep .grad and optimizer steps outside "
              "the function");
}

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

namespace {

/// Runs `f` on `inputs` under `state` and returns its outputs, with the
/// graph's inputs and outputs set.
std::vector<Tensor> run_traced(TraceState& state, const TraceFn& f, const std::vector<Tensor>& inputs,
                               const char* who) {
  if (active_trace() != nullptr)
    throw Error(std::string(who) + ": already tracing on this thread (traces do not nest)");
  for (const Tensor& t : inputs) {
    if (!t.defined()) throw Error(std::string(who) + ": input " + std::to_string(state.next_value) + " is undefined");
    state.graph.input_dtypes.push_back(t.dtype());
    state.graph.input_shapes.push_back(t.sizes());
    state.define(t);
  }
  std::vector<Tensor> outputs;
  {
    ActiveTrace active(state);
    outputs = f(inputs);
  }
  state.depth = 0;
  for (const Tensor& t : outputs) {
    if (!t.defined()) throw Error(std::string(who) + ": the function returned an undefined tensor");
    state.graph.outputs.push_back(state.value_of(t));
  }
  state.graph.traced = true;
  return outputs;
}

}  // namespace

CompileTrace trace_for_compile(const TraceFn& f, const std::vector<Tensor>& inputs) {
  TraceState state;
  state.by_reference = true;
  state.first_serial = storage_serial();
  CompileTrace out;
  out.outputs = run_traced(state, f, inputs, "compile");
  // The captured tensors become inputs n.. (in the order first read), the
  // other values follow them: ids are renumbered, order kept.
  Graph& g = state.graph;
  const int64_t n = static_cast<int64_t>(inputs.size());
  std::vector<int64_t> renumber(static_cast<size_t>(state.next_value), -1);
  for (int64_t k = 0; k < n; ++k) renumber[static_cast<size_t>(k)] = k;
  int64_t next = n;
  for (const auto& [id, t] : state.captured) {
    renumber[static_cast<size_t>(id)] = next++;
    g.input_dtypes.push_back(t.dtype());
    g.input_shapes.push_back(t.sizes());
    out.captured.push_back(t);
  }
  for (int64_t& r : renumber)
    if (r < 0) r = next++;
  auto at = [&renumber](int64_t& id) { id = renumber[static_cast<size_t>(id)]; };
  for (GraphNode& node : g.nodes) {
    for (int64_t& v : node.inputs) at(v);
    for (int64_t& v : node.outputs) at(v);
  }
  for (GraphConstant& c : g.constants) at(c.value);
  for (int64_t& v : g.outputs) at(v);
  out.graph = std::move(g);
  return out;
}

}  // namespace detail

Graph trace(const TraceFn& f, const std::vector<Tensor>& example_inputs) {
  detail::TraceState state;
  detail::run_traced(state, f, example_inputs, "trace");
  return std::move(state.graph);
}

}  // namespace strata
