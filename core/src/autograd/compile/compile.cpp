// compile.cpp — strata::compile (<strata/compile.hpp>, docs/compile.md): a
// cache of traced and fused graphs keyed by the input signature, replayed
// through the dispatcher (so autograd records the replay as usual).
#include <algorithm>
#include <list>
#include <mutex>
#include <optional>
#include <strata/compile.hpp>
#include <strata/error.hpp>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autocast.hpp"
#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace.hpp"
#include "runtime/dispatch/vmap_state.hpp"

namespace strata {

namespace {

/// One signature's trace: its graph (null when it fell back; the reason is
/// in the stats), the tensors it captured and its constants, made once.
struct Entry {
  std::string key;
  int guards = 0;           // guard nodes in the graph (host reads the replay checks)
  bool any_shape = false;  // replays inputs of any shape of the traced ranks
  std::shared_ptr<const Graph> graph;
  detail::ReplayPlan plan;  // views *graph
  std::vector<Tensor> captured;
  std::vector<Tensor> constants;
  FusionReport report;
};

/// Whether the ops that read `t` now are differentiated: autograd records
/// them (grad mode on, and `t` has history, requires grad, or a recording
/// tape watches it), or `t` carries a tangent of an active forward level.
bool differentiated(const Tensor& t) {
  const detail::AutogradState& st = detail::autograd_state();
  const detail::AutogradMeta* m = detail::meta_if(t);
  if (m == nullptr) return false;
  for (const auto& tangent : m->tangents)
    if (st.forward.contains(tangent.first)) return true;
  if (!st.grad_enabled) return false;
  if (m->requires_grad || m->grad_fn != nullptr) return true;
  for (uint8_t k = 0; k < m->levels.count; ++k)
    if (st.recording.contains(m->levels.ids[k])) return true;
  return false;
}

/// The cache key of a call: each input's dtype, shape (or, `shapes` false,
/// rank) and device, the autocast state, and whether derivatives are taken
/// (" grad": an input differentiated, in reverse or forward mode; " no_grad":
/// grad mode off): a trace made for derivatives saves values a
/// forward-only replay would write for nothing.
std::string signature(const std::vector<Tensor>& inputs, bool shapes = true) {
  std::string key;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (!t.defined()) throw Error("compile: input " + std::to_string(k) + " is undefined");
    key += (k == 0 ? "" : " ") + std::string(dtype_name(t.dtype())) +
           (shapes ? detail::shape_string(t.sizes()) : "[rank " + std::to_string(t.dim()) + "]") + "@" +
           t.device().str();
  }
  const detail::AutocastSnapshot amp = detail::autocast_snapshot();
  if (amp.enabled) key += " autocast:" + std::string(dtype_name(amp.dtype)) + "@" + std::to_string(amp.device_slot);
  if (std::any_of(inputs.begin(), inputs.end(), differentiated))
    key += " grad";
  else if (!detail::autograd_state().grad_enabled)
    key += " no_grad";
  return key;
}

/// Whether every input of rank above 0 has one shape: a call a shape-free
/// trace may serve.
bool one_shape(const std::vector<Tensor>& inputs) {
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (t.dim() == 0) continue;
    if (first == nullptr)
      first = &t;
    else if (t.sizes() != first->sizes())
      return false;
  }
  return true;
}

/// Whether a traced graph computes the same on inputs of any one shape of
/// the traced ranks: elementwise ops only (the fused vocabulary and fused
/// ops, no attribute but a program), 0-d constants, and no captured tensor
/// (inputs from `n_inputs` on) of rank above 0, whose shape would not follow.
bool shape_free(const Graph& g, size_t n_inputs) {
  for (const GraphNode& n : g.nodes) {
    plugin::fused::Op op;
    const bool fused = n.op == "fused_elementwise";
    if (!fused && (!plugin::fused::op_named(n.op, op) || !n.attrs.empty())) return false;
  }
  for (const GraphConstant& c : g.constants)
    if (!c.shape.empty()) return false;
  for (size_t k = n_inputs; k < g.input_shapes.size(); ++k)
    if (!g.input_shapes[k].empty()) return false;
  return true;
}

}  // namespace

struct CompiledFunction::State {
  TraceFn fn;
  CompileOptions options;
  mutable std::mutex mutex;
  std::list<std::shared_ptr<Entry>> entries;  // most recently used first
  CompileStats stats;

