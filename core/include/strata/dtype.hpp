// dtype.hpp — element types and type promotion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

/// Element types. Values match strata_dtype in the plugin ABI.
enum class DType : uint8_t { f32 = 0, f64 = 1, f16 = 2, bf16 = 3, i32 = 4, i64 = 5, boolean = 6 };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType boolean = DType::boolean;

inline constexpr int kDTypeCount = 7;

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return t == DType::i32 || t == DType::i64; }

/// "f32", "bool", ...
std::string_view dtype_name(DType t);
/// Parses a name produced by dtype_name (also "float32", "float", "int64"...).
/// Throws DTypeError for an unknown name.
DType dtype_from_name(std::string_view name);

/// NumPy/PyTorch promotion of two tensor dtypes: bool < integers < floats;
/// f16 with bf16 gives f32.
DType promote_types(DType a, DType b);

}  // namespace strata
