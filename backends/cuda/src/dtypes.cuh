// dtypes.cuh — storage types of the seven dtypes and the compute types
// kernels work in, for device and host code.
//
// Kernels are templates over *storage* types. `Scalar<T>` gives the compute
// type (f16/bf16 compute in f32, as PyTorch's kernels do; bool in bool), the
// dtype and its signature name, and `load`/`store` between storage and
// compute. `convert<To>(From)` is the `cast` op's value conversion:
// float -> integer truncates toward zero, -> bool is `!= 0`, bool -> number
// is 0/1, to f16/bf16 rounds to nearest even (through f32).
#pragma once

#include <strata/plugin/kernel.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <cstdint>
#include <type_traits>

#include "gpu_runtime.hpp"  // first: under hipcc it defines __forceinline__ & co.
#include "kernel_math.hpp"
#include "numeric.hpp"

namespace strata::gpu {

/// bool storage: one byte holding 0 or 1.
struct bool8 {
  uint8_t v;
};

}  // namespace strata::gpu

/// The dtypes of the storage types above, for kernel signatures
/// (strata/plugin/kernel.hpp; float, double, int32_t, int64_t are the SDK's).
STRATA_PLUGIN_DTYPE(strata::gpu::half_t, STRATA_F16);
STRATA_PLUGIN_DTYPE(strata::gpu::bfloat16_t, STRATA_BF16);
STRATA_PLUGIN_DTYPE(strata::gpu::bool8, STRATA_BOOL);

namespace strata::gpu {

template <class T>
struct Scalar;

template <class T, class C>
struct PlainScalar {
  using compute = C;
  static constexpr strata_dtype dtype = plugin::dtype_v<T>;
  STRATA_HD static C load(T v) { return static_cast<C>(v); }
  STRATA_HD static T store(C v) { return static_cast<T>(v); }
};

template <>
struct Scalar<float> : PlainScalar<float, float> {};
template <>
struct Scalar<double> : PlainScalar<double, double> {};
template <>
struct Scalar<int32_t> : PlainScalar<int32_t, int32_t> {};
template <>
struct Scalar<int64_t> : PlainScalar<int64_t, int64_t> {};

/// f16 and bf16: compute in f32 (to_acc / from_float, numeric.hpp).
template <class H>
struct HalfScalar {
  using compute = float;
  static constexpr strata_dtype dtype = plugin::dtype_v<H>;
  STRATA_HD static float load(H v) { return to_acc(v); }
  STRATA_HD static H store(float v) { return from_float<H>(v); }
};

template <>
struct Scalar<half_t> : HalfScalar<half_t> {};
template <>
struct Scalar<bfloat16_t> : HalfScalar<bfloat16_t> {};

template <>
struct Scalar<bool8> {
  using compute = bool;
  static constexpr strata_dtype dtype = STRATA_BOOL;
  STRATA_HD static bool load(bool8 v) { return v.v != 0; }
  STRATA_HD static bool8 store(bool v) { return bool8{static_cast<uint8_t>(v ? 1 : 0)}; }
};

template <class T>
using compute_t = typename Scalar<T>::compute;

template <class T>
inline constexpr bool is_float_storage = std::is_floating_point_v<compute_t<T>>;

/// `cast`'s conversion of one value.
template <class To, class From>
STRATA_HD To convert(From x) {
  using CF = compute_t<From>;
  using CT = compute_t<To>;
  const CF v = Scalar<From>::load(x);
  if constexpr (std::is_same_v<CT, bool>) {
    return Scalar<To>::store(v != CF(0));
  } else if constexpr (std::is_same_v<CF, bool>) {
    return Scalar<To>::store(v ? CT(1) : CT(0));
  } else {
    return Scalar<To>::store(static_cast<CT>(v));
  }
}

/// The signature name of a storage type ("f32").
template <class T>
const char* dtype_name() {
  return plugin::dtype_name(Scalar<T>::dtype);
}

}  // namespace strata::gpu