  std::shared_ptr<Entry> find(const std::string& key) const {
    for (const auto& e : entries)
      if (e->key == key) return e;
    return nullptr;
  }
  /// The entry serving `inputs`: traced with their shapes, or shape-free
  /// for their ranks.
  std::shared_ptr<Entry> find_for(const std::vector<Tensor>& inputs, const std::string& key) const {
    if (auto e = find(key)) return e;
    if (!one_shape(inputs)) return nullptr;
    auto e = find(signature(inputs, false));
    return e != nullptr && e->any_shape ? e : nullptr;
  }
  void touch(const std::shared_ptr<Entry>& e) {
    entries.remove(e);
    entries.push_front(e);
  }
  /// The traces kept for `key`, most recently used first: one, or several
  /// when guards failed (each trace took another path).
  std::vector<std::shared_ptr<Entry>> variants(const std::string& k) const {
    std::vector<std::shared_ptr<Entry>> out;
    for (const auto& e : entries)
      if (e->key == k) out.push_back(e);
    return out;
  }
  /// Keeps `e`, replacing the traces of its key unless it is one more
  /// `variant` (a trace taken after the others' guards failed).
  void store(std::shared_ptr<Entry> e, bool variant = false) {
    if (!variant) entries.remove_if([&e](const std::shared_ptr<Entry>& x) { return x->key == e->key; });
    entries.push_front(std::move(e));
    while (entries.size() > std::max<size_t>(options.max_signatures, 1)) entries.pop_back();
  }

  /// The first call of a signature: trace (running the function), fuse,
  /// keep; on a trace that cannot be taken, run eagerly and remember why.
  std::vector<Tensor> trace_and_keep(const std::vector<Tensor>& inputs, const std::string& key,
                                     bool variant = false) {
    auto e = std::make_shared<Entry>();
    e->key = key;
    detail::CompileTrace t;
    try {
      t = detail::trace_for_compile(fn, inputs);
    } catch (const Error& error) {
      // Ops run before the refused one were pure (in-place writes and
      // random draws are refused before they run), so running the
      // function again is what an eager call does. Its own errors are the
      // caller's and keep nothing.
      std::vector<Tensor> out = fn(inputs);
      std::lock_guard lock(mutex);
      stats.fallbacks.push_back({key, error.what()});
      store(std::move(e));
      return out;
    }
    Graph g;
    if (options.fuse && !detail::autocast_active()) {
      try {
        // Values for the derivative programs when the traced run was
        // differentiated (an input or a captured weight takes gradients,
        // or carries a tangent).
        const bool save = std::any_of(t.outputs.begin(), t.outputs.end(), differentiated);
        g = fuse(t.graph, &e->report, {.save_for_backward = save});
      } catch (const Error& error) {  // a defect of the pass must not cost the call: replay unfused, say why
        e->report = FusionReport{};
        e->report.notes.push_back(
            {0, "", std::string("the fusion pass failed, the trace replays unfused: ") + error.what()});
        g = std::move(t.graph);
      }
    } else {
      g = std::move(t.graph);
    }
    if (one_shape(inputs) && shape_free(g, inputs.size())) {
      e->any_shape = true;
      e->key = signature(inputs, false);
    }
    std::optional<Device> device;
    if (!inputs.empty())
      device = inputs.front().device();
    else if (!t.captured.empty())
      device = t.captured.front().device();
    e->constants = detail::make_constants(g, device);
    e->captured = std::move(t.captured);
    for (const GraphNode& n : g.nodes) e->guards += n.op == detail::kGuardOp ? 1 : 0;
    e->graph = std::make_shared<const Graph>(std::move(g));
    e->plan = detail::plan_replay(*e->graph);
    std::lock_guard lock(mutex);
    stats.shape_free_traces += e->any_shape ? 1 : 0;
    store(std::move(e), variant);
    return std::move(t.outputs);
  }

