// tape.cpp — GradientTape, grad-mode scopes and Tensor's autograd methods.
#include "autograd/engine/differentiate.hpp"
#include "autograd/engine/engine.hpp"
#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace.hpp"

#include "ops/batching.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/vmap.hpp>

namespace strata {

using detail::autograd_state;
using detail::meta_if;
using detail::meta_of;

namespace {

void require_differentiable(const Tensor& t, const char* what) {
  if (!is_differentiable(t.dtype())) {
    throw DTypeError(std::string(what) + ": only floating-point and complex tensors have gradients, found " +
                     type_string(t));
  }
}

/// The seed gradient for `target`: ones for a scalar, else `given` (checked).
Tensor seed_for(const Tensor& target, const Tensor& given, const char* what) {
  if (!given.defined()) {
    if (target.numel() != 1) {
      throw ShapeError(std::string(what) + ": the target has shape " + detail::shape_string(target.shape()) +
                       "; a non-scalar target needs output gradients of that shape");
    }
    // As PyTorch: a gradient is that of a real-valued function (docs/complex.md).
    if (is_complex(target.dtype())) {
      throw DTypeError(std::string(what) + ": the target is complex (" + type_string(target) +
                       "); an implicit output gradient needs a real target: differentiate real(), abs() or "
                       "another real function of it, or pass the output gradient");
    }
    return ones_like(target);
  }
  if (given.sizes() != target.sizes()) {
    throw ShapeError(std::string(what) + ": output gradient shape " + detail::shape_string(given.shape()) +
                     " does not match the target shape " + detail::shape_string(target.shape()));
  }
  if (given.device() != target.device()) {
    throw DeviceError(std::string(what) + ": output gradient on " + given.device().str() + ", target on " +
                      target.device().str());
  }
  return given.to(target.dtype());
}

}  // namespace

GradientTape::GradientTape(TapeOptions options) : id_(detail::new_level_id()), options_(options) {
  detail::set_level_alive(id_, true);
  autograd_state().recording.add(id_);
}

GradientTape::~GradientTape() {
  autograd_state().recording.remove(id_);
  detail::set_level_alive(id_, false);
}

uint64_t GradientTape::saved_bytes() const { return detail::level_saved_bytes(id_); }

uint64_t implicit_graph_saved_bytes() { return detail::level_saved_bytes(0); }

void GradientTape::watch(const Tensor& t) {
  if (!t.defined()) throw Error("GradientTape::watch: undefined tensor");
  require_differentiable(t, "GradientTape::watch");
  if (detail::batch_level(t) > id_) {
    throw Error("GradientTape::watch: the tensor is batched by a vmap that started after this tape; a tape "
                "differentiates the batched computation from outside (watch the tensor before vmap) or one lane "
                "from inside (open the tape in the vmapped function) (docs/vmap.md)");
  }
  meta_of(t).levels.add(id_);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_grad) {
  return gradient(Tensor(target), sources, output_grad);
}

std::vector<Tensor> GradientTape::gradient(Tensor&& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_grad) {
  if (!target.defined()) throw Error("GradientTape::gradient: undefined target");
  if (used_ && !options_.persistent) {
    throw Error("GradientTape::gradient called a second time on a non-persistent tape; its graph was freed "
                "(create the tape with TapeOptions{.persistent = true})");
  }
  detail::BackwardRequest req;
  req.level = id_;
  req.root_grads = {seed_for(target, output_grad, "GradientTape::gradient")};
  req.roots.push_back(std::move(target));
  req.sources = sources;
  req.create_graph = options_.higher_order;
  req.release = !options_.persistent;
  req.unconnected_zeros = options_.unconnected == Unconnected::zero;
  for (const Tensor& s : sources) {
    if (!s.defined()) throw Error("GradientTape::gradient: undefined source");
  }
  std::vector<const detail::AutogradMeta*> marked;
  for (const auto& w : marked_) {
    if (auto m = w.lock()) marked.push_back(m.get());
  }
  std::vector<std::pair<std::shared_ptr<detail::AutogradMeta>, Tensor>> retained;
  req.retention = options_.retention;
  req.marked = &marked;
  req.retained = &retained;
  std::vector<Tensor> grads = detail::run_backward(req);
  used_ = true;
  retained_.clear();
  for (auto& [m, g] : retained) retained_[m.get()] = {m, std::move(g)};
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k].defined()) {
      throw Error("GradientTape::gradient: source " + std::to_string(k) + " (" +
                  type_string(sources[k]) +
                  ") is not connected to the target (TapeOptions::unconnected is error)");
    }
  }
  return grads;
}

