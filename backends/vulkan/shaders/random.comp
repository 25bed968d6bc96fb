#version 460
// random.comp — random_uniform, random_normal and bernoulli (specialization
// constant 0: OP_*), compiled once per output kind K.
//
// A line-by-line port of the reference core/include/strata/plugin/philox.h,
// which defines these ops bit for bit (docs/ops.md, "Random numbers"). Every
// float temporary is `precise`, so the compiler neither fuses a * b + c into
// an FMA nor reorders anything; float constants are given as their binary32
// bits, so no compiler's decimal parsing can round them differently. Each
// invocation computes one Philox block, i.e. four consecutive elements.
#include "common.glsl"

layout(local_size_x = RANDOM_GROUP) in;
layout(constant_id = 0) const int OP = 0;

DECLARE_BUFFER(YBuffer, K)

layout(push_constant) uniform Push {
  YBuffer y;       // contiguous output
  uint n;          // elements of y (< 2^31)
  uint seed_lo;    // Philox key
  uint seed_hi;
  uint offset_lo;  // high half of the counter
  uint offset_hi;
  uint threshold;  // bernoulli: strata_philox_threshold(p), computed by the host
} pc;

/// strata_philox4x32_10: counter (block_lo, block_hi, offset), key seed.
uvec4 philox4x32_10(uint block_lo, uint block_hi) {
  uint c0 = block_lo, c1 = block_hi, c2 = pc.offset_lo, c3 = pc.offset_hi;
  uint k0 = pc.seed_lo, k1 = pc.seed_hi;
  for (int round = 0; round < 10; ++round) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c0, hi0, lo0);
    umulExtended(0xCD9E8D57u, c2, hi1, lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return uvec4(c0, c1, c2, c3);
}

#define F(bits) uintBitsToFloat(bits)
#define TWO_POW_M24 F(0x33800000u) /* 5.9604644775390625e-8 = 2^-24 */

/// strata_philox_uniform
float philox_uniform(uint word) {
  precise float u = float(word >> 8) * TWO_POW_M24;
  return u;
}

/// strata_philox_reciprocal
float philox_reciprocal(float d) {
  precise float r = uintBitsToFloat(0x7EF311C3u - floatBitsToUint(d));
  r = r * (2.0 - d * r);
  r = r * (2.0 - d * r);
  r = r * (2.0 - d * r);
  return r;
}

/// strata_philox_log
float philox_log(float u) {
  uint bits = floatBitsToUint(u);
  int e = int((bits >> 23) & 0xFFu) - 127;
  precise float m = uintBitsToFloat((bits & 0x7FFFFFu) | 0x3F800000u); /* [1, 2) */
  if (m > F(0x3FB504F3u)) { /* 1.41421356f */
    m = m * 0.5;
    e = e + 1;
  }
  precise float f = m - 1.0;
  precise float d = 2.0 + f;
  precise float s = f * philox_reciprocal(d);
  precise float s2 = s * s;
  precise float series = F(0x3DE38E39u);     /* 0.11111111f */
  series = series * s2 + F(0x3E124925u);     /* 0.14285715f */
  series = series * s2 + F(0x3E4CCCCDu);     /* 0.2f */
  series = series * s2 + F(0x3EAAAAABu);     /* 0.33333334f */
  series = series * s2 + 1.0;
  precise float result = float(e) * F(0x3F317218u) + 2.0 * (s * series); /* 0.69314718f */
  return result;
}

/// strata_philox_sqrt
float philox_sqrt(float x) {
  if (!(x > 0.0)) return 0.0;
  precise float y = uintBitsToFloat(0x5F3759DFu - (floatBitsToUint(x) >> 1));
  y = y * (1.5 - 0.5 * x * y * y);
  y = y * (1.5 - 0.5 * x * y * y);
  y = y * (1.5 - 0.5 * x * y * y);
  precise float result = x * y;
  return result;
}

