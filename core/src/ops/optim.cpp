// optim.cpp — the fused optimizer updates (docs/ops.md, "Optimizer updates"):
// one op per optimizer that updates a parameter and its state in place, so
// that a backend can do it in one pass over memory (as PyTorch's fused and
// foreach optimizers do) instead of a chain of out-of-place ops. Each is a
// composite whose decomposition is exactly the unfused update, written with
// public ops: a device without the kernel computes the same values, and a
// kernel must reproduce them — every operation in the decomposition's order
// and precision, the scalars rounded to the parameter's dtype — so that the
// fused and unfused updates agree to the last bit.
//
//   sgd_step(p, g) -> p                    lr, weight_decay
//   sgd_momentum_step(p, g, b) -> p, b     lr, weight_decay, momentum,
//                                          dampening, nesterov, first
//   adam_step(p, g, m, v) -> p, m, v       decay_mode, weight_decay, decay,
//                                          beta1, beta2, step_size,
//                                          inv_sqrt_bias2, eps, first
//
// The outputs are the inputs p, b, m, v themselves (written in place). Not
// differentiable: optimizers run without recording.
#include "../op.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <string>

namespace strata {
namespace detail {
namespace {

double real(const OpCall& call, const char* name) {
  const Attr* a = call.attr(name);
  if (a == nullptr) throw ValueError(call.describe() + ": missing attribute '" + name + "'");
  return a->f;
}

/// Every input has the parameter's dtype, shape and device; the outputs are
/// the first n_outputs state tensors' (parameter first).
void update_rule(OpCall& call, int n_outputs) {
  const Tensor& p = call.in(0);
  if (!is_differentiable(p.dtype())) {  // complex reaches only the SGD updates (takes_complex)
    throw DTypeError(call.describe() + ": parameters must be floating or complex, found " +
                     std::string(dtype_name(p.dtype())));
  }
  for (int k = 1; k < call.n_inputs; ++k) {
    const Tensor& t = call.in(k);
    if (t.dtype() != p.dtype() || !std::ranges::equal(t.shape(), p.shape())) {
      throw ShapeError(call.describe() + ": input " + std::to_string(k) + " must have the parameter's dtype and shape");
    }
  }
  call.n_outputs = n_outputs;
  for (int k = 0; k < n_outputs; ++k) {
    call.out(k).dtype = p.dtype();
    call.out(k).set_shape(p.shape());
  }
}

// --- sgd_step -------------------------------------------------------------------

std::vector<Tensor> sgd_decompose(const OpCall& call) {
  Tensor g = call.in(1);
  const double wd = real(call, "weight_decay");
  if (wd != 0.0) g = g + call.in(0) * wd;
  return {call.in(0) - g * real(call, "lr")};
}

// The SGD updates are linear in the gradient, so they take complex
// parameters as they are (PyTorch's SGD does the same); adam_step does not.
const OpDef& kSgdStep = define_op({.name = "sgd_step",
                                   .kind = OpKind::composite,
                                   .n_inputs = 2,
                                   .takes_complex = true,
                                   .prepare = [](OpCall& call) { update_rule(call, 1); },
                                   .decompose = sgd_decompose});

// --- sgd_momentum_step ----------------------------------------------------------

std::vector<Tensor> sgd_momentum_decompose(const OpCall& call) {
  Tensor g = call.in(1);
  const double wd = real(call, "weight_decay"), momentum = real(call, "momentum");
  if (wd != 0.0) g = g + call.in(0) * wd;
  Tensor b = call.attr_int("first") != 0 ? g : call.in(2) * momentum + g * (1.0 - real(call, "dampening"));
  g = call.attr_int("nesterov") != 0 ? g + b * momentum : b;
  return {call.in(0) - g * real(call, "lr"), b};
}

const OpDef& kSgdMomentumStep = define_op({.name = "sgd_momentum_step",
                                           .kind = OpKind::composite,
                                           .n_inputs = 3,
                                           .n_outputs = 2,
                                           .takes_complex = true,
                                           .prepare = [](OpCall& call) { update_rule(call, 2); },
                                           .decompose = sgd_momentum_decompose});

// --- adam_step ------------------------------------------------------------------

std::vector<Tensor> adam_decompose(const OpCall& call) {
  Tensor g = call.in(1);
  Tensor value = call.in(0);
  const int64_t mode = call.attr_int("decay_mode");
  if (mode == static_cast<int64_t>(WeightDecay::l2)) g = g + value * real(call, "weight_decay");
  if (mode == static_cast<int64_t>(WeightDecay::decoupled)) value = value * real(call, "decay");
  const double beta1 = real(call, "beta1"), beta2 = real(call, "beta2");
  const bool first = call.attr_int("first") != 0;
  Tensor m = first ? g * (1.0 - beta1) : call.in(2) * beta1 + g * (1.0 - beta1);
  Tensor v = first ? square(g) * (1.0 - beta2) : call.in(3) * beta2 + square(g) * (1.0 - beta2);
  Tensor denom = sqrt(v) * real(call, "inv_sqrt_bias2") + real(call, "eps");
  return {value - m / denom * real(call, "step_size"), m, v};
}

const OpDef& kAdamStep = define_op({.name = "adam_step",
                                    .kind = OpKind::composite,
                                    .n_inputs = 4,
                                    .n_outputs = 3,
                                    .prepare = [](OpCall& call) { update_rule(call, 3); },
                                    .decompose = adam_decompose});

/// Runs `op`, writing its results into `outputs`: as the call's preset
/// outputs (the kernel writes them in place) when all are contiguous, else
/// into fresh tensors copied over them.
void run_in_place(const OpDef& op, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
                  const Attrs& attrs) {
  OpCall call;
  call.op = &op;
  call.device = inputs.begin()->device();
  call.n_inputs = static_cast<int>(inputs.size());
  int k = 0;
  for (const Tensor& t : inputs) call.inputs[static_cast<size_t>(k++)] = t;
  bool compact = true;
  for (const Tensor& t : outputs) compact = compact && t.is_contiguous();
  k = 0;
  if (compact) {
    for (const Tensor& t : outputs) call.preset[static_cast<size_t>(k++)] = t;
  }
  call.attrs = &attrs;
  check_same_device(call);
  OpResult results = dispatch_call(call);
  if (compact) return;
  k = 0;
  for (const Tensor& t : outputs) Tensor(t).copy_(results[k++]);
}

}  // namespace
}  // namespace detail

using detail::Attr;
using detail::Attrs;

void sgd_step_(const Tensor& param, const Tensor& grad, double lr, double weight_decay) {
  Attrs attrs{Attr::real("lr", lr), Attr::real("weight_decay", weight_decay)};
  detail::run_in_place(detail::kSgdStep, {param, grad}, {param}, attrs);
}

void sgd_momentum_step_(const Tensor& param, const Tensor& grad, const Tensor& buffer, const SgdMomentumUpdate& o) {
  Attrs attrs{Attr::real("lr", o.lr),
              Attr::real("weight_decay", o.weight_decay),
              Attr::real("momentum", o.momentum),
              Attr::real("dampening", o.dampening),
              Attr::integer("nesterov", o.nesterov ? 1 : 0),
              Attr::integer("first", o.first ? 1 : 0)};
  detail::run_in_place(detail::kSgdMomentumStep, {param, grad, buffer}, {param, buffer}, attrs);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamUpdate& o) {
  Attrs attrs{Attr::integer("decay_mode", static_cast<int64_t>(o.decay_mode)),
              Attr::real("weight_decay", o.weight_decay),
              Attr::real("decay", o.decay),
              Attr::real("beta1", o.beta1),
              Attr::real("beta2", o.beta2),
              Attr::real("step_size", o.step_size),
              Attr::real("inv_sqrt_bias2", o.inv_sqrt_bias2),
              Attr::real("eps", o.eps),
              Attr::integer("first", o.first ? 1 : 0)};
  detail::run_in_place(detail::kAdamStep, {param, grad, exp_avg, exp_avg_sq}, {param, exp_avg, exp_avg_sq}, attrs);
}

}  // namespace strata
