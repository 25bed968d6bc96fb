// fusion.cpp — the fusion pass (strata::fuse, <strata/compile.hpp>): chains
// of elementwise ops in a traced Graph become fused_elementwise nodes whose
// program (<strata/plugin/fused_program.hpp>) computes the chain in one
// pass over memory.
//
// A region has one sink, its last op; it grows backwards from the sink,
// absorbing a producer of one of its operands when the producer is of the
// fused vocabulary, the region's dtype and shape, the region still reads at
// most kRegionInputs tensors, and the producer's value either is read only
// inside the region or can be one more output of the fused op (at most
// kRegionOutputs, and no reader outside leads back into the region: regions
// stay convex, so the fused graph has no cycle). Nodes are visited from
// last to first, so a sink is never absorbed later.
#include <algorithm>
#include <map>
#include <set>
#include <strata/compile.hpp>
#include <strata/error.hpp>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <vector>

#include "autograd/trace/trace_internal.hpp"
#include "ops/fused.hpp"
#include "runtime/dispatch/op.hpp"

namespace strata {

namespace {

namespace fp = strata::plugin::fused;

/// A region's tensor inputs and outputs: half the op's, so that the values
/// saved for the backward program (more outputs of the forward) and the
/// cotangents (more inputs of the backward) fit beside them.
constexpr int kRegionInputs = 4;
constexpr int kRegionOutputs = 3;
static_assert(2 * kRegionInputs <= fp::kMaxInputs && kRegionOutputs <= fp::kMaxOutputs);

struct ValueMeta {
  DType dtype = DType::f32;
  Shape shape;
  int producer = -1;  // node index, -1: an input or a constant
  const GraphConstant* constant = nullptr;
  std::vector<int> readers;  // node indices (once per reading node)
  bool output = false;       // a graph output
};

std::string node_label(const GraphNode& n) { return "node #" + std::to_string(n.id) + " (" + n.op + ")"; }

class Fuser {
 public:
  Fuser(const Graph& g, FusionReport& report, FuseOptions options) : g_(g), report_(report), options_(options) {}

  Graph run() {
    values();
    candidates();
    std::vector<int> region_of(g_.nodes.size(), -1);
    std::vector<std::vector<int>> regions;
    for (int s = static_cast<int>(g_.nodes.size()) - 1; s >= 0; --s) {
      if (!candidate_[static_cast<size_t>(s)] || region_of[static_cast<size_t>(s)] != -1) continue;
      std::vector<int> r = grow(s, region_of);
      for (int m : r) region_of[static_cast<size_t>(m)] = static_cast<int>(regions.size());
      regions.push_back(std::move(r));
    }
    Graph out = g_;
    out.nodes.clear();
    std::map<int, size_t> sink_to_region;
    for (size_t k = 0; k < regions.size(); ++k) {
      if (regions[k].size() > 1) sink_to_region[regions[k].back()] = k;
    }
    for (int k = 0; k < static_cast<int>(g_.nodes.size()); ++k) {
      const int r = region_of[static_cast<size_t>(k)];
      if (r < 0 || regions[static_cast<size_t>(r)].size() == 1) {
        out.nodes.push_back(g_.nodes[static_cast<size_t>(k)]);
        continue;
      }
      if (auto it = sink_to_region.find(k); it != sink_to_region.end()) {
        out.nodes.push_back(fused_node(regions[it->second]));
      }
    }
    prune_constants(out);
    order(out);
    renumber(out);
    std::sort(report_.regions.begin(), report_.regions.end(),
              [](const FusionRegion& a, const FusionRegion& b) { return a.node < b.node; });
    return out;
  }

 private:
  const ValueMeta& meta(int64_t v) const { return values_.at(static_cast<size_t>(v)); }

