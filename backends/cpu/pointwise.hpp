// pointwise.hpp — the functors of the CPU plugin's unary ops, of add, sub,
// mul and div, and of the backward helpers (grad, saved) -> grad, shared by
// their own kernels (unary.cpp, binary.cpp, nn.cpp) and the fused
// elementwise kernel (fused.cpp), so that a fused program computes each
// statement with the very expression the unfused op uses: the same bits.
#pragma once

#include <strata/plugin/strata_ops.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "dtype.hpp"
#include "scalar_math.hpp"

namespace strata::cpu {

// Sign-related helpers: integers wrap (neg/abs of INT_MIN is INT_MIN), floats
// keep IEEE behaviour (-0.0, NaN).
template <class C>
C negate(C x) {
  if constexpr (std::is_integral_v<C>) {
    return wrap_sub(C(0), x);
  } else {
    return -x;
  }
}
template <class C>
C absolute(C x) {
  if constexpr (std::is_integral_v<C>) {
    return x < 0 ? wrap_sub(C(0), x) : x;
  } else {
    return std::fabs(x);
  }
}

// One functor per op: UNARY(Type, op name, cost relative to a copy, expression of x).
#define STRATA_CPU_UNARY(Type, op, op_cost, ...) \
  struct Type {                                  \
    static constexpr const char* name = op;      \
    static constexpr int64_t cost = op_cost;     \
    template <class C>                           \
    C operator()(C x) const {                    \
      return __VA_ARGS__;                        \
    }                                            \
  }

STRATA_CPU_UNARY(Neg, STRATA_OP_NEG, 1, negate(x));
STRATA_CPU_UNARY(Abs, STRATA_OP_ABS, 1, absolute(x));
STRATA_CPU_UNARY(Sign, STRATA_OP_SIGN, 1, is_nan(x) ? x : C((x > C(0)) - (x < C(0))));
STRATA_CPU_UNARY(Relu, STRATA_OP_RELU, 1, x < C(0) ? C(0) : x);  // NaN passes through
STRATA_CPU_UNARY(Exp, STRATA_OP_EXP, 8, exp_of(x));
STRATA_CPU_UNARY(Log, STRATA_OP_LOG, 8, log_of(x));
STRATA_CPU_UNARY(Log1p, STRATA_OP_LOG1P, 8, log1p_of(x));
STRATA_CPU_UNARY(Expm1, STRATA_OP_EXPM1, 8, expm1_of(x));
STRATA_CPU_UNARY(Sqrt, STRATA_OP_SQRT, 2, std::sqrt(x));
STRATA_CPU_UNARY(Rsqrt, STRATA_OP_RSQRT, 2, C(1) / std::sqrt(x));
STRATA_CPU_UNARY(Sin, STRATA_OP_SIN, 8, sin_of(x));
STRATA_CPU_UNARY(Cos, STRATA_OP_COS, 8, cos_of(x));
STRATA_CPU_UNARY(Atan, STRATA_OP_ATAN, 8, atan_of(x));
STRATA_CPU_UNARY(Tanh, STRATA_OP_TANH, 8, tanh_of(x));
STRATA_CPU_UNARY(Sigmoid, STRATA_OP_SIGMOID, 8, sigmoid_of(x));
STRATA_CPU_UNARY(Erf, STRATA_OP_ERF, 8, erf_of(x));
STRATA_CPU_UNARY(Floor, STRATA_OP_FLOOR, 1, std::floor(x));
STRATA_CPU_UNARY(Ceil, STRATA_OP_CEIL, 1, std::ceil(x));
STRATA_CPU_UNARY(Round, STRATA_OP_ROUND, 1, std::nearbyint(x));  // default rounding mode: half to even
STRATA_CPU_UNARY(Reciprocal, STRATA_OP_RECIPROCAL, 1, C(1) / x);
STRATA_CPU_UNARY(LogicalNot, STRATA_OP_LOGICAL_NOT, 1, !x);

#undef STRATA_CPU_UNARY

// Arithmetic, as the binary kernels compute it: integers wrap, floats are IEEE.
#define STRATA_CPU_ARITH(Type, op, wrap)      \
  struct Type {                               \
    static constexpr const char* name = op;   \
    template <class C>                        \
    C operator()(C a, C b) const {            \
      return wrap(a, b);                      \
    }                                         \
  }
STRATA_CPU_ARITH(Add, STRATA_OP_ADD, wrap_add);
STRATA_CPU_ARITH(Sub, STRATA_OP_SUB, wrap_sub);
STRATA_CPU_ARITH(Mul, STRATA_OP_MUL, wrap_mul);
#undef STRATA_CPU_ARITH
/// Division's value: IEEE for floats; truncating for integers, INT_MIN / -1
/// wrapping (binary.cpp's Div adds the refusal of a zero integer divisor).
struct DivValue {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return b == C(-1) ? wrap_sub(C(0), a) : a / b;
    } else {
      return a / b;
    }
  }
};

struct ReluBackward {  // (grad, x)
  static constexpr const char* name = STRATA_OP_RELU_BACKWARD;
  template <class C>
  C operator()(C g, C x) const {
    return x > C(0) ? g : C(0);
  }
};

struct SigmoidBackward {  // (grad, y = sigmoid(x))
  static constexpr const char* name = STRATA_OP_SIGMOID_BACKWARD;
  template <class C>
  C operator()(C g, C y) const {
    return g * y * (C(1) - y);
  }
};

struct TanhBackward {  // (grad, y = tanh(x))
  static constexpr const char* name = STRATA_OP_TANH_BACKWARD;
  template <class C>
  C operator()(C g, C y) const {
    return g * (C(1) - y * y);
  }
};

}  // namespace strata::cpu
