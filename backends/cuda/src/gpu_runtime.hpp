// gpu_runtime.hpp — the one include that differs between the CUDA and the
// HIP build of the kernels in this folder.
//
// backends/cuda/ is written once in CUDA C++. The HIP plugin
// (backends/hip/) compiles the same files with hipcc and -DSTRATA_GPU_HIP,
// and backends/hip/hip_compat.hpp maps the CUDA runtime names used here to
// HIP's (cudaMalloc -> hipMalloc, ...). Code in this folder therefore uses
// CUDA spellings only, and includes this header instead of <cuda_runtime.h>.
#pragma once

#if defined(STRATA_GPU_HIP)
#include "hip_compat.hpp"
#define STRATA_GPU_API "hip"
#else
#include <cuda_runtime.h>
#define STRATA_GPU_API "cuda"
#endif
