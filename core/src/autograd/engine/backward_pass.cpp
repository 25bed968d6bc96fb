// backward_pass.cpp — reverse-mode differentiation over the recorded graph.
//
// The pass finds the nodes of the requested level reachable from the
// targets, prunes those that cannot reach a source (or, for backward(), a
// leaf that requires grad), and runs each node's VJP rule once every node
// that feeds it has run (Kahn's order, latest-created first). Every walk is
// iterative so that a million-op chain needs no deep stack.
#include "autograd/engine/engine.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace strata::detail {

namespace {

/// Restores the thread's recording state on scope exit.
class StateGuard {
 public:
  explicit StateGuard(AutogradState& st) : st_(st), saved_(st) {}
  ~StateGuard() {
    st_.grad_enabled = saved_.grad_enabled;
    st_.recording = saved_.recording;
  }
  StateGuard(const StateGuard&) = delete;
  StateGuard& operator=(const StateGuard&) = delete;

 private:
  AutogradState& st_;
  AutogradState saved_;
};

Tensor accumulate(const Tensor& a, const Tensor& b) { return a.defined() ? add(a, b) : b; }

Tensor unpack(const SavedTensor& s, const std::shared_ptr<Node>& node, bool differentiable) {
  if (s.shape_only) return s.data;  // no values: nothing to check or differentiate
  if (s.data.impl()->storage->version.load(std::memory_order_relaxed) != s.version) {
    throw Error("a tensor saved for the backward of op '" + std::string(node->op->name) + "' (" +
                type_string(s.data) +
                ") was modified in place after it was saved (version " + std::to_string(s.version) + " -> " +
                std::to_string(s.data.impl()->storage->version.load()) + "); clone it before modifying");
  }
  if (!s.is_output || (!differentiable && s.tangents.empty())) return s.data;
  // Re-link a saved output to its node so that rules using it stay
  // differentiable (higher order) — only for the duration of the pass —
  // and give it back its forward-mode tangents.
  Tensor alias = make_view(s.data, s.data.shape(), s.data.strides(), s.data.offset());
  if (!s.tangents.empty()) meta_of(alias).tangents = s.tangents;
  if (differentiable && is_differentiable(alias.dtype())) {
    AutogradMeta& m = meta_of(alias);
    m.grad_fn = node;
    m.output_nr = s.output_nr;
    m.levels = node->levels;
  }
  return alias;
}

void check_finite(const Tensor& g, const Node& node) {
  if (!g.defined() || !is_differentiable(g.dtype())) return;
  if (std::optional<double> v = first_non_finite(g)) {
    throw Error("anomaly: the backward of op '" + std::string(node.op->name) + "' produced a non-finite gradient (" +
                std::to_string(*v) + ")");
  }
}

/// Each input gradient has its input's shape: a rule that breaks this is a
/// bug in Strata; a node hook that does is the user's, and told so.
void check_input_grads(const Node& node, const std::vector<Tensor>& grads, std::span<const Tensor> inputs,
                       bool from_hook) {
  for (size_t k = 0; k < grads.size() && k < inputs.size(); ++k) {
    const Tensor& g = grads[k];
    if (!g.defined() || g.sizes() == inputs[k].sizes()) continue;
    throw Error(std::string(from_hook ? "a node hook on op '" : "internal: the VJP of op '") +
                std::string(node.op->name) + "' gave a gradient of shape " + shape_string(g.shape()) +
                " for input " + std::to_string(k) + " of shape " + shape_string(inputs[k].shape()));
  }
}

/// Hands back the gradients of `node`'s outputs that the request's
/// retention policy keeps.
void retain_outputs(const BackwardRequest& req, const Node& node, std::span<const Tensor> grads) {
  for (size_t k = 0; k < grads.size() && k < node.output_metas.size(); ++k) {
    if (!grads[k].defined()) continue;
    std::shared_ptr<AutogradMeta> m = node.output_metas[k].lock();
    if (m == nullptr) continue;  // the tensor is gone: nobody can read its gradient
    bool marked = req.marked != nullptr ? std::ranges::find(*req.marked, m.get()) != req.marked->end()
                                        : m->retains_grad;
    if (req.retention == GradRetention::keep || marked) req.retained->emplace_back(std::move(m), grads[k]);
  }
}

/// The scratch one pass keeps for one node.
struct Slot {
  std::shared_ptr<Node> node;
  int deps = 0;          // nodes of the pass, not yet run, that send it a gradient
  bool needed = false;   // reaches a source or a leaf that accumulates
  bool queued = false;
  bool claimed = false;  // the node carries this pass's id (else: overflow map)
  boost::container::small_vector<Tensor, 2> buffer;  // gradients of its outputs so far
};

/// The scratch of one pass, found from a node without hashing: a node the
/// pass claims carries the pass id and its slot index. A node another live
/// pass holds (a backward run inside a hook or a checkpoint recomputation
/// over the same nodes, or another thread's pass over a shared graph) is
/// looked up in a map instead.
class PassScratch {
 public:
  PassScratch() : id_(next_id().fetch_add(1, std::memory_order_relaxed)) {}
  ~PassScratch() {
    for (Slot& s : slots_) {
      if (s.claimed) s.node->pass.store(0, std::memory_order_release);
    }
  }
  PassScratch(const PassScratch&) = delete;
  PassScratch& operator=(const PassScratch&) = delete;