  void values() {
    int64_t count = static_cast<int64_t>(g_.input_dtypes.size());
    for (const GraphConstant& c : g_.constants) count = std::max(count, c.value + 1);
    for (const GraphNode& n : g_.nodes)
      for (int64_t v : n.outputs) count = std::max(count, v + 1);
    values_.resize(static_cast<size_t>(count));
    for (size_t k = 0; k < g_.input_dtypes.size(); ++k) {
      values_[k].dtype = g_.input_dtypes[k];
      values_[k].shape = g_.input_shapes[k];
    }
    for (const GraphConstant& c : g_.constants) {
      ValueMeta& m = values_[static_cast<size_t>(c.value)];
      m.dtype = c.dtype;
      m.shape = c.shape;
      m.constant = &c;
    }
    for (int k = 0; k < static_cast<int>(g_.nodes.size()); ++k) {
      const GraphNode& n = g_.nodes[static_cast<size_t>(k)];
      if (n.output_dtypes.size() != n.outputs.size() || n.output_shapes.size() != n.outputs.size()) {
        throw Error("fuse: " + node_label(n) +
                    " has no output dtypes or shapes (a graph from trace() or Graph::load has them)");
      }
      for (int64_t v : n.inputs) {
        std::vector<int>& r = values_.at(static_cast<size_t>(v)).readers;
        if (r.empty() || r.back() != k) r.push_back(k);
      }
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        ValueMeta& m = values_.at(static_cast<size_t>(n.outputs[i]));
        m.dtype = n.output_dtypes[i];
        m.shape = n.output_shapes[i];
        m.producer = k;
      }
    }
    for (int64_t v : g_.outputs) values_.at(static_cast<size_t>(v)).output = true;
  }

  /// A 0-d constant of `dtype`: a program constant, not an input.
  bool inline_constant(int64_t v, DType dtype) const {
    const ValueMeta& m = meta(v);
    return m.constant != nullptr && m.shape.empty() && m.dtype == dtype && m.constant->data.size() == 1;
  }

  void note(const GraphNode& n, std::string reason) {
    if (noted_.insert({n.id, reason}).second) report_.notes.push_back({n.id, n.op, std::move(reason)});
  }

  void candidates() {
    candidate_.assign(g_.nodes.size(), false);
    for (size_t k = 0; k < g_.nodes.size(); ++k) {
      const GraphNode& n = g_.nodes[k];
      fp::Op op = fp::Op::neg;
      if (!fp::op_named(n.op, op)) {
        const detail::OpDef* def = detail::find_op(n.op);
        if (def != nullptr && (def->tags & detail::op_tag::pointwise) != 0 && n.op != "fused_elementwise") {
          note(n, "pointwise, but not in the fused vocabulary");
        }
        continue;
      }
      if (!n.attrs.empty() || n.outputs.size() != 1 || n.inputs.size() != static_cast<size_t>(fp::arity(op))) continue;
      const DType t = n.output_dtypes.front();
      if (t != DType::f32 && t != DType::f64) {
        note(n, "its dtype is " + std::string(dtype_name(t)) + "; regions are f32 or f64");
        continue;
      }
      bool same = true, any_value = false;
      for (int64_t v : n.inputs) {
        if (inline_constant(v, t)) continue;
        any_value = true;
        if (meta(v).dtype != t) same = false;
      }
      if (!same) {
        note(n, "it mixes dtypes (its result is " + std::string(dtype_name(t)) + ")");
        continue;
      }
      candidate_[k] = any_value;
    }
  }

  /// The tensors region `r` (node indices) reads, in order of first use.
  std::vector<int64_t> region_inputs(const std::vector<int>& r, DType t) const {
    std::set<int64_t> defined;
    for (int m : r) defined.insert(g_.nodes[static_cast<size_t>(m)].outputs.front());
    std::vector<int64_t> in;
    for (int m : r) {
      for (int64_t v : g_.nodes[static_cast<size_t>(m)].inputs) {
        if (defined.count(v) == 0 && !inline_constant(v, t) && std::find(in.begin(), in.end(), v) == in.end()) {
          in.push_back(v);
        }
      }
    }
    return in;
  }

  static bool in(const std::vector<int>& r, int m) { return std::find(r.begin(), r.end(), m) != r.end(); }

  /// The readers of value `v` outside region `r`.
  std::vector<int> outside_readers(int64_t v, const std::vector<int>& r) const {
    std::vector<int> out;
    for (int reader : meta(v).readers)
      if (!in(r, reader)) out.push_back(reader);
    return out;
  }

