// blas.hpp — cuBLAS, opened at run time (CUDA build only).
//
// The plugin does not link cuBLAS: the library is dlopen()ed on a device's
// first matmul (libcublas.so.13, then .12), so the plugin loads on a machine
// that has the driver but not the toolkit, and matmul then runs on the
// shared tiled kernel (tiled_matmul.cuh), logging once why. The HIP build
// has no BLAS (Debian 12 packages neither hipBLAS nor rocBLAS) and always
// uses the tiled kernel.
#pragma once

#include <cstdint>
#include <string>

#include "state.hpp"

namespace strata::gpu {

/// One strided-batched GEMM in cuBLAS's column-major terms:
/// C = op(A) op(B), C m x n with leading dimension ldc, batch `count`.
struct GemmCall {
  strata_dtype dtype;
  bool transpose_a, transpose_b;
  int m, n, k;
  const void* a;
  int lda;
  long long stride_a;
  const void* b;
  int ldb;
  long long stride_b;
  void* c;
  int ldc;
  long long stride_c;
  int count;
};

/// Whether cuBLAS is usable here; on false, `why` says why (once per process).
bool blas_available(std::string* why);

/// Runs the GEMM on `stream` of `d` (creating the device's handle on first
/// use). false with `why` when cuBLAS refused it.
bool blas_gemm(Device& d, cudaStream_t stream, const GemmCall& g, std::string* why);

}  // namespace strata::gpu