  static constexpr uint32_t kNone = ~uint32_t{0};

  uint32_t find(const Node* n) const {
    if (n->pass.load(std::memory_order_relaxed) == id_) return n->pass_slot;
    if (overflow_.empty()) return kNone;
    auto it = overflow_.find(n);
    return it == overflow_.end() ? kNone : it->second;
  }
  /// The slot of `n`, created on first use (`created` says so).
  uint32_t get(const std::shared_ptr<Node>& n, bool& created) {
    uint32_t k = find(n.get());
    created = k == kNone;
    if (!created) return k;
    k = static_cast<uint32_t>(slots_.size());
    Slot& s = slots_.emplace_back();
    s.node = n;
    uint64_t expected = 0;
    if (n->pass.compare_exchange_strong(expected, id_, std::memory_order_acquire, std::memory_order_relaxed)) {
      n->pass_slot = k;
      s.claimed = true;
    } else {
      overflow_.emplace(n.get(), k);
    }
    return k;
  }
  Slot& operator[](uint32_t k) { return slots_[k]; }
  const Slot& operator[](uint32_t k) const { return slots_[k]; }

 private:
  static std::atomic<uint64_t>& next_id() {
    static std::atomic<uint64_t> id{1};
    return id;
  }
  uint64_t id_;
  std::vector<Slot> slots_;
  std::unordered_map<const Node*, uint32_t> overflow_;
};

/// One reverse pass over the recorded graph, as named steps (PyTorch's
/// GraphTask): discover() finds the nodes, seed() hands the targets their
/// gradients, run_node() runs one node's rule once every node that feeds it
/// has run, finish() fires the last ready hooks and writes grad().
class BackwardPass {
 public:
  explicit BackwardPass(BackwardRequest& req) : req_(req), st_(autograd_state()), results_(req.sources.size()) {
    for (size_t k = 0; k < req_.sources.size(); ++k) {
      if (const AutogradMeta* m = meta_if(req_.sources[k])) source_index_.emplace(m, k);
    }
  }

  std::vector<Tensor> run() {
    StateGuard guard(st_);
    if (req_.create_graph) {
      if (req_.level != 0) st_.recording.remove(req_.level);  // a tape does not record its own gradient
    } else {
      st_.grad_enabled = false;
    }
    discover();
    seed();
    while (!ready_.empty()) {
      const uint32_t slot = ready_.top().second;
      ready_.pop();
      run_node(slot);
    }
    return finish();
  }

 private:
  using Small = boost::container::small_vector<Tensor, 4>;

  bool in_level(const std::shared_ptr<Node>& n) const { return n != nullptr && n->levels.contains(req_.level); }

  /// A source, or a leaf whose grad() the pass accumulates into.
  bool is_sink(const AutogradMeta* m) const {
    return (!source_index_.empty() && source_index_.count(m) != 0) ||
           (req_.accumulate_leaves && m->requires_grad && m->grad_fn == nullptr);
  }

