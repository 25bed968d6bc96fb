// checkpoint.cpp — activation checkpointing as a recorded node whose
// derivative rules run the function again.
#include "autograd/engine/nodes.hpp"
#include "autograd/engine/rule_scopes.hpp"
#include "autograd/trace/trace.hpp"

#include "autograd/autocast.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/autograd.hpp>
#include <strata/checkpoint.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace detail {
Tensor tracked_alias(const Tensor& x);  // views.cpp
}  // namespace detail

namespace {

using detail::GradContext;

/// What the node keeps to run the function again.
struct CheckpointClosure {
  CheckpointFn fn;
  RngState rng;
  detail::AutocastSnapshot autocast;
  size_t n_explicit = 0;  // node inputs [0, n) are fn's inputs; the rest are captured reads
  std::unique_ptr<detail::SelectiveCache> kept;  // selective checkpointing's op outputs, or null
};

using detail::RecordingScope;

const CheckpointClosure& closure_of(const GradContext& c) {
  if (c.closure == nullptr) throw Error("checkpoint: the node's function was already released");
  return *static_cast<const CheckpointClosure*>(c.closure);
}

std::vector<Tensor> checkpoint_vjp(const GradContext& c) {
  const CheckpointClosure& cl = closure_of(c);
  // The engine leaves grad mode on only when the gradient itself is to be
  // recorded (higher order); then the recomputation is recorded on the
  // enclosing levels too, so its gradient is differentiable again.
  bool create_graph = detail::autograd_state().grad_enabled;
  detail::ReplayState replay(&cl.rng, cl.autocast);  // the first run's generator and autocast state
  EnableGradGuard enable;
  RecordingScope recording(create_graph);
  GradientTape tape({.persistent = false, .higher_order = create_graph, .unconnected = Unconnected::zero});
  std::vector<Tensor> args;
  std::vector<Tensor> sources;  // only the inputs whose gradients this pass uses
  std::vector<size_t> source_of;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& in = c.inputs[k];
    bool wanted = is_differentiable(in.dtype()) && c.needs(static_cast<int>(k));
    Tensor a = in;  // a captured read: fn uses this very tensor
    if (k < cl.n_explicit) a = create_graph && wanted ? detail::tracked_alias(in) : in.detach();
    if (k < cl.n_explicit) args.push_back(a);
    if (!wanted) continue;
    tape.watch(a);
    sources.push_back(a);
    source_of.push_back(k);
  }
  std::vector<Tensor> grads(c.inputs.size());
  if (sources.empty()) return grads;
  std::vector<Tensor> outs =
      cl.kept != nullptr ? detail::replay_selective(*cl.kept, [&] { return cl.fn(args); }) : cl.fn(args);
  if (outs.size() != c.outputs.size()) {
    throw Error("checkpoint: the function returned " + std::to_string(outs.size()) + " tensors when recomputed, " +
                std::to_string(c.outputs.size()) + " the first time (it must be deterministic)");
  }
  // Named here: the tape below would only see a seed that does not fit.
  // The first run's output may be gone (not kept); its gradient has its shape.
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& first = c.outputs[k].defined() ? c.outputs[k] : c.grads[k];
    if (!first.defined() || !outs[k].defined()) continue;
    if (outs[k].sizes() != first.sizes()) {
      throw ShapeError("checkpoint: output " + std::to_string(k) + " had shape " + detail::shape_string(first.shape()) +
                       " the first time and " + detail::shape_string(outs[k].shape()) +
                       " when recomputed in backward (the function must be deterministic)");
    }
  }
  Tensor target;
  Tensor seed;
  if (outs.size() == 1) {
    target = outs[0];
    seed = c.grad(0).defined() ? c.grad(0) : zeros_like(outs[0]);
  } else {
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!c.grads[k].defined() || !is_differentiable(outs[k].dtype())) continue;
      // <g, out> as a real number: its gradient with respect to out is g
      // (for a complex out too, in PyTorch's convention; conj and real are
      // no-ops on real tensors).
      Tensor term = sum(real(outs[k] * conj(c.grads[k])));
      target = target.defined() ? target + term : term;
    }
    if (!target.defined()) return grads;
  }
  // The recomputed outputs go as soon as their nodes have run backward:
  // the tape takes the target, and the nodes keep what their rules read.
  outs.clear();
  std::vector<Tensor> found = tape.gradient(std::move(target), sources, seed);
  for (size_t j = 0; j < found.size(); ++j) grads[source_of[j]] = found[j];
  return grads;
}

