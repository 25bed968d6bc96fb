// batching.cpp — how an op call with batched operands runs (batching.hpp):
// the driver dispatch sends such calls to, the rules the op families share,
// the loop over lanes where no rule applies (counted), and random draws
// inside vmap.
#include "ops/batching.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <strata/error.hpp>
#include <strata/ops.hpp>

#include "runtime/dispatch/dispatch_hooks.hpp"
#include "runtime/dispatch/dispatch_internal.hpp"

namespace strata::detail {

// --- batched tensors ------------------------------------------------------------

Tensor lanes_first(const Tensor& t, uint64_t level) {
  if (Tensor lanes = lanes_of(t, level); lanes.defined()) return lanes;
  const VmapFrame* frame = find_vmap_frame(level);
  if (frame == nullptr) throw Error("internal: lanes_first for a vmap that is not running");
  Shape shape = t.sizes();
  shape.insert(shape.begin(), frame->lanes);
  return t.unsqueeze(0).expand(shape);
}

Tensor batched_view(const Tensor& base, uint64_t level, const std::function<Tensor(const Tensor&)>& on_lanes) {
  Tensor lanes;
  in_lanes_scope(level, [&] { lanes = on_lanes(lanes_of(base, level)); });
  return make_batched(lanes, level);
}

// --- BatchCall ------------------------------------------------------------------

Tensor BatchCall::lanes_first(int k) const {
  const Tensor& t = input[static_cast<size_t>(k)];
  return batched[static_cast<size_t>(k)] ? t : detail::lanes_first(t, level);
}

Tensor BatchCall::aligned(int k, int64_t rank) const {
  const Tensor& t = input[static_cast<size_t>(k)];
  const bool b = batched[static_cast<size_t>(k)];
  const int64_t own = t.dim() - (b ? 1 : 0);
  if (own >= rank && b) return t;
  Shape shape = t.sizes();
  if (!b) shape.insert(shape.begin(), 1);
  shape.insert(shape.begin() + 1, static_cast<size_t>(std::max<int64_t>(rank - own, 0)), 1);
  return t.reshape(shape);
}

OpResult BatchCall::run(const OpDef& target, std::span<const Tensor> inputs, const Attrs* attrs) const {
  OpCall lanes_call;
  lanes_call.op = &target;
  lanes_call.attrs = attrs;
  lanes_call.n_outputs = target.n_outputs;
  lanes_call.n_inputs = static_cast<int>(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) lanes_call.inputs[k] = inputs[k];
  lanes_call.preset = preset;
  lanes_call.device = call.device;
  check_same_device(lanes_call);
  return dispatch_call(lanes_call);
}

Attrs BatchCall::shifted_dim(std::string_view name, int64_t rank) const {
  Attrs attrs = call.attrs != nullptr ? *call.attrs : Attrs{};
  for (Attr& a : attrs) {
    if (a.name != name) continue;
    if (a.kind == STRATA_ATTR_INTS) {
      for (int64_t& d : a.ints) d = normalize_dim(d, rank, call.op->name) + 1;
    } else {
      a.i = normalize_dim(a.i, rank, call.op->name) + 1;
    }
  }
  return attrs;
}

// --- the rules the families share --------------------------------------------------

namespace {

/// Each input as `each` makes it (undefined stays undefined), without a
/// heap allocation: the lanes' operands of one call.
struct LaneInputs {
  std::array<Tensor, kMaxInputs> tensors{};
  size_t count = 0;
  operator std::span<const Tensor>() const { return {tensors.data(), count}; }
};
LaneInputs inputs_of(const BatchCall& c, Tensor (BatchCall::*each)(int) const) {
  LaneInputs out;
  out.count = static_cast<size_t>(c.n_inputs());
  for (int k = 0; k < c.n_inputs(); ++k) {
    if (c.input[static_cast<size_t>(k)].defined()) out.tensors[static_cast<size_t>(k)] = (c.*each)(k);
  }
  return out;
}

/// Once per lane, stacked: the rule of last resort, and of the shapes a
/// family's rule cannot express (a rank-0 operand along a dim).
OpResult loop_over_lanes(const BatchCall& c, const std::string& reason);

}  // namespace

OpResult batch_pointwise(const BatchCall& c) {
  // Broadcasting ops broadcast an unbatched operand against the lanes;
  // the others take operands of one shape: the operand is expanded.
  if ((c.op().tags & op_tag::broadcasting) == 0)
    return c.run(c.op(), inputs_of(c, &BatchCall::lanes_first), c.call.attrs);
  int64_t rank = c.call.outputs[0].rank;
  for (int k = 0; k < c.n_inputs(); ++k) rank = std::max<int64_t>(rank, c.call.in(k).dim());
  LaneInputs inputs;
  inputs.count = static_cast<size_t>(c.n_inputs());
  for (int k = 0; k < c.n_inputs(); ++k) {
    if (c.input[static_cast<size_t>(k)].defined()) inputs.tensors[static_cast<size_t>(k)] = c.aligned(k, rank);
  }
  return c.run(c.op(), inputs, c.call.attrs);
}

OpResult batch_reduction(const BatchCall& c) {
  Attrs attrs = c.shifted_dim("dims", c.call.in(0).dim());
  const LaneInputs inputs = inputs_of(c, &BatchCall::lanes_first);
  return c.run(c.op(), inputs, &attrs);
}

OpResult batch_along_dim(const BatchCall& c) {
  const int64_t rank = c.call.in(0).dim();
  if (rank == 0) return loop_over_lanes(c, "a rank-0 operand along a dim");
  Attrs attrs = c.shifted_dim("dim", rank);
  const LaneInputs inputs = inputs_of(c, &BatchCall::lanes_first);
  return c.run(c.op(), inputs, &attrs);
}

OpResult batch_leading_dims(const BatchCall& c) {
  return c.run(c.op(), inputs_of(c, &BatchCall::lanes_first), c.call.attrs);
}

// --- the loop, counted -------------------------------------------------------------

namespace {

struct FallbackTable {
  std::mutex mutex;
  std::map<std::pair<std::string, std::string>, VmapFallback> entries;
};
FallbackTable& fallbacks() {
  static auto* table = new FallbackTable;  // outlives static teardown
  return *table;
}

void count_fallback(const OpDef& op, const std::string& reason, int64_t lanes) {
  FallbackTable& t = fallbacks();
  std::lock_guard lock(t.mutex);
  VmapFallback& e = t.entries[{std::string(op.kernel_name), reason}];
  e.op = std::string(op.kernel_name);
  e.reason = reason;
  ++e.calls;
  e.lanes += static_cast<uint64_t>(lanes);
}

OpResult loop_over_lanes(const BatchCall& c, const std::string& reason) {
  for (int k = 0; k < c.call.n_outputs; ++k) {
    if (c.preset[static_cast<size_t>(k)].defined()) {
      throw ValueError(c.call.describe() + ": writes its output in place and has no batching rule (" + reason +
                       "), so vmap cannot run it");
    }
  }
  const VmapFrame* frame = find_vmap_frame(c.level);
  if (frame != nullptr && frame->options.strict) {
    throw ValueError(c.call.describe() + ": no batching rule applies (" + reason +
                     "), and this vmap is strict (VmapOptions::strict); without it the op runs once per lane");
  }
  count_fallback(c.op(), reason, c.lanes);
  std::vector<std::vector<Tensor>> outputs(static_cast<size_t>(c.call.n_outputs));
  for (int64_t lane = 0; lane < c.lanes; ++lane) {
    std::vector<Tensor> inputs;
    for (int k = 0; k < c.n_inputs(); ++k) {
      const Tensor& t = c.input[static_cast<size_t>(k)];
      inputs.push_back(c.batched[static_cast<size_t>(k)] ? t.select(0, lane) : t);
    }
    OpResult r = dispatch_span(c.op(), inputs, c.call.attrs);
    for (int k = 0; k < r.size(); ++k) outputs[static_cast<size_t>(k)].push_back(r[k]);
  }
  OpResult result;
  for (auto& lane_outputs : outputs) result.push_back(stack(lane_outputs, 0));
  return result;
}

/// A plugin op with its own batching rule (ABI 2.6); declined: its
/// declared property, else the loop.
OpResult batch_by_plugin_rule(const BatchCall& c) {
  std::vector<Tensor> inputs;
  std::array<uint8_t, kMaxInputs> batched{};
  for (int k = 0; k < c.n_inputs(); ++k) {
    inputs.push_back(c.input[static_cast<size_t>(k)]);
    batched[static_cast<size_t>(k)] = c.batched[static_cast<size_t>(k)] ? 1 : 0;
  }
  std::vector<Tensor> out =
      c.op().plugin_batch(c.op(), inputs, std::span(batched).first(inputs.size()), c.lanes, c.call.attrs);
  if (out.empty()) {
    if (c.op().batch_leading_dims) return batch_leading_dims(c);
    return loop_over_lanes(c, "batching rule declined");
  }
  OpResult result;
  for (size_t k = 0; k < out.size(); ++k) {
    if (Tensor preset = c.preset[k]; preset.defined()) {
      preset.copy_(out[k]);
      result.push_back(preset);
    } else {
      result.push_back(out[k]);
    }
  }
  return result;
}

BatchRule derived_rule(const OpDef& op) {
  if (op.batch != nullptr) return op.batch;
  if (op.plugin_batch != nullptr) return batch_by_plugin_rule;
  if (op.batch_leading_dims) return batch_leading_dims;
  if ((op.tags & op_tag::pointwise) != 0) return batch_pointwise;
  if ((op.tags & op_tag::reduction) != 0) return batch_reduction;
  if ((op.tags & op_tag::along_dim) != 0 && op.kind != OpKind::join) return batch_along_dim;
  return nullptr;
}

}  // namespace

// --- the driver ----------------------------------------------------------------------

namespace {

[[noreturn]] void refuse_escaped(const OpCall& call) {
  throw ValueError(call.describe() +
                   ": an operand is a batched tensor of a vmap that has returned (kept past "
                   "its function, e.g. in a captured variable); return batched values from the vmapped function "
                   "instead");
}

/// An in-place call's unbatched target (output k) taking batched values:
/// refused, or under VmapOptions::batch_inplace_targets, made batched in
/// place (its values copied into every lane; the TensorImpl re-pointed at
/// the lanes, so every handle to it sees the batched tensor). Returns the
/// lanes.
Tensor batch_inplace_target(const OpCall& call, int k, uint64_t level, int64_t lanes) {
  const Tensor& p = call.preset[static_cast<size_t>(k)];
  const std::string where = call.describe() + ": writes in place into an unbatched tensor (output " +
                            std::to_string(k) + ", " + type_string(p) + ") values that differ per lane";
  const VmapFrame* frame = find_vmap_frame(level);
  if (frame == nullptr || !frame->options.batch_inplace_targets) {
    throw ValueError(where +
                     "; write into a batched tensor, make the target batched first (e.g. target = target + "
                     "zeros_like(value)), or set VmapOptions::batch_inplace_targets to have vmap do that for "
                     "a tensor the function made");
  }
  TensorImpl& impl = *p.impl();
  std::string refused;
  if (impl.storage->serial < frame->first_serial) {
    refused =
        "the target was made before the vmap (the function closed over it), and its lanes would "
        "not survive the vmap";
  } else if (impl.storage.use_count() > 1) {
    refused =
        "the target shares its storage with another tensor (it is a view, or has views); make "
        "the base batched before taking views of it";
  } else if (impl.autograd != nullptr) {
    refused = "the target has autograd state (it is watched, requires grad or has a history)";
  }
  if (!refused.empty()) {
    throw ValueError(where + "; VmapOptions::batch_inplace_targets is set, but " + refused);
  }
  Shape shape = p.sizes();
  shape.insert(shape.begin(), lanes);
  Tensor physical = p.unsqueeze(0).expand(shape).clone();  // contiguous, its own storage
  Tensor batched = make_batched(physical, level);
  const TensorImpl& b = *batched.impl();
  impl.storage = b.storage;
  impl.offset = b.offset;
  impl.strides = b.strides;
  impl.batch = b.batch;
  return physical;
}

/// The lanes of a call's operands at `level`.
BatchCall lanes_of_call(const OpCall& call, uint64_t level, int64_t lanes) {
  BatchCall c{call, level, lanes};
  for (int k = 0; k < call.n_inputs; ++k) {
    const Tensor& t = call.in(k);
    Tensor l = lanes_of(t, level);
    c.batched[static_cast<size_t>(k)] = l.defined();
    c.input[static_cast<size_t>(k)] = l.defined() ? l : t;
  }
  for (int k = 0; k < call.n_outputs; ++k) {
    const Tensor& p = call.preset[static_cast<size_t>(k)];
    if (!p.defined()) continue;
    Tensor l = lanes_of(p, level);
    if (!l.defined()) l = batch_inplace_target(call, k, level, lanes);
    c.preset[static_cast<size_t>(k)] = l;
  }
  return c;
}

/// The outputs a rule returned, checked against the shape rule's, batched.
OpResult batched_outputs(const OpCall& call, const OpResult& lanes, uint64_t level, int64_t n) {
  if (lanes.size() != call.n_outputs) {
    throw Error("internal: the batching rule of " + std::string(call.op->name) + " returned " +
                std::to_string(lanes.size()) + " outputs for " + std::to_string(call.n_outputs));
  }
  OpResult out;
  for (int k = 0; k < lanes.size(); ++k) {
    const Tensor& l = lanes.tensors[static_cast<size_t>(k)];
    const OutputMeta& want = call.outputs[static_cast<size_t>(k)];
    const auto got = l.shape();
    const bool fits = l.dtype() == want.dtype && got.size() == want.sizes().size() + 1 && !got.empty() && got[0] == n &&
                      std::ranges::equal(got.subspan(1), want.sizes());
    if (!fits) [[unlikely]] {
      Shape expected(want.sizes().begin(), want.sizes().end());
      expected.insert(expected.begin(), n);
      const std::string misfit = "the batching rule of " + call.describe() + " gave output " + std::to_string(k) +
                                 " as " + type_string(l) + " for " + std::to_string(n) + " lanes, expected " +
                                 std::string(dtype_name(want.dtype)) + shape_string(expected);
      // A plugin's rule (ABI 2.6) is the plugin's fault; any other is ours.
      if (call.op->plugin_batch != nullptr) {
        throw ShapeError(misfit +
                         " (each lane's output stacked along a new dim 0; plugin rule, strata_op_schema::batch)");
      }
      throw Error("internal: " + misfit);
    }
    const Tensor& preset = call.preset[static_cast<size_t>(k)];
    out.push_back(preset.defined() ? preset : make_batched(l, level));
  }
  return out;
}

OpResult dispatch_batched(OpCall& call, uint64_t level) {
  const VmapFrame* frame = find_vmap_frame(level);
  if (frame == nullptr) refuse_escaped(call);
  const int64_t n = frame->lanes;
  const DispatchHooks& hooks = dispatch_hooks();
  // The shape rule sees one lane (its casts and expands batch themselves).
  prepare_dispatch(call, hooks);
  const BatchRule rule = derived_rule(*call.op);
  OpResult lanes;
  if (rule != nullptr) {
    BatchCall c = lanes_of_call(call, level, n);
    in_lanes_scope(level, [&] { lanes = rule(c); });
  }
  if (lanes.size() == 0 && call.op->decompose != nullptr) {
    // No rule (or the rule declined these operands): the decomposition's
    // ops, each batched and recorded on its own.
    std::vector<Tensor> parts = call.op->decompose(call);
    OpResult result;
    for (size_t k = 0; k < parts.size(); ++k) {
      Tensor preset = call.preset[k];
      if (preset.defined()) {
        preset.copy_(parts[k]);
        result.push_back(preset);
      } else {
        result.push_back(parts[k]);
      }
    }
    finish_dispatch(call, result, true, hooks);
    return result;
  }
  if (lanes.size() == 0) {
    BatchCall c = lanes_of_call(call, level, n);
    in_lanes_scope(level, [&] { lanes = loop_over_lanes(c, "no batching rule"); });
  }
  OpResult result = batched_outputs(call, lanes, level, n);
  finish_dispatch(call, result, false, hooks);
  return result;
}

const bool kRegistered = [] {
  set_batched_dispatch(dispatch_batched);
  return true;
}();

}  // namespace

// --- random draws inside vmap ----------------------------------------------------------

namespace {
Tensor draw_at(std::string_view op, std::span<const int64_t> shape,
               const std::function<Tensor(std::span<const int64_t>)>& draw, size_t depth) {
  if (depth == 0) return draw(shape);
  const VmapFrame frame = vmap_frames()[depth - 1];
  switch (frame.options.randomness) {
    case Randomness::same:
      return draw_at(op, shape, draw, depth - 1);
    case Randomness::different: {
      Shape lanes(shape.begin(), shape.end());
      lanes.insert(lanes.begin(), frame.lanes);
      return make_batched(draw_at(op, lanes, draw, depth - 1), frame.level);
    }
    case Randomness::error:
      break;
  }
  throw ValueError(std::string(op) + ": a random draw inside vmap, whose randomness is 'error' (the default); " +
                   "pass VmapOptions{.randomness = Randomness::different} for each lane its own numbers, or " +
                   "Randomness::same for one draw every lane shares");
}
}  // namespace

Tensor draw_in_vmap(std::string_view op, std::span<const int64_t> shape,
                    const std::function<Tensor(std::span<const int64_t>)>& draw) {
  return draw_at(op, shape, draw, vmap_frames().size());
}

}  // namespace strata::detail

namespace strata {

const char* randomness_name(Randomness randomness) {
  switch (randomness) {
    case Randomness::error:
      return "error";
    case Randomness::different:
      return "different";
    case Randomness::same:
      return "same";
  }
  return "?";
}

bool is_batched(const Tensor& t) { return detail::batch_level(t) != 0; }

std::vector<VmapFallback> vmap_fallback_stats() {
  auto& t = detail::fallbacks();
  std::lock_guard lock(t.mutex);
  std::vector<VmapFallback> out;
  for (const auto& [key, e] : t.entries) out.push_back(e);
  return out;
}

void reset_vmap_fallback_stats() {
  auto& t = detail::fallbacks();
  std::lock_guard lock(t.mutex);
  t.entries.clear();
}

}  // namespace strata
