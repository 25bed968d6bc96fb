// kernel_math.hpp — the index arithmetic, reduction combiners and block tree
// of the GPU kernels, as plain __host__ __device__ functions.
//
// Who uses it: the CUDA plugin's kernels (backends/cuda/src/*.cu) and, through
// hipcc, the HIP plugin's. Everything here is also compiled by the host
// compiler and run on the CPU by tests/gpu_math, which is how the kernels'
// arithmetic is tested on machines without a GPU. The file therefore includes
// only <cstdint>/<cstddef>, uses no CUDA header and nothing of the standard
// library that device code lacks.
//
// Semantics
// ---------
//  - A Shape is an iteration space of `rank` dims (row-major: the last dim
//    varies fastest). An Operand is how one tensor walks it: element
//    `offset` plus coordinate * stride summed over dims. Strides are element
//    strides, >= 0 (0 broadcasts).
//  - offset_of(s, op, i) is the element index of op at the row-major linear
//    index i of s. coalesce() rewrites a shape and its operands into the
//    fewest dims that give every operand the same offset_of for every i.
//  - A reduction over `dims` of an input (in, in_op) writes a compact output
//    of the input's shape with the reduced dims of size 1. ReducePlan splits
//    the input into the kept dims (output index = row-major index over them)
//    and the reduced dims (reduce index = row-major index over them; for a
//    single reduced dim it is the coordinate along it, which argmax/argmin
//    report).
//  - Combiners (SumOp, ProdOp, MaxOp, MinOp, ArgMaxOp, ArgMinOp) are structs
//    with static identity() and combine(a, b). Max/Min propagate NaN. The
//    Arg combiners are commutative and associative (they pick the maximum of
//    a total order), so every reduction tree gives the sequential answer:
//    first occurrence wins, NaN beats every number, the first NaN wins.
//  - The block tree: thread t of a block of `threads` (a power of two)
//    threads first combines reduce indices t, t + threads, t + 2*threads, ...
//    in increasing order into its partial (strided_partial), writes it to
//    shared memory, then for stride = threads/2, threads/4, ..., 1 calls
//    tree_step between __syncthreads(); shared[0] is the result.
//  - Tiled matmul: the per-thread pieces of tiled_matmul.cuh's kernel (tile
//    loads with bounds checks, the inner product over a tile, the store),
//    so that a test can run the kernel on the CPU block by block, thread by
//    thread, phase by phase.
#pragma once

#include <cstddef>
#include <cstdint>

// STRATA_HD: a function for host and device code, inlined. (hipcc does not
// define __forceinline__ before <hip/hip_runtime.h>; this file may come first.)
#ifndef STRATA_HD
#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#elif defined(__HIPCC__)
#define STRATA_HD __host__ __device__ inline __attribute__((always_inline))
#else
#define STRATA_HD inline
#endif
#endif

namespace strata::gpu {

inline constexpr int kMaxRank = 8;

/// An iteration space, row-major. rank 0 is a scalar (one element).
struct Shape {
  int32_t rank;
  int64_t n[kMaxRank];
};

/// One tensor's walk over a Shape: element offset and element strides (>= 0).
struct Operand {
  int64_t offset;
  int64_t stride[kMaxRank];
};

/// Number of elements of s (1 for rank 0).
STRATA_HD int64_t numel(const Shape& s) {
  int64_t total = 1;
  for (int d = 0; d < s.rank; ++d) total *= s.n[d];
  return total;
}

/// The row-major coordinates of linear index `linear` of s into coord[0..rank).
STRATA_HD void unravel(const Shape& s, int64_t linear, int64_t* coord) {
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t q = linear / s.n[d];
    coord[d] = linear - q * s.n[d];
    linear = q;
  }
}

/// The element index of op at row-major linear index `linear` of s:
/// op.offset + sum over d of coord[d] * op.stride[d].
STRATA_HD int64_t offset_of(const Shape& s, const Operand& op, int64_t linear) {
  int64_t off = op.offset;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t q = linear / s.n[d];
    off += (linear - q * s.n[d]) * op.stride[d];
    linear = q;
  }
  return off;
}

