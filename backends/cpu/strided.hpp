// strided.hpp — walking strided tensors, and splitting loops across threads.
//
// Every kernel that accepts strided operands reduces them to a `Layout`: the
// common shape with size-1 dims dropped and neighbouring dims merged wherever
// all operands allow it, so a contiguous tensor becomes rank 1 and a transposed
// matrix stays rank 2. `for_each_run` then visits a linear range of that shape
// as runs along the innermost dim, which is where the real loops live.
#pragma once

#include "work_pool.hpp"

#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <cstdint>

namespace strata::cpu {

inline constexpr int kMaxRank = STRATA_MAX_RANK;

/// Elements of work below which a loop stays on the calling thread. Waking an
/// OpenMP team costs a few microseconds; a tiny op must never pay it.
inline constexpr int64_t kParallelGrain = 32768;

/// A stride of 1 known at compile time: `p[i * Unit{}]` loops vectorise
/// where `p[i * stride]` ones would not.
struct Unit {
  constexpr operator int64_t() const { return 1; }
};

/// Typed pointer to a tensor's first element (buffers are host pointers).
template <class T>
inline T* data(const strata_tensor& t) {
  return reinterpret_cast<T*>(t.buffer) + t.offset;
}

/// N operands (typically output first, then inputs) iterated over one shape.
template <int N>
struct Layout {
  int rank = 0;  // >= 1 after make_layout; entries past it are unset
  int64_t shape[kMaxRank];
  int64_t strides[N][kMaxRank];

  int64_t inner_stride(int operand) const { return strides[operand][rank - 1]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
};

/// Builds the collapsed layout of `rank`/`shape` with one stride array per
/// operand. Dims of size 1 are dropped; dim d merges into its outer neighbour
/// when, for every operand, stride[outer] == stride[d] * shape[d].
template <int N>
Layout<N> make_layout(int rank, const int64_t* shape, const int64_t* const (&strides)[N]) {
  Layout<N> l;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    if (l.rank > 0) {
      const int p = l.rank - 1;
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && l.strides[k][p] == strides[k][d] * shape[d];
      if (merge) {
        l.shape[p] *= shape[d];
        for (int k = 0; k < N; ++k) l.strides[k][p] = strides[k][d];
        continue;
      }
    }
    l.shape[l.rank] = shape[d];
    for (int k = 0; k < N; ++k) l.strides[k][l.rank] = strides[k][d];
    ++l.rank;
  }
  if (l.rank == 0) {  // scalar, or all dims of size 1
    l.rank = 1;
    l.shape[0] = 1;
    for (int k = 0; k < N; ++k) l.strides[k][0] = 1;
  }
  return l;
}

/// Visits the linear positions [begin, end) of the layout (row-major order)
/// as runs along the innermost dim: f(offsets, count), where offsets[k] is
/// operand k's element offset at the run's start and the run continues with
/// stride l.inner_stride(k).
template <int N, class F>
void for_each_run(const Layout<N>& l, int64_t begin, int64_t end, F&& f) {
  const int r = l.rank;
  int64_t idx[kMaxRank];
  int64_t off[N] = {};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % l.shape[d];
    rem /= l.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * l.strides[k][d];
  }
  const int64_t inner = l.shape[r - 1];
  for (int64_t pos = begin; pos < end;) {
    const int64_t count = std::min(inner - idx[r - 1], end - pos);
    f(static_cast<const int64_t*>(off), count);
    pos += count;
    if (pos >= end) break;
    // The run reached the end of the inner dim: back to the row's start
    // (offsets still point at the run's start), then carry outwards.
    for (int k = 0; k < N; ++k) off[k] -= idx[r - 1] * l.strides[k][r - 1];
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      for (int k = 0; k < N; ++k) off[k] += l.strides[k][d];
      if (++idx[d] < l.shape[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= l.shape[d] * l.strides[k][d];
      idx[d] = 0;
    }
  }
}

/// How many chunks parallel_for cuts `n` items of `work` elements into for
/// `threads` threads: 1 (run inline) when the work is below kParallelGrain
/// or threads <= 1; else up to kChunksPerThread per thread, each at least
/// a quarter of a grain.
inline int64_t chunk_count(int64_t n, int threads, int64_t work) {
  if (threads <= 1 || n < 2 || work < kParallelGrain) return 1;
  return std::min<int64_t>({int64_t{threads} * kChunksPerThread, n, work / (kParallelGrain / 4)});
}

/// Runs f(begin, end) over [0, n) in chunks shared by up to `threads`
/// threads (work_pool.hpp: a thread that starts late cannot stall the
/// loop); inline when the work (n * cost_per_item elements) is below
/// kParallelGrain or threads <= 1. f must not throw.
template <class F>
void parallel_for(int64_t n, int threads, F&& f, int64_t cost_per_item = 1) {
  const int64_t chunks = chunk_count(n, threads, n * cost_per_item);
  if (chunks <= 1) {
    f(int64_t{0}, n);
    return;
  }
  for_each_chunk(chunks, threads, [&](int64_t c) {
    const int64_t b = n * c / chunks;
    const int64_t e = n * (c + 1) / chunks;
    if (b < e) f(b, e);
  });
}

/// Side of the square tiles of parallel_runs.
inline constexpr int64_t kTile = 32;

/// True when some operand steps through the innermost dim with a larger
/// stride than through the next one (a transpose): linear order would touch a
/// new cache line, often a new page, per element of that operand.
template <int N>
bool transposed_access(const Layout<N>& l) {
  const int r = l.rank;
  if (r < 2 || l.shape[r - 1] < kTile || l.shape[r - 2] < kTile) return false;
  for (int k = 0; k < N; ++k) {
    if (l.strides[k][r - 2] != 0 && l.strides[k][r - 2] < l.strides[k][r - 1]) return true;  // 0: broadcast
  }
  return false;
}

/// Visits every position of the layout as runs, f(offsets, count) as in
/// for_each_run, split across threads. Transposed access goes tile by tile
/// (kTile x kTile over the two innermost dims) so that every operand's cache
/// lines are reused while in cache. f must not throw.
template <int N, class F>
void parallel_runs(const Layout<N>& l, int threads, int64_t cost_per_element, F&& f) {
  const int64_t n = l.numel();
  if (!transposed_access(l)) {
    parallel_for(
        n, threads, [&](int64_t b, int64_t e) { for_each_run(l, b, e, f); }, cost_per_element);
    return;
  }
  const int r = l.rank;
  const int64_t rows = l.shape[r - 2], cols = l.shape[r - 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tiles_per_plane = row_tiles * col_tiles;
  parallel_for(
      n / (rows * cols) * tiles_per_plane, threads,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t base[N] = {};
          int64_t plane = t / tiles_per_plane;
          for (int d = r - 3; d >= 0; --d) {
            const int64_t i = plane % l.shape[d];
            plane /= l.shape[d];
            for (int k = 0; k < N; ++k) base[k] += i * l.strides[k][d];
          }
          const int64_t i0 = t % tiles_per_plane / col_tiles * kTile, j0 = t % col_tiles * kTile;
          const int64_t width = std::min(kTile, cols - j0);
          for (int64_t i = i0; i < std::min(i0 + kTile, rows); ++i) {
            int64_t off[N];
            for (int k = 0; k < N; ++k) off[k] = base[k] + i * l.strides[k][r - 2] + j0 * l.strides[k][r - 1];
            f(static_cast<const int64_t*>(off), width);
          }
        }
      },
      cost_per_element * kTile * kTile);
}

