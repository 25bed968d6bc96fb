// unary.cpp — elementwise unary primitives (docs/ops.md, "Elementwise unary").
#include "elementwise.hpp"
#include "pointwise.hpp"
#include "vector_math.hpp"

#include <cmath>
#include <type_traits>

namespace strata::cpu {
namespace {


/// f32 exp, log, tanh, sigmoid, sin, cos, atan, erf, log1p and expm1 on
/// compact tensors: SLEEF's array loops in
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
  add<VectorUnary<Log1p, vmath::log1p>>(table);
  add<VectorUnary<Expm1, vmath::expm1>>(table);
  add<VectorUnary<Sin, vmath::sin>>(table);
  add<VectorUnary<Cos, vmath::cos>>(table);
  add<VectorUnary<Atan, vmath::atan>>(table);
  add<VectorUnary<Erf, vmath::erf>>(table);
  add_unary<Neg>(table, num);
  add_unary<Abs>(table, num);
  add_unary<Sign>(table, num);
  add_unary<Relu>(table, num);
  add_unary<Exp>(table, f_but_f32);
  add_unary<Log>(table, f_but_f32);
  add_unary<Log1p>(table, f_but_f32);
  add_unary<Expm1>(table, f_but_f32);
  add_unary<Atan>(table, f_but_f32);
  add_unary<Sqrt>(table, f);
  add_unary<Rsqrt>(table, f);
  add_unary<Sin>(table, f_but_f32);
  add_unary<Cos>(table, f_but_f32);
  add_unary<Tanh>(table, f_but_f32);
  add_unary<Sigmoid>(table, f_but_f32);
  add_unary<Erf>(table, f_but_f32);
  add_unary<Floor>(table, f);
  add_unary<Ceil>(table, f);
  add_unary<Round>(table, f);
  add_unary<Reciprocal>(table, f);
  add_unary<LogicalNot>(table, TypeList<bool8>{});
}

}  // namespace strata::cpu