/// Rewrites s and ops[0..n_ops) into the fewest dims with the same offset_of
/// for every operand and every linear index: size-1 dims are dropped (the
/// result may be rank 0, a scalar), and dims d, d+1 are merged when for every
/// operand stride[d] == stride[d+1] * n[d+1] (the merged dim has size
/// n[d]*n[d+1] and the inner dim's strides). A shape with no elements becomes
/// rank 1 of size 0 (strides 0). Offsets are unchanged.
STRATA_HD void coalesce(Shape& s, Operand* ops, int n_ops) {
  for (int d = 0; d < s.rank; ++d) {
    if (s.n[d] == 0) {
      s.rank = 1;
      s.n[0] = 0;
      for (int k = 0; k < n_ops; ++k) ops[k].stride[0] = 0;
      return;
    }
  }
  int out = 0;  // dims [0, out) are the result so far
  for (int d = 0; d < s.rank; ++d) {
    if (s.n[d] == 1) continue;
    bool merge = out > 0;
    for (int k = 0; merge && k < n_ops; ++k) {
      if (ops[k].stride[out - 1] != ops[k].stride[d] * s.n[d]) merge = false;
    }
    if (merge) {
      s.n[out - 1] *= s.n[d];
      for (int k = 0; k < n_ops; ++k) ops[k].stride[out - 1] = ops[k].stride[d];
    } else {
      s.n[out] = s.n[d];
      for (int k = 0; k < n_ops; ++k) ops[k].stride[out] = ops[k].stride[d];
      ++out;
    }
  }
  s.rank = out;
}

/// True when op walks s row-major with stride 1 from its offset (element i at
/// op.offset + i). Size-1 dims may have any stride; an empty shape is compact.
STRATA_HD bool is_compact(const Shape& s, const Operand& op) {
  int64_t expected = 1;
  bool ok = true;
  for (int d = s.rank - 1; d >= 0; --d) {
    if (s.n[d] == 0) return true;
    if (s.n[d] != 1 && op.stride[d] != expected) ok = false;
    expected *= s.n[d];
  }
  return ok;
}

// ---------------------------------------------------------------------------
// Reductions

/// A reduction of an input over some of its dims, both parts coalesced.
/// Output element `out_index` (row-major over the kept dims, which is the
/// compact keepdim output's own index) combines the input elements
/// reduce_input_offset(p, out_index, r) for r in [0, n_reduce).
struct ReducePlan {
  Shape kept;        // the dims not reduced
  Operand kept_in;   // the input's walk over them (carries the input's offset)
  Shape reduced;     // the reduced dims
  Operand reduced_in;  // the input's walk over them (offset 0)
  int64_t n_out;     // elements of the output (0 when a kept dim is empty)
  int64_t n_reduce;  // elements combined per output (1 when no dim is reduced,
                     // 0 when a reduced dim is empty: the output is identity)
};

/// Splits (in, in_op) by `dims` (sorted, unique, in [0, in.rank)).
STRATA_HD ReducePlan make_reduce_plan(const Shape& in, const Operand& in_op, const int64_t* dims, int n_dims) {
  ReducePlan p{};
  p.kept.rank = 0;
  p.reduced.rank = 0;
  p.kept_in.offset = in_op.offset;
  p.reduced_in.offset = 0;
  int next = 0;  // index into dims
  for (int d = 0; d < in.rank; ++d) {
    if (next < n_dims && dims[next] == d) {
      p.reduced.n[p.reduced.rank] = in.n[d];
      p.reduced_in.stride[p.reduced.rank] = in_op.stride[d];
      ++p.reduced.rank;
      ++next;
    } else {
      p.kept.n[p.kept.rank] = in.n[d];
      p.kept_in.stride[p.kept.rank] = in_op.stride[d];
      ++p.kept.rank;
    }
  }
  p.n_out = numel(p.kept);
  p.n_reduce = numel(p.reduced);
  coalesce(p.kept, &p.kept_in, 1);
  coalesce(p.reduced, &p.reduced_in, 1);
  return p;
}

/// The input element that output `out_index` combines as its `reduce_index`-th.
STRATA_HD int64_t reduce_input_offset(const ReducePlan& p, int64_t out_index, int64_t reduce_index) {
  return offset_of(p.kept, p.kept_in, out_index) + offset_of(p.reduced, p.reduced_in, reduce_index);
}

/// A compact tensor seen as outer x n x inner around dim `dim` (softmax and
/// friends work along rows of n elements spaced `inner` apart). Rank 0 is
/// 1 x 1 x 1. Precondition: 0 <= dim < s.rank (or s.rank == 0).
struct RowPlan {
  int64_t outer, n, inner;
};

