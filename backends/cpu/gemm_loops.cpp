// gemm_loops.cpp — matmul with plain loops: f64, which oneDNN does not
// provide, and tiny problems of any dtype, where oneDNN's per-call overhead
// (microseconds) would dwarf the arithmetic.
#include "matmul.hpp"

#include "dtype.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace strata::cpu {
namespace {

// f64: B is packed row-major once per batch, then rows of A are processed
// four at a time against cache-sized panels of B, accumulating into y.
constexpr int64_t kPanelK = 128;  // 128 x 512 doubles: a 512 KiB panel of B,
constexpr int64_t kPanelN = 512;  // and 4 rows of y at 4 KiB each stay in L1/L2

struct Matrix {  // a strided 2-D view
  const double* p;
  int64_t rs, cs;
  double at(int64_t i, int64_t j) const { return p[i * rs + j * cs]; }
};

/// y rows [i0, i1) (row stride ldy, unit column stride) = a @ bp, where bp is
/// the row-major K x N copy of b.
void rows_kernel(Matrix a, const double* bp, double* y, int64_t ldy, int64_t i0, int64_t i1, int64_t K,
                 int64_t N) {
  for (int64_t i = i0; i < i1; ++i) std::fill(y + i * ldy, y + i * ldy + N, 0.0);
  for (int64_t jb = 0; jb < N; jb += kPanelN) {
    const int64_t jn = std::min(kPanelN, N - jb);
    for (int64_t kb = 0; kb < K; kb += kPanelK) {
      const int64_t kn = std::min(kPanelK, K - kb);
      int64_t i = i0;
      for (; i + 4 <= i1; i += 4) {  // four rows share each load of B
        double* y0 = y + i * ldy + jb;
        double* y1 = y0 + ldy;
        double* y2 = y1 + ldy;
        double* y3 = y2 + ldy;
        for (int64_t k = kb; k < kb + kn; ++k) {
          const double a0 = a.at(i, k), a1 = a.at(i + 1, k), a2 = a.at(i + 2, k), a3 = a.at(i + 3, k);
          const double* brow = bp + k * N + jb;
          for (int64_t j = 0; j < jn; ++j) {
            const double bv = brow[j];
            y0[j] += a0 * bv;
            y1[j] += a1 * bv;
            y2[j] += a2 * bv;
            y3[j] += a3 * bv;
          }
        }
      }
      for (; i < i1; ++i) {
        double* yr = y + i * ldy + jb;
        for (int64_t k = kb; k < kb + kn; ++k) {
          const double av = a.at(i, k);
          const double* brow = bp + k * N + jb;
          for (int64_t j = 0; j < jn; ++j) yr[j] += av * brow[j];
        }
      }
    }
  }
}

}  // namespace

template <class T>
bool gemm_small(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y) {
  const int r = y.rank;
  const int64_t M = y.shape[r - 2], N = y.shape[r - 1], K = a.shape[r - 1];
  const Layout<3> batches = batch_layout(y, a, b);
  // In double: the product of large dims could overflow int64.
  const double work = static_cast<double>(batches.numel()) * static_cast<double>(M * N) * static_cast<double>(K);
  if (N > kSmallGemmMaxN || work > static_cast<double>(kSmallGemmMaxWork)) return false;
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t sam = a.strides[r - 2], sak = a.strides[r - 1], sbk = b.strides[r - 2], sbn = b.strides[r - 1];
  const int64_t sym = y.strides[r - 2], syn = y.strides[r - 1];
  for_each_run(batches, 0, batches.numel(), [&](const int64_t* off, int64_t count) {
    for (int64_t t = 0; t < count; ++t) {
      const T* A = data<const T>(a) + off[1] + t * batches.inner_stride(1);
      const T* B = data<const T>(b) + off[2] + t * batches.inner_stride(2);
      T* Y = data<T>(y) + off[0] + t * batches.inner_stride(0);
      for (int64_t i = 0; i < M; ++i) {
        C acc[kSmallGemmMaxN] = {};
        for (int64_t k = 0; k < K; ++k) {
          const C aik = load_as<C>(A[i * sam + k * sak]);
          for (int64_t j = 0; j < N; ++j) acc[j] += aik * load_as<C>(B[k * sbk + j * sbn]);
        }
        for (int64_t j = 0; j < N; ++j) Y[i * sym + j * syn] = store_from<T>(acc[j]);
      }
    }
  });
  return true;
}