/// Tangents: run the function under a fresh forward level with the input
/// tangents attached (to aliases of the explicit inputs, and for the span of
/// the call to the captured reads themselves).
std::vector<Tensor> checkpoint_jvp(const GradContext& c) {
  const CheckpointClosure& cl = closure_of(c);
  detail::ReplayState replay(&cl.rng, cl.autocast);  // the first run's generator and autocast state
  detail::AutogradState& st = detail::autograd_state();
  uint64_t level = detail::new_level_id();
  std::vector<Tensor> args;
  std::vector<detail::AutogradMeta*> attached;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& in = c.inputs[k];
    const Tensor& t = c.grads[k];
    if (k < cl.n_explicit) {
      Tensor a = detail::tracked_alias(in);
      if (t.defined()) detail::meta_of(a).tangents.emplace_back(level, t);
      args.push_back(a);
    } else if (t.defined()) {
      detail::AutogradMeta& m = detail::meta_of(in);
      m.tangents.emplace_back(level, t);
      attached.push_back(&m);
    }
  }
  auto detach_tangents = [&] {
    st.forward.remove(level);
    for (detail::AutogradMeta* m : attached) {
      std::erase_if(m->tangents, [level](const auto& p) { return p.first == level; });
    }
  };
  st.forward.add(level);
  std::vector<Tensor> outs;
  try {
    outs = cl.fn(args);
  } catch (...) {
    detach_tangents();
    throw;
  }
  detach_tangents();
  std::vector<Tensor> tangents;
  for (const Tensor& o : outs) tangents.push_back(o.tangent(level));
  return tangents;
}

const detail::OpDef& kCheckpoint = detail::define_op({.name = "checkpoint",
                                                      .kind = detail::OpKind::join,
                                                      .tags = detail::op_tag::autograd,
                                                      .dtypes = detail::DTypeFamily::any,
                                                      .n_inputs = -1,
                                                      .n_outputs = -1,
                                                      .derivative = {.vjp = checkpoint_vjp,
                                                      .jvp = checkpoint_jvp},
                                                      // it recomputes its outputs: only their count
                                                      .vjp_reads_outputs = 0});

}  // namespace

namespace detail {

std::vector<Tensor> checkpoint_impl(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                                    const std::set<std::string>* save_ops, bool reuse_output) {
  if (!fn) throw Error("checkpoint: empty function");
  detail::AutogradState& st = detail::autograd_state();
  // Nothing to save (no recording), tangents only (forward mode saves no
  // activations), or a trace (which records the function's own ops): run fn.
  // Its ops belong to it, not to an enclosing selective checkpoint's cache.
  if (!st.grad_enabled || st.recording.empty() || !st.forward.empty() || detail::tracing_graph()) {
    detail::SelectiveSuspend own_ops;
    return fn(inputs);
  }
  auto closure = std::make_shared<CheckpointClosure>();
  closure->fn = fn;
  closure->rng = get_rng_state();
  closure->autocast = detail::autocast_snapshot();
  closure->n_explicit = inputs.size();
  if (save_ops != nullptr || reuse_output) {
    closure->kept = std::make_unique<detail::SelectiveCache>();
    if (save_ops != nullptr) closure->kept->save_ops.insert(save_ops->begin(), save_ops->end());
    closure->kept->reuse_output = reuse_output;
  }
  std::vector<Tensor> outputs;
  std::vector<Tensor> reads = detail::capture_external_reads(
      inputs,
      [&] {
        detail::AutogradOff off;  // nothing recorded, nothing saved
        outputs = fn(inputs);
      },
      closure->kept.get());
  for (const Tensor& o : outputs) {
    if (!o.defined()) throw Error("checkpoint: the function returned an undefined tensor");
  }
  if (reuse_output) closure->kept->settle_reuse(outputs);
  for (Tensor& o : outputs) o = o.detach();  // fresh handles: never attach history to an input the function returned
  std::vector<Tensor> node_inputs = inputs;
  node_inputs.insert(node_inputs.end(), reads.begin(), reads.end());
  detail::record_node(kCheckpoint, node_inputs, outputs, nullptr, closure);
  return outputs;
}

}  // namespace detail

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  return detail::checkpoint_impl(fn, inputs, nullptr, false);
}

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::set<std::string>& save_ops) {
  return detail::checkpoint_impl(fn, inputs, &save_ops, false);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  if (!fn) throw Error("checkpoint: empty function");
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                    std::vector<Tensor>{input})[0];
}

}  // namespace strata
