// nn.hpp — the training toolkit (strata::nn): modules and layers, parameter
// initialisers, losses and other functional building blocks, optimizers
// (stateful, and functional ones that an outer tape differentiates through),
// learning-rate schedules and gradient clipping. See docs/training.md.
#pragma once

#include <strata/nn/clip.hpp>
#include <strata/nn/functional.hpp>
#include <strata/nn/functional_optim.hpp>
#include <strata/nn/hooks.hpp>
#include <strata/nn/init.hpp>
#include <strata/nn/layers.hpp>
#include <strata/nn/lr_scheduler.hpp>
#include <strata/nn/module.hpp>
#include <strata/nn/optim.hpp>
