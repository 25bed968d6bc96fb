// optim_cases.hpp — the optimizer settings and dtypes that the update
// equality tests (fused_optim_test.cpp, functional_optim_test.cpp) run
// through: every SGD variant (weight decay, momentum, dampening, Nesterov)
// and Adam with default and non-default hyperparameters.
#pragma once

#include <strata/strata.hpp>

namespace nn_test {

inline const strata::nn::SGDOptions kSgdCases[] = {
    {.lr = 0.1},
    {.lr = 0.05, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.9},
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3},
    {.lr = 0.02, .momentum = 0.8, .weight_decay = 1e-2, .nesterov = true},
};

inline const strata::nn::AdamOptions kAdamCases[] = {
    {.lr = 1e-3},
    {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.01},
};

/// Two dtypes with fused CPU kernels, two that run the decompositions.
inline const strata::DType kUpdateDtypes[] = {strata::DType::f32, strata::DType::f64, strata::DType::bf16,
                                              strata::DType::f16};

}  // namespace nn_test
