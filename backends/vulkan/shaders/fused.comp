#version 460
// fused.comp — strata::fused_elementwise: one invocation per element runs
// the op's program (<strata/plugin/fused_program.hpp>), read from the
// parameters as statements, over registers, with the ops' own arithmetic
// (float_ops.glsl) — so a program gives the bits of its ops run one by one,
// f16 values rounded after each statement as the ops store them. Compiled
// once per kind (K: f32, f16); 1 to FUSED_MAX_INPUTS inputs and 1 to
// FUSED_MAX_OUTPUTS outputs (their addresses fill the 128 bytes of push
// constants every device offers). The host passes inputs compact with the
// outputs or one broadcast value, and programs of at most
// FUSED_MAX_STATEMENTS statements (vulkan/fused.cpp).
#include "common.glsl"
#include "float_ops.glsl"

layout(local_size_x = ELTWISE_GROUP) in;

DECLARE_BUFFER(Buffer, K)

/// A statement: x = opcode (bit 16: binary), y and z = operand value
/// indices (FUSED_CONSTANT: the constant in w, as float bits).
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Params {
  uint n;
  uint n_inputs;
  uint n_statements;
  uint n_outputs;
  uint broadcast;  // bit k: input k is one value
  uint pad0;
  uint pad1;
  uint pad2;
  uint result[FUSED_MAX_OUTPUTS];  // the value each output is
  uint pad3;
  uint pad4;
  uvec4 st[FUSED_MAX_STATEMENTS];
};

layout(push_constant) uniform Push {
  Buffer y[FUSED_MAX_OUTPUTS];
  Buffer x[FUSED_MAX_INPUTS];
  Params p;
} pc;

float rounded(float x) {
#if K == KIND_F16
  return LOAD(K, STORE(K, x));
#else
  return x;
#endif
}

void main() {
  const uint n = pc.p.n;
  const uint ni = pc.p.n_inputs;
  const uint ns = pc.p.n_statements;
  const uint no = pc.p.n_outputs;
  const uint bc = pc.p.broadcast;
  const uint step = gl_NumWorkGroups.x * ELTWISE_GROUP;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    float v[FUSED_MAX_STATEMENTS + FUSED_MAX_INPUTS];
    for (uint k = 0u; k < ni; ++k) v[k] = LOAD(K, pc.x[k].v[(bc & (1u << k)) != 0u ? 0u : i]);
    for (uint j = 0u; j < ns; ++j) {
      const uvec4 s = pc.p.st[j];
      const float c = uintBitsToFloat(s.w);
      const float a = s.y == FUSED_CONSTANT ? c : v[s.y];
      const float b = s.z == FUSED_CONSTANT ? c : v[s.z];
      const int op = int(s.x & 0xffffu);
      v[ni + j] = rounded((s.x & 0x10000u) != 0u ? binary_float(op, a, b) : unary_float(op, a));
    }
    for (uint m = 0u; m < no; ++m) pc.y[m].v[i] = STORE(K, v[pc.p.result[m]]);
  }
}