  /// The values of region `r` besides its sink's that leave it (read
  /// outside, or outputs of the graph): its extra outputs, in node order.
  std::vector<int64_t> extras(const std::vector<int>& r) const {
    std::vector<int64_t> out;
    for (int m : r) {
      const int64_t v = g_.nodes[static_cast<size_t>(m)].outputs.front();
      if (m != r.back() && (meta(v).output || !outside_readers(v, r).empty())) out.push_back(v);
    }
    return out;
  }

  /// The nodes up to `limit` reachable from `from` (themselves included)
  /// through the values they define.
  std::vector<bool> downstream(const std::vector<int>& from, int limit) const {
    std::vector<bool> seen(g_.nodes.size(), false);
    std::vector<int> stack;
    for (int f : from)
      if (f <= limit) stack.push_back(f);
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(n)]) continue;
      seen[static_cast<size_t>(n)] = true;
      for (int64_t v : g_.nodes[static_cast<size_t>(n)].outputs) {
        for (int reader : meta(v).readers)
          if (reader <= limit && !seen[static_cast<size_t>(reader)]) stack.push_back(reader);
      }
    }
    return seen;
  }

  /// Why producer `p` of value `v` cannot join region `r` (sink's dtype
  /// `t`, shape `shape`); empty when it can.
  std::string refusal(int p, int64_t v, const std::vector<int>& r, DType t, const Shape& shape) const {
    if (g_.nodes[static_cast<size_t>(p)].no_grad != g_.nodes[static_cast<size_t>(r.back())].no_grad) {
      return g_.nodes[static_cast<size_t>(p)].no_grad ? "it ran with grad mode off, the region with it on"
                                                       : "it ran with grad mode on, the region with it off";
    }
    if (meta(v).dtype != t) return "its dtype differs from the region's " + std::string(dtype_name(t));
    if (meta(v).shape != shape) {
      return "its shape " + detail::shape_string(meta(v).shape) + " differs from the region's " +
             detail::shape_string(shape) + " (a broadcast value ends a region)";
    }
    const int sink = r.back();
    const std::vector<int64_t> leaving = extras(r);
    // A value read outside the region (or an output of the graph) becomes
    // one more output of the fused op: at most kRegionOutputs, and none of
    // its outside readers may lead back into the region (a cycle).
    const std::vector<int> outside = outside_readers(v, r);
    if (meta(v).output || !outside.empty()) {
      const std::string why =
          meta(v).output ? std::string("its value is an output of the graph")
                         : "its value is also read by " + node_label(g_.nodes[static_cast<size_t>(outside.front())]);
      if (leaving.size() + 2 > static_cast<size_t>(kRegionOutputs)) {
        return why + ", and a fused region has at most " + std::to_string(kRegionOutputs) + " outputs";
      }
      const std::vector<bool> down = downstream(outside, sink);
      for (int m : r) {
        if (down[static_cast<size_t>(m)]) {
          return why + ", which leads back into the region (" + node_label(g_.nodes[static_cast<size_t>(m)]) + ")";
        }
      }
    }
    // Nor may p itself lie downstream of a value already leaving the region.
    std::vector<int> readers_of_extras;
    for (int64_t x : leaving) {
      for (int q : outside_readers(x, r)) readers_of_extras.push_back(q);
    }
    if (downstream(readers_of_extras, sink)[static_cast<size_t>(p)]) {
      return "it reads, through other ops, a value that leaves the region";
    }
    std::vector<int> with(r);
    with.push_back(p);
    std::sort(with.begin(), with.end());
    if (const size_t k = region_inputs(with, t).size(); k > static_cast<size_t>(kRegionInputs)) {
      return "the region would read " + std::to_string(k) + " tensors; a fused region reads at most " +
             std::to_string(kRegionInputs);
    }
    return {};
  }

  /// The region whose sink is node `s`, node indices ascending.
  std::vector<int> grow(int s, const std::vector<int>& region_of) {
    const GraphNode& sink = g_.nodes[static_cast<size_t>(s)];
    const DType t = sink.output_dtypes.front();
    const Shape& shape = sink.output_shapes.front();
    std::vector<int> r{s};
    // Absorb until nothing more fits; then name, once, why each producer
    // at the border stayed out.
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < r.size() && !changed; ++i) {
        for (int64_t v : g_.nodes[static_cast<size_t>(r[i])].inputs) {
          const int p = meta(v).producer;
          if (p < 0 || !candidate_[static_cast<size_t>(p)] || region_of[static_cast<size_t>(p)] != -1 || in(r, p) ||
              !refusal(p, v, r, t, shape).empty()) {
            continue;
          }
          r.push_back(p);
          std::sort(r.begin(), r.end());
          changed = true;
          break;
        }
      }
    }
    for (int m : r) {
      for (int64_t v : g_.nodes[static_cast<size_t>(m)].inputs) {
        const int p = meta(v).producer;
        if (p < 0 || !candidate_[static_cast<size_t>(p)] || in(r, p)) continue;
        const std::string why = refusal(p, v, r, t, shape);
        if (!why.empty())
          note(g_.nodes[static_cast<size_t>(p)], "ends a region before " + node_label(sink) + ": " + why);
      }
    }
    return r;
  }

  GraphNode fused_node(const std::vector<int>& r) {
    const GraphNode& sink = g_.nodes[static_cast<size_t>(r.back())];
    const DType t = sink.output_dtypes.front();
    const std::vector<int64_t> in = region_inputs(r, t);
    fp::Program program;
    program.n_inputs = static_cast<int32_t>(in.size());
    std::map<int64_t, int32_t> index;
    for (size_t k = 0; k < in.size(); ++k) index[in[k]] = static_cast<int32_t>(k);
    FusionRegion region;
    region.node = sink.id;
    region.inputs = static_cast<int>(in.size());
    region.dtype = t;
    region.shape = sink.output_shapes.front();
    for (int m : r) {
      const GraphNode& n = g_.nodes[static_cast<size_t>(m)];
      fp::Op op = fp::Op::neg;
      fp::op_named(n.op, op);
      fp::Operand operands[2];
      for (size_t j = 0; j < n.inputs.size(); ++j) {
        const int64_t v = n.inputs[j];
        if (auto it = index.find(v); it != index.end()) {
          operands[j].value = it->second;
        } else {
          operands[j].constant = meta(v).constant->data.front();
        }
      }
      index[n.outputs.front()] = program.add(op, operands[0], operands[1]);
      region.nodes.push_back(n.id);
      region.ops.push_back(n.op);
    }
    // The sink's value first, then the values read outside the region.
    GraphNode f;
    f.id = sink.id;
    f.op = "fused_elementwise";
    f.no_grad = sink.no_grad;
    f.inputs = in;
    program.outputs = {program.n_values() - 1};
    f.outputs = sink.outputs;
    for (int64_t v : extras(r)) {
      program.outputs.push_back(index.at(v));
      f.outputs.push_back(v);
    }
    if (options_.save_for_backward && !sink.no_grad) {  // a no-grad region's replay is not recorded
      // A saved value keeps the graph value id of the op that made it (an
      // inner value, gone from the graph otherwise).
      std::map<int32_t, int64_t> value_of;
      for (const auto& [graph_value, program_value] : index) value_of[program_value] = graph_value;
      for (int32_t v : detail::fused_saved_values(program, fp::kMaxOutputs)) {
        program.outputs.push_back(v);
        f.outputs.push_back(value_of.at(v));
        ++region.saved;
      }
    }
    f.output_shapes.assign(f.outputs.size(), sink.output_shapes.front());
    f.output_dtypes.assign(f.outputs.size(), t);
    region.outputs = static_cast<int>(f.outputs.size());
    region.program = program.text();
    GraphAttr a;
    a.name = "program";
    a.kind = GraphAttr::Kind::text;
    a.text = region.program;
    f.attrs.push_back(std::move(a));
    report_.regions.push_back(std::move(region));
    return f;
  }

  /// Puts every node after the nodes that define its inputs, keeping the
  /// trace's order where it can: a fused node stands where its sink stood,
  /// and a reader of one of its extra outputs may have come before that.
  static void order(Graph& out) {
    std::set<int64_t> defined;
    for (int64_t k = 0; k < static_cast<int64_t>(out.input_dtypes.size()); ++k) defined.insert(k);
    for (const GraphConstant& c : out.constants) defined.insert(c.value);
    std::vector<GraphNode> pending = std::move(out.nodes), sorted;
    while (!pending.empty()) {
      auto ready = std::find_if(pending.begin(), pending.end(), [&defined](const GraphNode& n) {
        return std::all_of(n.inputs.begin(), n.inputs.end(), [&defined](int64_t v) { return defined.count(v) != 0; });
      });
      if (ready == pending.end()) throw Error("fuse: internal: the fused graph has a cycle");
      defined.insert(ready->outputs.begin(), ready->outputs.end());
      sorted.push_back(std::move(*ready));
      pending.erase(ready);
    }
    out.nodes = std::move(sorted);
  }

  /// Drops the constants no node or output reads any more.
  static void prune_constants(Graph& out) {
    std::set<int64_t> read(out.outputs.begin(), out.outputs.end());
    for (const GraphNode& n : out.nodes) read.insert(n.inputs.begin(), n.inputs.end());
    std::erase_if(out.constants, [&read](const GraphConstant& c) { return read.count(c.value) == 0; });
  }

  /// Value ids dense again (a fused region's inner values are gone), in
  /// the order they were defined, as a graph file requires.
  static void renumber(Graph& out) {
    std::vector<int64_t> defined;
    for (const GraphConstant& c : out.constants) defined.push_back(c.value);
    for (const GraphNode& n : out.nodes) defined.insert(defined.end(), n.outputs.begin(), n.outputs.end());
    std::sort(defined.begin(), defined.end());
    std::map<int64_t, int64_t> to;
    const int64_t n_inputs = static_cast<int64_t>(out.input_dtypes.size());
    for (int64_t k = 0; k < n_inputs; ++k) to[k] = k;
    for (int64_t v : defined) to.emplace(v, static_cast<int64_t>(to.size()));
    auto at = [&to](int64_t& v) { v = to.at(v); };
    for (GraphConstant& c : out.constants) at(c.value);
    for (GraphNode& n : out.nodes) {
      for (int64_t& v : n.inputs) at(v);
      for (int64_t& v : n.outputs) at(v);
    }
    for (int64_t& v : out.outputs) at(v);
  }

  const Graph& g_;
  FusionReport& report_;
  FuseOptions options_;
  std::vector<ValueMeta> values_;
  std::vector<bool> candidate_;
  std::set<std::pair<uint64_t, std::string>> noted_;
};

}  // namespace

