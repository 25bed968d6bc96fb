// reduce_test.cpp — kernel_math.hpp's reductions: the reduce plan against a
// naive reduction on random shapes and dim subsets, and the block tree
// (per-thread strided partials, then tree_step by halving strides) emulated
// exactly as a kernel runs it, for several block sizes, against sequential
// references written without the combiners.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gen.hpp"

namespace gpu_math_test {
namespace {

namespace g = strata::gpu;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// --- the plan ----------------------------------------------------------------

/// Random sorted unique dims of [0, rank) (possibly none, possibly all).
std::vector<int64_t> random_dims(std::mt19937_64& rng, int rank) {
  std::vector<int64_t> dims;
  const int mode = static_cast<int>(uniform(rng, 0, 4));
  for (int d = 0; d < rank; ++d)
    if (mode == 0 || (mode != 1 && uniform(rng, 0, 1) == 1)) dims.push_back(d);  // mode 0: all dims
  if (mode == 1 && rank > 0) dims.push_back(uniform(rng, 0, rank - 1));          // mode 1: one dim
  return dims;
}

TEST(ReducePlan, EveryOutputCombinesExactlyItsInputsInOrder) {
  std::mt19937_64 rng(10);
  for (int iter = 0; iter < 3000; ++iter) {
    const int rank = static_cast<int>(iter % (kMaxRank + 1));
    const Shape s = random_shape(rng, rank);
    const Operand op = random_operand(rng, s);
    const std::vector<int64_t> dims = random_dims(rng, rank);
    std::string dims_str;
    for (int64_t d : dims) dims_str += std::to_string(d) + " ";
    SCOPED_TRACE(describe(s, &op, 1) + " dims " + dims_str);
    const g::ReducePlan p = g::make_reduce_plan(s, op, dims.data(), static_cast<int>(dims.size()));

    // Naive: the kept and reduced dims of the original shape, uncoalesced.
    Shape kept{}, reduced{};
    std::vector<int> kept_dim, reduced_dim;
    for (int d = 0; d < rank; ++d) {
      const bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
      Shape& part = r ? reduced : kept;
      part.n[part.rank++] = s.n[d];
      (r ? reduced_dim : kept_dim).push_back(d);
    }
    ASSERT_EQ(p.n_out, naive_numel(kept));
    ASSERT_EQ(p.n_reduce, naive_numel(reduced));
    ASSERT_LE(p.kept.rank, kept.rank);
    ASSERT_LE(p.reduced.rank, reduced.rank);

    // (out, r) names input coordinates: kept coords from out, reduced from r.
    int64_t coord[kMaxRank];
    for_each_coord(kept, [&](int64_t o, const int64_t* kc) {
      for (size_t k = 0; k < kept_dim.size(); ++k) coord[kept_dim[k]] = kc[k];
      for_each_coord(reduced, [&](int64_t r, const int64_t* rc) {
        for (size_t k = 0; k < reduced_dim.size(); ++k) coord[reduced_dim[k]] = rc[k];
        ASSERT_EQ(g::reduce_input_offset(p, o, r), naive_offset(s, op, coord)) << "out " << o << " r " << r;
      });
    });

    // A sum through the plan equals a naive sum into the keepdim output.
    const int64_t size = max_offset(s, op) + 1;
    std::vector<int64_t> x(static_cast<size_t>(size));
    for (int64_t& v : x) v = uniform(rng, -1000000, 1000000);
    std::vector<int64_t> naive(static_cast<size_t>(p.n_out), 0);
    for_each_coord(s, [&](int64_t, const int64_t* c) {
      int64_t out = 0;  // row-major over the kept dims = the keepdim output's index
      for (int d : kept_dim) out = out * s.n[d] + c[d];
      naive[static_cast<size_t>(out)] += x[static_cast<size_t>(naive_offset(s, op, c))];
    });
    for (int64_t o = 0; o < p.n_out; ++o) {
      int64_t sum = 0;
      for (int64_t r = 0; r < p.n_reduce; ++r) sum += x[static_cast<size_t>(g::reduce_input_offset(p, o, r))];
      ASSERT_EQ(sum, naive[static_cast<size_t>(o)]) << "out " << o;
    }
  }
}

TEST(ReducePlan, EmptyInputs) {
  const Shape s{3, {2, 0, 3}};
  const Operand op{0, {0, 3, 1}};
  const int64_t reduce_empty[] = {1};
  g::ReducePlan p = g::make_reduce_plan(s, op, reduce_empty, 1);
  EXPECT_EQ(p.n_out, 6);  // every output is the identity
  EXPECT_EQ(p.n_reduce, 0);
  const int64_t keep_empty[] = {0, 2};
  p = g::make_reduce_plan(s, op, keep_empty, 2);
  EXPECT_EQ(p.n_out, 0);
  EXPECT_EQ(p.n_reduce, 6);
}

TEST(ReducePlan, ArgReductionIndexIsTheCoordinateAlongTheDim) {
  // [4, 5, 6] transposed in storage; reduce dim 1: r must be the dim-1 coordinate.
  const Shape s{3, {4, 5, 6}};
  const Operand op{2, {1, 24, 4}};
  const int64_t dims[] = {1};
  const g::ReducePlan p = g::make_reduce_plan(s, op, dims, 1);
  ASSERT_EQ(p.n_reduce, 5);
  for (int64_t o = 0; o < 24; ++o)
    for (int64_t r = 0; r < 5; ++r)
      EXPECT_EQ(g::reduce_input_offset(p, o, r), 2 + (o / 6) * 1 + r * 24 + (o % 6) * 4);
}

// --- the block tree ----------------------------------------------------------

/// One block of `threads` threads reducing n values exactly as a kernel does:
/// partials, then tree_step for stride = threads/2 .. 1 (a level's threads
/// run in any order: none reads a slot another one of its level writes).
template <class T, class Op, class Load>
T run_block(int threads, int64_t n, const Load& load) {
  std::vector<T> shared(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) shared[static_cast<size_t>(t)] = g::strided_partial<T, Op>(t, threads, n, load);
  for (int stride = threads / 2; stride > 0; stride /= 2)
    for (int t = threads - 1; t >= 0; --t) g::tree_step<T, Op>(shared.data(), t, stride);
  return shared[0];
}

constexpr int kThreads[] = {1, 2, 32, 64, 256, 1024};
constexpr int64_t kCounts[] = {0, 1, 5, 1000, 4097};

template <class T>
bool same_value(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return a == b;
}

TEST(BlockTree, IntegerSumIsExactForEveryBlockSize) {
  std::mt19937_64 rng(20);
  for (int64_t n : kCounts) {
    std::vector<int64_t> x(static_cast<size_t>(n));
    for (int64_t& v : x) v = uniform(rng, -1000000000000LL, 1000000000000LL);
    int64_t expected = 0;
    for (int64_t v : x) expected += v;
    for (int threads : kThreads) {
      const auto load = [&](int64_t r) { return x[static_cast<size_t>(r)]; };
      EXPECT_EQ((run_block<int64_t, g::SumOp<int64_t>>(threads, n, load)), expected) << n << " " << threads;
    }
    // i32 inputs accumulated in i64 beyond the i32 range.
    std::vector<int32_t> y(static_cast<size_t>(n), INT32_MAX);
    for (int threads : kThreads) {
      const auto load = [&](int64_t r) { return static_cast<int64_t>(y[static_cast<size_t>(r)]); };
      EXPECT_EQ((run_block<int64_t, g::SumOp<int64_t>>(threads, n, load)), n * INT32_MAX);
    }
  }
}

TEST(BlockTree, ProductOfPowersOfTwoIsExact) {
  std::mt19937_64 rng(21);
  const double factors[] = {1.0, -1.0, 2.0, 0.5, -2.0, -0.5};
  for (int64_t n : kCounts) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = factors[uniform(rng, 0, 5)];
    double expected = 1.0;
    for (double v : x) expected *= v;
    for (int threads : kThreads) {
      const auto load = [&](int64_t r) { return x[static_cast<size_t>(r)]; };
      EXPECT_EQ((run_block<double, g::ProdOp<double>>(threads, n, load)), expected) << n << " " << threads;
    }
  }
}

/// Float data for max/min: random finite values, infinities, and NaNs at
/// the given positions.
std::vector<float> float_data(std::mt19937_64& rng, int64_t n, const std::vector<int64_t>& nan_at) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    const int64_t kind = uniform(rng, 0, 19);
    v = kind == 0 ? INFINITY : kind == 1 ? -INFINITY : std::uniform_real_distribution<float>(-1e3f, 1e3f)(rng);
  }
  for (int64_t i : nan_at)
    if (i < n) x[static_cast<size_t>(i)] = NAN;
  return x;
}

