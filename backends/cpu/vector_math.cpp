// vector_math.cpp — vector_math.hpp's scalar functions and the dispatch of
// its array functions by loop_isa().
#include "vector_math.hpp"

#include "loop_isa.hpp"

#include <sleef.h>

#include <bit>
#include <cmath>
#include <cstdint>

// sleef.h declares the scalar FMA variants only where the compiler targets
// FMA (FP_FAST_FMA); libsleef exports them everywhere, and on a CPU without
// FMA their fmaf is the C library's correctly rounded one, so they give the
// vector variants' bits on any x86-64.
#ifndef FP_FAST_FMAF
extern "C" {
#define STRATA_VMATH_DECLARE(fn) float Sleef_##fn##f1_u10purecfma(float);
STRATA_VMATH_SLEEF_FUNCTIONS(STRATA_VMATH_DECLARE)
#undef STRATA_VMATH_DECLARE
}
#endif

namespace strata::cpu::vmath {

float fix_nan(float x, float r) noexcept {
  if (!std::isnan(r)) return r;
  const uint32_t bits = std::isnan(x) ? std::bit_cast<uint32_t>(x) | 0x00400000u : 0xffc00000u;
  return std::bit_cast<float>(bits);
}

#define STRATA_VMATH_SCALAR(fn) \
  float fn(float x) noexcept { return fix_nan(x, Sleef_##fn##f1_u10purecfma(x)); }
STRATA_VMATH_SLEEF_FUNCTIONS(STRATA_VMATH_SCALAR)
#undef STRATA_VMATH_SCALAR

float sigmoid(float x) noexcept { return fix_nan(x, 1.0f / (1.0f + Sleef_expf1_u10purecfma(-x))); }

namespace {

template <class F>
void scalar_loop(const float* x, float* y, int64_t n, F f) noexcept {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

}  // namespace

#if STRATA_CPU_ISA_CLONES
#define STRATA_VMATH_WIDE(fn)                           \
  switch (dispatch_loop_isa()) {                        \
    case LoopIsa::avx512: return avx512::fn(x, y, n);   \
    case LoopIsa::avx2: return avx2::fn(x, y, n);       \
    case LoopIsa::generic: break;                       \
  }
#else
#define STRATA_VMATH_WIDE(fn)
#endif

#define STRATA_VMATH_DISPATCH(fn)                                  \
  void fn(const float* x, float* y, int64_t n) noexcept {          \
    STRATA_VMATH_WIDE(fn)                                          \
    scalar_loop(x, y, n, [](float v) { return vmath::fn(v); });    \
  }

STRATA_VMATH_SLEEF_FUNCTIONS(STRATA_VMATH_DISPATCH)
STRATA_VMATH_DISPATCH(sigmoid)

#undef STRATA_VMATH_DISPATCH
#undef STRATA_VMATH_WIDE

}  // namespace strata::cpu::vmath