  /// Gradient-ready hooks: a sink with such hooks counts the edges into it
  /// from the nodes of the pass; when the last of those nodes has run its
  /// total is final and the hooks fire, while the rest of the pass still runs.
  bool ready_watched(const Edge& e) const {
    return e.leaf != nullptr && !e.leaf->ready_hooks.empty() && is_sink(e.leaf.get());
  }

  /// Whether a gradient along `e` is used: it reaches a source, a leaf that
  /// accumulates, or a node that leads to one.
  bool edge_needed(const Edge& e) const {
    if (e.leaf != nullptr && !source_index_.empty() && source_index_.count(e.leaf.get()) != 0) return true;
    if (req_.accumulate_leaves && e.leaf != nullptr && e.leaf->requires_grad && e.leaf->grad_fn == nullptr) return true;
    if (!in_level(e.node)) return false;
    uint32_t k = pass_.find(e.node.get());
    return k != PassScratch::kNone && pass_[k].needed;
  }

  /// Step 1: the reachable nodes, their in-degree, and (in post-order)
  /// whether each can reach a sink. Iterative: a million-op chain needs no
  /// deep stack.
  void discover() {
    struct Frame {
      uint32_t slot;
      size_t next_edge;
    };
    std::vector<Frame> stack;
    for (const Tensor& r : req_.roots) {
      const AutogradMeta* m = meta_if(r);
      if (m == nullptr || !in_level(m->grad_fn)) continue;
      bool created = false;
      uint32_t k = pass_.get(m->grad_fn, created);
      if (created) stack.push_back({k, 0});
    }
    while (!stack.empty()) {
      Frame& f = stack.back();
      uint32_t slot = f.slot;
      const Node& node = *pass_[slot].node;
      if (f.next_edge < node.next.size()) {
        const Edge& e = node.next[f.next_edge++];
        if (ready_watched(e)) ++ready_pending_[e.leaf.get()];
        if (in_level(e.node)) {
          bool created = false;
          uint32_t k = pass_.get(e.node, created);
          ++pass_[k].deps;
          if (created) stack.push_back({k, 0});
        }
        continue;
      }
      bool reaches = false;
      for (const Edge& e : node.next) reaches = reaches || edge_needed(e);
      pass_[slot].needed = reaches;
      stack.pop_back();
    }
  }

  /// Step 2: the targets' gradients delivered, the targets' nodes queued.
  /// The pass holds the roots' nodes from here on; a root tensor nobody else
  /// holds (a checkpoint's recomputed output) need not outlive its node.
  void seed() {
    for (size_t k = 0; k < req_.roots.size(); ++k) {
      const auto& m = req_.roots[k].impl()->autograd;
      Edge e;
      if (m) {
        e.leaf = m;
        e.node = m->grad_fn;
        e.output_nr = m->output_nr;
      }
      deliver(e, req_.root_grads[k]);
    }
    for (const Tensor& r : req_.roots) {
      const AutogradMeta* m = meta_if(r);
      if (m == nullptr || !in_level(m->grad_fn)) continue;
      uint32_t k = pass_.find(m->grad_fn.get());
      if (pass_[k].deps == 0) enqueue(k);
    }
    req_.roots.clear();
  }

  /// Adds `g` to what flows along `e`: a source's result, a leaf's total,
  /// or the buffer of the node it feeds (when that node is needed).
  void deliver(const Edge& e, const Tensor& g) {
    if (e.leaf != nullptr) {
      if (auto it = source_index_.find(e.leaf.get()); it != source_index_.end()) {
        results_[it->second] = accumulate(results_[it->second], g);
      }
      if (req_.accumulate_leaves && e.leaf->requires_grad && e.leaf->grad_fn == nullptr) {
        leaf_grads_[e.leaf.get()] = accumulate(leaf_grads_[e.leaf.get()], g);
      }
    }
    if (!in_level(e.node)) return;
    uint32_t k = pass_.find(e.node.get());
    if (k == PassScratch::kNone || !pass_[k].needed) return;
    auto& buf = pass_[k].buffer;
    buf.resize(e.node->n_outputs);
    buf[static_cast<size_t>(e.output_nr)] = accumulate(buf[static_cast<size_t>(e.output_nr)], g);
  }

