// vector_math.hpp — f32 transcendental functions over arrays, on SLEEF.
//
// SLEEF (libsleef-dev; PyTorch uses it the same way) gives vectorised exp,
// log and tanh within 1.0 ULP. Its FMA variants compute the same bits at
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

/// The scalar functions: the reference every width reproduces.
float exp(float x) noexcept;
float log(float x) noexcept;
float tanh(float x) noexcept;
/// 1 / (1 + exp(-x)), the division and addition in IEEE f32.
float sigmoid(float x) noexcept;

/// y[i] = f(x[i]) for i < n; y may be x. vmath:: picks the widest
/// instruction set loop_isa() allows; avx512:: and avx2:: are those widths'
/// loops, to call only on a CPU that has them.
#define STRATA_VMATH_ARRAY_FUNCTIONS                              \
  void exp(const float* x, float* y, int64_t n) noexcept;         \
  void log(const float* x, float* y, int64_t n) noexcept;         \
  void tanh(const float* x, float* y, int64_t n) noexcept;        \
  void sigmoid(const float* x, float* y, int64_t n) noexcept;

STRATA_VMATH_ARRAY_FUNCTIONS
namespace avx512 {
STRATA_VMATH_ARRAY_FUNCTIONS
}  // namespace avx512
namespace avx2 {
STRATA_VMATH_ARRAY_FUNCTIONS
}  // namespace avx2

#undef STRATA_VMATH_ARRAY_FUNCTIONS

}  // namespace strata::cpu::vmath