template <class T>
bool outer_product(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, int threads) {
  const int r = y.rank;
  const int64_t M = y.shape[r - 2], N = y.shape[r - 1];
  if (a.shape[r - 1] != 1) return false;
  const Layout<3> batches = batch_layout(y, a, b);
  // Rows shorter than a few vectors lose to oneDNN's kernels, which write
  // several rows at once (64 products of 784 x 10: 1.7x slower here), but
  // not to gemm_small's loop, which takes the tiny problems (one 784 x 10
  // product: 1.9x faster here).
  if (N < kOuterProductMinN && static_cast<double>(batches.numel()) * static_cast<double>(M * N) >
                                   static_cast<double>(kSmallGemmMaxWork)) {
    return false;
  }
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t sam = a.strides[r - 2], sbn = b.strides[r - 1], sym = y.strides[r - 2], syn = y.strides[r - 1];
  parallel_for(
      batches.numel(), threads,
      [&](int64_t begin, int64_t end) {
        for_each_run(batches, begin, end, [&](const int64_t* off, int64_t count) {
          for (int64_t t = 0; t < count; ++t) {
            const T* A = data<const T>(a) + off[1] + t * batches.inner_stride(1);
            const T* B = data<const T>(b) + off[2] + t * batches.inner_stride(2);
            T* Y = data<T>(y) + off[0] + t * batches.inner_stride(0);
            for (int64_t i = 0; i < M; ++i) {
              const C ai = load_as<C>(A[i * sam]);
              T* row = Y + i * sym;
              if (syn == 1 && sbn == 1) {  // the common layout: one vectorised loop
                for (int64_t j = 0; j < N; ++j) row[j] = store_from<T>(ai * load_as<C>(B[j]));
              } else {
                for (int64_t j = 0; j < N; ++j) row[j * syn] = store_from<T>(ai * load_as<C>(B[j * sbn]));
              }
            }
          }
        });
      },
      M * N);
  return true;
}

template bool outer_product<float>(const strata_tensor&, const strata_tensor&, const strata_tensor&, int);
template bool outer_product<double>(const strata_tensor&, const strata_tensor&, const strata_tensor&, int);
template bool outer_product<f16>(const strata_tensor&, const strata_tensor&, const strata_tensor&, int);
template bool outer_product<bf16>(const strata_tensor&, const strata_tensor&, const strata_tensor&, int);

template bool gemm_small<float>(const strata_tensor&, const strata_tensor&, const strata_tensor&);
template bool gemm_small<double>(const strata_tensor&, const strata_tensor&, const strata_tensor&);
template bool gemm_small<f16>(const strata_tensor&, const strata_tensor&, const strata_tensor&);
template bool gemm_small<bf16>(const strata_tensor&, const strata_tensor&, const strata_tensor&);

void gemm_f64(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, int threads) {
  const int r = y.rank;
  const int64_t M = y.shape[r - 2], N = y.shape[r - 1], K = a.shape[r - 1];
  const int64_t ldy = y.strides[r - 2];
  const bool y_rows = y.strides[r - 1] == 1 || N == 1;
  const Layout<3> batches = batch_layout(y, a, b);
  std::vector<double> packed_b(static_cast<size_t>(K * N));
  std::vector<double> y_tmp(y_rows ? 0 : static_cast<size_t>(M * N));

  for_each_run(batches, 0, batches.numel(), [&](const int64_t* off, int64_t count) {
    for (int64_t t = 0; t < count; ++t) {
      const Matrix am{data<const double>(a) + off[1] + t * batches.inner_stride(1), a.strides[r - 2], a.strides[r - 1]};
      const Matrix bm{data<const double>(b) + off[2] + t * batches.inner_stride(2), b.strides[r - 2], b.strides[r - 1]};
      double* yb = data<double>(y) + off[0] + t * batches.inner_stride(0);
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t j = 0; j < N; ++j) packed_b[k * N + j] = bm.at(k, j);
      }
      double* out = y_rows ? yb : y_tmp.data();
      const int64_t ld = y_rows ? ldy : N;
      parallel_for(
          M, threads, [&](int64_t i0, int64_t i1) { rows_kernel(am, packed_b.data(), out, ld, i0, i1, K, N); },
          K * N);
      if (!y_rows) {
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) yb[i * ldy + j * y.strides[r - 1]] = y_tmp[i * N + j];
        }
      }
    }
  });
}

}  // namespace strata::cpu
