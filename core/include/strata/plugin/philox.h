/*
 * philox.h — the reference of Strata's random-number primitives, bit for bit.
 *
 * strata::random_uniform, strata::random_normal and strata::bernoulli must
 * give the same bits on every backend for one (seed, offset). This C99
 * header is their definition; a backend in C or C++ includes it, a shader
 * ports it line by line (backends/vulkan/shaders/random.comp does). The
 * arithmetic is IEEE binary32 with + - * only, in the order written, and no
 * fused multiply-add: compile it with -ffp-contract=off (GLSL: `precise`).
 * Device code must be compiled without FMA contraction too: nvcc
 * -fmad=false, hipcc -ffp-contract=off (both contract by default).
 * Division, sqrt, log, sin and cos are not correctly rounded on every
 * device, so they are built here from + - * and bit operations.
 *
 * Counter layout: element i of an output (row-major) uses Philox4x32-10
 * with key (seed low word, seed high word) and counter
 * (i / 4 low word, i / 4 high word, offset low word, offset high word),
 * and takes word i % 4 of the result. The core gives every call a fresh
 * offset, so calls never share counters.
 */
#ifndef STRATA_PHILOX_H
#define STRATA_PHILOX_H

#include <stdint.h>
#include <string.h>

/* Every function is `static inline`; compiled by nvcc or hipcc it is also
 * __host__ __device__, so CUDA and HIP kernels call the reference itself. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define STRATA_PHILOX_FN static inline __host__ __device__
#else
#define STRATA_PHILOX_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_philox_block {
  uint32_t v[4];
} strata_philox_block;

/** Philox4x32-10 (Salmon et al., SC'11; the constants of Random123). */
STRATA_PHILOX_FN strata_philox_block strata_philox4x32_10(uint64_t block, uint64_t offset, uint64_t seed) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = (uint32_t)offset, c3 = (uint32_t)(offset >> 32);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  int round;
  strata_philox_block out;
  for (round = 0; round < 10; ++round) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out.v[0] = c0;
  out.v[1] = c1;
  out.v[2] = c2;
  out.v[3] = c3;
  return out;
}

/** The 32-bit word for element `index`. */
STRATA_PHILOX_FN uint32_t strata_philox_word(uint64_t index, uint64_t offset, uint64_t seed) {
  return strata_philox4x32_10(index >> 2, offset, seed).v[index & 3u];
}

/** Uniform in [0, 1): the top 24 bits, exact in binary32 (and binary64). */
STRATA_PHILOX_FN float strata_philox_uniform(uint32_t word) { return (float)(word >> 8) * 5.9604644775390625e-8f; }

/** Bernoulli threshold for probability p (computed once, in double):
 *  an element is 1 when (word >> 8) < threshold. */
STRATA_PHILOX_FN uint32_t strata_philox_threshold(double p) {
  double t;
  if (!(p > 0.0)) return 0u;
  if (p >= 1.0) return 16777216u;
  t = p * 16777216.0;
  return (uint32_t)t + ((double)(uint32_t)t < t ? 1u : 0u); /* ceil */
}

STRATA_PHILOX_FN float strata_philox_bits_to_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

STRATA_PHILOX_FN uint32_t strata_philox_float_to_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/** 1/d for d in [1.5, 3] by Newton's iteration from a bit-level guess. */
STRATA_PHILOX_FN float strata_philox_reciprocal(float d) {
  float r = strata_philox_bits_to_float(0x7EF311C3u - strata_philox_float_to_bits(d));
  r = r * (2.0f - d * r);
  r = r * (2.0f - d * r);
  r = r * (2.0f - d * r);
  return r;
}

