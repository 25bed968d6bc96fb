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
// differentiable: optimizers run without recording. The out-of-place forms
// (sgd_step, sgd_momentum_step, adam_step: the functional optimizers of
// nn/functional_optim.hpp) are the decompositions themselves, run as
// recorded ops, so the formulas live here once.
#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata {
namespace detail {
namespace {

namespace tag = detail::op_tag;
constexpr AttrDecl kSgdAttrs[] = {{"lr", STRATA_ATTR_FLOAT}, {"weight_decay", STRATA_ATTR_FLOAT}};
constexpr AttrDecl kSgdMomentumAttrs[] = {{"lr", STRATA_ATTR_FLOAT},       {"weight_decay", STRATA_ATTR_FLOAT},
                                          {"momentum", STRATA_ATTR_FLOAT}, {"dampening", STRATA_ATTR_FLOAT},
                                          {"nesterov", STRATA_ATTR_INT},   {"first", STRATA_ATTR_INT}};
constexpr AttrDecl kAdamAttrs[] = {{"decay_mode", STRATA_ATTR_INT},   {"weight_decay", STRATA_ATTR_FLOAT},
                                   {"decay", STRATA_ATTR_FLOAT},      {"beta1", STRATA_ATTR_FLOAT},
                                   {"beta2", STRATA_ATTR_FLOAT},      {"step_size", STRATA_ATTR_FLOAT},
                                   {"inv_sqrt_bias2", STRATA_ATTR_FLOAT}, {"eps", STRATA_ATTR_FLOAT},
                                   {"first", STRATA_ATTR_INT}};

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
  return {sgd_step(call.in(0), call.in(1), real(call, "lr"), real(call, "weight_decay"))};
}

// The SGD updates are linear in the gradient, so they take complex
// parameters as they are (PyTorch's SGD does the same); adam_step does not.
const OpDef& kSgdStep = define_op({.name = "sgd_step",
                                   .kind = OpKind::composite,
                                   .tags = tag::optimizer,
                                   .attrs = kSgdAttrs,
                                   .dtypes = detail::DTypeFamily::float_only,
                                   .n_inputs = 2,
                                   .takes_complex = true,
                                   .groupable = true,
                                   .prepare = [](OpCall& call) { update_rule(call, 1); },
                                   .decompose = sgd_decompose});

// --- sgd_momentum_step ----------------------------------------------------------

std::vector<Tensor> sgd_momentum_decompose(const OpCall& call) {
  SgdMomentumResult r = sgd_momentum_step(call.in(0), call.in(1), call.in(2),
                                          {.lr = real(call, "lr"),
                                           .weight_decay = real(call, "weight_decay"),
                                           .momentum = real(call, "momentum"),
                                           .dampening = real(call, "dampening"),
                                           .nesterov = call.attr_int("nesterov") != 0,
                                           .first = call.attr_int("first") != 0});
  return {r.param, r.buffer};
}

const OpDef& kSgdMomentumStep = define_op({.name = "sgd_momentum_step",
                                           .kind = OpKind::composite,
                                           .tags = tag::optimizer,
                                           .attrs = kSgdMomentumAttrs,
                                           .dtypes = detail::DTypeFamily::float_only,
                                           .n_inputs = 3,
                                           .n_outputs = 2,
                                           .takes_complex = true,
                                           .groupable = true,
                                           .prepare = [](OpCall& call) { update_rule(call, 2); },
                                           .decompose = sgd_momentum_decompose});

// --- adam_step ------------------------------------------------------------------

std::vector<Tensor> adam_decompose(const OpCall& call) {
  AdamResult r = adam_step(call.in(0), call.in(1), call.in(2), call.in(3),
                           {.decay_mode = static_cast<WeightDecay>(call.attr_int("decay_mode")),
                            .weight_decay = real(call, "weight_decay"),
                            .decay = real(call, "decay"),
                            .beta1 = real(call, "beta1"),
                            .beta2 = real(call, "beta2"),
                            .step_size = real(call, "step_size"),
                            .inv_sqrt_bias2 = real(call, "inv_sqrt_bias2"),
                            .eps = real(call, "eps"),
                            .first = call.attr_int("first") != 0});
  return {r.param, r.exp_avg, r.exp_avg_sq};
}

const OpDef& kAdamStep = define_op({.name = "adam_step",
                                    .kind = OpKind::composite,
                                    .tags = tag::optimizer,
                                    .attrs = kAdamAttrs,
                                    .dtypes = detail::DTypeFamily::float_only,
                                    .n_inputs = 4,
                                    .n_outputs = 3,
                                    .groupable = true,
                                    .prepare = [](OpCall& call) { update_rule(call, 3); },
                                    .decompose = adam_decompose});

/// Runs `op` in place over a group: `lists` hold one operand list each
/// (parameter first), `written[k]` the list output k is written into.
/// Members whose outputs are all compact have them as the call's preset
/// outputs (the kernel writes them in place) and run through dispatch_group
/// (one kernel call per device where the kernel takes groups, the single
/// forms' one call as dispatch_call would); the others run one by one into
/// fresh tensors copied over the outputs.
void run_group_in_place(const OpDef& op, std::initializer_list<std::span<const Tensor>> lists,
                        std::initializer_list<int> written, const Attrs& attrs) {
  const std::span<const Tensor> params = *lists.begin();
  auto output = [&](int w, size_t j) -> const Tensor& { return lists.begin()[w][j]; };
  auto call_for = [&](size_t j) {
    OpCall call;
    call.op = &op;
    call.device = params[j].device();
    call.n_inputs = static_cast<int>(lists.size());
    int k = 0;
    for (const std::span<const Tensor>& list : lists) call.inputs[static_cast<size_t>(k++)] = list[j];
    call.attrs = &attrs;
    check_same_device(call);
    return call;
  };
  std::vector<OpCall> calls;
  calls.reserve(params.size());
  std::vector<size_t> loose;  // members with an output that is not compact
  for (size_t j = 0; j < params.size(); ++j) {
    if (!std::ranges::all_of(written, [&](int w) { return output(w, j).is_contiguous(); })) {
      loose.push_back(j);
      continue;
    }
    OpCall& call = calls.emplace_back(call_for(j));
    int k = 0;
    for (int w : written) call.preset[static_cast<size_t>(k++)] = output(w, j);
  }
  dispatch_group(calls);
  for (size_t j : loose) {
    OpCall call = call_for(j);
    OpResult results = dispatch_call(call);
    int k = 0;
    for (int w : written) Tensor(output(w, j)).copy_(results[k++]);
  }
}

Attrs sgd_attrs(double lr, double weight_decay) {
  return {Attr::real("lr", lr), Attr::real("weight_decay", weight_decay)};
}

Attrs sgd_momentum_attrs(const SgdMomentumUpdate& o) {
  return {Attr::real("lr", o.lr),
          Attr::real("weight_decay", o.weight_decay),
          Attr::real("momentum", o.momentum),
          Attr::real("dampening", o.dampening),
          Attr::integer("nesterov", o.nesterov ? 1 : 0),
          Attr::integer("first", o.first ? 1 : 0)};
}

Attrs adam_attrs(const AdamUpdate& o) {
  return {Attr::integer("decay_mode", static_cast<int64_t>(o.decay_mode)),
          Attr::real("weight_decay", o.weight_decay),
          Attr::real("decay", o.decay),
          Attr::real("beta1", o.beta1),
          Attr::real("beta2", o.beta2),
          Attr::real("step_size", o.step_size),
          Attr::real("inv_sqrt_bias2", o.inv_sqrt_bias2),
          Attr::real("eps", o.eps),
          Attr::integer("first", o.first ? 1 : 0)};
}

}  // namespace
}  // namespace detail

