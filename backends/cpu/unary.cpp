// unary.cpp — elementwise unary primitives (docs/ops.md, "Elementwise unary").
#include "elementwise.hpp"
#include "scalar_math.hpp"
#include "vector_math.hpp"

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

// One functor per op: UNARY(Type, op name, cost relative to a copy, expression of x).
#define STRATA_CPU_UNARY(Type, op, op_cost, ...)                   \
  struct Type {                                                     \
    static constexpr const char* name = op;                         \
    static constexpr int64_t cost = op_cost;                        \
    template <class C>                                              \
    C operator()(C x) const {                                       \
      return __VA_ARGS__;                                           \
    }                                                               \
  }

STRATA_CPU_UNARY(Neg, STRATA_OP_NEG, 1, negate(x));
STRATA_CPU_UNARY(Abs, STRATA_OP_ABS, 1, absolute(x));
STRATA_CPU_UNARY(Sign, STRATA_OP_SIGN, 1, is_nan(x) ? x : C((x > C(0)) - (x < C(0))));
STRATA_CPU_UNARY(Relu, STRATA_OP_RELU, 1, x < C(0) ? C(0) : x);  // NaN passes through
STRATA_CPU_UNARY(Exp, STRATA_OP_EXP, 8, exp_of(x));
STRATA_CPU_UNARY(Log, STRATA_OP_LOG, 8, log_of(x));
STRATA_CPU_UNARY(Log1p, STRATA_OP_LOG1P, 8, std::log1p(x));
STRATA_CPU_UNARY(Expm1, STRATA_OP_EXPM1, 8, std::expm1(x));
STRATA_CPU_UNARY(Sqrt, STRATA_OP_SQRT, 2, std::sqrt(x));
STRATA_CPU_UNARY(Rsqrt, STRATA_OP_RSQRT, 2, C(1) / std::sqrt(x));
STRATA_CPU_UNARY(Sin, STRATA_OP_SIN, 8, std::sin(x));
STRATA_CPU_UNARY(Cos, STRATA_OP_COS, 8, std::cos(x));
STRATA_CPU_UNARY(Atan, STRATA_OP_ATAN, 8, std::atan(x));
STRATA_CPU_UNARY(Tanh, STRATA_OP_TANH, 8, tanh_of(x));
STRATA_CPU_UNARY(Sigmoid, STRATA_OP_SIGMOID, 8, sigmoid_of(x));
STRATA_CPU_UNARY(Erf, STRATA_OP_ERF, 8, std::erf(x));
STRATA_CPU_UNARY(Floor, STRATA_OP_FLOOR, 1, std::floor(x));
STRATA_CPU_UNARY(Ceil, STRATA_OP_CEIL, 1, std::ceil(x));
STRATA_CPU_UNARY(Round, STRATA_OP_ROUND, 1, std::nearbyint(x));  // default rounding mode: half to even
STRATA_CPU_UNARY(Reciprocal, STRATA_OP_RECIPROCAL, 1, C(1) / x);
STRATA_CPU_UNARY(LogicalNot, STRATA_OP_LOGICAL_NOT, 1, !x);

#undef STRATA_CPU_UNARY

/// f32 exp, log, tanh and sigmoid on compact tensors: SLEEF's array loops in
/// the widest instruction set allowed (vector_math.hpp), split across
/// threads; other layouts take the elementwise loop with the same scalar
/// function, which gives the same bits.
template <class Loop, void (*Array)(const float*, float*, int64_t) noexcept>
struct VectorUnary {
  static constexpr const char* name = Loop::name;
  using signature = float(float);
  static constexpr uint32_t flags = kStrided;

  static strata_status run(const KernelCall& call) {
    const strata_tensor &x = call.in(0), &y = call.out();
    if (!same_shape(x, y) || !plugin::is_contiguous(x) || !plugin::is_contiguous(y)) {
      return Elementwise<Loop, float, float>::run(call);
    }
    const float* src = data<const float>(x);
    float* dst = data<float>(y);
    parallel_for(
        plugin::numel(y), call.threads, [&](int64_t b, int64_t e) { Array(src + b, dst + b, e - b); },
        op_cost<Loop>());
    return STRATA_OK;
  }
};

}  // namespace

void register_unary_kernels(plugin::KernelTable& table) {
  constexpr FloatTypes f;
  constexpr NumericTypes num;
  // f32 of these runs SLEEF's array loops (VectorUnary); the other float types loop.
  constexpr TypeList<double, f16, bf16> f_but_f32;
  add<VectorUnary<Tanh, vmath::tanh>>(table);
  add<VectorUnary<Exp, vmath::exp>>(table);
  add<VectorUnary<Sigmoid, vmath::sigmoid>>(table);
  add<VectorUnary<Log, vmath::log>>(table);
  add_unary<Neg>(table, num);
  add_unary<Abs>(table, num);
  add_unary<Sign>(table, num);
  add_unary<Relu>(table, num);
  add_unary<Exp>(table, f_but_f32);
  add_unary<Log>(table, f_but_f32);
  add_unary<Log1p>(table, f);
  add_unary<Expm1>(table, f);
  add_unary<Atan>(table, f);
  add_unary<Sqrt>(table, f);
  add_unary<Rsqrt>(table, f);
  add_unary<Sin>(table, f);
  add_unary<Cos>(table, f);
  add_unary<Tanh>(table, f_but_f32);
  add_unary<Sigmoid>(table, f_but_f32);
  add_unary<Erf>(table, f);
  add_unary<Floor>(table, f);
  add_unary<Ceil>(table, f);
  add_unary<Round>(table, f);
  add_unary<Reciprocal>(table, f);
  add_unary<LogicalNot>(table, TypeList<bool8>{});
}

}  // namespace strata::cpu
