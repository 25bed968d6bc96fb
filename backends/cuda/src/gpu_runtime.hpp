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
#include <cuda_fp16.h>  // __half; hip_compat.hpp includes <hip/hip_fp16.h> likewise
#include <cuda_runtime.h>
#define STRATA_GPU_API "cuda"
// The CUDA values of the feature macros documented at the top of
// backends/hip/hip_compat.hpp (which defines the HIP values). Test them with
// #if, never #ifdef: both builds define every one of them.
#ifndef STRATA_GPU_HAS_MEMPOOLS
#define STRATA_GPU_HAS_MEMPOOLS 1  // cudaMallocAsync & co. (CUDA >= 11.2)
#endif
#ifndef STRATA_GPU_HAS_PROP_UUID
#define STRATA_GPU_HAS_PROP_UUID 1  // cudaDeviceProp::uuid
#endif
#ifndef STRATA_GPU_HAS_GCN_ARCH_NAME
#define STRATA_GPU_HAS_GCN_ARCH_NAME 0  // cudaDeviceProp has no gcnArchName
#endif
#ifndef STRATA_GPU_HAS_BLAS
#define STRATA_GPU_HAS_BLAS 1  // cuBLAS
#endif
#ifndef STRATA_GPU_HAS_NCCL
#define STRATA_GPU_HAS_NCCL 1  // NCCL, opened at run time (collectives.cpp)
#endif
#endif
