// vector_math.hpp — f32 transcendental functions over arrays, on SLEEF.
//
// SLEEF (libsleef-dev; PyTorch uses it the same way) gives vectorised exp,
// log, tanh, sin, cos, atan, erf, log1p and expm1, each within 1.0 ULP (its
// "u10" variants; docs/ops.md, "Accuracy"). Its FMA variants compute the same bits at
// every width: AVX-512 (16 lanes), AVX2 (8) and the scalar "purecfma" one,
// which the baseline level and every strided or short loop use, so results
// depend neither on the CPU nor on the layout (cpu_isa_test checks it).
// Each ISA's array functions live in their own translation unit, compiled
// with that ISA's flags and nothing else in it (vector_math_avx512.cpp,
// vector_math_avx2.cpp), so no inline function compiled for AVX-512 can be
// shared with the baseline code.
#pragma once

#include <cstdint>

namespace strata::cpu::vmath {

/// r, with a NaN result made canonical as x86 and the C library give it: a
/// NaN input comes back quieted, payload and sign kept; any other NaN (log
/// of a negative number) is the default NaN, 0xffc00000. SLEEF's widths
/// differ only in these bits.
float fix_nan(float x, float r) noexcept;

/// The functions SLEEF computes directly (X(name): SLEEF's <name>f, u10).
/// Lane-wise ones give each lane what the scalar function gives. SLEEF's
/// vector sin and cos do not: when one lane needs the wide-range argument
/// reduction (|x| >= 125), every lane of the vector takes it, and a small
/// argument there can differ from the scalar result in the last bit — so
/// their array loops take the scalar function for any vector holding an
/// argument outside [-100, 100] (cpu_isa_test caught it).
#define STRATA_VMATH_LANEWISE_FUNCTIONS(X) X(exp) X(log) X(tanh) X(atan) X(erf) X(log1p) X(expm1)
#define STRATA_VMATH_TRIG_FUNCTIONS(X) X(sin) X(cos)
#define STRATA_VMATH_SLEEF_FUNCTIONS(X) STRATA_VMATH_LANEWISE_FUNCTIONS(X) STRATA_VMATH_TRIG_FUNCTIONS(X)

/// The scalar functions: the reference every width reproduces.
#define STRATA_VMATH_SCALAR(fn) float fn(float x) noexcept;
STRATA_VMATH_SLEEF_FUNCTIONS(STRATA_VMATH_SCALAR)
#undef STRATA_VMATH_SCALAR
/// 1 / (1 + exp(-x)), the division and addition in IEEE f32.
float sigmoid(float x) noexcept;

/// y[i] = f(x[i]) for i < n; y may be x. vmath:: picks the widest
/// instruction set loop_isa() allows; avx512:: and avx2:: are those widths'
/// loops, to call only on a CPU that has them.
#define STRATA_VMATH_ARRAY(fn) void fn(const float* x, float* y, int64_t n) noexcept;
#define STRATA_VMATH_ARRAY_FUNCTIONS                \
  STRATA_VMATH_SLEEF_FUNCTIONS(STRATA_VMATH_ARRAY) \
  void sigmoid(const float* x, float* y, int64_t n) noexcept;

STRATA_VMATH_ARRAY_FUNCTIONS
namespace avx512 {
STRATA_VMATH_ARRAY_FUNCTIONS
}  // namespace avx512
namespace avx2 {
STRATA_VMATH_ARRAY_FUNCTIONS
}  // namespace avx2

#undef STRATA_VMATH_ARRAY_FUNCTIONS
#undef STRATA_VMATH_ARRAY

}  // namespace strata::cpu::vmath