/// strata_philox_cos_sin
void philox_cos_sin(float u, out float cos_out, out float sin_out) {
  precise float t = u * 4.0;
  int quadrant = int(t);
  precise float a = (t - float(quadrant)) * F(0x3FC90FDBu); /* 1.57079637f */
  precise float a2 = a * a;
  precise float s = F(0xAF309231u);  /* -1.6059044e-10f */
  precise float c = F(0xAD49CBA6u);  /* -1.1470746e-11f */
  s = s * a2 + F(0x32D7322Bu);       /* 2.5052108e-8f */
  s = s * a2 - F(0x3638EF1Du);       /* 2.7557319e-6f */
  s = s * a2 + F(0x39500D01u);       /* 1.9841270e-4f */
  s = s * a2 - F(0x3C088888u);       /* 8.3333333e-3f */
  s = s * a2 + F(0x3E2AAAABu);       /* 1.6666667e-1f */
  s = a - a * a2 * s;
  c = c * a2 + F(0x310F76C8u);       /* 2.0876757e-9f */
  c = c * a2 - F(0x3493F27Eu);       /* 2.7557319e-7f */
  c = c * a2 + F(0x37D00D01u);       /* 2.4801587e-5f */
  c = c * a2 - F(0x3AB60B61u);       /* 1.3888889e-3f */
  c = c * a2 + F(0x3D2AAAABu);       /* 4.1666667e-2f */
  c = c * a2 - 0.5;
  c = 1.0 + a2 * c;
  switch (quadrant) {
    case 0: cos_out = c; sin_out = s; break;
    case 1: cos_out = -s; sin_out = c; break;
    case 2: cos_out = -c; sin_out = -s; break;
    default: cos_out = s; sin_out = -c; break;
  }
}

/// Stores a float value (f32 as is, f16 rounded to nearest even).
void store_float(uint at, float v) {
#if K == KIND_F32
  pc.y.v[at] = v;
#elif K == KIND_F16
  pc.y.v[at] = uint16_t(f32_to_f16(v));
#endif
}

/// Stores bernoulli's 1 or 0 in kind K.
void store_bit(uint at, bool one) {
#if K == KIND_F32
  pc.y.v[at] = one ? 1.0 : 0.0;
#elif K == KIND_F16
  pc.y.v[at] = uint16_t(one ? 0x3C00u : 0u);
#elif K == KIND_I32
  pc.y.v[at] = one ? 1 : 0;
#elif K == KIND_I64
  pc.y.v[at] = int64_t(one ? 1 : 0);
#else
  pc.y.v[at] = uint8_t(one ? 1u : 0u);
#endif
}

void main() {
  const uint n = pc.n;
  const uint blocks = n / 4u + ((n & 3u) != 0u ? 1u : 0u);
  const uint step = gl_NumWorkGroups.x * RANDOM_GROUP;
  for (uint blk = gl_GlobalInvocationID.x; blk < blocks; blk += step) {
    const uvec4 w = philox4x32_10(blk, 0u);  // n < 2^31: the block index's high word is 0
    const uint first = 4u * blk;
    const uint count = min(4u, n - first);
    if (OP == OP_BERNOULLI) {
      for (uint j = 0u; j < count; ++j) store_bit(first + j, (w[j] >> 8) < pc.threshold);
    } else if (OP == OP_RANDOM_UNIFORM) {
#if IS_FLOAT(K)
      for (uint j = 0u; j < count; ++j) store_float(first + j, philox_uniform(w[j]));
#endif
    } else {
#if IS_FLOAT(K)
      // strata_philox_normal: lanes 0, 1 from words 0, 1; lanes 2, 3 from words 2, 3.
      for (uint pair = 0u; pair < count; pair += 2u) {
        precise float u1 = float((w[pair] >> 8) + 1u) * TWO_POW_M24; /* (0, 1] */
        precise float u2 = philox_uniform(w[pair + 1u]);
        precise float l = philox_log(u1);
        precise float x = -2.0 * l;
        precise float r = philox_sqrt(x);
        precise float c, s;
        philox_cos_sin(u2, c, s);
        precise float y0 = r * c;
        precise float y1 = r * s;
        store_float(first + pair, y0);
        if (pair + 1u < count) store_float(first + pair + 1u, y1);
      }
#endif
    }
  }
}
