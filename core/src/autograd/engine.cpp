// engine.cpp — reverse-mode differentiation over the recorded graph.
//
// The pass finds the nodes of the requested level reachable from the
// targets, prunes those that cannot reach a source (or, for backward(), a
// leaf that requires grad), and runs each node's VJP rule once every node
// that feeds it has run (Kahn's order, latest-created first). Every walk is
// iterative so that a million-op chain needs no deep stack.
#include "engine.hpp"

#include "../tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <mutex>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace strata::detail {

namespace {

std::mutex& alive_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<uint64_t>& alive_levels() {
  static auto* s = new std::unordered_set<uint64_t>();
  return *s;
}

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
  if (s.data.impl()->storage->version.load(std::memory_order_relaxed) != s.version) {
    throw Error("a tensor saved for the backward of op '" + std::string(node->op->name) + "' (" +
                std::string(dtype_name(s.data.dtype())) + shape_string(s.data.shape()) +
                ") was modified in place after it was saved (version " + std::to_string(s.version) + " -> " +
                std::to_string(s.data.impl()->storage->version.load()) + "); clone it before modifying");
  }
  if (!s.is_output || (!differentiable && s.tangents.empty())) return s.data;
  // Re-link a saved output to its node so that rules using it stay
  // differentiable (higher order) — only for the duration of the pass —
  // and give it back its forward-mode tangents.
  Tensor alias = make_view(s.data, s.data.shape(), s.data.strides(), s.data.offset());
  if (!s.tangents.empty()) meta_of(alias).tangents = s.tangents;
  if (differentiable && is_floating(alias.dtype())) {
    AutogradMeta& m = meta_of(alias);
    m.grad_fn = node;
    m.output_nr = s.output_nr;
    m.levels = node->levels;
  }
  return alias;
}

void check_finite(const Tensor& g, const Node& node) {
  if (!g.defined() || !is_floating(g.dtype())) return;
  for (double v : g.to_vector<double>()) {
    if (!std::isfinite(v)) {
      throw Error("anomaly: the backward of op '" + std::string(node.op->name) + "' produced a non-finite gradient (" +
                  std::to_string(v) + ")");
    }
  }
}

}  // namespace

bool level_alive(uint64_t id) {
  if (id == 0) return true;
  std::lock_guard lock(alive_mutex());
  return alive_levels().count(id) != 0;
}

void set_level_alive(uint64_t id, bool alive) {
  std::lock_guard lock(alive_mutex());
  if (alive) {
    alive_levels().insert(id);
  } else {
    alive_levels().erase(id);
  }
}