  /// Kahn's order over the nodes found, latest-created first.
  void enqueue(uint32_t k) {
    Slot& s = pass_[k];
    if (s.queued) return;
    s.queued = true;
    ready_.emplace(s.node->sequence, k);
  }

  /// Step 3, for one node whose feeders all ran: its hooks and rule, the
  /// input gradients delivered, its saved tensors released, the ready hooks
  /// of sinks it was the last to feed, and the nodes it frees queued.
  void run_node(uint32_t slot) {
    // Slots are only added in discover(), so references to them stay valid here.
    const std::shared_ptr<Node>& node = pass_[slot].node;
    boost::container::small_vector<Tensor, 2> grads = std::move(pass_[slot].buffer);
    grads.resize(node->n_outputs);
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    if (any && pass_[slot].needed) apply_rule(node, grads);
    if (req_.release) release(*node);
    if (!ready_pending_.empty()) {
      for (const Edge& e : node->next) {
        if (!ready_watched(e)) continue;
        auto it = ready_pending_.find(e.leaf.get());
        if (it != ready_pending_.end() && --it->second == 0) fire_ready(e.leaf.get());
      }
    }
    for (const Edge& e : node->next) {
      if (!in_level(e.node)) continue;
      uint32_t k = pass_.find(e.node.get());
      if (k != PassScratch::kNone && --pass_[k].deps == 0) enqueue(k);
    }
  }

  /// The node's hooks, its VJP rule on its saved tensors and `grads`, its
  /// post hooks; each input gradient delivered along its edge.
  void apply_rule(const std::shared_ptr<Node>& node, boost::container::small_vector<Tensor, 2>& grads) {
    if (!node->hooks.empty() && !node->released) {
      std::vector<Tensor> seen(grads.begin(), grads.end());
      for (auto& hook : node->hooks) hook(seen);
      seen.resize(grads.size());
      std::move(seen.begin(), seen.end(), grads.begin());
    }
    // Checked after the hooks: a hook may itself have run a backward that
    // freed this node.
    if (node->released) {
      throw Error("backward through a graph that was already freed (op '" + std::string(node->op->name) +
                  "'): use a persistent tape, or backward(retain_graph = true) the first time");
    }
    if (req_.retained != nullptr && (req_.retention == GradRetention::keep ||
                                     (req_.retention == GradRetention::selective && node->retain_hint))) {
      retain_outputs(req_, *node, {grads.data(), grads.size()});
    }
    Small inputs;
    Small outputs;
    for (const SavedTensor& s : node->inputs) inputs.push_back(unpack(s, node, req_.create_graph));
    for (const SavedTensor& s : node->outputs) outputs.push_back(unpack(s, node, req_.create_graph));
    boost::container::small_vector<uint8_t, 4> needs(node->next.size());
    for (size_t k = 0; k < needs.size(); ++k) needs[k] = edge_needed(node->next[k]) ? 1 : 0;
    GradContext ctx{{inputs.data(), inputs.size()},
                    {outputs.data(), outputs.size()},
                    {grads.data(), grads.size()},
                    &node->attrs,
                    {needs.data(), needs.size()},
                    node->closure.get(),
                    node->op};
    std::vector<Tensor> input_grads;
    try {
      input_grads = node->op->derivative.vjp(ctx);
    } catch (const Error& e) {
      // An anomaly check on an op inside the rule: name the op it differentiates.
      std::string what = e.what();
      if (!st_.anomaly || what.rfind("anomaly: ", 0) != 0) throw;
      throw Error("anomaly: in the backward of op '" + std::string(node->op->name) + "' (node #" +
                  std::to_string(node->sequence) + "): " + what.substr(9));
    }
    check_input_grads(*node, input_grads, {inputs.data(), inputs.size()}, false);
    if (!node->post_hooks.empty()) {
      input_grads.resize(node->next.size());
      const std::vector<Tensor> output_grads(grads.begin(), grads.end());
      for (auto& hook : node->post_hooks) hook(input_grads, output_grads);
      input_grads.resize(node->next.size());
      check_input_grads(*node, input_grads, {inputs.data(), inputs.size()}, true);
    }
    for (size_t k = 0; k < node->next.size() && k < input_grads.size(); ++k) {
      const Tensor& g = input_grads[k];
      if (!g.defined()) continue;
      if (st_.anomaly) check_finite(g, *node);
      deliver(node->next[k], g);
    }
  }

