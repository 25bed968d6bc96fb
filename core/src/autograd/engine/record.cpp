// record.cpp — recording ops into the graph and propagating forward-mode
// tangents, called by dispatch after every op.
#include "autograd/engine/engine.hpp"
#include "autograd/engine/nodes.hpp"
#include "autograd/vmap/lanes_twin.hpp"

#include "base/pool.hpp"
#include "runtime/dispatch/vmap_state.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>

namespace strata::detail {

void LevelSet::add(uint64_t id) {
  if (contains(id)) return;
  if (count == kCapacity) {  // forget the levels of tapes that are gone
    for (uint8_t k = 0; k < count;) {
      if (level_alive(ids[k])) {
        ++k;
      } else {
        ids[k] = ids[--count];
      }
    }
  }
  if (count == kCapacity) {
    throw Error("more than " + std::to_string(kCapacity) + " nested gradient tapes watch one tensor");
  }
  ids[count++] = id;
}

void LevelSet::remove(uint64_t id) {
  for (uint8_t k = 0; k < count; ++k) {
    if (ids[k] == id) {
      ids[k] = ids[--count];
      return;
    }
  }
}

std::atomic<int> g_anomaly_threads{0};

AutogradState& autograd_state() {
  thread_local AutogradState state = [] {
    AutogradState s;
    s.recording.add(0);  // the implicit level of requires_grad / backward()
    return s;
  }();
  return state;
}

LevelWindow::LevelWindow(uint64_t level, Keep keep)
    : st_(autograd_state()), recording_(st_.recording), forward_(st_.forward) {
  auto outside = [&](uint64_t id) { return keep == Keep::below ? id >= level : id <= level; };
  for (LevelSet* set : {&st_.recording, &st_.forward}) {
    for (uint8_t k = 0; k < set->count;) {
      if (outside(set->ids[k])) {
        set->ids[k] = set->ids[--set->count];
      } else {
        ++k;
      }
    }
  }
}

LevelWindow::~LevelWindow() {
  st_.recording = recording_;
  st_.forward = forward_;
}

uint64_t new_level_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

AutogradMeta& meta_of(const Tensor& t) {
  auto& slot = t.impl()->autograd;
  if (!slot) slot = make_pooled<AutogradMeta>();
  return *slot;
}

size_t Node::saved_bytes() const {
  size_t n = 0;
  auto add = [&n](const SavedTensor& s) {
    if (s.data.defined() && !s.shape_only) n += static_cast<size_t>(s.data.numel()) * dtype_size(s.data.dtype());
  };
  std::for_each(inputs.begin(), inputs.end(), add);
  std::for_each(outputs.begin(), outputs.end(), add);
  return n;
}

namespace {

// --- bytes held per level ----------------------------------------------------

std::mutex& bytes_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<uint64_t, uint64_t>& bytes_by_level() {
  static auto* map = new std::unordered_map<uint64_t, uint64_t>;  // outlives static teardown
  return *map;
}

/// Level 0 (backward()) is counted apart, without the lock: it is on every
/// node recorded outside a tape, so its counter is the hot one.
std::atomic<uint64_t>& implicit_level_bytes() {
  static std::atomic<uint64_t> bytes{0};
  return bytes;
}

void account(const LevelSet& levels, size_t bytes, bool add) {
  if (bytes == 0) return;
  bool locked_any = false;
  for (uint8_t k = 0; k < levels.count; ++k) {
    if (levels.ids[k] == 0) {
      if (add) {
        implicit_level_bytes().fetch_add(bytes, std::memory_order_relaxed);
      } else {
        implicit_level_bytes().fetch_sub(bytes, std::memory_order_relaxed);
      }
    } else {
      locked_any = true;
    }
  }
  if (!locked_any) return;
  std::lock_guard lock(bytes_mutex());
  auto& map = bytes_by_level();
  for (uint8_t k = 0; k < levels.count; ++k) {
    if (levels.ids[k] == 0) continue;
    uint64_t& held = map[levels.ids[k]];
    held = add ? held + bytes : held - std::min<uint64_t>(held, bytes);
    if (held == 0) map.erase(levels.ids[k]);
  }
}

/// Tensors and nodes whose destruction was deferred, so that freeing a long
/// chain (a million-op loop) is a loop, not a million-deep recursion.
struct Graveyard {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<std::shared_ptr<AutogradMeta>> metas;
  std::vector<Tensor> tensors;
  bool draining = false;
};

Graveyard& graveyard() {
  thread_local Graveyard g;
  return g;
}

/// An alias of `t`'s storage and geometry without autograd metadata.
Tensor plain_alias(const Tensor& t) {
  return make_view(t, t.shape(), t.strides(), t.offset());
}

/// Levels a new node belongs to: those of its inputs (a requires_grad leaf
/// is watched by every recording tape) that are recording now.
LevelSet node_levels(std::span<const Tensor> inputs, const AutogradState& st) {
  LevelSet levels;
  for (const Tensor& t : inputs) {
    const AutogradMeta* m = meta_if(t);
    if (m == nullptr) continue;
    for (uint8_t k = 0; k < m->levels.count; ++k) {
      if (st.recording.contains(m->levels.ids[k])) levels.add(m->levels.ids[k]);
    }
    if (m->requires_grad && m->grad_fn == nullptr) {
      for (uint8_t k = 0; k < st.recording.count; ++k) levels.add(st.recording.ids[k]);
    }
  }
  return levels;
}

/// The placeholder a node keeps for an operand whose values its VJP does not
/// read (SavedTensor::shape_only). Operands of one node with equal metadata
/// (add's inputs and output, as prepared) share one: `last` is the previous.
Tensor shape_only(const Tensor& t, Tensor& last) {
  const TensorImpl& src = *t.impl();
  if (last.defined()) {
    const TensorImpl& prev = *last.impl();
    if (prev.dtype == src.dtype && prev.device == src.device && std::ranges::equal(prev.sizes(), src.sizes()) &&
        std::ranges::equal(prev.stride_span(), src.stride_span())) {
      return last;
    }
  }
  auto impl = make_pooled<TensorImpl>();
  impl->device = src.device;
  impl->dtype = src.dtype;
  impl->rank = src.rank;
  impl->offset = src.offset;
  impl->numel = src.numel;
  impl->shape = src.shape;
  impl->strides = src.strides;
  last = Tensor(std::move(impl));
  return last;
}

/// Whether bit k of a vjp_reads mask is set (inputs past the eighth: yes).
bool reads(uint8_t mask, size_t k) { return k >= 8 || ((mask >> k) & 1U) != 0; }

void record_reverse(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs,
                    const AutogradState& st, const std::shared_ptr<const void>& closure) {
  if (!st.grad_enabled || op.derivative.vjp == nullptr) return;
  LevelSet levels = node_levels(inputs, st);
  if (levels.empty()) return;
  std::shared_ptr<Node> node = make_node();
  static std::atomic<uint64_t> sequence{0};
  node->op = &op;
  node->sequence = sequence.fetch_add(1, std::memory_order_relaxed);
  node->levels = levels;
  if (attrs != nullptr) node->attrs = *attrs;
  node->closure = closure;
  node->n_outputs = outputs.size();
  node->inputs.reserve(inputs.size());
  node->next.reserve(inputs.size());
  // What the node keeps of an operand: its values (an output's as a plain
  // alias) and their version when the VJP reads them, else a placeholder.
  Tensor placeholder;
  auto keep = [&placeholder](const Tensor& t, bool read, bool is_output, int output_nr) -> SavedTensor {
    if (!read) return {shape_only(t, placeholder), 0, is_output, output_nr, {}, true};
    return {is_output ? plain_alias(t) : t,
            t.impl()->storage->version.load(std::memory_order_relaxed),
            is_output,
            output_nr,
            {},
            false};
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    node->inputs.push_back(keep(t, reads(op.vjp_reads_inputs, k), false, 0));
    Edge edge;
    if (const auto& m = t.impl()->autograd) {
      edge.leaf = m;  // the input's metadata: identifies it as a source
      edge.node = m->grad_fn;
      edge.output_nr = m->output_nr;
    }
    node->next.push_back(std::move(edge));
  }
  node->output_metas.resize(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& out = outputs[k];
    node->outputs.push_back(keep(out, reads(op.vjp_reads_outputs, k), true, static_cast<int>(k)));
    if (!is_differentiable(out.dtype())) continue;
    AutogradMeta& m = meta_of(out);
    m.grad_fn = node;
    m.output_nr = static_cast<int>(k);
    m.levels = levels;
    node->output_metas[k] = out.impl()->autograd;
  }
  node->accounted_bytes = node->saved_bytes();
  account(levels, node->accounted_bytes, true);
}

void record_forward(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs,
                    AutogradState& st, const void* closure) {
  if (st.forward.empty() || op.derivative.jvp == nullptr) return;
  // Oldest (outermost) level first: an inner level's rule then sees the
  // outputs' outer tangents (below), as nested forward mode needs — the
  // jvp of a forward-over-reverse hvp differentiates the inner tangent
  // y' = x' * y of exp through y. Level ids grow with creation.
  LevelSet active = st.forward;
  std::sort(active.ids.begin(), active.ids.begin() + active.count);
  for (uint8_t l = 0; l < active.count; ++l) {
    uint64_t level = active.ids[l];
    std::vector<Tensor> tangents(inputs.size());
    bool any = false;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (const AutogradMeta* m = meta_if(inputs[k])) {
        if (const Tensor* t = m->tangent(level)) {
          tangents[k] = *t;
          any = true;
        }
      }
    }
    if (!any) continue;
    // The rule sees the outputs as aliases: linked to their node (so a
    // tangent computed from y stays differentiable through y) but not the
    // tensors themselves, whose metadata will own the tangent — otherwise
    // y -> tangent -> its node -> y would be a reference cycle.
    std::vector<Tensor> outs;
    outs.reserve(outputs.size());
    for (const Tensor& out : outputs) {
      Tensor alias = plain_alias(out);
      if (const AutogradMeta* m = meta_if(out); m != nullptr) {
        if (m->grad_fn != nullptr) {
          AutogradMeta& am = meta_of(alias);
          am.grad_fn = m->grad_fn;
          am.output_nr = m->output_nr;
          am.levels = m->levels;
        }
        // The tangents of the outer levels computed so far in this loop;
        // they reference aliases, never `out` itself, so no cycle forms.
        for (const auto& [other, tangent] : m->tangents) {
          if (other != level) meta_of(alias).tangents.emplace_back(other, tangent);
        }
      }
      outs.push_back(std::move(alias));
    }
    std::vector<Tensor> results;
    st.forward.remove(level);  // the rule's own ops must not carry this level
    try {
      GradContext ctx{inputs, outs, tangents, attrs, {}, closure, &op};
      results = op.derivative.jvp(ctx);
    } catch (...) {
      st.forward.add(level);
      throw;
    }
    st.forward.add(level);
    for (size_t k = 0; k < outputs.size() && k < results.size(); ++k) {
      if (results[k].defined() && is_differentiable(outputs[k].dtype())) {
        meta_of(outputs[k]).tangents.emplace_back(level, results[k]);
      }
    }
  }
}

}  // namespace

