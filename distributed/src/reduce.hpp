// reduce.hpp — elementwise reductions for Gloo's reduce-function hook and for
// the local step of reduce_scatter, per dtype. bf16 and f16 are 16-bit
// patterns: each step converts to f32, reduces, and rounds back to nearest
// even.
#pragma once

#include <strata/distributed.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace strata::distributed::detail {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 0x1p-24f;  // zero or subnormal
    return sign ? -v : v;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline uint16_t float_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  int exp = static_cast<int>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (e <= 0) {                                                  // subnormal or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // a carry rounds up the exponent, as it should
  return static_cast<uint16_t>(half);
}

/// out[i] = a[i] (op) b[i]; out may alias a or b. The signature of Gloo's
/// AllreduceOptions::Func.
using ReduceFn = std::function<void(void*, const void*, const void*, size_t)>;

template <typename T>
ReduceFn typed_reduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return [](void* o, const void* a, const void* b, size_t n) {
        auto* out = static_cast<T*>(o);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = std::max(x[i], y[i]);
      };
    case ReduceOp::min:
      return [](void* o, const void* a, const void* b, size_t n) {
        auto* out = static_cast<T*>(o);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = std::min(x[i], y[i]);
      };
    case ReduceOp::sum:
    case ReduceOp::mean:  // a sum; the division follows
      break;
  }
  return [](void* o, const void* a, const void* b, size_t n) {
    auto* out = static_cast<T*>(o);
    auto* x = static_cast<const T*>(a);
    auto* y = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(x[i] + y[i]);
  };
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
ReduceFn half_reduce(ReduceOp op) {
  return [op](void* o, const void* a, const void* b, size_t n) {
    auto* out = static_cast<uint16_t*>(o);
    auto* x = static_cast<const uint16_t*>(a);
    auto* y = static_cast<const uint16_t*>(b);
    for (size_t i = 0; i < n; ++i) {
      float u = ToFloat(x[i]), v = ToFloat(y[i]);
      float r = op == ReduceOp::max ? std::max(u, v) : op == ReduceOp::min ? std::min(u, v) : u + v;
      out[i] = FromFloat(r);
    }
  };
}

/// The reduction for `dtype` (f32, f64, bf16, f16, i32, i64).
inline ReduceFn reduce_function(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: return typed_reduce<float>(op);
    case DType::f64: return typed_reduce<double>(op);
    case DType::i32: return typed_reduce<int32_t>(op);
    case DType::i64: return typed_reduce<int64_t>(op);
    case DType::bf16: return half_reduce<bf16_to_float, float_to_bf16>(op);
    case DType::f16: return half_reduce<f16_to_float, float_to_f16>(op);
    case DType::boolean:
    case DType::c64:  // refused before (process_group.cpp)
    case DType::c128: break;
  }
  return nullptr;
}

/// Divides `n` elements of a floating dtype at `data` by `divisor` in place.
inline void divide_in_place(DType dtype, void* data, size_t n, double divisor) {
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(data);
      auto d = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] /= d;
      break;
    }
    case DType::f64: {
      auto* p = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) p[i] /= divisor;
      break;
    }
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(data);
      auto d = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / d);
      break;
    }
    case DType::f16: {
      auto* p = static_cast<uint16_t*>(data);
      auto d = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] = float_to_f16(f16_to_float(p[i]) / d);
      break;
    }
    default: break;
  }
}

}  // namespace strata::distributed::detail
