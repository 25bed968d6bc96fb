// strata.hpp — everything of the public C++ API.
#pragma once

#include <strata/amp.hpp>
#include <strata/autograd.hpp>
#include <strata/checkpoint.hpp>
#include <strata/compile.hpp>
#include <strata/config.hpp>
#include <strata/custom_function.hpp>
#include <strata/device.hpp>
#include <strata/dtype.hpp>
#include <strata/error.hpp>
#include <strata/transforms.hpp>
#include <strata/vmap.hpp>
#include <strata/graph.hpp>
#include <strata/implicit.hpp>
#include <strata/log.hpp>
#include <strata/nn.hpp>
#include <strata/ops.hpp>
#include <strata/runtime.hpp>
#include <strata/serialize.hpp>
#include <strata/tensor.hpp>
