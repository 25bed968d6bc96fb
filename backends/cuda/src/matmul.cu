// matmul.cu — strata::matmul for f32, f64, f16 and bf16 (docs/ops.md
// "Linear algebra"): a [..., M, K] @ b [..., K, N] -> y [..., M, N], strided
// inputs (transposed views and stride-0 batch dims need no copy).
//
// cuBLAS (strided-batched GEMM, f32 accumulation for 16-bit types, no TF32)
// takes every call whose matrices have a unit stride in one direction and
// whose batch is one stride per operand; row-major C = A B is computed as
// column-major C^T = B^T A^T. Everything else — a view cuBLAS cannot
// describe, sizes beyond int, no cuBLAS on the machine, the HIP build — runs
// on the tiled kernel of tiled_matmul.cuh. Batch dims that do not collapse
// to one stride are walked on the host, one batched launch per outer index.
#include <climits>
#include <mutex>

#include "blas.hpp"
#include "eltwise.cuh"
#include "kernels.hpp"
#include "tiled_matmul.cuh"

namespace strata::gpu {
namespace {

/// One row-major matrix operand as cuBLAS sees it (column-major): whether it
/// must be transposed and its leading dimension; false when cuBLAS cannot
/// describe it. `rows` x `cols` is its row-major shape.
bool blas_view(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, bool* transpose, int64_t* ld) {
  if (col_stride == 1 && row_stride >= std::max<int64_t>(cols, 1)) {  // row-major: column-major view is X^T
    *transpose = false;
    *ld = row_stride;
    return *ld <= INT_MAX;
  }
  if (row_stride == 1 && col_stride >= std::max<int64_t>(rows, 1)) {  // column-major storage: view is X
    *transpose = true;
    *ld = col_stride;
    return *ld <= INT_MAX;
  }
  if (rows == 1 && col_stride == 1) {  // a single row: any leading dimension >= cols works
    *transpose = false;
    *ld = std::max<int64_t>(cols, 1);
    return *ld <= INT_MAX;
  }
  if (cols == 1 && row_stride == 1) {
    *transpose = true;
    *ld = std::max<int64_t>(rows, 1);
    return *ld <= INT_MAX;
  }
  return false;
}

template <class T>
strata_status matmul_batch(Launch& l, const T* a, MatView av, const T* b, MatView bv, T* c, int64_t count, int64_t M,
                           int64_t N, int64_t K) {
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  const bool fits = M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && count <= INT_MAX;
  if (fits && blas_view(K, N, bv.row_stride, bv.col_stride, &ta, &lda) &&
      blas_view(M, K, av.row_stride, av.col_stride, &tb, &ldb)) {
    GemmCall g{};
    g.dtype = Scalar<T>::dtype;
    g.transpose_a = ta;  // cuBLAS's A is our B^T
    g.transpose_b = tb;  // cuBLAS's B is our A^T
    g.m = static_cast<int>(N);
    g.n = static_cast<int>(M);
    g.k = static_cast<int>(K);
    g.a = b + bv.offset;
    g.lda = static_cast<int>(lda);
    g.stride_a = bv.batch_stride;
    g.b = a + av.offset;
    g.ldb = static_cast<int>(ldb);
    g.stride_b = av.batch_stride;
    g.c = c;
    g.ldc = static_cast<int>(N);
    g.stride_c = M * N;
    g.count = static_cast<int>(count);
    std::string why;
    if (blas_gemm(l.device, l.stream, g, &why)) return STRATA_OK;
    static std::once_flag logged;
    std::call_once(logged, [&] {
      State* st = as_state(l.call.state);
      st->log(STRATA_LOG_WARN, "matmul on " + l.device.id + " uses the tiled kernel: " + why);
    });
  }
  if (cudaError_t e = launch_tiled_matmul<T>(a, av, b, bv, c, count, M, N, K, l.stream); e != cudaSuccess) {
    return runtime_failure(e, &l.device, "matmul (tiled_matmul kernel launch)", l.error);
  }
  return STRATA_OK;
}

template <class T>
struct Matmul {
  static constexpr const char* op = STRATA_OP_MATMUL;
  using inputs = Types<T, T>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    const strata_tensor& a = l.in(0);
    const strata_tensor& b = l.in(1);
    const strata_tensor& y = l.out();
    const int r = y.rank;
    if (r < 2 || a.rank != r || b.rank != r) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: operands %s @ %s -> %s must all have one rank >= 2", op,
                  plugin::describe(a).c_str(), plugin::describe(b).c_str(), plugin::describe(y).c_str());
    }
    const int64_t M = y.shape[r - 2], N = y.shape[r - 1], K = a.shape[r - 1];
    // The batch dims of all three, collapsed where they line up.
    Shape batch{};
    batch.rank = r - 2;
    Operand ops[3] = {};
    for (int d = 0; d < r - 2; ++d) {
      batch.n[d] = y.shape[d];
      ops[0].stride[d] = y.strides[d];
      ops[1].stride[d] = a.strides[d];
      ops[2].stride[d] = b.strides[d];
    }
    coalesce(batch, ops, 3);
    int64_t count = 1, inner_a = 0, inner_b = 0, inner_c = 0;
    Shape outer = batch;
    if (batch.rank > 0) {
      const int last = batch.rank - 1;
      count = batch.n[last];
      inner_c = ops[0].stride[last];
      inner_a = ops[1].stride[last];
      inner_b = ops[2].stride[last];
      outer.rank = last;
    }
    int64_t n_outer = 1;
    for (int d = 0; d < outer.rank; ++d) n_outer *= outer.n[d];
    const T* pa = base<const T>(a);
    const T* pb = base<const T>(b);
    T* pc = base<T>(y);
    for (int64_t o = 0; o < n_outer; ++o) {
      const MatView av{a.offset + offset_of(outer, ops[1], o), inner_a, a.strides[r - 2], a.strides[r - 1]};
      const MatView bv{b.offset + offset_of(outer, ops[2], o), inner_b, b.strides[r - 2], b.strides[r - 1]};
      if (count > 1 && inner_c != M * N) {
        return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output %s is not compact", op,
                    plugin::describe(y).c_str());
      }
      T* c = pc + y.offset + offset_of(outer, ops[0], o);
      if (strata_status s = matmul_batch<T>(l, pa, av, pb, bv, c, count, M, N, K); s != STRATA_OK) return s;
    }
    return STRATA_OK;
  }
};

}  // namespace

void register_matmul_kernels(plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() { add<Matmul<T>>(t); });
}

}  // namespace strata::gpu
