#version 460
// index.comp — index_select, gather and scatter_add (specialization constant
// 0: OP_*). K is the kind of the values; indices are i64, read as pairs of
// 32-bit words.
//
// An index outside [0, bound) is never followed: index_select and gather
// write 0 for it, scatter_add skips it, and the first one is recorded in the
// device's error record (common.glsl), which the host reports at the next
// synchronisation point as STRATA_ERROR_DEFERRED. The kernel itself never
// waits for the device.
//
// scatter_add runs as a gather over the output: each output element walks
// the index entries that may target it, in order, and adds their sources to
// the base value (copied into y beforehand). No atomics, so it works for
// every kind and the sums come out in the same order as on the CPU.
#include "common.glsl"

layout(local_size_x = INDEX_GROUP) in;
layout(constant_id = 0) const int OP = 0;

DECLARE_BUFFER(Buffer, K)

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Params {
  uint rank;
  uint dim;
  uint n;  // elements of y
  uint index_stride;  // index_select: stride of the 1-D index
  uint bound;  // valid indices are [0, bound): x's (base's) size along dim
  uint y_shape[MAX_RANK];
  uint x_stride[MAX_RANK];  // x, or src for scatter_add
  uint index_shape[MAX_RANK];
  uint index_strides[MAX_RANK];
};

layout(push_constant) uniform Push {
  Buffer y;
  Buffer x;  // x, or src for scatter_add
  IndexBuffer index;
  Params p;
  ErrorRecord err;
  uint site;
} pc;

/// Returned by index_at for an index outside [0, bound) (bound < 2^31, so
/// it is never a valid index).
const uint BAD_INDEX = 0xffffffffu;

/// The index at element offset `at` of the index tensor, or BAD_INDEX
/// (recording the failure) when it does not lie in [0, bound).
uint index_at(uint at) {
  const uint lo = pc.index.v[2u * at];
  const uint hi = pc.index.v[2u * at + 1u];
  if (hi == 0u && lo < pc.p.bound) return lo;
  record_failure(pc.err, pc.site, ERR_INDEX_RANGE, pc.p.dim, pc.p.bound, lo, hi);
  return BAD_INDEX;
}

/// The index at element offset `at`, or BAD_INDEX when it does not lie in
/// [0, bound); the first bad one is kept in `bad` (words lo, hi) instead of
/// being recorded (see scatter_add below).
uint index_or_bad(uint at, inout bool seen, inout uvec2 bad) {
  const uint lo = pc.index.v[2u * at];
  const uint hi = pc.index.v[2u * at + 1u];
  if (hi == 0u && lo < pc.p.bound) return lo;
  if (!seen) bad = uvec2(lo, hi);
  seen = true;
  return BAD_INDEX;
}

void main() {
  const uint n = pc.p.n;
  const uint rank = pc.p.rank;
  const uint dim = pc.p.dim;
  const uint step = gl_NumWorkGroups.x * INDEX_GROUP;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    uint pos[MAX_RANK];
    uint rest = i;
    for (int d = int(rank) - 1; d >= 0; --d) {
      pos[d] = rest % pc.p.y_shape[d];
      rest /= pc.p.y_shape[d];
    }
    if (OP == OP_INDEX_SELECT || OP == OP_GATHER) {
      uint at = 0u;
      if (OP == OP_INDEX_SELECT) {
        at = pos[dim] * pc.p.index_stride;
      } else {
        for (uint d = 0u; d < rank; ++d) at += pos[d] * pc.p.index_strides[d];
      }
      const uint k = index_at(at);
      if (k == BAD_INDEX) {
        pc.y.v[i] = STORE(K, COMP_T(K)(0));
        continue;
      }
      uint src = 0u;
      for (uint d = 0u; d < rank; ++d) src += (d == dim ? k : pos[d]) * pc.p.x_stride[d];
      pc.y.v[i] = pc.x.v[src];
    } else {
      bool covered = true;
      uint at = 0u, src = 0u;
      for (uint d = 0u; d < rank; ++d) {
        if (d == dim) continue;
        covered = covered && pos[d] < pc.p.index_shape[d];
        at += pos[d] * pc.p.index_strides[d];
        src += pos[d] * pc.p.x_stride[d];
      }
      if (!covered) continue;
      COMP_T(K) acc = LOAD(K, pc.y.v[i]);
      const uint target = pos[dim];
      // A bad entry is recorded after the loop, not in it: with the atomics
      // of record_failure inside the loop, lavapipe (Mesa 22.3) lost every
      // addition of the loop (tests/vulkan: ScatterAddKnownValues).
      bool seen = false;
      uvec2 bad = uvec2(0u, 0u);
      for (uint j = 0u; j < pc.p.index_shape[dim]; ++j) {
        if (index_or_bad(at + j * pc.p.index_strides[dim], seen, bad) == target) {  // never BAD_INDEX
          acc += LOAD(K, pc.x.v[src + j * pc.p.x_stride[dim]]);
        }
      }
      pc.y.v[i] = STORE(K, acc);
      // Every output of a column scans the same entries: the first one reports.
      if (seen && target == 0u) record_failure(pc.err, pc.site, ERR_INDEX_RANGE, dim, pc.p.bound, bad.x, bad.y);
    }
  }
}
