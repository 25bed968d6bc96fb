#include <strata/dtype.hpp>
#include <strata/error.hpp>

#include <array>
#include <string>

namespace strata {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
    case DType::c64: return "c64";
    case DType::c128: return "c128";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr std::array<Alias, 23> kAliases{{
      {"f32", DType::f32},       {"float32", DType::f32},     {"float", DType::f32},      {"f64", DType::f64},
      {"float64", DType::f64},   {"double", DType::f64},      {"f16", DType::f16},        {"float16", DType::f16},
      {"half", DType::f16},      {"bf16", DType::bf16},       {"bfloat16", DType::bf16},  {"i32", DType::i32},
      {"int32", DType::i32},     {"i64", DType::i64},         {"int64", DType::i64},      {"bool", DType::boolean},
      {"boolean", DType::boolean}, {"c64", DType::c64},       {"complex64", DType::c64},  {"cfloat", DType::c64},
      {"c128", DType::c128},     {"complex128", DType::c128}, {"cdouble", DType::c128},
  }};
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.dtype;
  }
  throw DTypeError("unknown dtype \"" + std::string(name) +
                   "\" (expected one of: f32, f64, f16, bf16, i32, i64, bool, c64, c128)");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_complex(a) || is_complex(b)) return to_complex(promote_types(to_real(a), to_real(b)));
  auto category = [](DType t) { return is_floating(t) ? 2 : is_integral(t) ? 1 : 0; };
  int ca = category(a);
  int cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

}  // namespace strata