void GradientTape::retain(const Tensor& t) {
  if (!t.defined()) throw Error("GradientTape::retain: undefined tensor");
  const detail::AutogradMeta* m = meta_if(t);
  if (m == nullptr || m->grad_fn == nullptr || !m->grad_fn->levels.contains(id_)) {
    throw Error("GradientTape::retain: the tensor (" + std::string(dtype_name(t.dtype())) +
                detail::shape_string(t.shape()) +
                ") is not the result of an op this tape recorded; watch its inputs before computing it");
  }
  m->grad_fn->retain_hint = true;
  marked_.push_back(t.impl()->autograd);
}

Tensor GradientTape::retained_gradient(const Tensor& t) const {
  const detail::AutogradMeta* m = meta_if(t);
  if (m == nullptr) return {};
  auto it = retained_.find(m);
  if (it == retained_.end() || it->second.first.expired()) return {};
  return it->second.second;
}

Tensor GradientTape::jacobian(const Tensor& target, const Tensor& source) {
  if (!options_.persistent) {
    throw Error("GradientTape::jacobian needs a persistent tape (one gradient per target element)");
  }
  // One batched backward pass over the unit cotangents (vmap).
  Tensor rows = vmap([&](const Tensor& seed) { return gradient(target, {source}, seed)[0]; }, 0, 0,
                     {.expand_unbatched_outputs = true})(
      detail::unit_basis(target.shape(), target.dtype(), target.device()));
  Shape shape = target.sizes();
  for (int64_t s : source.shape()) shape.push_back(s);
  return rows.reshape(shape);
}