using detail::Attr;
using detail::Attrs;

namespace {

/// The out-of-place updates' check (the in-place ops' shape rule, with the
/// function's own names): `operands` (name, tensor) are defined and match
/// the parameter's dtype, shape and device, since the arithmetic would
/// otherwise broadcast or promote them silently. The SGD updates are linear
/// in the gradient and take complex parameters (`complex_ok`); Adam squares
/// the gradient, which is not |g|² for complex values, so it does not.
void check_operands(const char* function, const Tensor& param,
                    std::span<const std::pair<const char*, const Tensor*>> operands, bool complex_ok,
                    int64_t index = -1) {
  // "adam_step_: " or, for a group's member, "adam_step_: parameter 3: ".
  auto where = [&] {
    return std::string(function) + ": " + (index >= 0 ? "parameter " + std::to_string(index) + ": " : "");
  };
  if (!param.defined()) throw ValueError(where() + "param is undefined");
  if (!is_floating(param.dtype()) && !(complex_ok && is_complex(param.dtype()))) {
    throw DTypeError(where() + "param must be floating" + (complex_ok ? " or complex" : "") + ", got " +
                     type_string(param));
  }
  for (const auto& [name, t] : operands) {
    if (!t->defined()) throw ValueError(where() + name + " is undefined");
    const bool dtype_ok = t->dtype() == param.dtype();
    const bool shape_ok = std::ranges::equal(t->shape(), param.shape());
    const bool device_ok = t->device() == param.device();
    if (dtype_ok && shape_ok && device_ok) continue;
    const std::string message = where() + name + " must be like param (" + type_string(param) + " on " +
                                param.device().str() + "), got " + type_string(*t) + " on " + t->device().str();
    if (!dtype_ok) throw DTypeError(message);
    if (!shape_ok) throw ShapeError(message);
    throw DeviceError(message);
  }
}

void check_operands(const char* function, const Tensor& param,
                    std::initializer_list<std::pair<const char*, const Tensor*>> operands, bool complex_ok) {
  check_operands(function, param, std::span(operands.begin(), operands.size()), complex_ok);
}

/// One tensor as a group's operand list (the single in-place forms).
std::span<const Tensor> one(const Tensor& t) { return {&t, 1}; }

}  // namespace

