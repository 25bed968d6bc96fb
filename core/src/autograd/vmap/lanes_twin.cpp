// lanes_twin.cpp — the autograd layer's own nodes (custom functions,
// checkpoints) under vmap, for the levels opened outside it.
//
// Such a node is recorded on the batched tensors its function returned, for
// the levels opened inside the vmap: its rules run on batched tensors, which
// batch op by op. Its function ran with recording off, so the levels opened
// before the vmap (a tape around it: grad of vmap) would see nothing. For
// them this records a twin on the lanes (the physical tensors), whose rules
// wrap the lanes as batched tensors of a fresh vmap, run the original rules
// there, and unwrap: an input every lane shares gets the sum over the lanes.
#include "autograd/vmap/lanes_twin.hpp"

#include <algorithm>
#include <memory>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <vector>

#include "autograd/engine/nodes.hpp"

namespace strata::detail {

namespace {

struct LanesTwin {
  const OpDef* op = nullptr;
  std::shared_ptr<const void> closure;
  int64_t lanes = 0;
  std::vector<uint8_t> batched_inputs;
};

Tensor wrap(const Tensor& lanes, bool batched, uint64_t level) {
  return lanes.defined() && batched ? make_batched(lanes, level) : lanes;
}

/// A rule's result for an input or output, back on the lanes: a batched
/// result's lanes; a result shared by the lanes repeated over them; for an
/// input every lane shares, the sum over the lanes.
Tensor unwrap(const Tensor& r, bool batched, uint64_t level, int64_t lanes) {
  if (!r.defined()) return r;
  if (Tensor l = lanes_of(r, level); l.defined()) return batched ? l : sum(l, {0});
  if (!batched) return r * static_cast<double>(lanes);
  Shape shape = r.sizes();
  shape.insert(shape.begin(), lanes);
  return r.unsqueeze(0).expand(shape);
}

std::vector<Tensor> twin_vjp(const GradContext& c) {
  const auto& twin = *static_cast<const LanesTwin*>(c.closure);
  // A fresh vmap level on this thread while the original rule runs.
  const uint64_t w = new_level_id();
  VmapFrameScope frame({w, twin.lanes, {}});
  std::vector<Tensor> inputs, outputs, grads;
  for (size_t k = 0; k < c.inputs.size(); ++k) inputs.push_back(wrap(c.inputs[k], twin.batched_inputs[k] != 0, w));
  for (const Tensor& o : c.outputs) outputs.push_back(wrap(o, true, w));
  for (const Tensor& g : c.grads) grads.push_back(wrap(g, true, w));
  GradContext inner{inputs, outputs, grads, c.attrs, c.needed, twin.closure.get(), twin.op};
  std::vector<Tensor> results = twin.op->derivative.vjp(inner);
  for (size_t k = 0; k < results.size() && k < c.inputs.size(); ++k) {
    results[k] = unwrap(results[k], twin.batched_inputs[k] != 0, w, twin.lanes);
  }
  return results;
}

std::vector<Tensor> twin_jvp(const GradContext& c) {
  const auto& twin = *static_cast<const LanesTwin*>(c.closure);
  // A fresh vmap level on this thread while the original rule runs.
  const uint64_t w = new_level_id();
  VmapFrameScope frame({w, twin.lanes, {}});
  std::vector<Tensor> inputs, outputs, tangents;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const bool batched = twin.batched_inputs[k] != 0;
    inputs.push_back(wrap(c.inputs[k], batched, w));
    tangents.push_back(wrap(c.grads[k], batched, w));
  }
  for (const Tensor& o : c.outputs) outputs.push_back(wrap(o, true, w));
  GradContext inner{inputs, outputs, tangents, c.attrs, {}, twin.closure.get(), twin.op};
  std::vector<Tensor> results = twin.op->derivative.jvp(inner);
  for (Tensor& r : results) r = unwrap(r, true, w, twin.lanes);
  return results;
}

const OpDef& kLanesTwin = define_op({.name = "batched_function",
                                     .kind = OpKind::join,
                                     .tags = op_tag::autograd,
                                     .dtypes = DTypeFamily::any,
                                     .n_inputs = -1,
                                     .n_outputs = -1,
                                     .derivative = {.vjp = twin_vjp, .jvp = twin_jvp}});

}  // namespace

bool history_through_lanes(const Tensor& t) {
  for (Tensor u = t; u.defined(); u = u.impl()->batch != nullptr ? u.impl()->batch->physical : Tensor()) {
    if (u.impl()->autograd != nullptr) return true;
  }
  return false;
}

void record_lanes_twin(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs,
                       const std::shared_ptr<const void>& closure, uint64_t level) {
  if (op.derivative.vjp == nullptr && op.derivative.jvp == nullptr) return;
  const VmapFrame* frame = find_vmap_frame(level);
  if (frame == nullptr) return;
  auto twin = std::make_shared<LanesTwin>();
  twin->op = &op;
  twin->closure = closure;
  twin->lanes = frame->lanes;
  std::vector<Tensor> lane_inputs;
  bool any = false;
  for (const Tensor& t : inputs) {
    Tensor l = lanes_of(t, level);
    twin->batched_inputs.push_back(l.defined() ? 1 : 0);
    lane_inputs.push_back(l.defined() ? l : t);
    any = any || history_through_lanes(lane_inputs.back());
  }
  if (!any) return;
  std::vector<Tensor> lane_outputs;
  for (const Tensor& o : outputs) {
    Tensor l = lanes_of(o, level);
    if (!l.defined()) {
      // An output no mapped input reaches: it is one tensor for every lane,
      // and the levels outside see it through that tensor's own history.
      Shape shape = o.sizes();
      shape.insert(shape.begin(), frame->lanes);
      l = o.detach().unsqueeze(0).expand(shape);
    }
    lane_outputs.push_back(l);
  }
  LevelWindow outside(level, LevelWindow::Keep::below);
  record_node(kLanesTwin, lane_inputs, lane_outputs, attrs, std::move(twin));
}

}  // namespace strata::detail