NoGradGuard::NoGradGuard() : previous_(autograd_state().grad_enabled) { autograd_state().grad_enabled = false; }
NoGradGuard::~NoGradGuard() { autograd_state().grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(autograd_state().grad_enabled) { autograd_state().grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { autograd_state().grad_enabled = previous_; }
bool is_grad_enabled() { return autograd_state().grad_enabled; }
void set_anomaly_mode(bool enabled) {
  detail::AutogradState& st = autograd_state();
  if (st.anomaly != enabled) detail::g_anomaly_threads.fetch_add(enabled ? 1 : -1, std::memory_order_relaxed);
  st.anomaly = enabled;
}
bool anomaly_mode() { return autograd_state().anomaly; }

// --- Tensor ------------------------------------------------------------------

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  if (!defined()) throw Error("set_requires_grad: undefined tensor");
  if (requires_grad) require_differentiable(*this, "set_requires_grad");
  detail::AutogradMeta* m = meta_if(*this);
  if (m != nullptr && m->grad_fn != nullptr) {
    throw Error("set_requires_grad: only leaf tensors can be marked; this one is the result of op '" +
                std::string(m->grad_fn->op->name) + "' (use detach() first)");
  }
  if (requires_grad || m != nullptr) meta_of(*this).requires_grad = requires_grad;
  return *this;
}

bool Tensor::requires_grad() const {
  const detail::AutogradMeta* m = meta_if(*this);
  return m != nullptr && (m->requires_grad || (m->grad_fn != nullptr && m->grad_fn->levels.contains(0)));
}

bool Tensor::is_leaf() const {
  const detail::AutogradMeta* m = meta_if(*this);
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  detail::refuse_grad_access("reads a tensor's .grad");
  const detail::AutogradMeta* m = meta_if(*this);
  return m != nullptr ? m->grad : Tensor();
}

void Tensor::register_node_hook(NodeHook hook) {
  if (!defined()) throw Error("register_node_hook: undefined tensor");
  detail::AutogradMeta* m = meta_if(*this);
  if (m == nullptr || m->grad_fn == nullptr) {
    throw Error("register_node_hook: the tensor (" + std::string(dtype_name(dtype())) +
                detail::shape_string(shape()) +
                ") is a leaf or has no gradient history, so no node produced it; use register_hook");
  }
  if (!hook) throw Error("register_node_hook: empty hook");
  m->grad_fn->post_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() {
  if (!defined()) throw Error("retain_grad: undefined tensor");
  detail::AutogradMeta* m = meta_if(*this);
  if (m != nullptr && m->grad_fn == nullptr && m->requires_grad) return;  // a leaf keeps its gradient anyway
  if (m == nullptr || m->grad_fn == nullptr || !m->grad_fn->levels.contains(0)) {
    throw Error("retain_grad: the tensor (" + type_string(*this) +
                ") has no gradient history for backward(): no leaf it depends on requires grad");
  }
  m->retains_grad = true;
  m->grad_fn->retain_hint = true;
}

void Tensor::zero_grad() {
  detail::refuse_grad_access("clears a tensor's .grad (zero_grad)");
  if (detail::AutogradMeta* m = meta_if(*this)) m->grad = Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  if (!defined()) throw Error("set_grad: undefined tensor");
  detail::refuse_grad_access("sets a tensor's .grad (set_grad)");
  detail::AutogradMeta* m = meta_if(*this);
  if (m == nullptr || m->grad_fn != nullptr || !m->requires_grad) {
    throw Error("set_grad: the tensor (" + type_string(*this) + ") is not a leaf that requires grad");
  }
  if (grad.defined()) {
    if (grad.sizes() != sizes()) {
      throw ShapeError("set_grad: the gradient's shape " + shape_string(grad.shape()) + " differs from the tensor's " +
                       shape_string(shape()));
    }
    if (grad.dtype() != dtype()) {
      throw DTypeError("set_grad: the gradient's dtype " + std::string(dtype_name(grad.dtype())) +
                       " differs from the tensor's " + std::string(dtype_name(dtype())));
    }
    if (grad.device() != device()) {
      throw DeviceError("set_grad: the gradient is on " + grad.device().str() + ", the tensor on " +
                        device().str());
    }
  }
  m->grad = grad;
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) {
  if (!defined()) throw Error("register_grad_ready_hook: undefined tensor");
  if (!hook) throw Error("register_grad_ready_hook: empty hook");
  meta_of(*this).ready_hooks.push_back(std::move(hook));
}

void Tensor::backward(const Tensor& gradient, BackwardOptions options) const {
  if (!defined()) throw Error("backward: undefined tensor");
  if (!requires_grad()) {
    throw Error("backward: the tensor (" + type_string(*this) +
                ") does not require grad: no leaf it depends on was created with requires_grad");
  }
  detail::refuse_grad_access("calls backward(), which accumulates into the leaves' .grad");
  detail::BackwardRequest req;
  req.level = 0;
  req.roots = {*this};
  req.root_grads = {seed_for(*this, gradient, "backward")};
  req.accumulate_leaves = true;
  req.create_graph = options.create_graph;
  req.release = !options.retain_graph;
  std::vector<std::pair<std::shared_ptr<detail::AutogradMeta>, Tensor>> retained;
  req.retention = options.retention;
  req.retained = &retained;
  // Retained intermediates accumulate like leaves, with them, when the pass
  // ends (recorded only under create_graph, as the pass itself was).
  detail::run_backward(req);
}

namespace {
/// detach as an op only so that trace() can replay it: no derivative rules.
const detail::OpDef& kDetach = detail::define_op(
    {.name = "detach", .kind = detail::OpKind::view, .tags = detail::op_tag::view | detail::op_tag::autograd,
    .dtypes = detail::DTypeFamily::any});
}  // namespace

Tensor Tensor::detach() const {
  if (!defined()) return {};
  // A batched tensor's lanes are detached too (they carry the history of
  // the levels opened outside its vmap).
  const uint64_t level = detail::batch_level(*this);
  Tensor out = level != 0 ? detail::make_batched(impl()->batch->physical.detach(), level)
                          : detail::make_view(*this, shape(), strides(), offset());
  if (detail::active_trace() != nullptr) detail::trace_op(kDetach, std::span<const Tensor>(this, 1), out, {});
  return out;
}

Tensor Tensor::tangent(uint64_t level) const {
  const detail::AutogradMeta* m = meta_if(*this);
  if (m == nullptr) return {};
  const Tensor* t = m->tangent(level);
  return t != nullptr ? *t : Tensor();
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) {
  if (!defined()) throw Error("register_hook: undefined tensor");
  detail::AutogradMeta& m = meta_of(*this);
  if (m.grad_fn == nullptr) {
    m.hooks.push_back(std::move(hook));
    return;
  }
  // A non-leaf: the hook sees (and may replace) the gradient of this output
  // when its producer runs backward.
  int nr = m.output_nr;
  m.grad_fn->hooks.push_back([nr, hook = std::move(hook)](std::vector<Tensor>& grads) {
    if (static_cast<size_t>(nr) < grads.size() && grads[static_cast<size_t>(nr)].defined()) {
      Tensor& grad = grads[static_cast<size_t>(nr)];
      Tensor replaced = hook(grad);
      if (replaced.defined()) grad = detail::checked_hook_gradient(replaced, grad);
    }
  });
}

}  // namespace strata
