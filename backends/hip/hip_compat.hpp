// hip_compat.hpp — CUDA runtime spellings for the HIP build of backends/cuda/src.
//
// Purpose
//   The HIP plugin (libstrata_plugin_hip.so) is built from the very same
//   sources as the CUDA plugin, backends/cuda/src/*.cu and *.cpp, compiled by
//   hipcc with -DSTRATA_GPU_HIP=1. Those sources include
//   backends/cuda/src/gpu_runtime.hpp, which includes this header under HIP
//   and <cuda_runtime.h> under CUDA. This header maps every CUDA runtime name
//   the shared sources use to its HIP equivalent, so that the sources need no
//   #ifdef for ordinary runtime calls.
//
// The rule
//   Shared sources use CUDA spellings only (cudaMalloc, cudaStream_t,
//   __shfl_down_sync, __half, ...), never hip* names. A CUDA name used there
//   that is not mapped below is a compile error in the HIP build: add it here
//   (after checking that HIP has it, see /usr/include/hip), or, where HIP has
//   no equivalent, guard the use with one of the feature macros below.
//
// Feature macros: defined to 0 or 1 in both builds, so test them with #if.
// This header defines the HIP values, gpu_runtime.hpp the CUDA ones. Each may
// be overridden with -D<name>=0 on the compiler's command line.
//
//   STRATA_GPU_HAS_MEMPOOLS        stream-ordered allocation: cudaMallocAsync,
//                                  cudaFreeAsync, cudaMemPool_t,
//                                  cudaDeviceGetDefaultMemPool,
//                                  cudaMemPoolTrimTo, cudaMemPoolSetAttribute.
//                                  CUDA: 1. HIP 5.2: 1 — the API is declared and
//                                  exported by libamdhip64 since HIP 5.1, but
//                                  AMD marks it *beta*. Either way, code must
//                                  also check cudaDevAttrMemoryPoolsSupported at
//                                  run time and fall back to cudaMalloc/cudaFree.
//   STRATA_GPU_HAS_PROP_UUID       cudaDeviceProp has a `uuid` member
//                                  (cudaUUID_t, 16 bytes). CUDA: 1. HIP 5.2: 0
//                                  (hipDeviceProp_t has no uuid; HIP has the
//                                  beta hipDeviceGetUuid, which is not mapped).
//   STRATA_GPU_HAS_GCN_ARCH_NAME   cudaDeviceProp has `gcnArchName` (char[256],
//                                  e.g. "gfx90a:sramecc+:xnack-"). CUDA: 0. HIP: 1.
//   STRATA_GPU_HAS_BLAS            a vendor BLAS (cuBLAS) is linked. CUDA: 1.
//                                  HIP: 0 — Debian 12 packages no hipBLAS or
//                                  rocBLAS, so the HIP build uses the plugin's
//                                  own tiled matmul kernel.
//   STRATA_GPU_HAS_NCCL            the strata.collectives extension on NCCL,
//                                  dlopen()ed at run time (collectives.cpp).
//                                  CUDA: 1. HIP: 0 — Debian 12 packages no
//                                  RCCL, so the HIP plugin has no collectives.
//
// Differences the mapping cannot hide (shared sources must respect them)
//   - warpSize is 64 on the CDNA targets (gfx90a by default, gfx94x), 32 on
//     NVIDIA. Use warpSize, never a literal 32; size per-warp shared arrays for
//     the smallest warp (32), i.e. blockDim.x / 32 entries.
//   - The *_sync shuffles below ignore their mask: HIP 5.2 has only the
//     unmasked __shfl, __shfl_up, __shfl_down, __shfl_xor, which act on the
//     whole wavefront. Call them with every lane of the warp active, as a
//     full-warp reduction does. __syncwarp, __ballot_sync, __activemask and
//     the cooperative-groups API are not mapped.
//   - __launch_bounds__(threads, n): on HIP the second argument is the
//     minimum number of *waves per execution unit*, not blocks per SM. Use
//     the one-argument form in shared sources.
//   - Host code (.cpp) is compiled by g++, device code (.cu) by clang. The
//     two see different definitions of __half (HIP's gcc fallback, a struct
//     of unsigned short, versus clang's struct of _Float16), which the x86-64
//     ABI passes in different registers: never pass __half by value between
//     a .cpp and a .cu file; use uint16_t bits in shared interfaces.
//   - Every hip* function is [[nodiscard]] (hipError_t is declared so under
//     C++17 and later); CUDA's are not. Check or (void)-cast every result, or
//     the HIP build warns (an error under STRATA_WERROR).
//   - hipcc (clang 15) segfaults on <nlohmann/json.hpp> in HIP mode with
//     -std=c++20: include it only from .cpp files, never from a .cu.
//   - cudaDeviceProp is hipDeviceProp_t: name, totalGlobalMem,
//     multiProcessorCount, major, minor, pciBusID, pciDomainID,
//     pciDeviceID, sharedMemPerBlock, maxThreadsPerBlock exist in both;
//     major/minor are an approximation on AMD (9.0 for gfx90a) — report
//     gcnArchName instead where STRATA_GPU_HAS_GCN_ARCH_NAME.
#pragma once