std::shared_ptr<Node> make_node() { return make_pooled<Node>(); }

uint64_t level_saved_bytes(uint64_t level) {
  if (level == 0) return implicit_level_bytes().load(std::memory_order_relaxed);
  std::lock_guard lock(bytes_mutex());
  auto it = bytes_by_level().find(level);
  return it == bytes_by_level().end() ? 0 : it->second;
}

void Node::release_saved() {
  released = true;
  inputs.clear();
  outputs.clear();
  closure.reset();
  account(levels, accounted_bytes, false);
  accounted_bytes = 0;
}

Node::~Node() {
  account(levels, accounted_bytes, false);
  Graveyard& g = graveyard();
  for (Edge& e : next) {
    if (e.node) g.nodes.push_back(std::move(e.node));
    if (e.leaf) g.metas.push_back(std::move(e.leaf));
  }
  for (SavedTensor& s : inputs) {
    if (s.data.defined()) g.tensors.push_back(std::move(s.data));
  }
  if (g.draining) return;
  g.draining = true;
  while (!g.nodes.empty() || !g.metas.empty() || !g.tensors.empty()) {
    if (!g.tensors.empty()) {
      Tensor t = std::move(g.tensors.back());
      g.tensors.pop_back();
    } else if (!g.metas.empty()) {
      std::shared_ptr<AutogradMeta> m = std::move(g.metas.back());
      g.metas.pop_back();
    } else {
      std::shared_ptr<Node> n = std::move(g.nodes.back());
      g.nodes.pop_back();
    }
  }
  g.draining = false;
}

