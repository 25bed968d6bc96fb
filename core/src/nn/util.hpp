// util.hpp — small helpers shared by the training toolkit's sources.
#pragma once

#include <span>
#include <strata/dtype.hpp>
#include <strata/tensor.hpp>
#include <string>

namespace strata::nn::detail {

/// "[2, 3]".
inline std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

/// "f32[2, 3]" (or "undefined").
inline std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + shape_str(t.shape());
}

/// Formats a double without trailing noise ("0.5", "1e-08").
std::string num(double v);

}  // namespace strata::nn::detail
