// safetensors_format.hpp — what writing (safetensors_write.cpp) and reading
// (safetensors.cpp) a safetensors file share: the dtype codes, the header
// limit, the checksum's text form.
#pragma once

#include <strata/dtype.hpp>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

// The data buffer and the header length are little-endian on disk; tensors
// are copied byte for byte, which is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "strata's file format code assumes a little-endian host");

namespace strata::safetensors {

/// Headers larger than this are refused (safetensors' own limit), so a
/// foreign file's first 8 bytes cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

struct DTypeCode {
  DType dtype;
  const char* code;
};
// C64 is safetensors' (real, imaginary) pair of F32. The format has no
// complex of F64: Strata writes c128 as "C128", the same pair of F64, which
// Strata reads back and other readers refuse by name (docs/complex.md).
constexpr DTypeCode kCodes[] = {{DType::f32, "F32"},   {DType::f64, "F64"},       {DType::f16, "F16"},
                                {DType::bf16, "BF16"}, {DType::i32, "I32"},       {DType::i64, "I64"},
                                {DType::boolean, "BOOL"}, {DType::c64, "C64"},    {DType::c128, "C128"}};

inline const char* dtype_code(DType t) {
  for (const auto& c : kCodes) {
    if (c.dtype == t) return c.code;
  }
  return "?";
}

inline std::string errno_text(int err) { return std::strerror(err); }

/// The CRC-32 as 8 lower-case hex digits, as the header records it.
inline std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

}  // namespace strata::safetensors