Graph fuse(const Graph& g, FusionReport* report, FuseOptions options) {
  if (!g.traced) throw Error("fuse: only graphs made by trace() (or loaded) can be fused");
  FusionReport local;
  FusionReport& r = report != nullptr ? *report : local;
  r = FusionReport{};
  return Fuser(g, r, options).run();
}

std::string FusionReport::text() const {
  std::string s;
  for (const FusionRegion& r : regions) {
    s += "region at node #" + std::to_string(r.node) + ": " + std::to_string(r.ops.size()) + " ops (";
    for (size_t k = 0; k < r.ops.size(); ++k) s += (k == 0 ? "" : " ") + r.ops[k];
    s += "), " + std::to_string(r.inputs) + (r.inputs == 1 ? " input, " : " inputs, ") +
         (r.outputs == 1 ? "" : std::to_string(r.outputs) + " outputs, ") +
         (r.saved == 0 ? "" : std::to_string(r.saved) + " saved for the backward pass, ") +
         std::string(dtype_name(r.dtype)) + detail::shape_string(r.shape) + "\n";
  }
  for (const FusionNote& n : notes) s += "node #" + std::to_string(n.node) + " (" + n.op + "): " + n.reason + "\n";
  if (regions.empty() && notes.empty()) s += "no elementwise chain to fuse\n";
  return s;
}

}  // namespace strata
