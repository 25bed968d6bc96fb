// layout_test.cpp — kernel_math.hpp's index arithmetic (offset_of, unravel,
// coalesce, is_compact, the row plan) against naive references on random
// shapes: rank 0..8, size-1 dims, broadcast (stride 0), transposed, sliced
// and stepped strides, offsets, several operands at once.
#include <gtest/gtest.h>

#include "gen.hpp"

namespace gpu_math_test {
namespace {

namespace g = strata::gpu;

TEST(Layout, OffsetOfAndUnravelMatchNaive) {
  std::mt19937_64 rng(1);
  for (int iter = 0; iter < 3000; ++iter) {
    const Shape s = random_shape(rng, static_cast<int>(iter % (kMaxRank + 1)));
    const Operand op = random_operand(rng, s);
    SCOPED_TRACE(describe(s, &op, 1));
    ASSERT_EQ(g::numel(s), naive_numel(s));
    int64_t coord[kMaxRank];
    for_each_coord(s, [&](int64_t i, const int64_t* c) {
      ASSERT_EQ(g::offset_of(s, op, i), naive_offset(s, op, c)) << "linear " << i;
      g::unravel(s, i, coord);
      for (int d = 0; d < s.rank; ++d) ASSERT_EQ(coord[d], c[d]) << "linear " << i << " dim " << d;
    });
  }
}

/// Checks that `after` (coalesced) gives every operand the offsets of
/// `before` for every linear index, and that it is as coalesced as it gets.
void expect_same_walk(const Shape& before, const std::vector<Operand>& ops_before, const Shape& after,
                      const std::vector<Operand>& ops_after) {
  const int n_ops = static_cast<int>(ops_before.size());
  SCOPED_TRACE("before " + describe(before, ops_before.data(), n_ops) + "; after " +
               describe(after, ops_after.data(), n_ops));
  ASSERT_LE(after.rank, std::max(before.rank, 1));
  ASSERT_EQ(naive_numel(after), naive_numel(before));
  if (naive_numel(before) == 0) {
    EXPECT_EQ(after.rank, 1);
    EXPECT_EQ(after.n[0], 0);
    return;
  }
  for (int d = 0; d < after.rank; ++d) EXPECT_GT(after.n[d], 1) << "size-1 dim " << d << " left";
  for (int d = 0; d + 1 < after.rank; ++d) {
    bool mergeable = true;
    for (const Operand& op : ops_after) mergeable &= op.stride[d] == op.stride[d + 1] * after.n[d + 1];
    EXPECT_FALSE(mergeable) << "dims " << d << " and " << d + 1 << " could still merge";
  }
  for (int k = 0; k < n_ops; ++k) {
    EXPECT_EQ(ops_after[static_cast<size_t>(k)].offset, ops_before[static_cast<size_t>(k)].offset);
    for_each_coord(before, [&](int64_t i, const int64_t* c) {
      ASSERT_EQ(g::offset_of(after, ops_after[static_cast<size_t>(k)], i),
                naive_offset(before, ops_before[static_cast<size_t>(k)], c))
          << "operand " << k << " linear " << i;
    });
  }
}

TEST(Layout, CoalescePreservesEveryOffsetOfEveryOperand) {
  std::mt19937_64 rng(2);
  int64_t dims_removed = 0, merged_with_several = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const Shape s = random_shape(rng, static_cast<int>(iter % (kMaxRank + 1)));
    const int n_ops = static_cast<int>(uniform(rng, 1, 4));
    std::vector<Operand> ops;
    for (int k = 0; k < n_ops; ++k) ops.push_back(random_operand(rng, s));
    // Sometimes every operand compact, so multi-operand merges happen.
    if (uniform(rng, 0, 3) == 0)
      for (Operand& op : ops) op = compact_operand(rng, s, op.offset);
    Shape c = s;
    std::vector<Operand> cops = ops;
    g::coalesce(c, cops.data(), n_ops);
    expect_same_walk(s, ops, c, cops);
    if (HasFatalFailure()) return;
    dims_removed += s.rank - c.rank;
    if (n_ops > 1 && c.rank < s.rank) ++merged_with_several;
  }
  // The random cases did exercise merging (not only the trivial path).
  EXPECT_GT(dims_removed, 3000);
  EXPECT_GT(merged_with_several, 300);
}

TEST(Layout, CoalesceKnownCases) {
  {  // compact 2x3x4 -> one dim of 24
    Shape s{3, {2, 3, 4}};
    Operand op{5, {12, 4, 1}};
    g::coalesce(s, &op, 1);
    EXPECT_EQ(s.rank, 1);
    EXPECT_EQ(s.n[0], 24);
    EXPECT_EQ(op.stride[0], 1);
    EXPECT_EQ(op.offset, 5);
  }
  {  // a transpose stays two dims
    Shape s{2, {3, 4}};
    Operand op{0, {1, 3}};
    g::coalesce(s, &op, 1);
    EXPECT_EQ(s.rank, 2);
    EXPECT_EQ(op.stride[0], 1);
    EXPECT_EQ(op.stride[1], 3);
  }
  {  // broadcast everywhere: one dim of stride 0
    Shape s{3, {2, 1, 3}};
    Operand op{7, {0, 9, 0}};
    g::coalesce(s, &op, 1);
    EXPECT_EQ(s.rank, 1);
    EXPECT_EQ(s.n[0], 6);
    EXPECT_EQ(op.stride[0], 0);
  }
  {  // size-1 dims only: a scalar
    Shape s{4, {1, 1, 1, 1}};
    Operand op{3, {5, 6, 7, 8}};
    g::coalesce(s, &op, 1);
    EXPECT_EQ(s.rank, 0);
    EXPECT_EQ(g::offset_of(s, op, 0), 3);
    EXPECT_EQ(g::numel(s), 1);
  }
  {  // rank 0 stays rank 0
    Shape s{0, {}};
    Operand op{4, {}};
    g::coalesce(s, &op, 1);
    EXPECT_EQ(s.rank, 0);
    EXPECT_EQ(g::offset_of(s, op, 0), 4);
  }
  {  // a compact operand and one broadcast along dim 0: only dims 1 and 2 merge
    Shape s{3, {2, 3, 4}};
    Operand ops[2] = {{0, {12, 4, 1}}, {0, {0, 4, 1}}};
    g::coalesce(s, ops, 2);
    ASSERT_EQ(s.rank, 2);
    EXPECT_EQ(s.n[0], 2);
    EXPECT_EQ(s.n[1], 12);
    EXPECT_EQ(ops[0].stride[0], 12);
    EXPECT_EQ(ops[1].stride[0], 0);
    EXPECT_EQ(ops[1].stride[1], 1);
  }
  {  // an empty shape
    Shape s{3, {4, 0, 2}};
    Operand op{1, {2, 2, 1}};
    g::coalesce(s, &op, 1);
    EXPECT_EQ(s.rank, 1);
    EXPECT_EQ(s.n[0], 0);
  }
}

TEST(Layout, IsCompactMatchesNaive) {
  std::mt19937_64 rng(3);
  int compact = 0, strided = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const Shape s = random_shape(rng, static_cast<int>(iter % (kMaxRank + 1)));
    const Operand op = random_operand(rng, s);
    bool naive = true;
    for_each_coord(s, [&](int64_t i, const int64_t* c) { naive &= naive_offset(s, op, c) == op.offset + i; });
    EXPECT_EQ(g::is_compact(s, op), naive) << describe(s, &op, 1);
    (naive ? compact : strided)++;
  }
  EXPECT_GT(compact, 800);
  EXPECT_GT(strided, 800);
  const Shape empty{2, {3, 0}};
  const Operand any{0, {7, 7}};
  EXPECT_TRUE(g::is_compact(empty, any));
}