std::vector<std::vector<int64_t>> nan_placements(int64_t n) {
  if (n == 0) return {{}};
  return {{}, {0}, {n / 2}, {n - 1}, {n - 1, 0}, {n / 3, 2 * n / 3}};
}

TEST(BlockTree, MaxAndMinPropagateNaNFromAnywhere) {
  std::mt19937_64 rng(22);
  for (int64_t n : kCounts) {
    for (const auto& nans : nan_placements(n)) {
      const std::vector<float> x = float_data(rng, n, nans);
      bool any_nan = false;
      float mx = -INFINITY, mn = INFINITY;
      for (float v : x) {
        if (std::isnan(v)) any_nan = true;
        else mx = std::max(mx, v), mn = std::min(mn, v);
      }
      if (any_nan) mx = mn = NAN;
      for (int threads : kThreads) {
        SCOPED_TRACE("n " + std::to_string(n) + " threads " + std::to_string(threads) + " nans " +
                     std::to_string(nans.size()));
        const auto load = [&](int64_t r) { return x[static_cast<size_t>(r)]; };
        EXPECT_TRUE(same_value((run_block<float, g::MaxOp<float>>(threads, n, load)), mx));
        EXPECT_TRUE(same_value((run_block<float, g::MinOp<float>>(threads, n, load)), mn));
        const auto load_d = [&](int64_t r) { return static_cast<double>(x[static_cast<size_t>(r)]); };
        EXPECT_TRUE(same_value((run_block<double, g::MaxOp<double>>(threads, n, load_d)), static_cast<double>(mx)));
        EXPECT_TRUE(same_value((run_block<double, g::MinOp<double>>(threads, n, load_d)), static_cast<double>(mn)));
      }
    }
  }
}

