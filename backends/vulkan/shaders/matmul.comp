#version 460
// matmul.comp — y[b] = a[b] @ b[b] for strided a [.., M, K] and b [.., K, N]
// (any strides, batch strides may be 0), compact y [.., M, N]. Tiled in shared
// memory: a work group of 16x16 threads computes a 64x64 tile of y, each
// thread a 4x4 block, stepping through K 16 at a time. Accumulates in f32
// (f16 operands are widened on load). K is the kind of every operand.
// Tiles and batches beyond one dispatch's work-group counts are covered by
// grid-stride loops.
#include "common.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

DECLARE_BUFFER(Buffer, K)

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Params {
  uint m;
  uint n;
  uint k;
  uint batch;
  uint a_row;  // strides of a's last two dims
  uint a_col;
  uint b_row;
  uint b_col;
  uint batch_rank;
  uint pad0;
  uint pad1;
  uint pad2;
  uint batch_shape[MAX_RANK];
  uint a_batch[MAX_RANK];
  uint b_batch[MAX_RANK];
};

layout(push_constant) uniform Push {
  Buffer y;
  Buffer a;
  Buffer b;
  Params p;
} pc;

const uint T = MATMUL_TILE;
const uint TK = MATMUL_TILE_K;

shared float s_a[TK][T];  // s_a[kk][row]
shared float s_b[TK][T];  // s_b[kk][col]

void main() {
  const uint m = pc.p.m, n = pc.p.n, kdim = pc.p.k;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint lid = ty * 16u + tx;
  const uint tiles_m = (m + T - 1u) / T, tiles_n = (n + T - 1u) / T;
  for (uint z = gl_WorkGroupID.z; z < pc.p.batch; z += gl_NumWorkGroups.z)
  for (uint tile_m = gl_WorkGroupID.y; tile_m < tiles_m; tile_m += gl_NumWorkGroups.y)
  for (uint tile_n = gl_WorkGroupID.x; tile_n < tiles_n; tile_n += gl_NumWorkGroups.x) {
    const uint row0 = tile_m * T, col0 = tile_n * T;
    uint a_off = 0u, b_off = 0u;
    uint rest = z;
    for (int d = int(pc.p.batch_rank) - 1; d >= 0; --d) {
      uint i = rest % pc.p.batch_shape[d];
      rest /= pc.p.batch_shape[d];
      a_off += i * pc.p.a_batch[d];
      b_off += i * pc.p.b_batch[d];
    }
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < kdim; k0 += TK) {
      for (uint q = 0u; q < 4u; ++q) {
        uint e = lid + 256u * q;
        uint r = e / TK, kk = e % TK;
        uint gr = row0 + r, gk = k0 + kk;
        s_a[kk][r] = gr < m && gk < kdim ? LOAD(K, pc.a.v[a_off + gr * pc.p.a_row + gk * pc.p.a_col]) : 0.0;
        uint kb = e / T, c = e % T;
        uint gkb = k0 + kb, gc = col0 + c;
        s_b[kb][c] = gkb < kdim && gc < n ? LOAD(K, pc.b.v[b_off + gkb * pc.p.b_row + gc * pc.p.b_col]) : 0.0;
      }
      barrier();
      for (uint kk = 0u; kk < TK; ++kk) {
        float av[4], bv[4];
        for (int i = 0; i < 4; ++i) av[i] = s_a[kk][ty + 16u * uint(i)];
        for (int j = 0; j < 4; ++j) bv[j] = s_b[kk][tx + 16u * uint(j)];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
      }
      barrier();
    }
    const uint y_off = z * m * n;
    for (int i = 0; i < 4; ++i) {
      uint r = row0 + ty + 16u * uint(i);
      if (r >= m) continue;
      for (int j = 0; j < 4; ++j) {
        uint c = col0 + tx + 16u * uint(j);
        if (c < n) pc.y.v[y_off + r * n + c] = STORE(K, acc[i][j]);
      }
    }
  }
}
