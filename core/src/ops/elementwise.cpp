// elementwise.cpp — unary, binary, comparison and selection ops.
//
// One op, one place: each op is defined here once (name, kind, rule); the
// autograd issue adds its VJP and JVP next to the rule.
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {
using detail::dispatch1;
using detail::define_op;
using detail::OpDef;
using detail::OpKind;
namespace rules = detail::rules;

OpDef unary(std::string_view name, void (*rule)(detail::OpCall&)) {
  return OpDef{.name = name, .kind = OpKind::primitive, .n_inputs = 1, .prepare = rule};
}
OpDef binary(std::string_view name, void (*rule)(detail::OpCall&)) {
  return OpDef{.name = name, .kind = OpKind::primitive, .n_inputs = 2, .prepare = rule};
}

// --- unary ---------------------------------------------------------------
const OpDef& kNeg = define_op(unary("neg", rules::unary_numeric));
const OpDef& kAbs = define_op(unary("abs", rules::unary_numeric));
const OpDef& kSign = define_op(unary("sign", rules::unary_numeric));
const OpDef& kRelu = define_op(unary("relu", rules::unary_numeric));
const OpDef& kExp = define_op(unary("exp", rules::unary_float));
const OpDef& kLog = define_op(unary("log", rules::unary_float));
const OpDef& kLog1p = define_op(unary("log1p", rules::unary_float));
const OpDef& kExpm1 = define_op(unary("expm1", rules::unary_float));
const OpDef& kSqrt = define_op(unary("sqrt", rules::unary_float));
const OpDef& kRsqrt = define_op(unary("rsqrt", rules::unary_float));
const OpDef& kSin = define_op(unary("sin", rules::unary_float));
const OpDef& kCos = define_op(unary("cos", rules::unary_float));
const OpDef& kTanh = define_op(unary("tanh", rules::unary_float));
const OpDef& kSigmoid = define_op(unary("sigmoid", rules::unary_float));
const OpDef& kErf = define_op(unary("erf", rules::unary_float));
const OpDef& kFloor = define_op(unary("floor", rules::unary_float));
const OpDef& kCeil = define_op(unary("ceil", rules::unary_float));
const OpDef& kRound = define_op(unary("round", rules::unary_float));
const OpDef& kReciprocal = define_op(unary("reciprocal", rules::unary_float));
const OpDef& kLogicalNot = define_op(unary("logical_not", rules::logical));

// --- binary --------------------------------------------------------------
const OpDef& kAdd = define_op(binary("add", rules::binary_arith));
const OpDef& kSub = define_op(binary("sub", rules::binary_arith));
const OpDef& kMul = define_op(binary("mul", rules::binary_arith));
const OpDef& kDiv = define_op(binary("div", rules::binary_float));
const OpDef& kPow = define_op(binary("pow", rules::binary_float));
const OpDef& kMaximum = define_op(binary("maximum", rules::binary_arith));
const OpDef& kMinimum = define_op(binary("minimum", rules::binary_arith));
const OpDef& kLogicalAnd = define_op(binary("logical_and", rules::logical));
const OpDef& kLogicalOr = define_op(binary("logical_or", rules::logical));
const OpDef& kEq = define_op(binary("eq", rules::compare));
const OpDef& kNe = define_op(binary("ne", rules::compare));
const OpDef& kLt = define_op(binary("lt", rules::compare_ordered));
const OpDef& kLe = define_op(binary("le", rules::compare_ordered));
const OpDef& kGt = define_op(binary("gt", rules::compare_ordered));
const OpDef& kGe = define_op(binary("ge", rules::compare_ordered));

// --- selection -------------------------------------------------------------
void where_rule(detail::OpCall& call) {
  DType t = promote_types(call.in(1).dtype(), call.in(2).dtype());
  Shape shape = detail::broadcast_shapes(call.in(0).shape(), call.in(1).shape(), call);
  shape = detail::broadcast_shapes(shape, call.in(2).shape(), call);
  detail::cast_input(call, 0, DType::boolean);
  for (int k = 0; k < 3; ++k) detail::expand_input(call, k, shape);
  detail::cast_input(call, 1, t);
  detail::cast_input(call, 2, t);
  call.out().dtype = t;
  call.out().set_shape(shape);
}
const OpDef& kWhere = define_op({.name = "where", .kind = OpKind::primitive, .n_inputs = 3, .prepare = where_rule});

/// A C++ scalar as a 0-d tensor beside `t`: it keeps t's dtype category
/// (f32 tensor * 2.5 stays f32; i64 tensor * 2.5 becomes f32).
Tensor scalar_like(const Tensor& t, double value) {
  DType dtype = t.dtype();
  bool integral_value = value == static_cast<double>(static_cast<int64_t>(value));
  if (!is_floating(dtype)) dtype = integral_value ? (dtype == DType::boolean ? DType::i64 : dtype) : DType::f32;
  return scalar_tensor(value, {.dtype = dtype, .device = t.device()});
}

}  // namespace

