// fused.cu — the device half of strata::fused_elementwise on CUDA and HIP:
// one kernel per float dtype runs fused_element (fused_eval.hpp) over the
// elements, grid-stride. fused_kernels.cpp, host code, parses the program,
// checks the operands and fills the arguments (kept out of device
// compilation: Debian's hipcc, clang 15, crashes instantiating the program
// cache's std::map in device code).
#include "eltwise.cuh"
#include "fused_launch.hpp"

namespace strata::gpu {
namespace {

template <class T>
__global__ void fused_kernel(FusedArgs args) {
  STRATA_GRID_STRIDE(i, args.n) { fused_element<T>(args, i); }
}

}  // namespace

template <class T>
cudaError_t launch_fused(const FusedArgs& args, unsigned blocks, cudaStream_t stream) {
  fused_kernel<T><<<blocks, kFusedThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

template cudaError_t launch_fused<float>(const FusedArgs&, unsigned, cudaStream_t);
template cudaError_t launch_fused<double>(const FusedArgs&, unsigned, cudaStream_t);
template cudaError_t launch_fused<half_t>(const FusedArgs&, unsigned, cudaStream_t);
template cudaError_t launch_fused<bfloat16_t>(const FusedArgs&, unsigned, cudaStream_t);

}  // namespace strata::gpu
