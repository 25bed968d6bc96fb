// derivatives.hpp — the vocabulary the derivative rules next to each op
// definition are written in (core/src/ops/*.cpp).
//
// A rule sees a GradContext (op.hpp): inputs as prepared by the op's shape
// rule (promoted, and for elementwise ops broadcast to the output shape), the
// outputs, and either the output gradients (VJP) or the input tangents (JVP),
// where an undefined tensor means zero. Rules use public ops only, so that
// differentiating a rule gives higher-order derivatives.
#pragma once

#include "rules.hpp"
#include "runtime/dispatch/op.hpp"

#include <strata/ops.hpp>

#include <cstddef>
#include <vector>

namespace strata::detail::derivatives {

using Grads = std::vector<Tensor>;

/// a + b where an undefined tensor is zero (two undefined give undefined).
inline Tensor plus(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

/// A 0-d tensor of `like`'s dtype and device: a constant that never promotes.
inline Tensor scalar(const Tensor& like, double value) {
  return scalar_tensor(value, {.dtype = like.dtype(), .device = like.device()});
}

// --- what a node keeps ----------------------------------------------------------
// OpDef::vjp_reads_inputs / vjp_reads_outputs, set in each record next to the
// rule that justifies them: a recorded node keeps the values of only the
// operands its VJP reads (the others as shape-only placeholders). `0` on
// inputs: the VJP reads the output (exp: g·y); `0` on outputs: the inputs
// (mul: g·b, g·a); both `0`: shapes and dtypes only (add: g, g).

// --- elementwise ops: diagonal Jacobians -------------------------------------
// The derivative of an elementwise op is a pointwise product g·f'(x), so the
// JVP applies the map D(g) = g·f'(x) to the input tangent. The VJP applies
// it to the output gradient too, conjugated: for complex values PyTorch's
// convention (docs/complex.md) makes the VJP of a holomorphic f
// g·conj(f'(x)) = conj(D(conj(g))). conj is the identity on real tensors
// (it returns its argument, no op runs), so real ops pay nothing for it.

/// Unary: D(g, x, y) with x the input and y = f(x).
template <auto D>
Grads unary_vjp(const GradContext& c) {
  if (!c.grad(0).defined()) return {Tensor()};
  return {conj(D(conj(c.grad(0)), c.in(0), c.out(0)))};
}
template <auto D>
Grads unary_jvp(const GradContext& c) {
  if (!c.grad(0).defined()) return {Tensor()};
  return {D(c.grad(0), c.in(0), c.out(0))};
}

/// Binary: partials Da(g, a, b, y), Db(g, a, b, y).
template <auto Da, auto Db>
Grads binary_vjp(const GradContext& c) {
  const Tensor& g = c.grad(0);
  if (!g.defined()) return {Tensor(), Tensor()};
  const Tensor gc = conj(g);
  return {c.needs(0) ? conj(Da(gc, c.in(0), c.in(1), c.out(0))) : Tensor(),
          c.needs(1) ? conj(Db(gc, c.in(0), c.in(1), c.out(0))) : Tensor()};
}
template <auto Da, auto Db>
Grads binary_jvp(const GradContext& c) {
  const Tensor &ta = c.grad(0), &tb = c.grad(1);
  Tensor da = ta.defined() ? Da(ta, c.in(0), c.in(1), c.out(0)) : Tensor();
  return {plus(da, tb.defined() ? Db(tb, c.in(0), c.in(1), c.out(0)) : Tensor())};
}

template <auto D>
inline constexpr detail::Derivative unary_derivative{&unary_vjp<D>, &unary_jvp<D>};
template <auto Da, auto Db>
inline constexpr detail::Derivative binary_derivative{&binary_vjp<Da, Db>, &binary_jvp<Da, Db>};

// --- general ops ---------------------------------------------------------------

/// VJP of a single-output op from F(c, g) (one gradient per input); every
/// input gradient is zero (undefined) when the output gradient is.
template <auto F>
Grads vjp(const GradContext& c) {
  if (!c.grad(0).defined()) return Grads(c.inputs.size());
  return F(c, c.grad(0));
}

/// VJP of a single-output op with one term per input, Term_k(c, g), each
/// computed only when the pass uses that input's gradient (a frozen weight
/// of a matmul costs no GEMM).
template <auto... Term>
Grads vjp_each(const GradContext& c) {
  if (!c.grad(0).defined()) return Grads(c.inputs.size());
  Grads out;
  int k = 0;
  ((out.push_back(c.needs(k) ? Term(c, c.grad(0)) : Tensor()), ++k), ...);
  return out;
}

/// JVP of a single-output op: the sum, over the inputs whose tangent t is
/// defined, of Term_k(c, t) (linear in t). Undefined when every tangent is.
template <auto... Term>
Grads jvp(const GradContext& c) {
  Tensor out;
  size_t k = 0;
  auto term = [&](auto f) {
    if (k < c.grads.size() && c.grad(static_cast<int>(k)).defined()) out = plus(out, f(c, c.grad(static_cast<int>(k))));
    ++k;
  };
  (term(Term), ...);
  return {out};
}

// --- complex values ------------------------------------------------------------

/// z/|z|, and 0 where |z| is 0 (`modulus` is |z|): the direction abs's
/// derivative takes (PyTorch's sgn). The division is guarded too, so that no
/// NaN reaches a gradient through the masked branch.
inline Tensor unit_or_zero(const Tensor& z, const Tensor& modulus) {
  Tensor at_zero = eq(modulus, scalar(modulus, 0.0));
  return where(at_zero, scalar(z, 0.0), z / where(at_zero, scalar(modulus, 1.0), modulus));
}

/// The JVP term of an input that is not differentiable (an index tensor).
inline constexpr auto no_tangent = [](const GradContext&, const Tensor&) { return Tensor(); };

}  // namespace strata::detail::derivatives

/// Elementwise unary: `expr` maps g (gradient or tangent) through f'(x), with
/// x the input and y the output: STRATA_DERIVATIVE(g * y) for exp.
#define STRATA_DERIVATIVE(expr)                                                                                 \
  ::strata::detail::derivatives::unary_derivative<[](const ::strata::Tensor& g, const ::strata::Tensor& x,     \
                                                     const ::strata::Tensor& y) -> ::strata::Tensor { return expr; }>

/// Elementwise binary: the partials as maps of g, with inputs a, b and output
/// y: STRATA_PARTIALS(g * b, g * a) for mul.
#define STRATA_PARTIALS(da, db)                                                                   \
  ::strata::detail::derivatives::binary_derivative<                                             \
      [](const ::strata::Tensor& g, const ::strata::Tensor& a, const ::strata::Tensor& b,         \
         const ::strata::Tensor& y) -> ::strata::Tensor { return da; },                           \
      [](const ::strata::Tensor& g, const ::strata::Tensor& a, const ::strata::Tensor& b,         \
         const ::strata::Tensor& y) -> ::strata::Tensor { return db; }>

/// A VJP: the input gradients, comma-separated, in terms of the context `c`
/// and the output gradient `g`: STRATA_VJP(g.expand(c.in(0).sizes())).
#define STRATA_VJP(...)                                                                                        \
  &::strata::detail::derivatives::vjp<[](const ::strata::detail::GradContext& c, const ::strata::Tensor& g)   \
                                          -> ::strata::detail::derivatives::Grads { return {__VA_ARGS__}; }>

/// One input's gradient for STRATA_VJP_EACH(term0, term1, ...), in terms of
/// the context `c` and the output gradient `g`.
#define STRATA_INPUT_GRAD(expr) \
  [](const ::strata::detail::GradContext& c, const ::strata::Tensor& g) -> ::strata::Tensor { return expr; }
#define STRATA_VJP_EACH(...) &::strata::detail::derivatives::vjp_each<__VA_ARGS__>

/// One JVP term: the output tangent due to an input's tangent `t`, for
/// STRATA_JVP(term0, term1, ...).
#define STRATA_TANGENT(expr) \
  [](const ::strata::detail::GradContext& c, const ::strata::Tensor& t) -> ::strata::Tensor { return expr; }
#define STRATA_JVP(...) &::strata::detail::derivatives::jvp<__VA_ARGS__>

namespace strata::detail::op_vocabulary {

// What an op file's records and rules are written with: each op file says
// `using namespace detail::op_vocabulary;` in its anonymous namespace, rather
// than repeat these using-declarations.
namespace tag = op_tag;
namespace rules = detail::rules;
using derivatives::Grads;
using derivatives::scalar;
using detail::Attr;
using detail::AttrDecl;
using detail::Attrs;
using detail::define_op;
using detail::GradContext;
using detail::OpCall;
using detail::OpDef;
using detail::OpKind;
using detail::shape_string;
using Family = DTypeFamily;

// Autocast categories (docs/mixed-precision-and-checkpointing.md, "Autocast").
inline constexpr auto kFp32 = AutocastCategory::fp32;        // computed in f32 under autocast
inline constexpr auto kPromote = AutocastCategory::promote;  // inputs promoted to the widest

// The attribute schemas several op files share.
inline constexpr AttrDecl kDimAttrs[] = {{"dim", STRATA_ATTR_INT}};
inline constexpr AttrDecl kDimsAttrs[] = {{"dims", STRATA_ATTR_INTS}};

}  // namespace strata::detail::op_vocabulary
