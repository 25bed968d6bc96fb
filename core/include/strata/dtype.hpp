// dtype.hpp — element types and type promotion.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

/// Element types. Values match strata_dtype in the plugin ABI, so the enum is
/// sparse: 7 to 10 are reserved there (i8, u8, fp8) and not defined here.
/// Iterate over kAllDTypes, never over a numeric range.
enum class DType : uint8_t {
  f32 = 0,
  f64 = 1,
  f16 = 2,
  bf16 = 3,
  i32 = 4,
  i64 = 5,
  boolean = 6,
  c64 = 11,   ///< complex of two f32 (real, imaginary), std::complex<float>'s layout
  c128 = 12,  ///< complex of two f64, std::complex<double>'s layout
};

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType boolean = DType::boolean;
inline constexpr DType c64 = DType::c64;
inline constexpr DType c128 = DType::c128;

/// Every dtype, in value order.
inline constexpr std::array<DType, 9> kAllDTypes{DType::f32,  DType::f64, DType::f16,     DType::bf16, DType::i32,
                                                 DType::i64,  DType::boolean, DType::c64, DType::c128};

/// One past the largest dtype value: the size of a table indexed by value.
inline constexpr int kDTypeLimit = 13;

/// Whether `value` is the value of a dtype (raw values arrive from plugins,
/// traced graphs and attributes; 7 to 10 are reserved, not dtypes).
constexpr bool is_dtype_value(int64_t value) {
  for (DType t : kAllDTypes) {
    if (static_cast<int64_t>(t) == value) return true;
  }
  return false;
}

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::c128: return 16;
    case DType::f64:
    case DType::i64:
    case DType::c64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

/// Real floating point: f32, f64, f16, bf16 (complex dtypes are not).
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return t == DType::i32 || t == DType::i64; }
constexpr bool is_complex(DType t) { return t == DType::c64 || t == DType::c128; }
/// The dtypes that carry gradients: floating and complex.
constexpr bool is_differentiable(DType t) { return is_floating(t) || is_complex(t); }

/// The real dtype of a complex one's parts (c64 -> f32, c128 -> f64); real
/// dtypes map to themselves.
constexpr DType to_real(DType t) {
  return t == DType::c64 ? DType::f32 : t == DType::c128 ? DType::f64 : t;
}
/// The complex dtype of matching precision: f64 and c128 -> c128, every other
/// dtype -> c64 (there is no complex f16).
constexpr DType to_complex(DType t) {
  return t == DType::f64 || t == DType::c128 ? DType::c128 : DType::c64;
}

/// "f32", "bool", "c64", ...
std::string_view dtype_name(DType t);
/// Parses a name produced by dtype_name (also "float32", "float", "int64",
/// "complex64", "cfloat", "complex128", "cdouble"...). Throws DTypeError for
/// an unknown name.
DType dtype_from_name(std::string_view name);

/// NumPy/PyTorch promotion of two tensor dtypes: bool < integers < floats <
/// complex; f16 with bf16 gives f32; a complex with a real dtype gives the
/// complex of their promoted precision (c64 with f64 gives c128).
DType promote_types(DType a, DType b);

}  // namespace strata
