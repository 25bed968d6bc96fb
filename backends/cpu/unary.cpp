// unary.cpp — elementwise unary primitives (docs/ops.md, "Elementwise unary").
#include "elementwise.hpp"

#include <cmath>
#include <type_traits>

namespace strata::cpu {
namespace {

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

// One functor per op: UNARY(Type, "op", cost relative to a copy, expression of x).
#define STRATA_CPU_UNARY(Type, op, op_cost, ...)                   \
  struct Type {                                                     \
    static constexpr const char* name = op;                         \
    static constexpr int64_t cost = op_cost;                        \
    template <class C>                                              \
    C operator()(C x) const {                                       \
      return __VA_ARGS__;                                           \
    }                                                               \
  }

STRATA_CPU_UNARY(Neg, "neg", 1, negate(x));
STRATA_CPU_UNARY(Abs, "abs", 1, absolute(x));
STRATA_CPU_UNARY(Sign, "sign", 1, is_nan(x) ? x : C((x > C(0)) - (x < C(0))));
STRATA_CPU_UNARY(Relu, "relu", 1, x < C(0) ? C(0) : x);  // NaN passes through
STRATA_CPU_UNARY(Exp, "exp", 8, std::exp(x));
STRATA_CPU_UNARY(Log, "log", 8, std::log(x));
STRATA_CPU_UNARY(Log1p, "log1p", 8, std::log1p(x));
STRATA_CPU_UNARY(Expm1, "expm1", 8, std::expm1(x));
STRATA_CPU_UNARY(Sqrt, "sqrt", 2, std::sqrt(x));
STRATA_CPU_UNARY(Rsqrt, "rsqrt", 2, C(1) / std::sqrt(x));
STRATA_CPU_UNARY(Sin, "sin", 8, std::sin(x));
STRATA_CPU_UNARY(Cos, "cos", 8, std::cos(x));
STRATA_CPU_UNARY(Tanh, "tanh", 8, std::tanh(x));
STRATA_CPU_UNARY(Sigmoid, "sigmoid", 8, C(1) / (C(1) + std::exp(-x)));
STRATA_CPU_UNARY(Erf, "erf", 8, std::erf(x));
STRATA_CPU_UNARY(Floor, "floor", 1, std::floor(x));
STRATA_CPU_UNARY(Ceil, "ceil", 1, std::ceil(x));
STRATA_CPU_UNARY(Round, "round", 1, std::nearbyint(x));  // default rounding mode: half to even
STRATA_CPU_UNARY(Reciprocal, "reciprocal", 1, C(1) / x);
STRATA_CPU_UNARY(LogicalNot, "logical_not", 1, !x);

#undef STRATA_CPU_UNARY

}  // namespace

void register_unary_kernels(KernelTable& table) {
  constexpr FloatTypes f;
  constexpr NumericTypes num;
  add_unary<Neg>(table, num);
  add_unary<Abs>(table, num);
  add_unary<Sign>(table, num);
  add_unary<Relu>(table, num);
  add_unary<Exp>(table, f);
  add_unary<Log>(table, f);
  add_unary<Log1p>(table, f);
  add_unary<Expm1>(table, f);
  add_unary<Sqrt>(table, f);
  add_unary<Rsqrt>(table, f);
  add_unary<Sin>(table, f);
  add_unary<Cos>(table, f);
  add_unary<Tanh>(table, f);
  add_unary<Sigmoid>(table, f);
  add_unary<Erf>(table, f);
  add_unary<Floor>(table, f);
  add_unary<Ceil>(table, f);
  add_unary<Round>(table, f);
  add_unary<Reciprocal>(table, f);
  add_unary<LogicalNot>(table, TypeList<bool8>{});
}

}  // namespace strata::cpu
