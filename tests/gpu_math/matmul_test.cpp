// matmul_test.cpp — tiled_matmul.cuh's kernel emulated on the CPU: every
// block of the grid (and grid-stride loops over smaller grids), every thread,
// every K phase, through the same kernel_math.hpp functions the kernel calls
// (mm_load_tiles, mm_multiply, mm_store, matmul_grid), against a naive
// double matmul. Transposed, sliced, broadcast (stride 0) views, odd shapes,
// batches 1..3, in f32, f64, f16 and bf16. Every element index the loads
// read is checked to be an element of its operand, every shared-memory slot
// to be written in each phase, and every output to be written once inside
// its bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_math.hpp"
#include "numeric.hpp"

namespace gpu_math_test {
namespace {

namespace g = strata::gpu;
using g::MatView;

/// Which element indices of a buffer are elements of the operand.
struct MatOperand {
  MatView view;
  int64_t rows, cols, size;
  std::vector<char> valid;
  int64_t reads = 0, bad_reads = 0;
};

MatOperand make_operand(int kind, int64_t batch, int64_t rows, int64_t cols) {
  MatOperand o{};
  o.rows = rows;
  o.cols = cols;
  MatView& v = o.view;
  switch (kind) {
    case 0: v = {0, rows * cols, cols, 1}; break;                          // compact
    case 1: v = {0, rows * cols, 1, rows}; break;                          // transposed
    case 2: v = {4, rows * (2 * cols + 3) + 5, 2 * cols + 3, 2}; break;    // sliced, stepped
    case 3: v = {1, 0, cols, 1}; break;                                    // batch broadcast
    case 4: v = {3, 0, 1, rows + 2}; break;                                // transposed, padded, broadcast
    case 5: v = {2, cols, 0, 1}; break;                                    // every row the same
    default: v = {0, rows, 1, 0}; break;                                   // every column the same
  }
  o.size = g::mat_index(v, batch - 1, rows - 1, cols - 1) + 1;
  o.valid.assign(static_cast<size_t>(o.size), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) o.valid[static_cast<size_t>(g::mat_index(v, b, r, c))] = 1;
  return o;
}
constexpr int kViewKinds = 7;

/// The tile loads' element reader in the test: checks and counts every index.
template <class T>
struct RecordingReader {
  const std::vector<T>* data;
  MatOperand* op;
  g::acc_t<T> operator()(int64_t index) const {
    ++op->reads;
    if (index < 0 || index >= op->size || !op->valid[static_cast<size_t>(index)]) {
      ++op->bad_reads;
      return g::acc_t<T>(0);
    }
    return g::to_acc((*data)[static_cast<size_t>(index)]);
  }
};

template <class T>
T sentinel() {
  if constexpr (std::is_same_v<T, g::half_t>) return g::half_t{0x7e01};
  else if constexpr (std::is_same_v<T, g::bfloat16_t>) return g::bfloat16_t{0x7fc1};
  else return std::numeric_limits<T>::quiet_NaN();
}

template <class T>
bool is_sentinel(T x) {
  const T s = sentinel<T>();
  return std::memcmp(&x, &s, sizeof x) == 0;
}

/// Runs tiled_matmul_kernel's body for every block of `grid` (whose sizes
/// may be smaller than matmul_grid's: the kernel strides over the rest).
/// Fails (ASSERT) when a phase leaves a shared-memory slot unset.
template <class T>
void emulate_kernel(const std::vector<T>& a, MatOperand& ao, const std::vector<T>& b, MatOperand& bo, T* c,
                    int64_t batch, int64_t M, int64_t N, int64_t K, g::MatmulGrid grid) {
  using Acc = g::acc_t<T>;
  std::vector<Acc> sa(g::kMmSharedA), sb(g::kMmSharedB);
  std::vector<g::MmAcc<Acc>> acc(g::kMmThreads);
  const RecordingReader<T> read_a{&a, &ao}, read_b{&b, &bo};
  const int64_t row_tiles = g::tile_count(M, g::kMmTileM), col_tiles = g::tile_count(N, g::kMmTileN);
  for (int64_t bz = 0; bz < grid.z; ++bz)
    for (int64_t by = 0; by < grid.y; ++by)
      for (int64_t bx = 0; bx < grid.x; ++bx)
        // The kernel's loops, for this block.
        for (int64_t bi = bz; bi < batch; bi += grid.z)
          for (int64_t rt = by; rt < row_tiles; rt += grid.y)
            for (int64_t ct = bx; ct < col_tiles; ct += grid.x) {
              const int64_t row0 = rt * g::kMmTileM, col0 = ct * g::kMmTileN;
              for (auto& x : acc) x = g::mm_zero<Acc>();
              for (int64_t k0 = 0; k0 < K; k0 += g::kMmTileK) {
                std::fill(sa.begin(), sa.end(), std::numeric_limits<Acc>::quiet_NaN());
                std::fill(sb.begin(), sb.end(), std::numeric_limits<Acc>::quiet_NaN());
                for (int t = 0; t < g::kMmThreads; ++t)
                  g::mm_load_tiles<Acc>(read_a, ao.view, read_b, bo.view, bi, M, N, K, row0, col0, k0, t, sa.data(),
                                        sb.data());
                // __syncthreads(): every slot of both tiles is set.
                for (Acc x : sa) ASSERT_FALSE(std::isnan(x)) << "A tile slot not loaded";
                for (Acc x : sb) ASSERT_FALSE(std::isnan(x)) << "B tile slot not loaded";
                for (int t = 0; t < g::kMmThreads; ++t) g::mm_multiply<Acc>(sa.data(), sb.data(), t, acc[static_cast<size_t>(t)]);
              }
              for (int t = 0; t < g::kMmThreads; ++t)
                g::mm_store<T, Acc>(c, bi, M, N, row0, col0, t, acc[static_cast<size_t>(t)], g::FromAcc<T>{});
            }
}

template <class T>
double as_double(T x) {
  return static_cast<double>(g::to_acc(x));
}

/// One case: random data (small integers when `exact`, so every sum is exact
/// and the result is the exact product rounded once to T), emulated kernel
/// vs naive double matmul.
template <class T>
void check_case(std::mt19937_64& rng, int64_t batch, int64_t M, int64_t N, int64_t K, int a_kind, int b_kind,
                bool exact, const g::MatmulGrid* grid_override = nullptr) {
  SCOPED_TRACE("batch " + std::to_string(batch) + " M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
               std::to_string(K) + " A view " + std::to_string(a_kind) + " B view " + std::to_string(b_kind) +
               (exact ? " exact" : " random"));
  MatOperand ao = make_operand(a_kind, batch, M, K);
  MatOperand bo = make_operand(b_kind, batch, K, N);
  const auto fill = [&](std::vector<T>& v, int64_t size) {
    v.resize(static_cast<size_t>(size));
    for (T& x : v) {
      const float f = exact ? static_cast<float>(std::uniform_int_distribution<int>(-4, 4)(rng))
                            : std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      x = g::from_float<T>(f);
    }
  };
  std::vector<T> a, b;
  fill(a, ao.size);
  fill(b, bo.size);
  const int64_t guard = 37, n_c = batch * M * N;
  std::vector<T> c(static_cast<size_t>(n_c + 2 * guard), sentinel<T>());
  const g::MatmulGrid grid = grid_override ? *grid_override : g::matmul_grid(batch, M, N);
  emulate_kernel(a, ao, b, bo, c.data() + guard, batch, M, N, K, grid);
  if (::testing::Test::HasFatalFailure()) return;

  EXPECT_EQ(ao.bad_reads, 0) << "A reads outside its elements";
  EXPECT_EQ(bo.bad_reads, 0) << "B reads outside its elements";
  // Each block reads its A rows once per column tile and its B columns once
  // per row tile: exactly the elements a tiled kernel needs.
  const int64_t row_tiles = g::tile_count(M, g::kMmTileM), col_tiles = g::tile_count(N, g::kMmTileN);
  EXPECT_EQ(ao.reads, batch * M * K * col_tiles);
  EXPECT_EQ(bo.reads, batch * K * N * row_tiles);
  for (int64_t i = 0; i < guard; ++i) {
    ASSERT_TRUE(is_sentinel(c[static_cast<size_t>(i)])) << "write before C";
    ASSERT_TRUE(is_sentinel(c[static_cast<size_t>(guard + n_c + i)])) << "write after C";
  }
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = as_double(a[static_cast<size_t>(g::mat_index(ao.view, bi, i, k))]);
          const double y = as_double(b[static_cast<size_t>(g::mat_index(bo.view, bi, k, j))]);
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        const T got = c[static_cast<size_t>(guard + (bi * M + i) * N + j)];
        ASSERT_FALSE(is_sentinel(got)) << "C(" << bi << "," << i << "," << j << ") not written";
        if (exact) {
          const T want = g::from_float<T>(static_cast<float>(sum));
          ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
              << "C(" << bi << "," << i << "," << j << ") = " << as_double(got) << ", want " << sum;
        } else {
          const double tol = (std::is_same_v<g::acc_t<T>, double> ? 1e-13 : 2e-5) * magnitude + 1e-30;
          ASSERT_NEAR(as_double(got), sum, tol) << "C(" << bi << "," << i << "," << j << ")";
        }
      }
}

constexpr int64_t kDims[] = {1, 3, 16, 17, 33, 65};

template <class T>
void check_all_shapes(uint64_t seed, bool exact) {
  std::mt19937_64 rng(seed);
  int n = 0;
  for (int64_t M : kDims)
    for (int64_t N : kDims)
      for (int64_t K : kDims) {
        const int64_t batch = 1 + (n % 3);
        check_case<T>(rng, batch, M, N, K, n % kViewKinds, (n / kViewKinds + n) % kViewKinds, exact);
        if (::testing::Test::HasFailure()) return;
        ++n;
      }
}

TEST(TiledMatmul, F32ExactOnEveryOddShape) { check_all_shapes<float>(30, true); }
TEST(TiledMatmul, F64ExactOnEveryOddShape) { check_all_shapes<double>(31, true); }
TEST(TiledMatmul, F16ExactOnEveryOddShape) { check_all_shapes<g::half_t>(32, true); }
TEST(TiledMatmul, BF16ExactOnEveryOddShape) { check_all_shapes<g::bfloat16_t>(33, true); }
TEST(TiledMatmul, F32RandomOnEveryOddShape) { check_all_shapes<float>(34, false); }
TEST(TiledMatmul, F64RandomOnEveryOddShape) { check_all_shapes<double>(35, false); }

TEST(TiledMatmul, EveryViewPairing) {
  std::mt19937_64 rng(36);
  for (int ak = 0; ak < kViewKinds; ++ak)
    for (int bk = 0; bk < kViewKinds; ++bk) {
      check_case<float>(rng, 3, 33, 17, 65, ak, bk, false);
      check_case<double>(rng, 2, 17, 33, 3, ak, bk, true);
      if (HasFailure()) return;
    }
}

TEST(TiledMatmul, GridStrideLoopsCoverEverythingWithSmallerGrids) {
  // The kernel strides over batches, row and column tiles beyond the grid
  // (gridDim.z and gridDim.y are capped at 65535): any grid gives the same C.
  std::mt19937_64 rng(37);
  const g::MatmulGrid grids[] = {{1, 1, 1}, {2, 1, 2}, {1, 2, 1}, {3, 2, 2}};
  for (const g::MatmulGrid& grid : grids) {
    check_case<float>(rng, 3, 65, 65, 17, 1, 2, false, &grid);
    check_case<double>(rng, 5, 33, 97, 33, 4, 0, true, &grid);
  }
}

TEST(TiledMatmul, EmptyKWritesZerosAndReadsNothing) {
  MatOperand ao = make_operand(0, 2, 5, 1), bo = make_operand(0, 2, 1, 7);
  const std::vector<float> a(static_cast<size_t>(ao.size), 1.0f), b(static_cast<size_t>(bo.size), 1.0f);
  std::vector<float> c(2 * 5 * 7, NAN);
  emulate_kernel(a, ao, b, bo, c.data(), 2, 5, 7, 0, g::matmul_grid(2, 5, 7));
  for (float x : c) EXPECT_EQ(x, 0.0f);
  EXPECT_EQ(ao.reads + bo.reads, 0);
}

TEST(TiledMatmul, GridIsCappedWhereCudaAndHipCapIt) {
  g::MatmulGrid grid = g::matmul_grid(3, 33, 65);
  EXPECT_EQ(grid.x, 3);
  EXPECT_EQ(grid.y, 2);
  EXPECT_EQ(grid.z, 3);
  grid = g::matmul_grid(100000, int64_t{g::kMmTileM} * 70000 + 1, int64_t{1} << 30);
  EXPECT_EQ(grid.x, (int64_t{1} << 30) / g::kMmTileN);
  EXPECT_EQ(grid.y, 65535);
  EXPECT_EQ(grid.z, 65535);
  grid = g::matmul_grid(1, 1, int64_t{1} << 62);
  EXPECT_EQ(grid.x, 2147483647);
}

}  // namespace
}  // namespace gpu_math_test
