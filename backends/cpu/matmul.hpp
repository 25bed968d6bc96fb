// matmul.hpp — pieces of the matmul kernel shared between matmul.cpp (oneDNN)
// and gemm_loops.cpp (f64, which oneDNN lacks, and tiny problems).
#pragma once

#include "strided.hpp"

namespace strata::cpu {

/// Checks a [..., M, K] @ b [..., K, N] -> y [..., M, N] with equal batch dims.
inline bool matmul_shapes_ok(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y) {
  const int r = y.rank;
  if (r < 2 || a.rank != r || b.rank != r) return false;
  for (int d = 0; d < r - 2; ++d) {
    if (a.shape[d] != y.shape[d] || b.shape[d] != y.shape[d]) return false;
  }
  return a.shape[r - 2] == y.shape[r - 2] && b.shape[r - 1] == y.shape[r - 1] && a.shape[r - 1] == b.shape[r - 2];
}

/// The INVALID_ARGUMENT status of `op` (matmul of any dtype) for operands
/// that matmul_shapes_ok refuses, naming the three shapes (matmul.cpp).
strata_status refuse_matmul_shapes(strata_error* error, const char* op, const strata_tensor& a,
                                   const strata_tensor& b, const strata_tensor& y);

/// The batch dims of (y, a, b), collapsed; a stride of 0 marks a broadcast.
inline Layout<3> batch_layout(const strata_tensor& y, const strata_tensor& a, const strata_tensor& b) {
  return make_layout<3>(y.rank - 2, y.shape, {y.strides, a.strides, b.strides});
}

/// Limits of gemm_small: output columns, and multiply-adds over all batches.
inline constexpr int64_t kSmallGemmMaxN = 64;
inline constexpr int64_t kSmallGemmMaxWork = 8192;

/// y = a @ b with one simple loop nest when the problem is tiny (within the
/// limits above; returns false otherwise). Any strides; T is f32, f64, f16
/// or bf16, accumulated in f32 (f64 for f64).
template <class T>
bool gemm_small(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y);
/// y = a @ b when the inner dim K is 1: each matrix the outer product of a
/// column and a row, a loop bound by writing y (oneDNN's GEMM reached about
/// a third of the write bandwidth there: vmap's per-sample weight gradients
/// are such products, 64 of 784 x 128 in one call). Exact, as the GEMM is
/// (one product per element). False when K is not 1, or when the rows are
/// shorter than kOuterProductMinN and the problem is beyond gemm_small's.
inline constexpr int64_t kOuterProductMinN = 32;
template <class T>
bool outer_product(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, int threads);

/// f64 matmul with plain blocked loops; any strides.
void gemm_f64(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, int threads);

/// Drops the cached oneDNN primitives (plugin shutdown).
void clear_matmul_cache();

}  // namespace strata::cpu