namespace {

/// A tangent as a node may keep it: a plain alias (no grad_fn, so the node
/// never owns history leading back to itself) that still carries the
/// tangent's own tangents of other levels, aliased the same way. Nested
/// forward mode needs them: the jvp of a forward-over-reverse hvp
/// differentiates the tangent an output's VJP rule reads.
Tensor tangent_alias(const Tensor& t) {
  Tensor alias = plain_alias(t);
  if (const AutogradMeta* m = meta_if(t); m != nullptr && !m->tangents.empty()) {
    AutogradMeta& am = meta_of(alias);
    for (const auto& [level, inner] : m->tangents) am.tangents.emplace_back(level, tangent_alias(inner));
  }
  return alias;
}

/// An output that already has autograd metadata is a tensor written in
/// place: its new value gets metadata of its own. Nodes recorded before
/// keep the old one in their edges (it identifies the old value), so the
/// new node cannot reach the tensor through them — x.copy_(x + w) would
/// otherwise close a reference cycle x → node → (x + w) → x and leak the
/// whole history. What belongs to the tensor rather than to its value
/// carries over: requires_grad, the accumulated .grad, hooks, retain_grad,
/// the watching levels. Tangents do not (the value changed; the op's JVP
/// gives the new ones).
void new_value_meta(Tensor& out) {
  std::shared_ptr<AutogradMeta>& m = out.impl()->autograd;
  if (m == nullptr) return;
  auto fresh = make_pooled<AutogradMeta>();
  fresh->requires_grad = m->requires_grad;
  fresh->grad = m->grad;
  fresh->levels = m->levels;
  fresh->hooks = m->hooks;
  fresh->ready_hooks = m->ready_hooks;
  fresh->retains_grad = m->retains_grad;
  m = std::move(fresh);
}

}  // namespace