Tensor neg(const Tensor& x) { return dispatch1(kNeg, {x}); }
Tensor abs(const Tensor& x) { return dispatch1(kAbs, {x}); }
Tensor sign(const Tensor& x) { return dispatch1(kSign, {x}); }
Tensor relu(const Tensor& x) { return dispatch1(kRelu, {x}); }
Tensor exp(const Tensor& x) { return dispatch1(kExp, {x}); }
Tensor log(const Tensor& x) { return dispatch1(kLog, {x}); }
Tensor log1p(const Tensor& x) { return dispatch1(kLog1p, {x}); }
Tensor expm1(const Tensor& x) { return dispatch1(kExpm1, {x}); }
Tensor sqrt(const Tensor& x) { return dispatch1(kSqrt, {x}); }
Tensor rsqrt(const Tensor& x) { return dispatch1(kRsqrt, {x}); }
Tensor sin(const Tensor& x) { return dispatch1(kSin, {x}); }
Tensor cos(const Tensor& x) { return dispatch1(kCos, {x}); }
Tensor tanh(const Tensor& x) { return dispatch1(kTanh, {x}); }
Tensor sigmoid(const Tensor& x) { return dispatch1(kSigmoid, {x}); }
Tensor erf(const Tensor& x) { return dispatch1(kErf, {x}); }
Tensor floor(const Tensor& x) { return dispatch1(kFloor, {x}); }
Tensor ceil(const Tensor& x) { return dispatch1(kCeil, {x}); }
Tensor round(const Tensor& x) { return dispatch1(kRound, {x}); }
Tensor reciprocal(const Tensor& x) { return dispatch1(kReciprocal, {x}); }
Tensor logical_not(const Tensor& x) { return dispatch1(kLogicalNot, {x}); }
Tensor square(const Tensor& x) { return mul(x, x); }

Tensor add(const Tensor& a, const Tensor& b) { return dispatch1(kAdd, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return dispatch1(kSub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return dispatch1(kMul, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return dispatch1(kDiv, {a, b}); }
Tensor pow(const Tensor& a, const Tensor& b) { return dispatch1(kPow, {a, b}); }
Tensor pow(const Tensor& a, double exponent) { return pow(a, scalar_like(a, exponent)); }
Tensor maximum(const Tensor& a, const Tensor& b) { return dispatch1(kMaximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return dispatch1(kMinimum, {a, b}); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return dispatch1(kLogicalAnd, {a, b}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return dispatch1(kLogicalOr, {a, b}); }
Tensor eq(const Tensor& a, const Tensor& b) { return dispatch1(kEq, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return dispatch1(kNe, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return dispatch1(kLt, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return dispatch1(kLe, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return dispatch1(kGt, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return dispatch1(kGe, {a, b}); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return dispatch1(kWhere, {cond, a, b}); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  if (lo > hi) throw Error("clamp: lower bound " + std::to_string(lo) + " exceeds upper bound " + std::to_string(hi));
  return minimum(maximum(x, scalar_like(x, lo)), scalar_like(x, hi));
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(b, a), b); }

}  // namespace strata