STRATA_HD RowPlan make_row_plan(const Shape& s, int dim) {
  RowPlan p{1, 1, 1};
  for (int d = 0; d < s.rank; ++d) {
    if (d < dim) p.outer *= s.n[d];
    else if (d == dim) p.n = s.n[d];
    else p.inner *= s.n[d];
  }
  return p;
}

/// Element index (from the tensor's offset) of element j of row `row`, where
/// row in [0, outer*inner) counts rows row-major over (outer, inner).
STRATA_HD int64_t row_offset(const RowPlan& p, int64_t row, int64_t j) {
  const int64_t o = row / p.inner;
  const int64_t i = row - o * p.inner;
  return (o * p.n + j) * p.inner + i;
}

// ---------------------------------------------------------------------------
// Combiners

/// NaN test usable in device code (x != x); false for integers.
template <class T>
STRATA_HD bool is_nan(T) {
  return false;
}
STRATA_HD bool is_nan(float x) { return x != x; }
STRATA_HD bool is_nan(double x) { return x != x; }

/// lowest()/highest() of an accumulator type: -inf/+inf for floating point,
/// the extreme values for integers.
template <class T>
struct Limits;
template <>
struct Limits<float> {
  STRATA_HD static float lowest() { return -__builtin_huge_valf(); }
  STRATA_HD static float highest() { return __builtin_huge_valf(); }
};
template <>
struct Limits<double> {
  STRATA_HD static double lowest() { return -__builtin_huge_val(); }
  STRATA_HD static double highest() { return __builtin_huge_val(); }
};
template <>
struct Limits<int64_t> {
  STRATA_HD static int64_t lowest() { return INT64_MIN; }
  STRATA_HD static int64_t highest() { return INT64_MAX; }
};
template <>
struct Limits<int32_t> {
  STRATA_HD static int32_t lowest() { return INT32_MIN; }
  STRATA_HD static int32_t highest() { return INT32_MAX; }
};
template <>
struct Limits<uint8_t> {
  STRATA_HD static uint8_t lowest() { return 0; }
  STRATA_HD static uint8_t highest() { return UINT8_MAX; }
};
template <>
struct Limits<bool> {
  STRATA_HD static bool lowest() { return false; }
  STRATA_HD static bool highest() { return true; }
};

template <class Acc>
struct SumOp {
  STRATA_HD static Acc identity() { return Acc(0); }
  STRATA_HD static Acc combine(Acc a, Acc b) { return a + b; }
};

template <class Acc>
struct ProdOp {
  STRATA_HD static Acc identity() { return Acc(1); }
  STRATA_HD static Acc combine(Acc a, Acc b) { return a * b; }
};

/// max; a NaN operand makes the result NaN (the first operand's if both are).
template <class Acc>
struct MaxOp {
  STRATA_HD static Acc identity() { return Limits<Acc>::lowest(); }
  STRATA_HD static Acc combine(Acc a, Acc b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a < b ? b : a;
  }
};

/// min; a NaN operand makes the result NaN (the first operand's if both are).
template <class Acc>
struct MinOp {
  STRATA_HD static Acc identity() { return Limits<Acc>::highest(); }
  STRATA_HD static Acc combine(Acc a, Acc b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return b < a ? b : a;
  }
};

/// A value and the reduce index it was found at.
template <class Acc>
struct ArgPair {
  Acc v;
  int64_t i;
};

/// argmax: the pair that is largest in the total order
///   NaN > every number;  larger value > smaller value;
///   on equal values (or both NaN) the smaller index wins.
/// combine() picks the larger of two pairs in that order, so it is
/// commutative and associative: any tree gives "first occurrence wins, the
/// first NaN wins". The identity is (lowest value, INT64_MAX): every element
/// is >= lowest, and on a tie (a real -inf, or INT64_MIN) the element's index
/// is smaller, so the identity never wins over a real element (real indices
/// are < INT64_MAX).
template <class Acc>
struct ArgMaxOp {
  using T = ArgPair<Acc>;
  STRATA_HD static T identity() { return T{Limits<Acc>::lowest(), INT64_MAX}; }
  STRATA_HD static T combine(T a, T b) {
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) {
      if (an && bn) return a.i <= b.i ? a : b;
      return an ? a : b;
    }
    if (b.v < a.v) return a;
    if (a.v < b.v) return b;
    return a.i <= b.i ? a : b;
  }
};

