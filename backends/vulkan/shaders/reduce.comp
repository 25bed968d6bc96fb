#version 460
// reduce.comp — sum, prod, max, min, argmax, argmin over any set of dims.
// Compiled per (input kind A_K, output kind Y_K); the op is specialization
// constant 0 (OP_*). The host splits the input's dims into kept dims (the
// output positions, row-major) and reduced dims, merging dims where the
// strides allow. Mode 0 reduces one output per work group (strided partial
// results per thread, then a tree in shared memory), mode 1 one output per
// thread (short reductions with many outputs).
#include "common.glsl"

layout(local_size_x = REDUCE_GROUP) in;
layout(constant_id = 0) const int OP = 0;

DECLARE_BUFFER(YBuffer, Y_K)
DECLARE_BUFFER(ABuffer, A_K)

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Params {
  uint n_out;
  uint n_red;
  uint keep_rank;
  uint red_rank;
  uint keep_shape[MAX_RANK];
  uint keep_stride[MAX_RANK];
  uint red_shape[MAX_RANK];
  uint red_stride[MAX_RANK];
};

layout(push_constant) uniform Push {
  YBuffer y;
  ABuffer a;
  Params p;
  uint mode;
  float scale;  // applied to float sums (mean)
} pc;

#define YC COMP_T(Y_K)
#define AC COMP_T(A_K)

const bool ARG = OP == OP_ARGMAX || OP == OP_ARGMIN;
const uint NO_INDEX = 0xffffffffu;

shared YC s_acc[REDUCE_GROUP];
shared AC s_val[REDUCE_GROUP];
shared uint s_idx[REDUCE_GROUP];

YC identity() {
  if (OP == OP_SUM) return YC(0);
  if (OP == OP_PROD) return YC(1);
#if IS_FLOAT(Y_K)
  return OP == OP_MAX ? uintBitsToFloat(0xff800000u) : uintBitsToFloat(0x7f800000u);
#elif Y_K == KIND_I32
  return OP == OP_MAX ? int(0x80000000u) : int(0x7fffffff);
#elif Y_K == KIND_I64
  return OP == OP_MAX ? int64_t(0x8000000000000000ul) : int64_t(0x7ffffffffffffffful);
#else
  return YC(0);
#endif
}

YC combine(YC x, YC v) {
  if (OP == OP_SUM) return x + v;
  if (OP == OP_PROD) return x * v;
#if IS_FLOAT(Y_K)
  if (isnan(x)) return x;  // NaN propagates
  if (isnan(v)) return v;
#endif
  return OP == OP_MAX ? max(x, v) : min(x, v);
}

/// Whether candidate (v, i) replaces (best, bi): NaN wins (first one), then
/// the larger (argmax) or smaller (argmin) value, ties to the lower index.
bool better(AC best, uint bi, AC v, uint i) {
  if (i == NO_INDEX) return false;
  if (bi == NO_INDEX) return true;
#if IS_FLOAT(A_K)
  if (isnan(best)) return isnan(v) && i < bi;
  if (isnan(v)) return true;
#endif
  if (v == best) return i < bi;
  return OP == OP_ARGMAX ? v > best : v < best;
}

uint keep_offset(uint o) {
  if (pc.p.keep_rank == 1u) return o * pc.p.keep_stride[0];
  uint off = 0u;
  for (int d = int(pc.p.keep_rank) - 1; d >= 0; --d) {
    off += (o % pc.p.keep_shape[d]) * pc.p.keep_stride[d];
    o /= pc.p.keep_shape[d];
  }
  return off;
}

uint red_offset(uint j) {
  if (pc.p.red_rank == 1u) return j * pc.p.red_stride[0];
  uint off = 0u;
  for (int d = int(pc.p.red_rank) - 1; d >= 0; --d) {
    off += (j % pc.p.red_shape[d]) * pc.p.red_stride[d];
    j /= pc.p.red_shape[d];
  }
  return off;
}

void store_arg(uint o, uint idx) { pc.y.v[o] = STORE(Y_K, YC(idx)); }

void store_acc(uint o, YC acc) {
#if IS_FLOAT(Y_K)
  if (OP == OP_SUM) acc *= pc.scale;
#endif
  pc.y.v[o] = STORE(Y_K, acc);
}

void main() {
  const uint n_out = pc.p.n_out;
  const uint n_red = pc.p.n_red;
  if (pc.mode == 1u) {
    const uint step = gl_NumWorkGroups.x * REDUCE_GROUP;
    for (uint o = gl_GlobalInvocationID.x; o < n_out; o += step) {
      const uint base = keep_offset(o);
      if (ARG) {
        AC best = LOAD(A_K, pc.a.v[base]);
        uint bi = 0u;
        for (uint j = 1u; j < n_red; ++j) {
          AC v = LOAD(A_K, pc.a.v[base + red_offset(j)]);
          if (better(best, bi, v, j)) {
            best = v;
            bi = j;
          }
        }
        store_arg(o, bi);
      } else {
        YC acc = identity();
        for (uint j = 0u; j < n_red; ++j) acc = combine(acc, YC(LOAD(A_K, pc.a.v[base + red_offset(j)])));
        store_acc(o, acc);
      }
    }
    return;
  }
  const uint t = gl_LocalInvocationID.x;
  for (uint o = gl_WorkGroupID.x; o < n_out; o += gl_NumWorkGroups.x) {
    const uint base = keep_offset(o);
    if (ARG) {
      AC best = AC(0);
      uint bi = NO_INDEX;
      for (uint j = t; j < n_red; j += REDUCE_GROUP) {
        AC v = LOAD(A_K, pc.a.v[base + red_offset(j)]);
        if (better(best, bi, v, j)) {
          best = v;
          bi = j;
        }
      }
      s_val[t] = best;
      s_idx[t] = bi;
    } else {
      YC acc = identity();
      for (uint j = t; j < n_red; j += REDUCE_GROUP) acc = combine(acc, YC(LOAD(A_K, pc.a.v[base + red_offset(j)])));
      s_acc[t] = acc;
    }
    barrier();
    for (uint half_size = REDUCE_GROUP / 2; half_size > 0u; half_size >>= 1) {
      if (t < half_size) {
        if (ARG) {
          if (better(s_val[t], s_idx[t], s_val[t + half_size], s_idx[t + half_size])) {
            s_val[t] = s_val[t + half_size];
            s_idx[t] = s_idx[t + half_size];
          }
        } else {
          s_acc[t] = combine(s_acc[t], s_acc[t + half_size]);
        }
      }
      barrier();
    }
    if (t == 0u) {
      if (ARG) {
        store_arg(o, s_idx[0]);
      } else {
        store_acc(o, s_acc[0]);
      }
    }
    barrier();
  }
}