TEST(Layout, RowPlanWalksEveryRowOfACompactTensor) {
  std::mt19937_64 rng(4);
  for (int iter = 0; iter < 2000; ++iter) {
    const int rank = static_cast<int>(iter % kMaxRank) + 1;
    const Shape s = random_shape(rng, rank);
    const int dim = static_cast<int>(uniform(rng, 0, rank - 1));
    const g::RowPlan p = g::make_row_plan(s, dim);
    SCOPED_TRACE(describe(s, nullptr, 0) + " dim " + std::to_string(dim));
    ASSERT_EQ(p.outer * p.n * p.inner, naive_numel(s));
    ASSERT_EQ(p.n, s.n[dim]);
    // Naive: element i (row-major) is element coord[dim] of the row whose
    // other coordinates, row-major, number it.
    for_each_coord(s, [&](int64_t i, const int64_t* c) {
      int64_t row = 0;
      for (int d = 0; d < rank; ++d)
        if (d != dim) row = row * s.n[d] + c[d];
      ASSERT_EQ(g::row_offset(p, row, c[dim]), i) << "row " << row << " j " << c[dim];
    });
  }
  const Shape scalar{0, {}};
  const g::RowPlan p = g::make_row_plan(scalar, 0);
  EXPECT_EQ(p.outer * p.n * p.inner, 1);
  EXPECT_EQ(g::row_offset(p, 0, 0), 0);
}

}  // namespace
}  // namespace gpu_math_test