/// argmin: as ArgMaxOp with the value order reversed (NaN still wins; the
/// identity is (highest value, INT64_MAX)).
template <class Acc>
struct ArgMinOp {
  using T = ArgPair<Acc>;
  STRATA_HD static T identity() { return T{Limits<Acc>::highest(), INT64_MAX}; }
  STRATA_HD static T combine(T a, T b) {
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) {
      if (an && bn) return a.i <= b.i ? a : b;
      return an ? a : b;
    }
    if (a.v < b.v) return a;
    if (b.v < a.v) return b;
    return a.i <= b.i ? a : b;
  }
};

// ---------------------------------------------------------------------------
// The block tree

/// Thread `tid`'s partial of a block of `threads` threads over n reduce
/// indices: Op::combine of load(r) for r = tid, tid + threads, ... < n, in
/// increasing order, starting from Op::identity(). `load` is any callable
/// object (a struct with an STRATA_HD operator() in device code) mapping a
/// reduce index to a T.
template <class T, class Op, class Load>
STRATA_HD T strided_partial(int tid, int threads, int64_t n, const Load& load) {
  T acc = Op::identity();
  for (int64_t r = tid; r < n; r += threads) acc = Op::combine(acc, load(r));
  return acc;
}

/// One level of the block tree: threads below `stride` combine their slot
/// with the one `stride` above. Called for stride = threads/2, ..., 1 with a
/// __syncthreads() before each call (threads a power of two).
template <class T, class Op>
STRATA_HD void tree_step(T* shared, int tid, int stride) {
  if (tid < stride) shared[tid] = Op::combine(shared[tid], shared[tid + stride]);
}

// ---------------------------------------------------------------------------
// Tiled matmul (tiled_matmul.cuh)
//
// C[b] = A[b] @ B[b]: A is M x K, B is K x N, each given by a MatView (element
// offset and strides per batch, row and column; any stride may be 0), C is
// compact row-major M x N per batch. A block of kMmThreads threads computes a
// kMmTileM x kMmTileN tile of one batch's C, stepping through K in phases of
// kMmTileK: each phase every thread loads its elements of the A and B tiles
// into shared memory (zero outside the matrices), __syncthreads(), every
// thread accumulates its kMmPerThread x kMmPerThread outputs over the phase,
// __syncthreads(). Thread tid owns outputs (ty + kMmThreadsY * i,
// tx + kMmThreadsX * j) of the tile, tx = tid % kMmThreadsX,
// ty = tid / kMmThreadsX, so consecutive threads read consecutive shared B
// columns and store consecutive C columns.

struct MatView {
  int64_t offset, batch_stride, row_stride, col_stride;
};

inline constexpr int kMmThreadsX = 16;
inline constexpr int kMmThreadsY = 16;
inline constexpr int kMmThreads = kMmThreadsX * kMmThreadsY;  // 256
inline constexpr int kMmPerThread = 2;
inline constexpr int kMmTileM = kMmThreadsY * kMmPerThread;  // 32
inline constexpr int kMmTileN = kMmThreadsX * kMmPerThread;  // 32
inline constexpr int kMmTileK = 16;
inline constexpr int kMmSharedA = kMmTileM * kMmTileK;  // shared A tile, row-major [TileM][TileK]
inline constexpr int kMmSharedB = kMmTileK * kMmTileN;  // shared B tile, row-major [TileK][TileN]
inline constexpr int64_t kMaxGridYZ = 65535;

/// Element index of (batch, row, col) of a view.
STRATA_HD int64_t mat_index(const MatView& v, int64_t batch, int64_t row, int64_t col) {
  return v.offset + batch * v.batch_stride + row * v.row_stride + col * v.col_stride;
}

/// Number of tiles of edge `tile` covering `extent`.
STRATA_HD int64_t tile_count(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; }

/// The launch grid: x over column tiles, y over row tiles (at most 65535,
/// the kernel strides), z over batches (at most 65535, the kernel strides).
/// grid_x also stays below 2^31 - 1 (the kernel strides over x as well).
struct MatmulGrid {
  int64_t x, y, z;
};
STRATA_HD MatmulGrid matmul_grid(int64_t batch, int64_t M, int64_t N) {
  MatmulGrid g{tile_count(N, kMmTileN), tile_count(M, kMmTileM), batch};
  if (g.x > 2147483647) g.x = 2147483647;
  if (g.y > kMaxGridYZ) g.y = kMaxGridYZ;
  if (g.z > kMaxGridYZ) g.z = kMaxGridYZ;
  return g;
}