Tensor sgd_step(const Tensor& param, const Tensor& grad, double lr, double weight_decay) {
  check_operands("sgd_step", param, {{"grad", &grad}}, true);
  Tensor g = grad;
  if (weight_decay != 0.0) g = g + param * weight_decay;
  return param - g * lr;
}

SgdMomentumResult sgd_momentum_step(const Tensor& param, const Tensor& grad, const Tensor& buffer,
                                    const SgdMomentumUpdate& o) {
  check_operands("sgd_momentum_step", param, {{"grad", &grad}}, true);
  if (!o.first) check_operands("sgd_momentum_step", param, {{"buffer", &buffer}}, true);
  Tensor g = grad;
  if (o.weight_decay != 0.0) g = g + param * o.weight_decay;
  Tensor b = o.first ? g : buffer * o.momentum + g * (1.0 - o.dampening);
  g = o.nesterov ? g + b * o.momentum : b;
  return {param - g * o.lr, b};
}

AdamResult adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const AdamUpdate& o) {
  check_operands("adam_step", param, {{"grad", &grad}}, false);
  if (!o.first) check_operands("adam_step", param, {{"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}}, false);
  Tensor g = grad;
  Tensor value = param;
  if (o.decay_mode == WeightDecay::l2) g = g + value * o.weight_decay;
  if (o.decay_mode == WeightDecay::decoupled) value = value * o.decay;
  Tensor m = o.first ? g * (1.0 - o.beta1) : exp_avg * o.beta1 + g * (1.0 - o.beta1);
  Tensor v = o.first ? square(g) * (1.0 - o.beta2) : exp_avg_sq * o.beta2 + square(g) * (1.0 - o.beta2);
  Tensor denom = sqrt(v) * o.inv_sqrt_bias2 + o.eps;
  return {value - m / denom * o.step_size, m, v};
}

void sgd_step_(const Tensor& param, const Tensor& grad, double lr, double weight_decay) {
  const Attrs attrs = detail::sgd_attrs(lr, weight_decay);
  detail::run_group_in_place(detail::kSgdStep, {one(param), one(grad)}, {0}, attrs);
}

void sgd_momentum_step_(const Tensor& param, const Tensor& grad, const Tensor& buffer, const SgdMomentumUpdate& o) {
  const Attrs attrs = detail::sgd_momentum_attrs(o);
  detail::run_group_in_place(detail::kSgdMomentumStep, {one(param), one(grad), one(buffer)}, {0, 2}, attrs);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamUpdate& o) {
  const Attrs attrs = detail::adam_attrs(o);
  detail::run_group_in_place(detail::kAdamStep, {one(param), one(grad), one(exp_avg), one(exp_avg_sq)}, {0, 2, 3},
                             attrs);
}

namespace {

/// The group forms' check, before anything runs: one entry per parameter in
/// every list (`lists` after the parameters: an operand's name, its list),
/// each member's operands like its parameter, as check_operands names them.
void check_group(const char* function, std::span<const Tensor> params,
                 std::initializer_list<std::pair<const char*, std::span<const Tensor>>> lists, bool complex_ok) {
  for (const auto& [name, list] : lists) {
    if (list.size() != params.size()) {
      throw ValueError(std::string(function) + ": " + std::to_string(params.size()) + " params but " +
                       std::to_string(list.size()) + " " + name + "s; every list has one entry per parameter");
    }
  }
  std::array<std::pair<const char*, const Tensor*>, 3> operands{};
  for (size_t j = 0; j < params.size(); ++j) {
    size_t n = 0;
    for (const auto& [name, list] : lists) operands[n++] = {name, &list[j]};
    check_operands(function, params[j], {operands.data(), n}, complex_ok, static_cast<int64_t>(j));
  }
}

}  // namespace

void sgd_step_(std::span<const Tensor> params, std::span<const Tensor> grads, double lr, double weight_decay) {
  check_group("sgd_step_", params, {{"grad", grads}}, true);
  const Attrs attrs = detail::sgd_attrs(lr, weight_decay);
  detail::run_group_in_place(detail::kSgdStep, {params, grads}, {0}, attrs);
}

void sgd_momentum_step_(std::span<const Tensor> params, std::span<const Tensor> grads,
                        std::span<const Tensor> buffers, const SgdMomentumUpdate& update) {
  check_group("sgd_momentum_step_", params, {{"grad", grads}, {"buffer", buffers}}, true);
  const Attrs attrs = detail::sgd_momentum_attrs(update);
  detail::run_group_in_place(detail::kSgdMomentumStep, {params, grads, buffers}, {0, 2}, attrs);
}

void adam_step_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                std::span<const Tensor> exp_avg_sqs, const AdamUpdate& update) {
  check_group("adam_step_", params, {{"grad", grads}, {"exp_avg", exp_avgs}, {"exp_avg_sq", exp_avg_sqs}}, false);
  const Attrs attrs = detail::adam_attrs(update);
  detail::run_group_in_place(detail::kAdamStep, {params, grads, exp_avgs, exp_avg_sqs}, {0, 2, 3}, attrs);
}

}  // namespace strata
