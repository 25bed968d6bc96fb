// half.hpp — IEEE binary16 and bfloat16 conversions, header-only.
//
// Storage types for f16/bf16 as 16-bit patterns, with conversions to and from
// f32 that round to nearest-even and keep NaN/Inf. Used by the core and by
// plugins that compute 16-bit types through f32.
#pragma once

#include <bit>
#include <cstdint>

namespace strata {

/// bfloat16 bits <-> float.
constexpr float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

constexpr uint16_t float_to_bf16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

/// IEEE binary16 bits <-> float.
constexpr float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    mantissa &= 0x3ffu;
    return std::bit_cast<float>(sign | (static_cast<uint32_t>(112 - e) << 23) | (mantissa << 13));
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

constexpr uint16_t float_to_f16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // rounds to zero
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace strata