/** Natural log of u in (0, 1]. */
STRATA_PHILOX_FN float strata_philox_log(float u) {
  uint32_t bits = strata_philox_float_to_bits(u);
  int32_t e = (int32_t)((bits >> 23) & 0xFFu) - 127;
  float m = strata_philox_bits_to_float((bits & 0x7FFFFFu) | 0x3F800000u); /* [1, 2) */
  float f, s, s2, series;
  if (m > 1.41421356f) {
    m = m * 0.5f;
    e = e + 1;
  }
  f = m - 1.0f;                                        /* exact: [-0.293, 0.414] */
  s = f * strata_philox_reciprocal(2.0f + f);          /* ln(1+f) = 2 atanh(s) */
  s2 = s * s;
  series = 0.11111111f;                                /* 1/9 */
  series = series * s2 + 0.14285715f;                  /* 1/7 */
  series = series * s2 + 0.2f;                         /* 1/5 */
  series = series * s2 + 0.33333334f;                  /* 1/3 */
  series = series * s2 + 1.0f;
  return (float)e * 0.69314718f + 2.0f * (s * series);
}

/** sqrt(x) for x >= 0 through a refined reciprocal square root. */
STRATA_PHILOX_FN float strata_philox_sqrt(float x) {
  float y;
  if (!(x > 0.0f)) return 0.0f;
  y = strata_philox_bits_to_float(0x5F3759DFu - (strata_philox_float_to_bits(x) >> 1));
  y = y * (1.5f - 0.5f * x * y * y);
  y = y * (1.5f - 0.5f * x * y * y);
  y = y * (1.5f - 0.5f * x * y * y);
  return x * y;
}

/** cos and sin of 2*pi*u for u in [0, 1). */
STRATA_PHILOX_FN void strata_philox_cos_sin(float u, float* cos_out, float* sin_out) {
  float t = u * 4.0f; /* exact */
  int32_t quadrant = (int32_t)t;
  float a = (t - (float)quadrant) * 1.57079637f; /* [0, pi/2) */
  float a2 = a * a;
  float s = -1.6059044e-10f;                     /* -1/13! */
  float c = -1.1470746e-11f;                     /* -1/14! */
  s = s * a2 + 2.5052108e-8f;
  s = s * a2 - 2.7557319e-6f;
  s = s * a2 + 1.9841270e-4f;
  s = s * a2 - 8.3333333e-3f;
  s = s * a2 + 1.6666667e-1f;
  s = a - a * a2 * s;                             /* a - a^3/3! + ... */
  c = c * a2 + 2.0876757e-9f;
  c = c * a2 - 2.7557319e-7f;
  c = c * a2 + 2.4801587e-5f;
  c = c * a2 - 1.3888889e-3f;
  c = c * a2 + 4.1666667e-2f;
  c = c * a2 - 0.5f;
  c = 1.0f + a2 * c;
  switch (quadrant) {
    case 0: *cos_out = c; *sin_out = s; break;
    case 1: *cos_out = -s; *sin_out = c; break;
    case 2: *cos_out = -c; *sin_out = -s; break;
    default: *cos_out = s; *sin_out = -c; break;
  }
}

/** Box-Muller on two words: the even lane's value r*cos (z_even) and the odd
 *  lane's r*sin (z_odd). */
STRATA_PHILOX_FN void strata_philox_box_muller(uint32_t w0, uint32_t w1, float* z_even, float* z_odd) {
  float u1 = (float)((w0 >> 8) + 1u) * 5.9604644775390625e-8f; /* (0, 1] */
  float u2 = strata_philox_uniform(w1);
  float r = strata_philox_sqrt(-2.0f * strata_philox_log(u1));
  float c, s;
  strata_philox_cos_sin(u2, &c, &s);
  *z_even = r * c;
  *z_odd = r * s;
}

/** Standard normal for element `index` (Box-Muller on the word pair of its
 *  half of the block: lanes 0,1 share words 0,1; lanes 2,3 words 2,3). */
STRATA_PHILOX_FN float strata_philox_normal(uint64_t index, uint64_t offset, uint64_t seed) {
  strata_philox_block b = strata_philox4x32_10(index >> 2, offset, seed);
  uint32_t lane = (uint32_t)(index & 3u);
  uint32_t pair = lane & 2u;
  float z_even, z_odd;
  strata_philox_box_muller(b.v[pair], b.v[pair + 1u], &z_even, &z_odd);
  return (lane & 1u) == 0u ? z_even : z_odd;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_PHILOX_H */