  /// Frees the node's saved tensors unless a live level other than this
  /// pass's still needs them.
  void release(Node& node) const {
    bool other_live = false;
    for (uint8_t k = 0; k < node.levels.count; ++k) {
      uint64_t id = node.levels.ids[k];
      other_live = other_live || (id != req_.level && level_alive(id));
    }
    if (!other_live) node.release_saved();
  }

  /// Runs the ready hooks of sink `m` on its total, once per pass.
  void fire_ready(AutogradMeta* m) {
    const Tensor* total = nullptr;
    if (auto it = source_index_.find(m); it != source_index_.end()) {
      total = &results_[it->second];
    } else if (auto lt = leaf_grads_.find(m); lt != leaf_grads_.end()) {
      total = &lt->second;
    }
    if (total == nullptr || !total->defined() || !ready_fired_.insert(m).second) return;
    const GradReadyInfo info{.level = req_.level, .accumulates = req_.accumulate_leaves};
    for (size_t h = 0; h < m->ready_hooks.size(); ++h) {
      Tensor::GradReadyHook hook = m->ready_hooks[h];  // a copy: a hook may register more
      hook(*total, info);
    }
  }

  /// Step 4: the ready hooks of sinks reached without a node of the pass (a
  /// target that is itself a source or leaf) or registered during the pass;
  /// for backward(), the leaves' totals after their hooks and the retained
  /// intermediates' gradients go into grad() together once the whole pass
  /// ran — a pass that fails anywhere (a rule, a hook, a kernel, an
  /// allocation, the accumulation itself) leaves every grad() as it was.
  std::vector<Tensor> finish() {
    for (auto& [meta, g] : leaf_grads_) {
      if (!meta->ready_hooks.empty()) fire_ready(meta);
    }
    for (const auto& [meta, k] : source_index_) {
      if (!meta->ready_hooks.empty()) fire_ready(const_cast<AutogradMeta*>(meta));
    }
    if (req_.accumulate_leaves) {
      std::vector<std::pair<AutogradMeta*, Tensor>> into_grad;
      into_grad.reserve(leaf_grads_.size() + (req_.retained != nullptr ? req_.retained->size() : 0));
      for (auto& [meta, g] : leaf_grads_) {
        Tensor total = g;
        for (auto& hook : meta->hooks) {
          Tensor replaced = hook(total);
          if (replaced.defined()) total = checked_hook_gradient(replaced, total);
        }
        into_grad.emplace_back(meta, std::move(total));
      }
      if (req_.retained != nullptr) {
        for (auto& [meta, g] : *req_.retained) into_grad.emplace_back(meta.get(), g);
      }
      accumulate_grads(into_grad);
    }
    for (size_t k = 0; k < results_.size(); ++k) {
      if (!results_[k].defined() && req_.unconnected_zeros) results_[k] = zeros_like(req_.sources[k]);
    }
    return std::move(results_);
  }

  BackwardRequest& req_;
  AutogradState& st_;
  std::unordered_map<const AutogradMeta*, size_t> source_index_;
  std::vector<Tensor> results_;  // one per source
  PassScratch pass_;
  std::unordered_map<AutogradMeta*, int> ready_pending_;  // only sinks with ready hooks
  std::unordered_map<AutogradMeta*, Tensor> leaf_grads_;
  std::unordered_set<const AutogradMeta*> ready_fired_;
  std::priority_queue<std::pair<uint64_t, uint32_t>> ready_;  // (sequence, slot)
};

}  // namespace

std::vector<Tensor> run_backward(BackwardRequest& req) { return BackwardPass(req).run(); }

}  // namespace strata::detail
