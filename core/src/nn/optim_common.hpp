// optim_common.hpp — what the stateful optimizers (optim.cpp) and the
// functional ones (functional_optim.cpp) share: the hyperparameter checks,
// so both accept the same options and word a refusal the same way, and the
// translation of options into the update ops' arguments, so both run the
// same update.
#pragma once

#include <cstdint>
#include <strata/nn/optim.hpp>
#include <strata/ops.hpp>
#include <string_view>

namespace strata::nn::detail {

/// ValueError "<owner>: <name> must be ..." unless momentum, dampening and
/// weight_decay are >= 0, nesterov is 0 or 1, and Nesterov comes with
/// momentum > 0 and dampening 0 (PyTorch's rules).
void check_sgd_hyperparameters(std::string_view owner, double momentum, double dampening, double weight_decay,
                               double nesterov);

/// ValueError "<owner>: <name> must be ..." unless beta1 and beta2 are in
/// [0, 1) and eps and weight_decay are >= 0.
void check_adam_hyperparameters(std::string_view owner, double beta1, double beta2, double eps,
                                double weight_decay);

/// The arguments of sgd_momentum_step(_) for `options` at learning rate `lr`.
SgdMomentumUpdate sgd_momentum_update(const SGDOptions& options, double lr, bool first);

/// The arguments of adam_step(_) for update number `step` (1 for the first)
/// at learning rate `lr`: the bias corrections computed in double on the
/// host, weight decay as an L2 term (Adam) or `decoupled` (AdamW).
AdamUpdate adam_update(const AdamOptions& options, double lr, int64_t step, bool decoupled);

}  // namespace strata::nn::detail