void record_node(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs,
                 std::shared_ptr<const void> closure) {
  // A node on batched tensors belongs only to the levels opened inside
  // their vmap; the levels opened outside it recorded the lanes' ops — but
  // for the autograd layer's own nodes, whose functions ran unrecorded, they
  // get a twin on the lanes (autograd/vmap/lanes_twin.cpp). An op call
  // records through here after every dispatch: the plain case (no input
  // with autograd metadata, no autograd-layer node) returns before any of it.
  auto vmap_level = [&] {
    return std::max(top_batch_level(inputs), top_batch_level(std::span<const Tensor>(outputs)));
  };
  if ((op.tags & op_tag::autograd) != 0) [[unlikely]] {
    if (const uint64_t level = vmap_level(); level != 0) record_lanes_twin(op, inputs, outputs, attrs, closure, level);
  }
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.impl()->autograd != nullptr);
  if (!any) return;
  // In place (an output with metadata already): the output's new value gets
  // new metadata, and an input that is the output itself (x.add_(w)) is
  // recorded as the old value (an alias holding the old metadata).
  std::vector<Tensor> old_values;
  for (Tensor& out : outputs) {
    if (!out.defined() || out.impl()->autograd == nullptr) [[likely]] continue;
    if (old_values.empty()) old_values.assign(inputs.begin(), inputs.end());
    for (Tensor& in : old_values) {
      if (!in.defined() || in.impl() != out.impl()) continue;
      Tensor old = plain_alias(in);
      old.impl()->autograd = in.impl()->autograd;
      in = std::move(old);
    }
    new_value_meta(out);
  }
  if (!old_values.empty()) inputs = old_values;
  std::optional<LevelWindow> window;
  if (const uint64_t level = vmap_level(); level != 0) window.emplace(level, LevelWindow::Keep::above);
  AutogradState& st = autograd_state();
  record_reverse(op, inputs, outputs, attrs, st, closure);
  record_forward(op, inputs, outputs, attrs, st, closure.get());
  // A node that saved its outputs keeps their tangents too (as plain
  // aliases), so that its VJP sees them under forward-over-reverse.
  for (size_t k = 0; k < outputs.size(); ++k) {
    AutogradMeta* m = meta_if(outputs[k]);
    if (m == nullptr || m->grad_fn == nullptr || m->tangents.empty()) continue;
    Node& node = *m->grad_fn;
    if (static_cast<size_t>(m->output_nr) >= node.outputs.size()) continue;
    if (node.outputs[static_cast<size_t>(m->output_nr)].shape_only) continue;  // the VJP reads no value of it
    auto& saved = node.outputs[static_cast<size_t>(m->output_nr)].tangents;
    for (const auto& [level, t] : m->tangents) saved.emplace_back(level, tangent_alias(t));
  }
}

void record_op(const OpCall& call, OpResult& outputs) {
  record_node(*call.op, std::span<const Tensor>(call.inputs.data(), static_cast<size_t>(call.n_inputs)),
              std::span<Tensor>(outputs.tensors.data(), outputs.tensors.size()), call.attrs);
}

void record_view(const OpDef& op, const Tensor& base, Tensor& view, Attrs attrs) {
  record_node(op, std::span<const Tensor>(&base, 1), std::span<Tensor>(&view, 1), &attrs);
}

}  // namespace strata::detail
