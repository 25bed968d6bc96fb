// elementwise.cpp — unary, binary, comparison and selection ops.
//
// One op, one place: each op is defined here once (name, kind, shape rule)
// with its derivative. Elementwise derivatives are diagonal, so one map of g
// (output gradient in reverse mode, input tangent in forward mode) gives both
// the VJP and the JVP (derivatives.hpp). Comparisons and logical ops have no
// derivative; sign, floor, ceil and round have a zero one (as in PyTorch).
// Ops built with `complex_too` also take c64 and c128 (docs/complex.md):
// their rules keep complex dtypes, and their derivatives follow PyTorch's
// convention (the VJP of a holomorphic op conjugates f', derivatives.hpp).
#include "derivatives.hpp"
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <numbers>

namespace strata {

namespace {

using namespace detail::op_vocabulary;
using detail::dispatch1;

// The tags of the op families below.
constexpr detail::OpTags kUnary = tag::pointwise;
constexpr detail::OpTags kBinary = tag::pointwise | tag::broadcasting;
constexpr detail::OpTags kPredicate = tag::pointwise | tag::broadcasting | tag::predicate;

// Test domains (OpDef::domain): where the checks draw inputs.
constexpr detail::TestDomain kWide{.lo = -3.0, .hi = 3.0};
constexpr detail::TestDomain kPositive{.lo = 0.1, .hi = 3.0};
constexpr detail::TestDomain kKinked{.orders = 1};  // abs, relu, maximum
constexpr detail::TestDomain kFlat{.orders = 0};    // zero derivative: hand-written checks
constexpr detail::TestDomain kQuarters{.lo = -3.0, .hi = 3.0, .grid = 0.25, .orders = 0};  // ties of floor, round
constexpr detail::TestDomain kIntegers{.lo = -3.0, .hi = 3.0, .grid = 1.0, .orders = 0};   // ties of comparisons

/// maximum/minimum: g goes to the operand that `wins`; ties split it evenly.
Tensor pick(const Tensor& g, const Tensor& wins, const Tensor& tie) {
  return where(wins, g, where(tie, g * 0.5, scalar(g, 0.0)));
}

/// d(a^b)/da = b a^(b-1), and 0 where b == 0 (no NaN from 0^-1 at a = 0).
Tensor pow_base_partial(const Tensor& g, const Tensor& a, const Tensor& b) {
  return where(eq(b, scalar(b, 0.0)), scalar(g, 0.0), g * b * pow(a, b - 1.0));
}
/// d(a^b)/db = a^b log a, and 0 where a == 0 and b >= 0 (the one-sided limit;
/// the log's argument is masked too, so that second derivatives stay finite).
/// Negative bases give NaN, as in PyTorch. Complex: 0 where a == 0 (the
/// limit when Re b > 0; b is not ordered).
Tensor pow_exponent_partial(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& y) {
  Tensor zero_base = eq(a, scalar(a, 0.0));
  if (!is_complex(a.dtype())) zero_base = logical_and(zero_base, ge(b, scalar(b, 0.0)));
  return where(zero_base, scalar(g, 0.0), g * y * log(where(zero_base, scalar(a, 1.0), a)));
}

/// abs: real inputs keep their dtype; a complex input's modulus is real.
void abs_rule(detail::OpCall& call) {
  rules::unary_numeric(call);
  call.out().dtype = to_real(call.in(0).dtype());
}
/// d|x| = sign(x) for reals. For complex z, |z| is not holomorphic: its
/// VJP is g·z/|z| (PyTorch's convention: g is real, the gradient complex)
/// and its JVP Re(conj(z/|z|)·t); both 0 where z = 0.
Grads abs_vjp(const GradContext& c) {
  const Tensor &g = c.grad(0), &x = c.in(0);
  if (!g.defined()) return {Tensor()};
  return {is_complex(x.dtype()) ? g * detail::derivatives::unit_or_zero(x, c.out(0)) : g * sign(x)};
}
Grads abs_jvp(const GradContext& c) {
  const Tensor &t = c.grad(0), &x = c.in(0);
  if (!t.defined()) return {Tensor()};
  return {is_complex(x.dtype()) ? real(t * conj(detail::derivatives::unit_or_zero(x, c.out(0)))) : t * sign(x)};
}

// --- unary: STRATA_DERIVATIVE(g through f'(x)), x input, y output ----------------
// vjp_reads_inputs = 0: the VJP reads the output only; vjp_reads_outputs = 0:
// the input only; both: neither value (derivatives.hpp, "what a node keeps").
const OpDef& kNeg = define_op({.name = "neg", .tags = kUnary, .dtypes = Family::numeric, .takes_complex = true,
                               .prepare = rules::unary_numeric, .derivative = STRATA_DERIVATIVE(-g),
                               .vjp_reads_inputs = 0, .vjp_reads_outputs = 0});
const OpDef& kAbs = define_op({.name = "abs", .tags = kUnary, .dtypes = Family::numeric, .takes_complex = true,
                               .prepare = abs_rule, .derivative = {abs_vjp, abs_jvp}, .domain = kKinked});
const OpDef& kSign = define_op({.name = "sign", .tags = kUnary, .dtypes = Family::numeric,
                                .prepare = rules::unary_numeric,
                                .derivative = STRATA_DERIVATIVE(zeros_like(g)), .vjp_reads_inputs = 0,
                                .vjp_reads_outputs = 0, .domain = kFlat});
// relu's mask reads the output (y > 0 exactly where x > 0), as PyTorch saves
// the result: the input is then free to go when nothing else keeps it.
const OpDef& kRelu = define_op({.name = "relu", .tags = kUnary, .dtypes = Family::numeric,
                                .prepare = rules::unary_numeric,
                                .derivative = STRATA_DERIVATIVE(relu_backward(g, y)), .vjp_reads_inputs = 0,
                                .domain = kKinked});
const OpDef& kExp = define_op({.name = "exp", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                               .takes_complex = true, .prepare = rules::unary_float,
                               .derivative = STRATA_DERIVATIVE(g * y), .vjp_reads_inputs = 0, .domain = kWide});
const OpDef& kLog = define_op({.name = "log", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                               .takes_complex = true, .prepare = rules::unary_float,
                               .derivative = STRATA_DERIVATIVE(g / x), .vjp_reads_outputs = 0, .domain = kPositive});
const OpDef& kLog1p = define_op({.name = "log1p", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                                 .prepare = rules::unary_float, .derivative = STRATA_DERIVATIVE(g / (x + 1.0)),
                                 .vjp_reads_outputs = 0, .domain = {.lo = -0.5, .hi = 3.0}});
const OpDef& kExpm1 = define_op({.name = "expm1", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                                 .prepare = rules::unary_float, .derivative = STRATA_DERIVATIVE(g * (y + 1.0)),
                                 .vjp_reads_inputs = 0, .domain = kWide});
const OpDef& kSqrt = define_op({.name = "sqrt", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                                .takes_complex = true, .prepare = rules::unary_float,
                                .derivative = STRATA_DERIVATIVE(g / (y * 2.0)), .vjp_reads_inputs = 0,
                                .domain = kPositive});
const OpDef& kRsqrt = define_op({.name = "rsqrt", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                                 .prepare = rules::unary_float, .derivative = STRATA_DERIVATIVE(g * (y * y * y) * -0.5),
                                 .vjp_reads_inputs = 0, .domain = kPositive});
const OpDef& kSin = define_op({.name = "sin", .tags = kUnary, .dtypes = Family::floating, .prepare = rules::unary_float,
                               .derivative = STRATA_DERIVATIVE(g * cos(x)), .vjp_reads_outputs = 0, .domain = kWide});
const OpDef& kCos = define_op({.name = "cos", .tags = kUnary, .dtypes = Family::floating, .prepare = rules::unary_float,
                               .derivative = STRATA_DERIVATIVE(-g * sin(x)), .vjp_reads_outputs = 0, .domain = kWide});
const OpDef& kAtan = define_op({.name = "atan", .tags = kUnary, .dtypes = Family::floating,
                                .prepare = rules::unary_float,
                                .derivative = STRATA_DERIVATIVE(g / (x * x + 1.0)), .vjp_reads_outputs = 0,
                                .domain = kWide});
const OpDef& kTanh = define_op({.name = "tanh", .tags = kUnary, .dtypes = Family::floating,
                                .prepare = rules::unary_float,
                                .derivative = STRATA_DERIVATIVE(tanh_backward(g, y)), .vjp_reads_inputs = 0});
const OpDef& kSigmoid = define_op({.name = "sigmoid", .tags = kUnary, .dtypes = Family::floating,
                                   .prepare = rules::unary_float,
                                   .derivative = STRATA_DERIVATIVE(sigmoid_backward(g, y)),
                                   .vjp_reads_inputs = 0});
const OpDef& kErf = define_op({.name = "erf", .tags = kUnary, .dtypes = Family::floating, .autocast = kFp32,
                               .prepare = rules::unary_float,
                               .derivative = STRATA_DERIVATIVE(g * exp(-(x * x)) * (2.0 * std::numbers::inv_sqrtpi)),
                               .vjp_reads_outputs = 0});
const OpDef& kFloor = define_op({.name = "floor", .tags = kUnary, .dtypes = Family::floating,
                                 .prepare = rules::unary_float, .derivative = STRATA_DERIVATIVE(zeros_like(g)),
                                 .vjp_reads_inputs = 0, .vjp_reads_outputs = 0, .domain = kQuarters});
const OpDef& kCeil = define_op({.name = "ceil", .tags = kUnary, .dtypes = Family::floating,
                                .prepare = rules::unary_float,
                                .derivative = STRATA_DERIVATIVE(zeros_like(g)), .vjp_reads_inputs = 0,
                                .vjp_reads_outputs = 0, .domain = kQuarters});
const OpDef& kRound = define_op({.name = "round", .tags = kUnary, .dtypes = Family::floating,
                                 .prepare = rules::unary_float, .derivative = STRATA_DERIVATIVE(zeros_like(g)),
                                 .vjp_reads_inputs = 0, .vjp_reads_outputs = 0, .domain = kQuarters});
const OpDef& kReciprocal = define_op({.name = "reciprocal", .tags = kUnary, .dtypes = Family::floating,
                                      .autocast = kFp32, .takes_complex = true, .prepare = rules::unary_float,
                                      .derivative = STRATA_DERIVATIVE(-g * y * y), .vjp_reads_inputs = 0,
                                      .domain = {.nonzero_input = 0}});
const OpDef& kLogicalNot = define_op({.name = "logical_not", .tags = kUnary | tag::predicate,
                                      .dtypes = Family::logical, .prepare = rules::logical, .domain = kFlat});

// --- binary: STRATA_PARTIALS(g through d/da, g through d/db), output y ------------
const OpDef& kAdd = define_op({.name = "add", .tags = kBinary, .dtypes = Family::numeric, .autocast = kPromote,
                               .n_inputs = 2, .takes_complex = true, .prepare = rules::binary_arith,
                               .derivative = STRATA_PARTIALS(g, g), .vjp_reads_inputs = 0, .vjp_reads_outputs = 0});
const OpDef& kSub = define_op({.name = "sub", .tags = kBinary, .dtypes = Family::numeric, .autocast = kPromote,
                               .n_inputs = 2, .takes_complex = true, .prepare = rules::binary_arith,
                               .derivative = STRATA_PARTIALS(g, -g), .vjp_reads_inputs = 0, .vjp_reads_outputs = 0});
const OpDef& kMul = define_op({.name = "mul", .tags = kBinary, .dtypes = Family::numeric, .autocast = kPromote,
                               .n_inputs = 2, .takes_complex = true, .prepare = rules::binary_arith,
                               .derivative = STRATA_PARTIALS(g * b, g * a), .vjp_reads_outputs = 0});
const OpDef& kDiv = define_op({.name = "div", .tags = kBinary, .dtypes = Family::floating, .autocast = kPromote,
                               .n_inputs = 2, .takes_complex = true, .prepare = rules::binary_float,
                               .derivative = STRATA_PARTIALS(g / b, -g * a / (b * b)), .vjp_reads_outputs = 0,
                               .domain = {.nonzero_input = 1}});
const OpDef& kPow = define_op({.name = "pow", .tags = kBinary, .dtypes = Family::floating, .autocast = kFp32,
                               .n_inputs = 2, .takes_complex = true, .prepare = rules::binary_float,
                               .derivative = STRATA_PARTIALS(pow_base_partial(g, a, b),
                                                             pow_exponent_partial(g, a, b, y)),
                               .domain = {.lo = 0.5, .hi = 2.0}});
const OpDef& kMaximum = define_op({.name = "maximum", .tags = kBinary, .dtypes = Family::numeric, .autocast = kPromote,
                                   .n_inputs = 2, .prepare = rules::binary_arith,
                                   .derivative = STRATA_PARTIALS(pick(g, gt(a, b), eq(a, b)),
                                                                 pick(g, lt(a, b), eq(a, b))),
                                   .vjp_reads_outputs = 0, .domain = kKinked});
const OpDef& kMinimum = define_op({.name = "minimum", .tags = kBinary, .dtypes = Family::numeric, .autocast = kPromote,
                                   .n_inputs = 2, .prepare = rules::binary_arith,
                                   .derivative = STRATA_PARTIALS(pick(g, lt(a, b), eq(a, b)),
                                                                 pick(g, gt(a, b), eq(a, b))),
                                   .vjp_reads_outputs = 0, .domain = kKinked});
const OpDef& kLogicalAnd = define_op({.name = "logical_and", .tags = kPredicate, .dtypes = Family::logical,
                                      .n_inputs = 2, .prepare = rules::logical, .domain = kFlat});
const OpDef& kLogicalOr = define_op({.name = "logical_or", .tags = kPredicate, .dtypes = Family::logical,
                                     .n_inputs = 2, .prepare = rules::logical, .domain = kFlat});
const OpDef& kEq = define_op({.name = "eq", .tags = kPredicate, .dtypes = Family::compare, .n_inputs = 2,
                              .takes_complex = true, .prepare = rules::compare, .domain = kIntegers});
const OpDef& kNe = define_op({.name = "ne", .tags = kPredicate, .dtypes = Family::compare, .n_inputs = 2,
                              .takes_complex = true, .prepare = rules::compare, .domain = kIntegers});
const OpDef& kLt = define_op({.name = "lt", .tags = kPredicate, .dtypes = Family::compare, .n_inputs = 2,
                              .prepare = rules::compare_ordered, .domain = kIntegers});
const OpDef& kLe = define_op({.name = "le", .tags = kPredicate, .dtypes = Family::compare, .n_inputs = 2,
                              .prepare = rules::compare_ordered, .domain = kIntegers});
const OpDef& kGt = define_op({.name = "gt", .tags = kPredicate, .dtypes = Family::compare, .n_inputs = 2,
                              .prepare = rules::compare_ordered, .domain = kIntegers});
const OpDef& kGe = define_op({.name = "ge", .tags = kPredicate, .dtypes = Family::compare, .n_inputs = 2,
                              .prepare = rules::compare_ordered, .domain = kIntegers});

// --- selection -------------------------------------------------------------
void where_rule(detail::OpCall& call) {
  rules::require_dtype(call, !is_complex(call.in(0).dtype()), "a real or bool condition, found a complex one");
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
const OpDef& kWhere = define_op({
    .name = "where",
    .tags = kBinary,
    .dtypes = Family::any,
    .autocast = kPromote,
    .n_inputs = 3,
    .takes_complex = true,  // the branches; the condition must be real
    .prepare = where_rule,
    // The condition (input 0) is not differentiable.
    .derivative = {.vjp = STRATA_VJP(Tensor(), where(c.in(0), g, scalar(g, 0.0)), where(c.in(0), scalar(g, 0.0), g)),
                   .jvp = [](const GradContext& c) -> Grads {
                     const Tensor &ta = c.grad(1), &tb = c.grad(2);
                     if (!ta.defined() && !tb.defined()) return {Tensor()};
                     return {where(c.in(0), ta.defined() ? ta : scalar(tb, 0.0), tb.defined() ? tb : scalar(ta, 0.0))};
                   }},
    .vjp_reads_inputs = 0b001,  // the condition; the branches' shapes only
    .vjp_reads_outputs = 0});

/// A C++ scalar as a 0-d tensor beside `t`: it keeps t's dtype category
/// (f32 tensor * 2.5 stays f32; i64 tensor * 2.5 becomes f32; a c64 tensor
/// gets a c64 scalar, imaginary part 0).
Tensor scalar_like(const Tensor& t, double value) {
  DType dtype = t.dtype();
  // Whole and within int64 (casting a double outside it is undefined).
  const bool integral_value = value >= -0x1p63 && value < 0x1p63 && std::trunc(value) == value;
  if (!is_floating(dtype) && !is_complex(dtype)) {
    dtype = integral_value ? (dtype == DType::boolean ? DType::i64 : dtype) : DType::f32;
  }
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
Tensor atan(const Tensor& x) { return dispatch1(kAtan, {x}); }
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