/// A reduction's operands: the dims y keeps (x's and y's strides, collapsed)
/// and the dims it reduces (y has size 1 there; x's strides, collapsed).
struct ReductionLayout {
  Layout<2> kept;     // operands x, y
  Layout<1> reduced;  // operand x
  int reduced_dims = 0;  // before collapsing
};

/// Splits x and y (of equal rank) into a ReductionLayout; false when a dim
/// of y is neither x's size nor 1 (`bad_dim` is set to it).
inline bool reduction_layout(const strata_tensor& x, const strata_tensor& y, ReductionLayout& out, int& bad_dim) {
  int64_t kshape[kMaxRank] = {}, kx[kMaxRank] = {}, ky[kMaxRank] = {}, rshape[kMaxRank] = {}, rx[kMaxRank] = {};
  int nk = 0, nr = 0;
  for (int d = 0; d < x.rank; ++d) {
    if (y.shape[d] == x.shape[d]) {
      kshape[nk] = x.shape[d];
      kx[nk] = x.strides[d];
      ky[nk] = y.strides[d];
      ++nk;
    } else if (y.shape[d] == 1) {
      rshape[nr] = x.shape[d];
      rx[nr] = x.strides[d];
      ++nr;
    } else {
      bad_dim = d;
      return false;
    }
  }
  out.kept = make_layout<2>(nk, kshape, {kx, ky});
  out.reduced = make_layout<1>(nr, rshape, {rx});
  out.reduced_dims = nr;
  return true;
}

/// True when every tensor is compact row-major (the fast path of most ops).
/// Inlined by force: it is on the path of every tiny elementwise call.
template <class... Ts>
[[gnu::always_inline]] inline bool all_contiguous(const Ts&... tensors) {
  return (plugin::is_contiguous(tensors) && ...);
}

using plugin::same_shape;

}  // namespace strata::cpu
