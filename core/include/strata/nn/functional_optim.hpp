// nn/functional_optim.hpp — functional optimizers: SGD, Adam and AdamW as
// pure functions (params, grads, state) -> (new params, new state).
//
// The stateful optimizers of nn/optim.hpp write each parameter in place with
// recording off, which is what ordinary training wants and what an outer
// tape cannot see through. These take the parameters and the optimizer
// state as arguments and return new tensors, computed by recorded ops:
// nothing passed in is written (values and version counters stay), so an
// enclosing GradientTape (or backward()) differentiates through one or
// several update steps — a learned initialisation (MAML), learned
// hyperparameters, unrolled optimisation. This is Optax's
// `update(grads, state, params)` and higher's / torch.func's differentiable
// optimizers, in Strata's terms.
//
//   using namespace strata::nn;
//   std::vector<Tensor> fast = model.parameters();
//   functional::SGDState state = functional::sgd_init(fast, {.lr = 0.01});
//   for (int k = 0; k < inner_steps; ++k) {
//     GradientTape tape({.higher_order = true});  // the gradient stays differentiable
//     for (const Tensor& p : fast) tape.watch(p);
//     Tensor loss = mse(functional_call(model, fast, x_support), y_support);
//     auto [next, next_state] = functional::sgd(fast, tape.gradient(loss, fast), state, {.lr = 0.01});
//     fast = std::move(next);
//     state = std::move(next_state);
//   }
//   Tensor meta_loss = mse(functional_call(model, fast, x_query), y_query);
//   meta_loss.backward();  // second-order MAML: through every inner step
//
// Each update is the out-of-place form of the fused op the stateful
// optimizer runs (sgd_step, sgd_momentum_step, adam_step in ops.hpp: the
// op's decomposition, the formula's one home), so from the same parameters,
// gradients and state both give the same values to the last bit, on every
// step (tests/nn/functional_optim_test.cpp). Hyperparameters are the
// stateful optimizers' options, with the same meaning and checks.
//
// Every parameter must have a gradient (pass zeros to leave one alone: the
// stateful optimizers skip parameters without grad(), a pure function has
// nothing to skip). Bad input — lists of different lengths, a gradient or
// state tensor whose shape, dtype or device is not its parameter's, an
// undefined tensor, a non-floating parameter, lr < 0 or another invalid
// hyperparameter — is an error (ValueError, ShapeError, DTypeError,
// DeviceError) naming the function, the list and the index, what was
// expected and what was found, raised before any op runs, so a failed call
// records nothing.
//
// Differentiating through Adam: the update divides by √v, whose derivative
// is infinite where v = 0. A gradient element that is exactly zero on the
// first step (v = 0 there) therefore gives NaN in the derivative of the
// update, as in every framework that differentiates the textbook formula
// (higher, Optax). SGD has no such point.
#pragma once

#include <cstdint>
#include <strata/nn/optim.hpp>
#include <strata/tensor.hpp>
#include <vector>

namespace strata::nn::functional {

/// SGD's state: one momentum buffer per parameter (empty without momentum)
/// and the number of steps taken. While `step` is 0 the buffers are not
/// read: the first step sets each to its gradient, as nn::SGD does.
struct SGDState {
  std::vector<Tensor> momentum_buffers;
  int64_t step = 0;
};

/// A step's results: the new parameters (same order) and the new state.
struct SGDStepResult {
  std::vector<Tensor> params;
  SGDState state;
};

/// The state before the first step: zero buffers shaped like `params` when
/// options.momentum > 0, none otherwise. The options are checked as sgd()
/// checks them.
SGDState sgd_init(const std::vector<Tensor>& params, const SGDOptions& options);

/// One SGD step (nn::SGD's update: weight decay, momentum with dampening,
/// Nesterov), out of place: g ← grad + wd·p; with momentum μ, b ← g on the
/// first step, else μ·b + (1 − dampening)·g, and g ← b, or g + μ·b with
/// Nesterov; p ← p − lr·g. `state` must come from sgd_init() with the same
/// momentum setting (or an earlier sgd()).
SGDStepResult sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const SGDState& state,
                  const SGDOptions& options);

/// Adam's state: the first and second moments, one of each per parameter,
/// and the number of steps taken (the bias corrections' t, counted on the
/// host so that they are computed in double, as nn::Adam does). While
/// `step` is 0 the moments are not read.
struct AdamState {
  std::vector<Tensor> exp_avg;
  std::vector<Tensor> exp_avg_sq;
  int64_t step = 0;
};

/// A step's results: the new parameters (same order) and the new state.
struct AdamStepResult {
  std::vector<Tensor> params;
  AdamState state;
};

/// The state before the first step: zero moments shaped like `params`.
/// Also the state of adamw().
AdamState adam_init(const std::vector<Tensor>& params);

/// One Adam step (nn::Adam: L2 weight decay added to the gradient), out of
/// place: m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², t ← t + 1,
/// p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps).
AdamStepResult adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const AdamState& state,
                    const AdamOptions& options = {});

/// One AdamW step (nn::AdamW: decoupled weight decay, p ← p·(1 − lr·wd)
/// before the Adam update; default weight_decay 0.01, as nn::AdamW).
AdamStepResult adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const AdamState& state,
                     const AdamOptions& options = {.weight_decay = 0.01});

}  // namespace strata::nn::functional