  /// Every trace of a signature stopped at a guard (`failure`, the last):
  /// one more trace, up to kMaxVariants of them; beyond, the signature
  /// runs eagerly, the failure its reason.
  std::vector<Tensor> after_guards(const std::vector<Tensor>& inputs, const std::string& key,
                                   const std::string& failure) {
    bool eager = false;
    {
      std::lock_guard lock(mutex);
      ++stats.guard_failures;
      --stats.replays;  // counted as one when the call began
      if (variants(key).size() >= kMaxVariants) {
        auto e = std::make_shared<Entry>();
        e->key = key;
        stats.fallbacks.push_back({key, "compile: the guards of " + std::to_string(kMaxVariants) +
                                            " traces of this signature failed (a value the function reads on "
                                            "the host changes from call to call); the last: " + failure});
        store(std::move(e));
        ++stats.eager_calls;
        eager = true;
      } else {
        ++stats.traces;
      }
    }
    return eager ? fn(inputs) : trace_and_keep(inputs, key, true);
  }

  static constexpr size_t kMaxVariants = 4;
};

namespace {
/// Replays `e`'s graph on `inputs` and the tensors it captured.
std::vector<Tensor> replay(const Entry& e, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> all(inputs);
  all.insert(all.end(), e.captured.begin(), e.captured.end());
  return detail::run_plan(e.plan, all, &e.constants, e.any_shape);
}
}  // namespace

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs) const {
  State& s = *state_;
  // Inside another trace (or a checkpoint's capture) the function's ops
  // belong to that trace; under vmap the inputs are lanes, which a trace
  // does not record: both run the function as written.
  if (detail::active_trace() != nullptr || !detail::vmap_frames().empty()) {
    {
      std::lock_guard lock(s.mutex);
      ++s.stats.calls;
      ++s.stats.eager_calls;
    }
    return s.fn(inputs);
  }
  const std::string key = signature(inputs);
  std::shared_ptr<Entry> e;
  {
    std::lock_guard lock(s.mutex);
    ++s.stats.calls;
    e = s.find_for(inputs, key);
    if (e == nullptr) {
      ++s.stats.traces;
    } else {
      s.touch(e);
      ++(e->graph != nullptr ? s.stats.replays : s.stats.eager_calls);
    }
  }
  if (e == nullptr) return s.trace_and_keep(inputs, key);
  if (e->graph == nullptr) return s.fn(inputs);
  if (e->guards == 0) return replay(*e, inputs);
  // Guarded traces: each took the path the values it read on the host
  // chose; the first whose guards hold answers (a failed one stops at its
  // guard, having run only pure ops), else one more trace.
  std::vector<std::shared_ptr<Entry>> tries;
  {
    std::lock_guard lock(s.mutex);
    tries = s.variants(e->key);
  }
  std::string failure;
  for (const auto& v : tries) {
    if (v->graph == nullptr) continue;
    try {
      std::vector<Tensor> out = replay(*v, inputs);
      std::lock_guard lock(s.mutex);
      s.touch(v);
      return out;
    } catch (const detail::GuardFailure& g) {
      failure = g.what();
    }
  }
  return s.after_guards(inputs, e->key, failure);
}

CompileStats CompiledFunction::stats() const {
  std::lock_guard lock(state_->mutex);
  CompileStats out = state_->stats;
  for (const auto& e : state_->entries) {
    out.signatures.push_back(e->graph == nullptr ? e->key + " (eager)"
                             : e->guards > 0  ? e->key + " (" + std::to_string(e->guards) + " guard" +
                                                   (e->guards == 1 ? ")" : "s)")
                                              : e->key);
    out.fused_regions += e->report.regions.size();
    for (const FusionRegion& r : e->report.regions) out.fused_ops += r.ops.size();
  }
  return out;
}

std::shared_ptr<const Graph> CompiledFunction::graph_for(const std::vector<Tensor>& inputs) const {
  const std::string key = signature(inputs);
  std::lock_guard lock(state_->mutex);
  auto e = state_->find_for(inputs, key);
  return e != nullptr ? e->graph : nullptr;
}

FusionReport CompiledFunction::report_for(const std::vector<Tensor>& inputs) const {
  const std::string key = signature(inputs);
  std::lock_guard lock(state_->mutex);
  auto e = state_->find_for(inputs, key);
  return e != nullptr ? e->report : FusionReport{};
}

bool is_compiling() { return detail::compile_tracing(); }

CompiledFunction compile(TraceFn fn, CompileOptions options) {
  if (!fn) throw Error("compile: the function is empty");
  CompiledFunction f;
  f.state_ = std::make_shared<CompiledFunction::State>();
  f.state_->fn = std::move(fn);
  f.state_->options = options;
  return f;
}

}  // namespace strata