#if !defined(STRATA_GPU_HIP)
#error "hip_compat.hpp is for the HIP build only (compile with -DSTRATA_GPU_HIP=1); include gpu_runtime.hpp"
#endif

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <bit>
#include <new>

#if !defined(__HIP_PLATFORM_AMD__)
#error "the HIP plugin targets AMD GPUs; on NVIDIA build the CUDA plugin instead"
#endif

// ---- Feature macros (see the top of this file) ------------------------------

#ifndef STRATA_GPU_HAS_MEMPOOLS
#if HIP_VERSION >= 50100000  // hipMallocAsync & co. are exported since HIP 5.1 (beta)
#define STRATA_GPU_HAS_MEMPOOLS 1
#else
#define STRATA_GPU_HAS_MEMPOOLS 0
#endif
#endif
#ifndef STRATA_GPU_HAS_PROP_UUID
#define STRATA_GPU_HAS_PROP_UUID 0
#endif
#ifndef STRATA_GPU_HAS_GCN_ARCH_NAME
#define STRATA_GPU_HAS_GCN_ARCH_NAME 1
#endif
#ifndef STRATA_GPU_HAS_BLAS
#define STRATA_GPU_HAS_BLAS 0
#endif
#ifndef STRATA_GPU_HAS_NCCL
#define STRATA_GPU_HAS_NCCL 0
#endif

// ---- Types ------------------------------------------------------------------
// Aliases rather than macros, so that diagnostics name both spellings.

using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
using cudaEvent_t = hipEvent_t;
using cudaDeviceProp = hipDeviceProp_t;
using cudaDeviceAttr = hipDeviceAttribute_t;
using cudaMemcpyKind = hipMemcpyKind;
using cudaHostFn_t = hipHostFn_t;
using cudaFuncAttribute = hipFuncAttribute;
#if STRATA_GPU_HAS_MEMPOOLS
using cudaMemPool_t = hipMemPool_t;
using cudaMemPoolAttr = hipMemPoolAttr;
#endif

// ---- Enumerators and flag values --------------------------------------------

#define cudaSuccess hipSuccess
#define cudaErrorNotReady hipErrorNotReady
#define cudaErrorIllegalAddress hipErrorIllegalAddress
#define cudaErrorLaunchFailure hipErrorLaunchFailure
#define cudaErrorAssert hipErrorAssert
#define cudaErrorMemoryAllocation hipErrorOutOfMemory  // hipErrorMemoryAllocation is its deprecated alias
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorInvalidValue hipErrorInvalidValue

#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrMemoryPoolsSupported hipDeviceAttributeMemoryPoolsSupported
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor

#define cudaMemcpyHostToHost hipMemcpyHostToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDefault hipMemcpyDefault

// cudaHostAlloc's flags are hipHostMalloc's (hipHostAlloc is deprecated in HIP).
#define cudaHostAllocDefault hipHostMallocDefault
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable

#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaEventDefault hipEventDefault
#define cudaEventDisableTiming hipEventDisableTiming

#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize

#if STRATA_GPU_HAS_MEMPOOLS
#define cudaMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#endif

// ---- Functions --------------------------------------------------------------
// Macros, so that HIP's overload sets (e.g. the templated hipMalloc) carry
// over unchanged. Argument orders and meanings are CUDA's in every case below.

// Errors
#define cudaGetErrorString hipGetErrorString
#define cudaGetErrorName hipGetErrorName
#define cudaGetLastError hipGetLastError
#define cudaPeekAtLastError hipPeekAtLastError

// Devices
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDriverGetVersion hipDriverGetVersion  // HIP's numbering, not CUDA's
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaMemGetInfo hipMemGetInfo

// Device and host memory
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc  // same (ptr, size, flags) signature
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaFreeHost hipHostFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync

