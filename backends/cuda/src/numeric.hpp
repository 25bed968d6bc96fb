// numeric.hpp — storage types, accumulator types and conversions of the GPU
// kernels, as __host__ __device__ functions.
//
// Who uses it: the CUDA/HIP kernels (backends/cuda/src) and tests/gpu_math,
// which runs the host path on the CPU. It compiles with plain g++ (the host
// path), nvcc and hipcc.
//
//  - half_t / bfloat16_t: IEEE binary16 and bfloat16 stored as their 16-bit
//    patterns (the layout of the tensors the plugin receives). Kernels
//    compute them in float.
//  - acc_t<T>: the type a kernel accumulates T in: float for half_t,
//    bfloat16_t and float; double for double; int64_t for int32_t, int64_t
//    and bool (sums of integers and booleans are i64, docs/ops.md).
//  - to_acc(x): T -> acc_t<T>. from_float<T>(float), from_acc<T>(acc):
//    back to T. The 16-bit conversions round to nearest even and keep
//    NaN/Inf, bit for bit as strata/plugin/half.hpp (the core's reference):
//    the host path calls half.hpp; device code uses the f16 intrinsics of
//    <cuda_fp16.h> / <hip/hip_fp16.h> (which round the same way) and the
//    same bit code as half.hpp for bf16. A NaN converted to f16 or bf16 stays
//    a NaN (its payload may differ between the paths; f16 -> float keeps
//    the payload).
//  - from_acc<T> for a 16-bit T takes a float; integer T take int64_t and
//    truncate (bool: != 0).
#pragma once

#include <cstdint>
#include <type_traits>

#include <strata/plugin/half.hpp>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#elif defined(__HIPCC__)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>  // __float_as_uint / __uint_as_float (nvcc declares them implicitly)
#endif

#include "kernel_math.hpp"  // STRATA_HD

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define STRATA_GPU_DEVICE_PASS 1
#else
#define STRATA_GPU_DEVICE_PASS 0
#endif

namespace strata::gpu {

/// IEEE binary16, stored as its bits.
struct half_t {
  uint16_t bits;
};

/// bfloat16 (the top half of a binary32), stored as its bits.
struct bfloat16_t {
  uint16_t bits;
};

template <class T>
using acc_t = std::conditional_t<
    std::is_same_v<T, double>, double,
    std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>, float,
                       int64_t>>;

namespace detail {

/// half.hpp's float_to_bf16 on the float's bits: round to nearest even,
/// quiet NaN. The device path of from_float<bfloat16_t>; host-device so that
/// tests/gpu_math checks it on the CPU against half.hpp.
STRATA_HD uint16_t bf16_bits_from_float_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace detail

// ---------------------------------------------------------------------------
// To the accumulator

STRATA_HD float to_acc(half_t h) {
#if STRATA_GPU_DEVICE_PASS
  return __half2float(__ushort_as_half(h.bits));
#else
  return ::strata::f16_to_float(h.bits);
#endif
}

STRATA_HD float to_acc(bfloat16_t h) {
#if STRATA_GPU_DEVICE_PASS
  return __uint_as_float(static_cast<uint32_t>(h.bits) << 16);
#else
  return ::strata::bf16_to_float(h.bits);
#endif
}

/// Every other type: a plain conversion (float -> float, int32_t -> int64_t, ...).
template <class T>
STRATA_HD acc_t<T> to_acc(T x) {
  return static_cast<acc_t<T>>(x);
}

/// T -> float (for kernels that compute in float whatever the accumulator).
template <class T>
STRATA_HD float to_float(T x) {
  return static_cast<float>(to_acc(x));
}

// ---------------------------------------------------------------------------
// From float / from the accumulator

/// float -> T, rounding to nearest even for half_t / bfloat16_t.
template <class T>
STRATA_HD T from_float(float x) {
  return static_cast<T>(x);
}

template <>
STRATA_HD half_t from_float<half_t>(float x) {
#if STRATA_GPU_DEVICE_PASS
  return half_t{__half_as_ushort(__float2half_rn(x))};
#else
  return half_t{::strata::float_to_f16(x)};
#endif
}

template <>
STRATA_HD bfloat16_t from_float<bfloat16_t>(float x) {
#if STRATA_GPU_DEVICE_PASS
  return bfloat16_t{detail::bf16_bits_from_float_bits(__float_as_uint(x))};
#else
  return bfloat16_t{::strata::float_to_bf16(x)};
#endif
}

/// acc_t<T> -> T: the inverse direction of to_acc.
template <class T>
STRATA_HD T from_acc(acc_t<T> x) {
  return static_cast<T>(x);
}

template <>
STRATA_HD half_t from_acc<half_t>(float x) {
  return from_float<half_t>(x);
}

template <>
STRATA_HD bfloat16_t from_acc<bfloat16_t>(float x) {
  return from_float<bfloat16_t>(x);
}

/// Callable wrappers, for templates that take a conversion object
/// (kernel_math.hpp's mm_store).
template <class T>
struct FromAcc {
  STRATA_HD T operator()(acc_t<T> x) const { return from_acc<T>(x); }
};

}  // namespace strata::gpu