TEST(BlockTree, IntegerMaxAndMinReachTheExtremes) {
  std::mt19937_64 rng(23);
  for (int64_t n : kCounts) {
    std::vector<int64_t> x(static_cast<size_t>(n));
    for (int64_t& v : x) {
      const int64_t kind = uniform(rng, 0, 9);
      v = kind == 0 ? INT64_MIN : kind == 1 ? INT64_MAX : uniform(rng, -1000, 1000);
    }
    const int64_t mx = n ? *std::max_element(x.begin(), x.end()) : INT64_MIN;
    const int64_t mn = n ? *std::min_element(x.begin(), x.end()) : INT64_MAX;
    for (int threads : kThreads) {
      const auto load = [&](int64_t r) { return x[static_cast<size_t>(r)]; };
      EXPECT_EQ((run_block<int64_t, g::MaxOp<int64_t>>(threads, n, load)), mx);
      EXPECT_EQ((run_block<int64_t, g::MinOp<int64_t>>(threads, n, load)), mn);
    }
  }
}

/// Sequential argmax/argmin written without the combiners: the first NaN
/// wins; otherwise the first strictly better value wins. n == 0 gives -1.
template <class T>
bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

template <class T>
int64_t sequential_arg(const std::vector<T>& x, bool is_max) {
  int64_t best = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    const T v = x[i];
    if (best < 0) {
      best = static_cast<int64_t>(i);
      continue;
    }
    const T b = x[static_cast<size_t>(best)];
    if (is_nan_value(b)) continue;  // a NaN already won
    if (is_nan_value(v) || (is_max ? v > b : v < b)) best = static_cast<int64_t>(i);
  }
  return best;
}

template <class Acc, class Op, class T>
void expect_arg_matches(const std::vector<T>& x, bool is_max, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t expected = sequential_arg(x, is_max);
  for (int threads : kThreads) {
    const auto load = [&](int64_t r) { return g::ArgPair<Acc>{static_cast<Acc>(x[static_cast<size_t>(r)]), r}; };
    const g::ArgPair<Acc> got = run_block<g::ArgPair<Acc>, Op>(threads, n, load);
    if (n == 0) {
      EXPECT_EQ(got.i, INT64_MAX) << what << " threads " << threads;
      continue;
    }
    ASSERT_EQ(got.i, expected) << what << " threads " << threads;
    EXPECT_TRUE(same_value(got.v, static_cast<Acc>(x[static_cast<size_t>(expected)])));
  }
}