std::vector<Tensor> run_backward(const BackwardRequest& req) {
  AutogradState& st = autograd_state();
  StateGuard guard(st);
  if (req.create_graph) {
    if (req.level != 0) st.recording.remove(req.level);  // a tape does not record its own gradient
  } else {
    st.grad_enabled = false;
  }

  std::unordered_map<const AutogradMeta*, size_t> source_index;
  for (size_t k = 0; k < req.sources.size(); ++k) {
    if (const AutogradMeta* m = meta_if(req.sources[k])) source_index.emplace(m, k);
  }
  std::vector<Tensor> results(req.sources.size());

  auto in_level = [&](const std::shared_ptr<Node>& n) { return n != nullptr && n->levels.contains(req.level); };

  // 1. Reachable nodes and, in post-order, whether each can reach a sink.
  std::unordered_map<Node*, bool> needed;  // node -> reaches a source/leaf
  std::unordered_map<Node*, int> deps;
  std::vector<std::shared_ptr<Node>> order;  // post-order
  // Whether a gradient along `e` is used: it reaches a source, a leaf that
  // accumulates, or a node that leads to one.
  auto edge_needed = [&](const Edge& e) {
    if (e.leaf != nullptr && source_index.count(e.leaf.get()) != 0) return true;
    if (req.accumulate_leaves && e.leaf != nullptr && e.leaf->requires_grad && e.leaf->grad_fn == nullptr) return true;
    return in_level(e.node) && needed[e.node.get()];
  };

  {
    std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack;
    std::unordered_set<Node*> visited;
    for (const Tensor& r : req.roots) {
      const AutogradMeta* m = meta_if(r);
      if (m != nullptr && in_level(m->grad_fn) && visited.insert(m->grad_fn.get()).second) {
        stack.emplace_back(m->grad_fn, 0);
      }
    }
    while (!stack.empty()) {
      auto& [node, next_edge] = stack.back();
      if (next_edge < node->next.size()) {
        const Edge& e = node->next[next_edge++];
        if (in_level(e.node)) {
          ++deps[e.node.get()];
          if (visited.insert(e.node.get()).second) stack.emplace_back(e.node, 0);
        }
        continue;
      }
      bool reaches = false;
      for (const Edge& e : node->next) reaches = reaches || edge_needed(e);
      needed[node.get()] = reaches;
      order.push_back(node);
      stack.pop_back();
    }
  }

  // 2. Seed the targets.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<AutogradMeta*, Tensor> leaf_grads;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    if (e.leaf != nullptr) {
      if (auto it = source_index.find(e.leaf.get()); it != source_index.end()) {
        results[it->second] = accumulate(results[it->second], g);
      }
      if (req.accumulate_leaves && e.leaf->requires_grad && e.leaf->grad_fn == nullptr) {
        leaf_grads[e.leaf.get()] = accumulate(leaf_grads[e.leaf.get()], g);
      }
    }
    if (in_level(e.node) && needed[e.node.get()]) {
      auto& buf = buffers[e.node.get()];
      buf.resize(e.node->n_outputs);
      buf[static_cast<size_t>(e.output_nr)] = accumulate(buf[static_cast<size_t>(e.output_nr)], g);
    }
  };
  for (size_t k = 0; k < req.roots.size(); ++k) {
    const auto& m = req.roots[k].impl()->autograd;
    Edge e;
    if (m) {
      e.leaf = m;
      e.node = m->grad_fn;
      e.output_nr = m->output_nr;
    }
    deliver(e, req.root_grads[k]);
  }

  // 3. Kahn's order over needed nodes, latest first.
  auto later = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) { return a->sequence < b->sequence; };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later)> ready(later);
  std::set<Node*> queued;
  for (const Tensor& r : req.roots) {
    const AutogradMeta* m = meta_if(r);
    if (m != nullptr && in_level(m->grad_fn) && deps[m->grad_fn.get()] == 0 && queued.insert(m->grad_fn.get()).second) {
      ready.push(m->grad_fn);
    }
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    grads.resize(node->n_outputs);
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    if (any && needed[node.get()]) {
      if (node->released) {
        throw Error("backward through a graph that was already freed (op '" + std::string(node->op->name) +
                    "'): use a persistent tape, or backward(retain_graph = true) the first time");
      }
      for (auto& hook : node->hooks) hook(grads);
      std::vector<Tensor> inputs;
      std::vector<Tensor> outputs;
      for (const SavedTensor& s : node->inputs) inputs.push_back(unpack(s, node, req.create_graph));
      for (const SavedTensor& s : node->outputs) outputs.push_back(unpack(s, node, req.create_graph));
      std::vector<uint8_t> needs(node->next.size());
      for (size_t k = 0; k < needs.size(); ++k) needs[k] = edge_needed(node->next[k]) ? 1 : 0;
      GradContext ctx{inputs, outputs, grads, &node->attrs, needs, node->closure.get()};
      std::vector<Tensor> input_grads;
      try {
        input_grads = node->op->vjp(ctx);
      } catch (const Error& e) {
        // An anomaly check on an op inside the rule: name the op it differentiates.
        std::string what = e.what();
        if (!st.anomaly || what.rfind("anomaly: ", 0) != 0) throw;
        throw Error("anomaly: in the backward of op '" + std::string(node->op->name) + "' (node #" +
                    std::to_string(node->sequence) + "): " + what.substr(9));
      }
      for (size_t k = 0; k < node->next.size() && k < input_grads.size(); ++k) {
        const Tensor& g = input_grads[k];
        if (!g.defined()) continue;
        if (st.anomaly) check_finite(g, *node);
        if (g.sizes() != inputs[k].sizes()) {
          throw Error("internal: the VJP of '" + std::string(node->op->name) + "' returned shape " +
                      shape_string(g.shape()) + " for an input of shape " + shape_string(inputs[k].shape()));
        }
        deliver(node->next[k], g);
      }
    }
    if (req.release) {
      bool other_live = false;
      for (uint8_t k = 0; k < node->levels.count; ++k) {
        uint64_t id = node->levels.ids[k];
        other_live = other_live || (id != req.level && level_alive(id));
      }
      if (!other_live) node->release_saved();
    }
    for (const Edge& e : node->next) {
      if (!in_level(e.node)) continue;
      if (--deps[e.node.get()] == 0 && queued.insert(e.node.get()).second) ready.push(e.node);
    }
  }

  for (auto& [meta, g] : leaf_grads) {
    Tensor total = g;
    for (auto& hook : meta->hooks) {
      Tensor replaced = hook(total);
      if (replaced.defined()) total = replaced;
    }
    meta->grad = meta->grad.defined() ? add(meta->grad, total) : total;
  }
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k].defined() && req.unconnected_zeros) results[k] = zeros_like(req.sources[k]);
  }
  return results;
}

}  // namespace strata::detail
