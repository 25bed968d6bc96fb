// abi_attrs.cpp — attr_from_abi (plugin_host_internal.hpp): an attribute a
// plugin wrote (call_op's arguments, a strata.test_cases case) read into the
// core's Attr, every field checked before it is used.
#include "runtime/plugins/plugin_host_internal.hpp"

#include <strata/error.hpp>

#include <string>

namespace strata::detail {

Attr attr_from_abi(const strata_attr* a, const std::string& where) {
  if (a == nullptr) throw ValueError(where + ": null attribute");
  if (a->struct_size < STRATA_ATTR_MIN_SIZE) {
    throw ValueError(where + ": attribute struct_size " + std::to_string(a->struct_size) + " below the minimum " +
                     std::to_string(STRATA_ATTR_MIN_SIZE));
  }
  if (a->name == nullptr) throw ValueError(where + ": attribute without a name");
  const int32_t kind = abi_enum(a->kind);
  if (kind < STRATA_ATTR_INT || kind > STRATA_ATTR_SCALAR) {
    throw ValueError(where + ": attribute '" + a->name + "' has unknown kind " + std::to_string(kind));
  }
  Attr out{intern_name(a->name), static_cast<strata_attr_kind>(kind)};
  out.i = a->i;
  out.f = a->f;
  if (kind == STRATA_ATTR_SCALAR) {
    const int32_t scalar = abi_enum(a->scalar_dtype);
    if (scalar != STRATA_I64 && scalar != STRATA_F64 && scalar != STRATA_BOOL) {
      throw ValueError(where + ": SCALAR attribute '" + a->name + "' has scalar_dtype " + std::to_string(scalar) +
                       " (I64, F64 or BOOL)");
    }
    out.scalar_dtype = static_cast<strata_dtype>(scalar);
  }
  auto need_array = [&](const void* p) {
    if (a->count < 0 || (a->count > 0 && p == nullptr)) {
      throw ValueError(where + ": attribute '" + a->name + "' has " + std::to_string(a->count) + " values but no array");
    }
  };
  switch (out.kind) {
    case STRATA_ATTR_INT:
    case STRATA_ATTR_FLOAT:
    case STRATA_ATTR_BOOL:
    case STRATA_ATTR_DTYPE:
    case STRATA_ATTR_SCALAR: break;
    case STRATA_ATTR_INTS:
      need_array(a->ints);
      if (a->count > 0) out.ints.assign(a->ints, a->ints + a->count);
      break;
    case STRATA_ATTR_FLOATS:
      need_array(a->floats);
      if (a->count > 0) out.floats.assign(a->floats, a->floats + a->count);
      break;
    case STRATA_ATTR_STRING:
      if (a->string == nullptr) throw ValueError(where + ": STRING attribute '" + a->name + "' without a string");
      out.text = a->string;
      break;
    default: break;  // checked above
  }
  return out;
}

}  // namespace strata::detail
