// common.glsl — what every Strata compute shader shares: extensions, how the
// five element kinds (opcodes.h KIND_*) are stored and computed, the f32->f16
// conversion, and float functions GLSL lacks (or has only imprecisely).
//
// Tensors are reached through buffer device addresses (GL_EXT_buffer_reference)
// passed in push constants, so there are no descriptor sets anywhere. A kind
// is a compile-time macro argument: STORE_T(k) is the storage type, COMP_T(k)
// the type arithmetic happens in (f16 computes in f32, bool in uint 0/1),
// LOAD(k, v) turns a stored value into COMP_T(k), STORE(k, c) the reverse.
// 64-bit and 8/16-bit types only appear in the SPIR-V of variants that use
// them, so an f32 pipeline never needs shaderInt64 or 8/16-bit storage.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

#include "opcodes.h"

#define STORE_0 float
#define STORE_1 uint16_t
#define STORE_2 int
#define STORE_3 int64_t
#define STORE_4 uint8_t
#define COMP_0 float
#define COMP_1 float
#define COMP_2 int
#define COMP_3 int64_t
#define COMP_4 uint
#define ALIGN_0 4
#define ALIGN_1 2
#define ALIGN_2 4
#define ALIGN_3 8
#define ALIGN_4 1

#define STORE_T_(k) STORE_##k
#define STORE_T(k) STORE_T_(k)
#define COMP_T_(k) COMP_##k
#define COMP_T(k) COMP_T_(k)
#define ALIGN_OF_(k) ALIGN_##k
#define ALIGN_OF(k) ALIGN_OF_(k)
#define IS_FLOAT(k) ((k) == KIND_F32 || (k) == KIND_F16)

#define LOAD_0(v) (v)
#define LOAD_1(v) unpackHalf2x16(uint(v)).x
#define LOAD_2(v) (v)
#define LOAD_3(v) (v)
#define LOAD_4(v) uint(v)
#define LOAD_(k, v) LOAD_##k(v)
#define LOAD(k, v) LOAD_(k, v)

#define STOREV_0(c) (c)
#define STOREV_1(c) uint16_t(f32_to_f16(c))
#define STOREV_2(c) (c)
#define STOREV_3(c) (c)
#define STOREV_4(c) uint8_t(c)
#define STORE_(k, c) STOREV_##k(c)
#define STORE(k, c) STORE_(k, c)

/// A buffer-reference type `Name` whose array `v` holds elements of kind k.
#define DECLARE_BUFFER(Name, k) \
  layout(buffer_reference, std430, buffer_reference_align = ALIGN_OF(k)) buffer Name { STORE_T(k) v[]; };

/// An i64 index tensor read as pairs of uints (low word first), so that no
/// variant needs shaderInt64 just to read indices.
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer IndexBuffer { uint v[]; };

/// The device's deferred-error record (device.hpp, DeferredRecord): the
/// first failure since the host last looked. `state` is 0 (none), 1 (being
/// written) or 2 (written); the host reads it at a synchronisation point,
/// reports STRATA_ERROR_DEFERRED and clears it.
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer ErrorRecord {
  uint state;
  uint site;  // the failing kernel (an OpSpec id, kernels.hpp)
  uint what;  // ERR_*
  uint dim;
  uint bound;
  uint value_lo;
  uint value_hi;
  uint pad;
};

/// Records a failure unless one is already recorded (the first one wins).
void record_failure(ErrorRecord r, uint site, uint what, uint dim, uint bound, uint value_lo, uint value_hi) {
  if (atomicCompSwap(r.state, 0u, 1u) == 0u) {
    r.site = site;
    r.what = what;
    r.dim = dim;
    r.bound = bound;
    r.value_lo = value_lo;
    r.value_hi = value_hi;
    memoryBarrierBuffer();
    atomicExchange(r.state, 2u);
  }
}

/// f32 -> IEEE binary16 bits, rounding to nearest-even (OpFConvert's rounding
/// mode is implementation-defined, so it is done by hand).
uint f32_to_f16(float value) {
  uint u = floatBitsToUint(value);
  uint sign = (u >> 16) & 0x8000u;
  uint a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sign;
    uint e = a >> 23;
    uint m = (a & 0x7fffffu) | 0x800000u;
    uint shift = 126u - e;
    uint h = m >> shift;
    uint rem = m & ((1u << shift) - 1u);
    uint halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) ++h;
    return sign | h;
  }
  uint r = a + 0xfffu + ((a >> 13) & 1u);
  return sign | ((r - 0x38000000u) >> 13);
}

float nan_value() { return uintBitsToFloat(0x7fc00000u); }

/// exp(x) - 1 without cancellation near 0 (Taylor series to x^9 below 0.5).
float expm1_f(float x) {
  if (abs(x) < 0.5) {
    float p = 1.0 / 362880.0;
    p = p * x + 1.0 / 40320.0;
    p = p * x + 1.0 / 5040.0;
    p = p * x + 1.0 / 720.0;
    p = p * x + 1.0 / 120.0;
    p = p * x + 1.0 / 24.0;
    p = p * x + 1.0 / 6.0;
    p = p * x + 0.5;
    p = p * x + 1.0;
    return p * x;
  }
  return exp(x) - 1.0;
}

/// log(1 + x) with Kahan's correction of the rounding of 1 + x.
float log1p_f(float x) {
  float u = 1.0 + x;
  if (u == 1.0) return x;
  if (isinf(u)) return u;
  return log(u) * (x / (u - 1.0));
}

float tanh_f(float x) {
  float e = expm1_f(2.0 * min(abs(x), 9.0));
  float t = e / (e + 2.0);
  return x < 0.0 ? -t : (x > 0.0 ? t : x);
}

float sigmoid_f(float x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  float e = exp(x);
  return e / (1.0 + e);
}

/// erf: Maclaurin series below |x| = 1 (relative accuracy near 0), the
/// Chebyshev-fitted erfc approximation (fractional error < 1.2e-7) above.
float erf_f(float x) {
  float a = abs(x);
  float r;
  if (a < 1.0) {
    // erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
    float x2 = a * a;
    float term = a;
    float sum = a;
    for (int n = 1; n <= 12; ++n) {
      term *= -x2 / float(n);
      sum += term / float(2 * n + 1);
    }
    r = sum * 1.1283791670955126;
  } else {
    float t = 1.0 / (1.0 + 0.5 * a);
    float p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
              t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    r = 1.0 - t * exp(-a * a + p);
  }
  return x < 0.0 ? -r : r;
}

float normal_cdf(float x) { return 0.5 * (1.0 + erf_f(x * 0.70710678118654752)); }
float normal_pdf(float x) { return exp(-0.5 * x * x) * 0.39894228040143268; }

/// pow with std::pow's special cases: integer exponents (|b| <= 64) by
/// repeated squaring, so negative bases work and small powers are exact;
/// otherwise exp2(b * log2(a)), NaN for a negative base.
float pow_f(float a, float b) {
  if (b == 0.0 || a == 1.0) return 1.0;
  if (isnan(a) || isnan(b)) return nan_value();
  if (b == floor(b) && abs(b) <= 64.0) {
    uint e = uint(abs(b));
    float base = a;
    float r = 1.0;
    while (e != 0u) {
      if ((e & 1u) != 0u) r *= base;
      base *= base;
      e >>= 1;
    }
    return b < 0.0 ? 1.0 / r : r;
  }
  if (a < 0.0) return b == floor(b) ? (mod(b, 2.0) == 1.0 ? -1.0 : 1.0) * exp2(b * log2(-a)) : nan_value();
  if (a == 0.0) return b > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  return exp2(b * log2(a));
}
