// gen.hpp — random shapes and strided operands for tests/gpu_math, and the
// naive references the kernel arithmetic is checked against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernel_math.hpp"

namespace gpu_math_test {

using strata::gpu::kMaxRank;
using strata::gpu::Operand;
using strata::gpu::Shape;

inline int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

inline int64_t naive_numel(const Shape& s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.n[d];
  return n;
}

/// A random shape of `rank` dims: many of size 1, the others 2..5, at most
/// `max_numel` elements (dims shrink to 1 until it fits).
inline Shape random_shape(std::mt19937_64& rng, int rank, int64_t max_numel = 3000) {
  Shape s{};
  s.rank = rank;
  for (int d = 0; d < rank; ++d) s.n[d] = uniform(rng, 0, 9) < 3 ? 1 : uniform(rng, 2, 5);
  for (int d = 0; naive_numel(s) > max_numel; d = (d + 1) % rank) s.n[d] = 1;
  return s;
}

/// Row-major strides from `offset`, arbitrary strides on size-1 dims.
inline Operand compact_operand(std::mt19937_64& rng, const Shape& s, int64_t offset) {
  Operand op{};
  op.offset = offset;
  int64_t stride = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    op.stride[d] = s.n[d] == 1 ? uniform(rng, 0, 50) : stride;
    stride *= s.n[d];
  }
  return op;
}

/// A random view of s: compact (30%), or laid out in storage in a random dim
/// order (transposed), with padded rows (sliced), every other element
/// (stepped slices) and stride-0 (broadcast) dims, from a random offset.
inline Operand random_operand(std::mt19937_64& rng, const Shape& s) {
  const int64_t offset = uniform(rng, 0, 7);
  if (uniform(rng, 0, 9) < 3) return compact_operand(rng, s, offset);
  Operand op{};
  op.offset = offset;
  std::vector<int> perm(static_cast<size_t>(s.rank));
  std::iota(perm.begin(), perm.end(), 0);
  if (uniform(rng, 0, 9) < 6) std::shuffle(perm.begin(), perm.end(), rng);
  int64_t extent = 1;
  for (int k = s.rank - 1; k >= 0; --k) {
    const int d = perm[static_cast<size_t>(k)];
    const int64_t step = uniform(rng, 0, 3) == 0 ? 2 : 1;
    const int64_t pad = uniform(rng, 0, 3) == 0 ? uniform(rng, 1, 2) : 0;
    op.stride[d] = extent * step;
    extent *= s.n[d] * step + pad;
  }
  for (int d = 0; d < s.rank; ++d)
    if (uniform(rng, 0, 6) == 0) op.stride[d] = 0;
  return op;
}

/// Calls f(linear, coord) for every element of s in row-major order.
template <class F>
void for_each_coord(const Shape& s, F&& f) {
  const int64_t n = naive_numel(s);
  int64_t coord[kMaxRank] = {};
  for (int64_t i = 0; i < n; ++i) {
    f(i, static_cast<const int64_t*>(coord));
    for (int d = s.rank - 1; d >= 0; --d) {
      if (++coord[d] < s.n[d]) break;
      coord[d] = 0;
    }
  }
}

inline int64_t naive_offset(const Shape& s, const Operand& op, const int64_t* coord) {
  int64_t off = op.offset;
  for (int d = 0; d < s.rank; ++d) off += coord[d] * op.stride[d];
  return off;
}

/// The largest element index op reaches over s (strides >= 0).
inline int64_t max_offset(const Shape& s, const Operand& op) {
  int64_t off = op.offset;
  for (int d = 0; d < s.rank; ++d) off += (s.n[d] - 1) * op.stride[d];
  return off;
}

inline std::string describe(const Shape& s, const Operand* ops, int n_ops) {
  std::ostringstream out;
  out << "shape [";
  for (int d = 0; d < s.rank; ++d) out << (d ? "," : "") << s.n[d];
  out << "]";
  for (int k = 0; k < n_ops; ++k) {
    out << " op" << k << " offset " << ops[k].offset << " strides (";
    for (int d = 0; d < s.rank; ++d) out << (d ? "," : "") << ops[k].stride[d];
    out << ")";
  }
  return out.str();
}

}  // namespace gpu_math_test
