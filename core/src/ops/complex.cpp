// complex.cpp — the ops that build complex tensors and take them apart:
// real, imag, conj, angle, complex and polar (docs/complex.md).
//
// Derivatives follow PyTorch's convention. The gradient of a real loss L
// with respect to z = x + iy is dL/dx + i·dL/dy, so for an op s = f(z) with
// output gradient g the input gradient is
//   conj(g)·∂s/∂conj(z) + g·conj(∂s/∂z),
// which for a real input x reduces to Re(g·conj(∂s/∂x)). The JVP is the
// ordinary differential ∂s/∂z·t + ∂s/∂conj(z)·conj(t). Each rule below is
// that formula for its op, written with ops, so it is differentiable again.
// abs of a complex tensor lives with abs (elementwise.cpp).
#include "derivatives.hpp"
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {

using namespace detail::op_vocabulary;

/// real, imag, angle: one complex input; a real output of its parts' dtype.
void part_rule(OpCall& call) {
  rules::require_dtype(call, is_complex(call.in(0).dtype()), "a complex tensor");
  call.out().dtype = to_real(call.in(0).dtype());
  call.out().set_shape(call.in(0).shape());
}

/// conj: one complex input, a result of its dtype.
void conj_rule(OpCall& call) {
  rules::require_dtype(call, is_complex(call.in(0).dtype()), "a complex tensor");
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(0).shape());
}

/// complex, polar: two real parts, promoted to f32 or f64 (integers, bool,
/// f16 and bf16 to f32: there is no complex of 16-bit floats) and broadcast;
/// the result is the complex dtype of that precision.
void parts_rule(OpCall& call) {
  for (int k = 0; k < 2; ++k) {
    rules::require_dtype(call, !is_complex(call.in(k).dtype()), "real parts, found a complex one");
  }
  rules::binary_float(call);  // promotes (integers to f32) and broadcasts
  const DType part = call.out().dtype == DType::f64 ? DType::f64 : DType::f32;
  for (int k = 0; k < 2; ++k) detail::cast_input(call, k, part);
  call.out().dtype = to_complex(part);
}

/// i·z, written with real and imag so that no complex constant is needed.
Tensor times_i(const Tensor& z) { return complex(-imag(z), real(z)); }

// --- angle: atan2(Im z, Re z). dθ = Im(conj(z)·dz)/|z|², so the VJP is
// g·i·z/|z|² and the JVP Im(conj(z)·t)/|z|²; both 0 at z = 0 (PyTorch's
// angle_backward), with the division guarded so that no NaN leaks through.
Tensor squared_modulus(const Tensor& z) { return real(z * conj(z)); }
Tensor guarded(const Tensor& denominator) {
  return where(eq(denominator, scalar(denominator, 0.0)), scalar(denominator, 1.0), denominator);
}
Tensor angle_vjp(const Tensor& g, const Tensor& z) {
  Tensor m2 = squared_modulus(z);
  return where(eq(m2, scalar(m2, 0.0)), scalar(z, 0.0), g * times_i(z) / guarded(m2));
}
Tensor angle_jvp(const Tensor& t, const Tensor& z) {
  Tensor m2 = squared_modulus(z);
  return where(eq(m2, scalar(m2, 0.0)), scalar(m2, 0.0), imag(conj(z) * t) / guarded(m2));
}

// --- polar(r, θ) = r·e^{iθ}: ∂s/∂r = e^{iθ}, ∂s/∂θ = i·s. For the real
// inputs: g_r = Re(g·e^{-iθ}) = Re(g)cos θ + Im(g)sin θ, g_θ = Re(g·conj(i·s))
// = Im(g·conj(s)).
std::vector<Tensor> polar_decomposition(const OpCall& call) {
  const Tensor &r = call.in(0), &theta = call.in(1);
  return {complex(r * cos(theta), r * sin(theta))};
}

