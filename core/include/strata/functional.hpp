// functional.hpp — DEPRECATED name of strata/transforms.hpp (grad, jvp, vjp,
// jacrev, hessian, ...), kept for one release so that existing includes
// build; it was easy to confuse with strata/nn/functional.hpp (the layers'
// functions: linear, conv2d, losses). Include <strata/transforms.hpp>.
#pragma once

#include <strata/transforms.hpp>