#if STRATA_GPU_HAS_MEMPOOLS
#define cudaMallocAsync hipMallocAsync
#define cudaFreeAsync hipFreeAsync
#define cudaDeviceGetDefaultMemPool hipDeviceGetDefaultMemPool
#define cudaMemPoolTrimTo hipMemPoolTrimTo
#define cudaMemPoolSetAttribute hipMemPoolSetAttribute
#define cudaMemPoolGetAttribute hipMemPoolGetAttribute
#endif

// Streams and events
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamQuery hipStreamQuery
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventQuery hipEventQuery
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventDestroy hipEventDestroy

// cudaLaunchHostFunc. HIP 5.2's header declares hipLaunchHostFunc, but
// Debian's libamdhip64 5.2.3 does not export it (the link fails), so it is
// built on hipStreamAddCallback, exported by every HIP 5: the callback
// receives (fn, data) in a heap record, frees it and calls fn(data) in stream
// order, blocking later work in the stream until it returns, as in CUDA. As
// with cudaLaunchHostFunc, fn is not called when the stream has failed.
namespace strata_hip_compat {
struct HostFnCall {
  hipHostFn_t fn;
  void* data;
};
inline void run_host_fn(hipStream_t /*stream*/, hipError_t status, void* record) {
  const HostFnCall call = *static_cast<HostFnCall*>(record);
  delete static_cast<HostFnCall*>(record);
  if (status == hipSuccess) call.fn(call.data);
}
}  // namespace strata_hip_compat

inline hipError_t cudaLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void* data) {
  auto* record = new (std::nothrow) strata_hip_compat::HostFnCall{fn, data};
  if (record == nullptr) return hipErrorOutOfMemory;
  const hipError_t e = hipStreamAddCallback(stream, strata_hip_compat::run_host_fn, record, 0);
  if (e != hipSuccess) delete record;
  return e;
}

// CUDA's runtime API offers cudaFuncSetAttribute(kernel, ...) for any kernel
// pointer through a template; HIP 5.2 declares only the const void* form.
template <class Kernel>
inline hipError_t cudaFuncSetAttribute(Kernel* kernel, hipFuncAttribute attr, int value) {
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// ---- Device intrinsics ------------------------------------------------------
// HIP before 7.0 has no *_sync warp shuffles unless HIP_ENABLE_WARP_SYNC_BUILTINS
// is defined. Ours drop the mask and call the unmasked shuffle on the whole
// wavefront: see "Differences" at the top. The width defaults to warpSize as
// in CUDA. Only hipcc (clang in HIP mode, __HIPCC__) sees device code; the
// plugin's .cpp files are host code compiled by the project's g++.
#if defined(__HIPCC__) && HIP_VERSION < 70000000 && !defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
template <class T>
__device__ inline T __shfl_sync(unsigned long long /*mask*/, T var, int src_lane, int width = warpSize) {
  return __shfl(var, src_lane, width);
}
template <class T>
__device__ inline T __shfl_up_sync(unsigned long long /*mask*/, T var, unsigned int delta, int width = warpSize) {
  return __shfl_up(var, delta, width);
}
template <class T>
__device__ inline T __shfl_down_sync(unsigned long long /*mask*/, T var, unsigned int delta, int width = warpSize) {
  return __shfl_down(var, delta, width);
}
template <class T>
__device__ inline T __shfl_xor_sync(unsigned long long /*mask*/, T var, int lane_mask, int width = warpSize) {
  return __shfl_xor(var, lane_mask, width);
}
#endif

// CUDA declares __half_as_ushort and __ushort_as_half __host__ __device__;
// HIP 5.2 declares them __device__ only under hipcc, and not at all for g++
// (host code). These are their host versions, a plain bit copy as in CUDA:
// under hipcc an overload on the __host__ target (clang resolves overloads by
// target), under g++ (where __host__ expands to nothing) plain functions.
__host__ inline unsigned short __half_as_ushort(__half x) { return std::bit_cast<unsigned short>(x); }
__host__ inline __half __ushort_as_half(unsigned short x) { return std::bit_cast<__half>(x); }

// __half, __half2float, __float2half_rn (both __host__ __device__ in HIP too),
// atomicAdd (float and double), blockIdx/threadIdx/blockDim/gridDim, dim3,
// __syncthreads, __shared__, __global__, __device__, __host__, warpSize and the
// <<<grid, block, shmem, stream>>> launch syntax have the same names in HIP:
// nothing to map.
