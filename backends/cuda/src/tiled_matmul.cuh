// tiled_matmul.cuh — a shared-memory tiled batched matmul kernel and its
// launcher: the HIP build's matmul, and the CUDA build's where cuBLAS does
// not apply (strides cuBLAS cannot express, types it lacks).
//
//   C[b] = A[b] @ B[b] for b < batch
//
// A is M x K and B is K x N, each described by a MatView (element offset,
// batch stride, row stride, column stride: any of them may be 0 or
// arbitrary, so transposed, sliced and broadcast views work without a
// copy); C is compact row-major M x N per batch, batch after batch. T is
// float, double, half_t or bfloat16_t (numeric.hpp); products are summed in
// acc_t<T> in increasing k, and C is rounded to T once.
//
// The per-thread pieces (tile loads with bounds checks, the inner product,
// the store, the grid) are kernel_math.hpp's mm_* functions, which
// tests/gpu_math runs on the CPU block by block and thread by thread; this
// file only strings them together between __syncthreads(). Grid: x over
// column tiles, y over row tiles, z over batches; y and z are capped at
// 65535 (x at 2^31 - 1) and the kernel strides over the rest, so any batch,
// M and N work. The loops are uniform across a block, so every thread
// reaches every __syncthreads(). Nothing assumes a warp size (HIP's is 64).
#pragma once

#include "gpu_runtime.hpp"
#include "kernel_math.hpp"
#include "numeric.hpp"

namespace strata::gpu {

/// Reads element `index` of a global array as acc_t<T> (host-device only so
/// that kernel_math.hpp's host-device templates may call it; used on the device).
template <class T>
struct GlobalReader {
  const T* p;
  STRATA_HD acc_t<T> operator()(int64_t index) const { return to_acc(p[index]); }
};

template <class T>
__global__ void __launch_bounds__(kMmThreads)
    tiled_matmul_kernel(const T* a, MatView av, const T* b, MatView bv, T* c, int64_t batch, int64_t M, int64_t N,
                        int64_t K) {
  using Acc = acc_t<T>;
  __shared__ Acc sa[kMmSharedA];
  __shared__ Acc sb[kMmSharedB];
  const int tid = static_cast<int>(threadIdx.x);
  const GlobalReader<T> read_a{a}, read_b{b};
  const int64_t row_tiles = tile_count(M, kMmTileM), col_tiles = tile_count(N, kMmTileN);
  for (int64_t bi = blockIdx.z; bi < batch; bi += gridDim.z) {
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      for (int64_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
        const int64_t row0 = rt * kMmTileM, col0 = ct * kMmTileN;
        MmAcc<Acc> acc = mm_zero<Acc>();
        for (int64_t k0 = 0; k0 < K; k0 += kMmTileK) {
          mm_load_tiles<Acc>(read_a, av, read_b, bv, bi, M, N, K, row0, col0, k0, tid, sa, sb);
          __syncthreads();
          mm_multiply<Acc>(sa, sb, tid, acc);
          __syncthreads();
        }
        mm_store<T, Acc>(c, bi, M, N, row0, col0, tid, acc, FromAcc<T>{});
      }
    }
  }
}

/// Launches the kernel on `stream`; returns cudaGetLastError() after the
/// launch (cudaSuccess and no launch when C is empty). K == 0 writes zeros.
template <class T>
cudaError_t launch_tiled_matmul(const T* a, MatView av, const T* b, MatView bv, T* c, int64_t batch, int64_t M,
                                int64_t N, int64_t K, cudaStream_t stream) {
  if (batch <= 0 || M <= 0 || N <= 0) return cudaSuccess;
  const MatmulGrid g = matmul_grid(batch, M, N);
  const dim3 grid(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y), static_cast<unsigned>(g.z));
  tiled_matmul_kernel<T><<<grid, dim3(kMmThreads), 0, stream>>>(a, av, b, bv, c, batch, M, N, K);
  return cudaGetLastError();
}

}  // namespace strata::gpu
