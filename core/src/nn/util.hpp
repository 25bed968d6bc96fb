// util.hpp — small helpers shared by the training toolkit's sources.
#pragma once

#include <span>
#include <strata/dtype.hpp>
#include <strata/tensor.hpp>
#include <string>

namespace strata::nn {
class Module;
}  // namespace strata::nn

namespace strata::nn::detail {

/// Whether backward hooks are registered on `layer` (hooks.cpp).
bool has_backward_hooks(const Module& layer);

/// Formats a double without trailing noise ("0.5", "1e-08").
std::string num(double v);

}  // namespace strata::nn::detail
