#version 460
// softmax.comp — fused softmax, log_softmax and their backward ops along one
// dim of compact tensors viewed as [outer, n, inner]. One work group per row
// (an (outer, inner) position); threads stride along the row and combine
// their partial max/sum in shared memory. Computes in f32 for f32 and f16
// (K is the kind of every operand); the op is specialization constant 0.
#include "common.glsl"

layout(local_size_x = SOFTMAX_GROUP) in;
layout(constant_id = 0) const int OP = 0;

DECLARE_BUFFER(Buffer, K)

layout(push_constant) uniform Push {
  Buffer y;
  Buffer a;  // x, or grad for the backward ops
  Buffer b;  // the forward output, backward ops only
  uint outer;
  uint n;
  uint inner;
} pc;

shared float s_part[SOFTMAX_GROUP];

float group_max(float v) {
  const uint t = gl_LocalInvocationID.x;
  s_part[t] = v;
  barrier();
  for (uint h = SOFTMAX_GROUP / 2; h > 0u; h >>= 1) {
    if (t < h) {
      float o = s_part[t + h];
      if (isnan(o) || o > s_part[t]) s_part[t] = o;
    }
    barrier();
  }
  float r = s_part[0];
  barrier();
  return r;
}

float group_sum(float v) {
  const uint t = gl_LocalInvocationID.x;
  s_part[t] = v;
  barrier();
  for (uint h = SOFTMAX_GROUP / 2; h > 0u; h >>= 1) {
    if (t < h) s_part[t] += s_part[t + h];
    barrier();
  }
  float r = s_part[0];
  barrier();
  return r;
}

float ld_a(uint i) { return LOAD(K, pc.a.v[i]); }
float ld_b(uint i) { return LOAD(K, pc.b.v[i]); }

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint n = pc.n;
  const uint inner = pc.inner;
  const uint rows = pc.outer * inner;
  for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
    const uint base = (r / inner) * n * inner + r % inner;
    if (OP == OP_SOFTMAX || OP == OP_LOG_SOFTMAX) {
      float m = uintBitsToFloat(0xff800000u);
      for (uint i = t; i < n; i += SOFTMAX_GROUP) {
        float v = ld_a(base + i * inner);
        if (isnan(v) || v > m) m = v;
      }
      m = group_max(m);
      float s = 0.0;
      for (uint i = t; i < n; i += SOFTMAX_GROUP) s += exp(ld_a(base + i * inner) - m);
      s = group_sum(s);
      if (OP == OP_SOFTMAX) {
        const float inv = 1.0 / s;
        for (uint i = t; i < n; i += SOFTMAX_GROUP) {
          pc.y.v[base + i * inner] = STORE(K, exp(ld_a(base + i * inner) - m) * inv);
        }
      } else {
        // (x - m) - log(s), not x - (m + log(s)): keeps log(s)'s digits when |m| is large.
        const float ls = log(s);
        for (uint i = t; i < n; i += SOFTMAX_GROUP) {
          pc.y.v[base + i * inner] = STORE(K, (ld_a(base + i * inner) - m) - ls);
        }
      }
    } else if (OP == OP_SOFTMAX_BACKWARD) {
      float d = 0.0;
      for (uint i = t; i < n; i += SOFTMAX_GROUP) d += ld_a(base + i * inner) * ld_b(base + i * inner);
      d = group_sum(d);
      for (uint i = t; i < n; i += SOFTMAX_GROUP) {
        const uint k = base + i * inner;
        pc.y.v[k] = STORE(K, ld_b(k) * (ld_a(k) - d));
      }
    } else {
      float s = 0.0;
      for (uint i = t; i < n; i += SOFTMAX_GROUP) s += ld_a(base + i * inner);
      s = group_sum(s);
      for (uint i = t; i < n; i += SOFTMAX_GROUP) {
        const uint k = base + i * inner;
        pc.y.v[k] = STORE(K, ld_a(k) - exp(ld_b(k)) * s);
      }
    }
  }
}
