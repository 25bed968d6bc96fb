#version 460
// index.comp — index_select, gather and scatter_add (specialization constant
// 0: IX_*). K is the kind of the values; indices are i64, already checked by
// the host to lie in range, and read as their low 32-bit word.
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
} pc;

uint index_at(uint element) { return pc.index.v[2u * element]; }

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
    if (OP == IX_INDEX_SELECT) {
      uint src = 0u;
      for (uint d = 0u; d < rank; ++d) {
        uint k = d == dim ? index_at(pos[d] * pc.p.index_stride) : pos[d];
        src += k * pc.p.x_stride[d];
      }
      pc.y.v[i] = pc.x.v[src];
    } else if (OP == IX_GATHER) {
      uint at = 0u;
      for (uint d = 0u; d < rank; ++d) at += pos[d] * pc.p.index_strides[d];
      uint src = 0u;
      for (uint d = 0u; d < rank; ++d) src += (d == dim ? index_at(at) : pos[d]) * pc.p.x_stride[d];
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
      for (uint j = 0u; j < pc.p.index_shape[dim]; ++j) {
        if (index_at(at + j * pc.p.index_strides[dim]) == target) {
          acc += LOAD(K, pc.x.v[src + j * pc.p.x_stride[dim]]);
        }
      }
      pc.y.v[i] = STORE(K, acc);
    }
  }
}
