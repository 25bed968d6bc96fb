// scalar_math.hpp — exp, log, tanh, sigmoid and the other transcendental
// functions of vector_math.hpp of a compute type, for the
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

/// exp_of, log_of, tanh_of, sin_of, cos_of, atan_of, erf_of, log1p_of,
/// expm1_of: SLEEF's for f32, the C library's otherwise.
#define STRATA_CPU_FLOAT_MATH(fn)                  \
  template <class C>                               \
  C fn##_of(C x) {                                 \
    if constexpr (std::is_same_v<C, float>) {      \
      return vmath::fn(x);                         \
    } else {                                       \
      return std::fn(x);                           \
    }                                              \
  }
STRATA_VMATH_SLEEF_FUNCTIONS(STRATA_CPU_FLOAT_MATH)
#undef STRATA_CPU_FLOAT_MATH

template <class C>
C sigmoid_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return vmath::sigmoid(x);
  } else {
    return C(1) / (C(1) + std::exp(-x));
  }
}

}  // namespace strata::cpu
