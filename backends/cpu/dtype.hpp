// dtype.hpp — storage types of the seven Strata dtypes and their compute types.
//
// Kernels are templates over *storage* types (what lies in memory). Each
// storage type has a `Scalar<T>` trait giving the *compute* type arithmetic
// runs in (f16/bf16 compute through f32, bool through `bool`) with `load` and
// `store` converting between the two.
#pragma once

#include <strata/plugin/half.hpp>
#include <strata/plugin/kernel.hpp>
#include <strata/plugin/strata_plugin.h>
#include <strata/plugin/strata_plugin.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace strata::cpu {

/// 16-bit float storage: distinct types so that templates tell them apart.
struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};
/// bool storage: one byte holding 0 or 1 (read as `!= 0`, never as C++ bool).
using bool8 = uint8_t;

}  // namespace strata::cpu

/// The dtypes of the storage types above, for kernel signatures
/// (strata/plugin/kernel.hpp; float, double, int32_t, int64_t are the SDK's).
STRATA_PLUGIN_DTYPE(strata::cpu::f16, STRATA_F16);
STRATA_PLUGIN_DTYPE(strata::cpu::bf16, STRATA_BF16);
STRATA_PLUGIN_DTYPE(strata::cpu::bool8, STRATA_BOOL);

namespace strata::cpu {

template <class T>
struct Scalar;

/// A dtype stored as itself: computes in C, named by plugin::dtype_name.
template <class T, class C>
struct PlainScalar {
  using compute = C;
  static constexpr strata_dtype dtype = plugin::dtype_v<T>;
  static const char* name() { return plugin::dtype_name(dtype); }
  static C load(T v) { return static_cast<C>(v); }
  static T store(C v) { return static_cast<T>(v); }
};

/// A 16-bit float stored as bits (H::bits), computed in f32.
template <class H, float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct HalfScalar {
  using compute = float;
  static constexpr strata_dtype dtype = plugin::dtype_v<H>;
  static const char* name() { return plugin::dtype_name(dtype); }
  static float load(H v) { return ToFloat(v.bits); }
  static H store(float v) { return H{FromFloat(v)}; }
};

template <>
struct Scalar<float> : PlainScalar<float, float> {};
template <>
struct Scalar<double> : PlainScalar<double, double> {};
template <>
struct Scalar<int32_t> : PlainScalar<int32_t, int32_t> {};
template <>
struct Scalar<int64_t> : PlainScalar<int64_t, int64_t> {};
template <>
struct Scalar<f16> : HalfScalar<f16, f16_to_float, float_to_f16> {};
template <>
struct Scalar<bf16> : HalfScalar<bf16, bf16_to_float, float_to_bf16> {};

template <>
struct Scalar<bool8> {
  using compute = bool;
  static constexpr strata_dtype dtype = STRATA_BOOL;
  static const char* name() { return plugin::dtype_name(dtype); }
  static bool load(bool8 v) { return v != 0; }
  static bool8 store(bool v) { return static_cast<bool8>(v); }
};

template <class T>
using compute_t = typename Scalar<T>::compute;

/// Value conversion between compute types with the `cast` op's rules:
/// anything -> bool is `!= 0`; float -> int truncates toward zero, saturates
/// at the integer range and maps NaN to 0 (C++ leaves those cases undefined).
template <class To, class From>
constexpr To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Both bounds are powers of two, hence exact in From.
    constexpr From hi = -static_cast<From>(std::numeric_limits<To>::min());
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    if (!(v == v)) return 0;
    if (v >= hi) return std::numeric_limits<To>::max();
    if (v <= lo) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

/// Loads a storage value straight into another compute type.
template <class To, class T>
inline To load_as(T v) {
  return convert<To>(Scalar<T>::load(v));
}

/// Stores a value of any compute type into storage type T.
template <class T, class From>
inline T store_from(From v) {
  return Scalar<T>::store(convert<compute_t<T>>(v));
}

/// Wrapping integer arithmetic (signed overflow is undefined in C++; tensors
/// wrap like every other framework's do).
template <class C>
constexpr C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class C>
constexpr C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <class C>
constexpr C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

/// NaN test that is a no-op for integer types.
template <class C>
constexpr bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

/// Type lists for registering one kernel template over several dtypes
/// (plugin::TypeList, plugin::for_each_type).
using plugin::for_each_type;
using plugin::TypeList;

using FloatTypes = TypeList<float, double, f16, bf16>;
using IntTypes = TypeList<int32_t, int64_t>;
using NumericTypes = TypeList<float, double, f16, bf16, int32_t, int64_t>;
using AllTypes = TypeList<float, double, f16, bf16, int32_t, int64_t, bool8>;

}  // namespace strata::cpu
