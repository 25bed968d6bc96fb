#version 460
// eltwise.comp — every elementwise kernel: fill (NIN 0), unary ops and casts
// (NIN 1), binary ops, comparisons and the elementwise backward ops (NIN 2),
// where (NIN 3). Compiled once per combination of operand kinds (Y_K output,
// A_K/B_K/C_K inputs); the op is specialization constant 0 (opcodes.h).
//
// Operands are arbitrary strided views (stride 0 for broadcast dims), the
// output too (copy writes into views). The host merges dims wherever every
// operand allows, so most calls arrive as rank 1. Integer division by zero
// yields 0 and is recorded as a deferred failure (common.glsl).
#include "common.glsl"
#include "float_ops.glsl"

layout(local_size_x = ELTWISE_GROUP) in;
layout(constant_id = 0) const int OP = 0;

DECLARE_BUFFER(YBuffer, Y_K)
DECLARE_BUFFER(ABuffer, A_K)
DECLARE_BUFFER(BBuffer, B_K)
DECLARE_BUFFER(CBuffer, C_K)

/// Shape and strides (elements) of the launch; operand 0 is the output.
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Params {
  uint rank;
  uint n;
  uint fill_lo;  // fill: the value's storage bits (low, high word)
  uint fill_hi;
  uint shape[MAX_RANK];
  uint strides[4 * MAX_RANK];
};

layout(push_constant) uniform Push {
  YBuffer y;
  ABuffer a;
  BBuffer b;
  CBuffer c;
  Params p;
  ErrorRecord err;  // integer div by zero is recorded here (common.glsl)
  uint site;
} pc;

#define YC COMP_T(Y_K)
#define AC COMP_T(A_K)

#if NIN == 1
YC unary_op(AC x) {
#if IS_FLOAT(A_K) && A_K == Y_K
  return unary_float(OP, x);
#elif (A_K == KIND_I32 || A_K == KIND_I64) && A_K == Y_K
  switch (OP) {
    case OP_NEG: return -x;
    case OP_ABS: return x < AC(0) ? -x : x;
    case OP_SIGN: return x > AC(0) ? AC(1) : (x < AC(0) ? AC(-1) : AC(0));
    case OP_RELU: return x > AC(0) ? x : AC(0);
    default: return x;
  }
#elif A_K == KIND_BOOL && Y_K == KIND_BOOL
  return OP == OP_LOGICAL_NOT ? (x == 0u ? 1u : 0u) : x;
#elif Y_K == KIND_BOOL
  return x != AC(0) ? 1u : 0u;  // cast to bool
#else
  return YC(x);  // cast: float->int truncates toward zero, bool->number is 0/1
#endif
}
#endif

#if NIN == 2
YC binary_op(AC a, AC b) {
#if Y_K == KIND_BOOL
  switch (OP) {
    case OP_EQ: return a == b ? 1u : 0u;
    case OP_NE: return a != b ? 1u : 0u;
#if A_K != KIND_BOOL
    case OP_LT: return a < b ? 1u : 0u;
    case OP_LE: return a <= b ? 1u : 0u;
    case OP_GT: return a > b ? 1u : 0u;
    case OP_GE: return a >= b ? 1u : 0u;
#endif
  }
#if A_K == KIND_BOOL
  return OP == OP_LOGICAL_AND ? ((a & b) != 0u ? 1u : 0u) : ((a | b) != 0u ? 1u : 0u);
#else
  return 0u;
#endif
#elif IS_FLOAT(A_K)
  return binary_float(OP, a, b);
#else
  switch (OP) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return b == AC(0) ? AC(0) : a / b;  // main() records zero divisors
    case OP_MAXIMUM: return max(a, b);
    case OP_MINIMUM: return min(a, b);
  }
  return a;
#endif
}
#endif

void main() {
  const uint n = pc.p.n;
  const uint rank = pc.p.rank;
  const uint step = gl_NumWorkGroups.x * ELTWISE_GROUP;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    uint oy = 0u, oa = 0u, ob = 0u, oc = 0u;
    if (rank == 1u) {
      oy = i * pc.p.strides[0];
      oa = i * pc.p.strides[MAX_RANK];
      ob = i * pc.p.strides[2 * MAX_RANK];
      oc = i * pc.p.strides[3 * MAX_RANK];
    } else {
      uint rest = i;
      for (int d = int(rank) - 1; d >= 0; --d) {
        uint extent = pc.p.shape[d];
        uint k = rest % extent;
        rest /= extent;
        oy += k * pc.p.strides[d];
        oa += k * pc.p.strides[MAX_RANK + d];
        ob += k * pc.p.strides[2 * MAX_RANK + d];
        oc += k * pc.p.strides[3 * MAX_RANK + d];
      }
    }
#if NIN == 0
#if Y_K == KIND_F32
    pc.y.v[oy] = uintBitsToFloat(pc.p.fill_lo);
#elif Y_K == KIND_F16
    pc.y.v[oy] = uint16_t(pc.p.fill_lo);
#elif Y_K == KIND_I32
    pc.y.v[oy] = int(pc.p.fill_lo);
#elif Y_K == KIND_I64
    pc.y.v[oy] = int64_t((uint64_t(pc.p.fill_hi) << 32) | uint64_t(pc.p.fill_lo));
#else
    pc.y.v[oy] = uint8_t(pc.p.fill_lo);
#endif
#elif NIN == 1
#if A_K == Y_K
    if (OP == OP_COPY) {  // bit-exact, NaN payloads and all
      pc.y.v[oy] = pc.a.v[oa];
      continue;
    }
#endif
    pc.y.v[oy] = STORE(Y_K, unary_op(LOAD(A_K, pc.a.v[oa])));
#elif NIN == 2
#if A_K == KIND_I32 || A_K == KIND_I64
    if (OP == OP_DIV && pc.b.v[ob] == STORE_T(B_K)(0)) {
      // Integer division by zero: 0 here, STRATA_ERROR_DEFERRED at the next
      // synchronisation point.
      record_failure(pc.err, pc.site, ERR_DIV_ZERO, 0u, 0u, 0u, 0u);
      pc.y.v[oy] = STORE_T(Y_K)(0);
      continue;
    }
#endif
    pc.y.v[oy] = STORE(Y_K, binary_op(LOAD(A_K, pc.a.v[oa]), LOAD(B_K, pc.b.v[ob])));
#else
    pc.y.v[oy] = LOAD(A_K, pc.a.v[oa]) != 0u ? pc.b.v[ob] : pc.c.v[oc];
#endif
  }
}
