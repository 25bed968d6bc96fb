// functional_optim.cpp — the functional optimizers of nn/functional_optim.hpp:
// checks, state bookkeeping, and one out-of-place update op per parameter.
#include <algorithm>
#include <cmath>
#include <strata/error.hpp>
#include <strata/nn/functional_optim.hpp>
#include <strata/ops.hpp>
#include <string>
#include <vector>

#include "optim_common.hpp"
#include "util.hpp"

namespace strata::nn::functional {

namespace {

/// "f32[40, 1] on cpu:0"
std::string described(const Tensor& t) { return type_string(t) + " on " + t.device().str(); }

/// Checks that `list` has one tensor per parameter, each defined and of its
/// parameter's shape, dtype and device. `what` names the list ("grads",
/// "state.exp_avg"). Messages are built only on failure: this runs on
/// every step.
void check_like_params(const char* function, const char* what, const std::vector<Tensor>& params,
                       const std::vector<Tensor>& list) {
  if (list.size() != params.size()) {
    throw ValueError(std::string(function) + ": " + what + " has " + std::to_string(list.size()) + " tensors for " +
                     std::to_string(params.size()) + " params (one per parameter, in the same order)");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& p = params[i];
    const Tensor& t = list[i];
    const bool defined = t.defined();
    const bool shape_ok = defined && std::ranges::equal(t.shape(), p.shape());
    const bool dtype_ok = defined && t.dtype() == p.dtype();
    const bool device_ok = defined && t.device() == p.device();
    if (shape_ok && dtype_ok && device_ok) continue;
    const std::string where = std::string(function) + ": " + what + "[" + std::to_string(i) + "]";
    const std::string expected = described(p) + " like params[" + std::to_string(i) + "]";
    if (!defined) throw ValueError(where + " is undefined (expected " + expected + ")");
    const std::string mismatch = where + ": expected " + expected + ", got " + described(t);
    if (!shape_ok) throw ShapeError(mismatch);
    if (!dtype_ok) throw DTypeError(mismatch);
    throw DeviceError(mismatch);
  }
}

/// The checks every step shares: floating parameters (or complex ones, for
/// the SGD updates, which are linear in the gradient: `complex_ok`), one
/// gradient per parameter like it, lr >= 0 and a step count >= 0.
void check_step(const char* function, const std::vector<Tensor>& params, const std::vector<Tensor>& grads, double lr,
                int64_t step, bool complex_ok) {
  for (size_t i = 0; i < params.size(); ++i) {
    const bool dtype_ok = params[i].defined() && (is_floating(params[i].dtype()) ||
                                                  (complex_ok && is_complex(params[i].dtype())));
    if (dtype_ok) continue;
    const std::string where = std::string(function) + ": params[" + std::to_string(i) + "]";
    if (!params[i].defined()) throw ValueError(where + " is undefined");
    throw DTypeError(where + " must be floating" + (complex_ok ? " or complex" : "") + ", got " +
                     described(params[i]));
  }
  check_like_params(function, "grads", params, grads);
  if (!(lr >= 0.0 && std::isfinite(lr))) {
    throw ValueError(std::string(function) + ": lr must be finite and >= 0, got " + detail::num(lr));
  }
  if (step < 0) throw ValueError(std::string(function) + ": state.step must be >= 0, got " + std::to_string(step));
}

/// Zero tensors shaped like `params` (the state before the first step).
std::vector<Tensor> zeros_like_each(const char* function, const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) {
      throw ValueError(std::string(function) + ": params[" + std::to_string(i) + "] is undefined");
    }
    out.push_back(zeros_like(params[i].detach()));
  }
  return out;
}

AdamStepResult adam_like(const char* function, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                         const AdamState& state, const AdamOptions& options, bool decoupled) {
  check_step(function, params, grads, options.lr, state.step, false);
  detail::check_adam_hyperparameters(function, options.beta1, options.beta2, options.eps, options.weight_decay);
  check_like_params(function, "state.exp_avg", params, state.exp_avg);
  check_like_params(function, "state.exp_avg_sq", params, state.exp_avg_sq);
  AdamUpdate update = detail::adam_update(options, options.lr, state.step + 1, decoupled);
  update.first = state.step == 0;
  AdamStepResult out;
  out.state.step = state.step + 1;
  for (size_t i = 0; i < params.size(); ++i) {
    AdamResult r = adam_step(params[i], grads[i], state.exp_avg[i], state.exp_avg_sq[i], update);
    out.params.push_back(std::move(r.param));
    out.state.exp_avg.push_back(std::move(r.exp_avg));
    out.state.exp_avg_sq.push_back(std::move(r.exp_avg_sq));
  }
  return out;
}

}  // namespace

SGDState sgd_init(const std::vector<Tensor>& params, const SGDOptions& options) {
  detail::check_sgd_hyperparameters("functional::sgd_init", options.momentum, options.dampening,
                                    options.weight_decay, options.nesterov ? 1.0 : 0.0);
  SGDState state;
  if (options.momentum != 0.0) state.momentum_buffers = zeros_like_each("functional::sgd_init", params);
  return state;
}

SGDStepResult sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const SGDState& state,
                  const SGDOptions& options) {
  constexpr const char* kName = "functional::sgd";
  check_step(kName, params, grads, options.lr, state.step, true);
  detail::check_sgd_hyperparameters(kName, options.momentum, options.dampening, options.weight_decay,
                                    options.nesterov ? 1.0 : 0.0);
  const bool momentum = options.momentum != 0.0;
  if (momentum) {
    if (state.momentum_buffers.empty() && !params.empty()) {
      throw ValueError(std::string(kName) +
                       ": momentum > 0 but the state has no momentum buffers (make it with sgd_init and the same "
                       "options)");
    }
    check_like_params(kName, "state.momentum_buffers", params, state.momentum_buffers);
  } else if (!state.momentum_buffers.empty()) {
    throw ValueError(std::string(kName) +
                     ": momentum is 0 but the state has momentum buffers (made by sgd_init with momentum > 0)");
  }
  SGDStepResult out;
  out.state.step = state.step + 1;
  const bool first = state.step == 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!momentum) {
      out.params.push_back(sgd_step(params[i], grads[i], options.lr, options.weight_decay));
      continue;
    }
    SgdMomentumResult r = sgd_momentum_step(params[i], grads[i], state.momentum_buffers[i],
                                            detail::sgd_momentum_update(options, options.lr, first));
    // The first buffer is the gradient itself when there is no weight decay:
    // a copy, so that the state never shares storage with an argument.
    if (r.buffer.impl() == grads[i].impl()) r.buffer = r.buffer.clone();
    out.params.push_back(std::move(r.param));
    out.state.momentum_buffers.push_back(std::move(r.buffer));
  }
  return out;
}

AdamState adam_init(const std::vector<Tensor>& params) {
  AdamState state;
  state.exp_avg = zeros_like_each("functional::adam_init", params);
  state.exp_avg_sq = zeros_like_each("functional::adam_init", params);
  return state;
}

AdamStepResult adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const AdamState& state,
                    const AdamOptions& options) {
  return adam_like("functional::adam", params, grads, state, options, false);
}

AdamStepResult adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const AdamState& state,
                     const AdamOptions& options) {
  return adam_like("functional::adamw", params, grads, state, options, true);
}

}  // namespace strata::nn::functional