TEST(BlockTree, ArgMaxAndArgMinAreFirstOccurrenceForEveryBlockSize) {
  std::mt19937_64 rng(24);
  // Few distinct values, so ties are everywhere; -0 and +0 tie.
  const float values[] = {-INFINITY, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f, INFINITY};
  int cases = 0;
  for (int64_t n : kCounts) {
    for (const auto& nans : nan_placements(n)) {
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<float> x(static_cast<size_t>(n));
        // rep 0: all -inf; rep 1: all +inf; rep 2,3: random from the set.
        for (float& v : x) v = rep == 0 ? -INFINITY : rep == 1 ? INFINITY : values[uniform(rng, 0, 6)];
        for (int64_t i : nans)
          if (i < n) x[static_cast<size_t>(i)] = NAN;
        const std::string what = "n " + std::to_string(n) + " rep " + std::to_string(rep) + " nans " +
                                 std::to_string(nans.size());
        expect_arg_matches<float, g::ArgMaxOp<float>>(x, true, "argmax f32 " + what);
        expect_arg_matches<float, g::ArgMinOp<float>>(x, false, "argmin f32 " + what);
        expect_arg_matches<double, g::ArgMaxOp<double>>(x, true, "argmax f64 " + what);
        expect_arg_matches<double, g::ArgMinOp<double>>(x, false, "argmin f64 " + what);
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 50);
}

TEST(BlockTree, IntegerArgMaxAndArgMinBeatTheIdentityAtTheExtremes) {
  std::mt19937_64 rng(25);
  for (int64_t n : kCounts) {
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<int64_t> x(static_cast<size_t>(n));
      for (int64_t& v : x) {
        const int64_t kind = uniform(rng, 0, 3);
        v = rep == 0 ? INT64_MIN : rep == 1 ? INT64_MAX : kind == 0 ? INT64_MIN : kind == 1 ? INT64_MAX : uniform(rng, -2, 2);
      }
      expect_arg_matches<int64_t, g::ArgMaxOp<int64_t>>(x, true, "argmax i64 rep " + std::to_string(rep));
      expect_arg_matches<int64_t, g::ArgMinOp<int64_t>>(x, false, "argmin i64 rep " + std::to_string(rep));
    }
  }
}

/// The Arg combiners select the best of a total order: commutative,
/// associative, identity neutral, for every triple of elements with distinct
/// indices from a set of special values.
template <class Op>
void expect_arg_combiner_is_order_independent() {
  using P = g::ArgPair<double>;
  const double values[] = {kNaN, -kInf, -1.0, -0.0, 0.0, 1.0, kInf};
  std::vector<P> pairs;
  for (double v : values)
    for (int64_t i = 0; i < 3; ++i) pairs.push_back(P{v, i});
  pairs.push_back(Op::identity());
  const auto same = [](const P& a, const P& b) {
    return a.i == b.i && (std::memcmp(&a.v, &b.v, sizeof a.v) == 0 || (std::isnan(a.v) && std::isnan(b.v)));
  };
  const auto distinct = [](const P& a, const P& b) { return a.i != b.i || a.i == INT64_MAX; };
  for (const P& a : pairs) {
    EXPECT_TRUE(same(Op::combine(Op::identity(), a), a));
    EXPECT_TRUE(same(Op::combine(a, Op::identity()), a));
    for (const P& b : pairs) {
      if (!distinct(a, b)) continue;
      ASSERT_TRUE(same(Op::combine(a, b), Op::combine(b, a))) << a.v << "@" << a.i << " " << b.v << "@" << b.i;
      for (const P& c : pairs) {
        if (!distinct(a, c) || !distinct(b, c)) continue;
        ASSERT_TRUE(same(Op::combine(Op::combine(a, b), c), Op::combine(a, Op::combine(b, c))))
            << a.v << "@" << a.i << " " << b.v << "@" << b.i << " " << c.v << "@" << c.i;
      }
    }
  }
}

TEST(Combiners, ArgCombinersAreCommutativeAndAssociative) {
  expect_arg_combiner_is_order_independent<g::ArgMaxOp<double>>();
  expect_arg_combiner_is_order_independent<g::ArgMinOp<double>>();
}

TEST(Combiners, Identities) {
  EXPECT_EQ(g::SumOp<int64_t>::identity(), 0);
  EXPECT_EQ(g::ProdOp<float>::identity(), 1.0f);
  EXPECT_EQ(g::MaxOp<float>::identity(), -INFINITY);
  EXPECT_EQ(g::MinOp<double>::identity(), kInf);
  EXPECT_EQ(g::MaxOp<int32_t>::identity(), INT32_MIN);
  EXPECT_EQ(g::MinOp<int64_t>::identity(), INT64_MAX);
  EXPECT_TRUE(std::isnan(g::MaxOp<float>::combine(1.0f, NAN)));
  EXPECT_TRUE(std::isnan(g::MinOp<float>::combine(NAN, -INFINITY)));
  EXPECT_FALSE(g::is_nan(int64_t{0}));
  EXPECT_TRUE(g::is_nan(kNaN));
}

}  // namespace
}  // namespace gpu_math_test
