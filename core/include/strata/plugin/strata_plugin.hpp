// strata_plugin.hpp — thin, header-only C++20 helpers for plugin authors.
//
// Nothing here is required: a plugin written in C (or Rust) uses the C header
// alone. These helpers only make the C ABI pleasant from C++: error messages,
// attribute lookup, dtype names and sizes, and shape/stride arithmetic.
// Depends on the C++ standard library only.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace strata::plugin {

/// printf-style message into a strata_error; returns `status` for chaining:
///   return fail(err, STRATA_ERROR_INVALID_ARGUMENT, "dim %d out of range", d);
[[gnu::format(printf, 3, 4)]] inline strata_status fail(strata_error* error, strata_status status,
                                                        const char* format, ...) {
  if (error != nullptr) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error->message, sizeof(error->message), format, args);
    va_end(args);
  }
  return status;
}

/// Short lower-case name, as used in kernel signatures ("f32", "bool").
inline const char* dtype_name(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_F32: return "f32";
    case STRATA_F64: return "f64";
    case STRATA_F16: return "f16";
    case STRATA_BF16: return "bf16";
    case STRATA_I32: return "i32";
    case STRATA_I64: return "i64";
    case STRATA_BOOL: return "bool";
    default: return "?";
  }
}

/// Bytes per element.
inline size_t dtype_size(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_F64:
    case STRATA_I64: return 8;
    case STRATA_F32:
    case STRATA_I32: return 4;
    case STRATA_F16:
    case STRATA_BF16: return 2;
    case STRATA_BOOL: return 1;
    default: return 0;
  }
}

/// Looks up an attribute by name; nullptr when absent.
inline const strata_attr* find_attr(const strata_attrs* attrs, std::string_view name) {
  if (attrs == nullptr) return nullptr;
  for (int32_t k = 0; k < attrs->count; ++k) {
    if (attrs->items[k].name != nullptr && name == attrs->items[k].name) return &attrs->items[k];
  }
  return nullptr;
}

inline int64_t attr_int(const strata_attrs* attrs, std::string_view name, int64_t fallback) {
  const strata_attr* a = find_attr(attrs, name);
  return a != nullptr ? a->i : fallback;
}

inline double attr_float(const strata_attrs* attrs, std::string_view name, double fallback) {
  const strata_attr* a = find_attr(attrs, name);
  if (a == nullptr) return fallback;
  return a->kind == STRATA_ATTR_FLOAT ? a->f : static_cast<double>(a->i);
}

/// Number of elements of a descriptor (1 for rank 0).
inline int64_t numel(const strata_tensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

/// True when the descriptor is compact row-major (size-1 dims ignored).
inline bool is_contiguous(const strata_tensor& t) {
  int64_t expected = 1;
  for (int32_t d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

/// Fills a strata_kernel_entry; for building static kernel tables.
constexpr strata_kernel_entry kernel(const char* op, const char* signature, strata_kernel_fn fn,
                                     uint32_t flags = 0) {
  return strata_kernel_entry{sizeof(strata_kernel_entry), op, signature, flags, fn};
}

}  // namespace strata::plugin