/// Phase `k0` of tile (row0, col0) of batch `batch`, thread `tid`: loads this
/// thread's share of the A tile (rows row0.., cols k0..) into sa and of the B
/// tile (rows k0.., cols col0..) into sb; elements outside the M x K and
/// K x N matrices are stored as zero and never read. `read_a`/`read_b` are
/// callable objects mapping an element index of A/B to its value as Acc
/// (tiled_matmul.cuh passes readers of global memory; tests pass readers
/// that record every index).
template <class Acc, class ReadA, class ReadB>
STRATA_HD void mm_load_tiles(const ReadA& read_a, const MatView& av, const ReadB& read_b, const MatView& bv,
                             int64_t batch, int64_t M, int64_t N, int64_t K, int64_t row0, int64_t col0,
                             int64_t k0, int tid, Acc* sa, Acc* sb) {
  for (int e = tid; e < kMmSharedA; e += kMmThreads) {
    const int r = e / kMmTileK, c = e % kMmTileK;
    const int64_t gr = row0 + r, gc = k0 + c;
    sa[e] = (gr < M && gc < K) ? read_a(mat_index(av, batch, gr, gc)) : Acc(0);
  }
  for (int e = tid; e < kMmSharedB; e += kMmThreads) {
    const int r = e / kMmTileN, c = e % kMmTileN;
    const int64_t gr = k0 + r, gc = col0 + c;
    sb[e] = (gr < K && gc < N) ? read_b(mat_index(bv, batch, gr, gc)) : Acc(0);
  }
}

/// Thread `tid`'s accumulators, acc[i][j] for output (ty + kMmThreadsY * i,
/// tx + kMmThreadsX * j) of the tile.
template <class Acc>
struct MmAcc {
  Acc v[kMmPerThread][kMmPerThread];
};

template <class Acc>
STRATA_HD MmAcc<Acc> mm_zero() {
  MmAcc<Acc> a;
  for (int i = 0; i < kMmPerThread; ++i)
    for (int j = 0; j < kMmPerThread; ++j) a.v[i][j] = Acc(0);
  return a;
}

/// The inner product step over one phase: acc[i][j] += sum over kk of
/// sa[row i][kk] * sb[kk][col j], kk increasing. For an output inside M x N,
/// a zero-padded entry (k >= K) only ever meets another one, so padding adds
/// exact zeros (0 * 0) and never 0 * inf; padded rows >= M and columns >= N
/// only reach outputs that mm_store skips.
template <class Acc>
STRATA_HD void mm_multiply(const Acc* sa, const Acc* sb, int tid, MmAcc<Acc>& acc) {
  const int tx = tid % kMmThreadsX, ty = tid / kMmThreadsX;
  for (int kk = 0; kk < kMmTileK; ++kk) {
    Acc a[kMmPerThread], b[kMmPerThread];
    for (int i = 0; i < kMmPerThread; ++i) a[i] = sa[(ty + kMmThreadsY * i) * kMmTileK + kk];
    for (int j = 0; j < kMmPerThread; ++j) b[j] = sb[kk * kMmTileN + tx + kMmThreadsX * j];
    for (int i = 0; i < kMmPerThread; ++i)
      for (int j = 0; j < kMmPerThread; ++j) acc.v[i][j] += a[i] * b[j];
  }
}

/// Writes thread `tid`'s outputs that lie inside M x N: c is compact, batch
/// `batch` starts at batch * M * N. `convert` maps Acc to the stored type.
template <class T, class Acc, class Convert>
STRATA_HD void mm_store(T* c, int64_t batch, int64_t M, int64_t N, int64_t row0, int64_t col0, int tid,
                        const MmAcc<Acc>& acc, const Convert& convert) {
  const int tx = tid % kMmThreadsX, ty = tid / kMmThreadsX;
  for (int i = 0; i < kMmPerThread; ++i) {
    const int64_t r = row0 + ty + kMmThreadsY * i;
    if (r >= M) continue;
    for (int j = 0; j < kMmPerThread; ++j) {
      const int64_t col = col0 + tx + kMmThreadsX * j;
      if (col < N) c[(batch * M + r) * N + col] = convert(acc.v[i][j]);
    }
  }
}

}  // namespace strata::gpu
