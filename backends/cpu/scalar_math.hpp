// scalar_math.hpp — exp, log, tanh and sigmoid of a compute type, for the
// kernels' functors: SLEEF's (vector_math.hpp) for f32 (and f16/bf16, which
// compute in f32), so that every kernel and every layout gives the bits the
// vectorised f32 loops give; the C library's for f64. Not for the ISA
// translation units (vector_math_*.cpp), which must stay free of shared
// inline code.
#pragma once

#include "vector_math.hpp"

#include <cmath>
#include <type_traits>

namespace strata::cpu {

template <class C>
C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return vmath::exp(x);
  } else {
    return std::exp(x);
  }
}
template <class C>
C log_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return vmath::log(x);
  } else {
    return std::log(x);
  }
}
template <class C>
C tanh_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return vmath::tanh(x);
  } else {
    return std::tanh(x);
  }
}
template <class C>
C sigmoid_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return vmath::sigmoid(x);
  } else {
    return C(1) / (C(1) + std::exp(-x));
  }
}

}  // namespace strata::cpu
