// fused_launch.hpp — the launch of strata::fused_elementwise's kernel
// (fused.cu), for the host code that prepares it (fused_kernels.cpp).
#pragma once

#include "fused_eval.hpp"
#include "gpu_runtime.hpp"

namespace strata::gpu {

/// Threads per block of the fused kernel.
inline constexpr int kFusedThreads = 256;

/// Queues fused_element<T> over args.n elements in `blocks` blocks on
/// `stream`; the launch's error (cudaSuccess when queued). T: float, double,
/// half_t or bfloat16_t.
template <class T>
cudaError_t launch_fused(const FusedArgs& args, unsigned blocks, cudaStream_t stream);

}  // namespace strata::gpu