const OpDef& kReal = define_op({.name = "real",
                                .tags = tag::complex | tag::pointwise,
                                .dtypes = detail::DTypeFamily::floating,
                                .takes_complex = true,
                                .complex_only = true,
                                .prepare = part_rule,
                                .derivative = {.vjp = STRATA_VJP(cast(g, c.in(0).dtype())),  // (g, 0)
                                               .jvp = STRATA_JVP(STRATA_TANGENT(real(t)))}});
const OpDef& kImag = define_op({.name = "imag",
                                .tags = tag::complex | tag::pointwise,
                                .dtypes = detail::DTypeFamily::floating,
                                .takes_complex = true,
                                .complex_only = true,
                                .prepare = part_rule,
                                .derivative = {.vjp = STRATA_VJP(complex(zeros_like(g), g)),  // i·g
                                               .jvp = STRATA_JVP(STRATA_TANGENT(imag(t)))}});
const OpDef& kConj = define_op({.name = "conj",
                                .tags = tag::complex | tag::pointwise,
                                .dtypes = detail::DTypeFamily::floating,
                                .takes_complex = true,
                                .complex_only = true,
                                .prepare = conj_rule,
                                .derivative = {.vjp = STRATA_VJP(conj(g)),
                                .jvp = STRATA_JVP(STRATA_TANGENT(conj(t)))}});
const OpDef& kAngle = define_op({.name = "angle",
                                 .tags = tag::complex | tag::pointwise,
                                 .dtypes = detail::DTypeFamily::floating,
                                 .takes_complex = true,
                                 .complex_only = true,
                                 .prepare = part_rule,
                                 .derivative = {.vjp = STRATA_VJP(angle_vjp(g, c.in(0))),
                                 .jvp = STRATA_JVP(STRATA_TANGENT(angle_jvp(t, c.in(0))))}});
// complex and polar take real inputs; takes_complex lets a complex one
// reach their rule, which names what it expected.
const OpDef& kComplex = define_op({.name = "complex",
                                   .tags = tag::complex | tag::pointwise | tag::broadcasting,
                                   .dtypes = detail::DTypeFamily::floating,
                                   .n_inputs = 2,
                                   .takes_complex = true,
                                   .complex_only = true,
                                   .prepare = parts_rule,
                                   .derivative = {.vjp = STRATA_VJP_EACH(STRATA_INPUT_GRAD(real(g)),
                                                                         STRATA_INPUT_GRAD(imag(g))),
                                                  .jvp = STRATA_JVP(STRATA_TANGENT(complex(t, zeros_like(t))),
                                                                    STRATA_TANGENT(complex(zeros_like(t), t)))}});
const OpDef& kPolar = define_op(
    {.name = "polar",
     .kind = OpKind::composite,
     .tags = tag::complex | tag::pointwise | tag::broadcasting,
     .dtypes = detail::DTypeFamily::floating,
     .n_inputs = 2,
     .takes_complex = true,
     .prepare = parts_rule,
     .decompose = polar_decomposition,
     .derivative = {.vjp = STRATA_VJP_EACH(STRATA_INPUT_GRAD(real(g) * cos(c.in(1)) + imag(g) * sin(c.in(1))),
                            STRATA_INPUT_GRAD(imag(g * conj(c.out())))),
     .jvp = STRATA_JVP(STRATA_TANGENT(polar(t, c.in(1))), STRATA_TANGENT(times_i(c.out()) * t))}});

}  // namespace

Tensor real(const Tensor& x) {
  if (!x.defined()) throw Error("real: undefined tensor");
  return is_complex(x.dtype()) ? detail::dispatch1(kReal, {x}) : x;
}
Tensor imag(const Tensor& x) { return detail::dispatch1(kImag, {x}); }
Tensor conj(const Tensor& x) {
  if (!x.defined()) throw Error("conj: undefined tensor");
  return is_complex(x.dtype()) ? detail::dispatch1(kConj, {x}) : x;
}
Tensor angle(const Tensor& x) { return detail::dispatch1(kAngle, {x}); }
Tensor complex(const Tensor& re, const Tensor& im) { return detail::dispatch1(kComplex, {re, im}); }
Tensor polar(const Tensor& abs, const Tensor& angle) { return detail::dispatch1(kPolar, {abs, angle}); }

}  // namespace strata
