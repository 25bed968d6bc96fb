// op_call.cpp — one call of an op as it flows through dispatch: its output
// metadata, its attributes read by kind (the errors name the call and the
// attribute), its description in messages, and the one-device rule.
#include "runtime/dispatch/op.hpp"

#include "runtime/dispatch/abi_attrs.hpp"
#include "runtime/tensor/host_data.hpp"

#include <strata/error.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace strata::detail {

namespace {
[[noreturn, gnu::cold]] void throw_rank_too_high(std::span<const int64_t> s) {
  throw ShapeError("result of rank " + std::to_string(s.size()) + " exceeds the maximum rank " +
                   std::to_string(STRATA_MAX_RANK) + " (shape " + shape_string(s) + ")");
}
}  // namespace

void OutputMeta::set_shape(std::span<const int64_t> s) {
  if (s.size() > STRATA_MAX_RANK) [[unlikely]] throw_rank_too_high(s);  // callers check first, to name the op
  rank = static_cast<int32_t>(s.size());
  std::copy(s.begin(), s.end(), shape.begin());
}

namespace {
const Attr* find_attr(const Attrs* attrs, std::string_view name) {
  if (attrs == nullptr) return nullptr;
  for (const Attr& a : *attrs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

/// The attribute `name`, which must hold an integer (INT, BOOL, DTYPE or an
/// integral SCALAR) or, with `list`, INTS. Ops called by name (call_op) get
/// attributes from strangers, so the kind is checked.
const Attr& require_attr(const Attrs* attrs, std::string_view name, std::string_view op, bool list) {
  const Attr* a = find_attr(attrs, name);
  if (a == nullptr) throw Error(std::string(op) + ": missing attribute '" + std::string(name) + "'");
  const bool ok = list ? a->kind == STRATA_ATTR_INTS
                       : a->kind == STRATA_ATTR_INT || a->kind == STRATA_ATTR_BOOL || a->kind == STRATA_ATTR_DTYPE ||
                             (a->kind == STRATA_ATTR_SCALAR && a->scalar_dtype != STRATA_F64);
  if (!ok) {
    throw ValueError(std::string(op) + ": attribute '" + std::string(name) + "' must be " +
                     (list ? "INTS" : "an integer (INT)") + ", got " + plugin::attr_kind_name(a->kind));
  }
  return *a;
}
}  // namespace

const Attr* OpCall::attr(std::string_view name) const { return find_attr(attrs, name); }

std::string declared_list(std::span<const AttrDecl> decls) {
  if (decls.empty()) return "none";
  std::string out;
  for (const AttrDecl& d : decls) {
    if (!out.empty()) out += ", ";
    out += std::string(d.name) + " " + plugin::attr_kind_name(d.kind) + (d.required ? "" : " (optional)");
  }
  return out;
}

void check_declared_attrs(const OpCall& call) {
  const std::span<const AttrDecl> decls = call.op->attrs;
  // Cheap on the dispatch path: names compare by pointer first (the core's
  // calls pass the literals their op declares), then by strcmp; which
  // declarations were met is a bit mask, so required ones need no search.
  uint64_t met = 0;
  if (call.attrs != nullptr) {
    for (const Attr& a : *call.attrs) {
      size_t k = 0;
      while (k < decls.size() && decls[k].name != a.name && std::strcmp(decls[k].name, a.name) != 0) ++k;
      if (k == decls.size()) [[unlikely]] {
        throw ValueError(call.describe() + ": attribute '" + std::string(a.name) +
                         "' is not one the op takes (it takes: " + declared_list(decls) + ")");
      }
      if (a.kind != decls[k].kind) [[unlikely]] {
        throw ValueError(call.describe() + ": attribute '" + std::string(a.name) + "' must be " +
                         plugin::attr_kind_name(decls[k].kind) + " (its declared kind), got " +
                         plugin::attr_kind_name(a.kind));
      }
      if (k < 64) met |= uint64_t{1} << k;
    }
  }
  for (size_t k = 0; k < decls.size() && k < 64; ++k) {
    if (decls[k].required && (met & (uint64_t{1} << k)) == 0) [[unlikely]] {
      throw ValueError(call.describe() + ": missing attribute '" + std::string(decls[k].name) + "' (" +
                       plugin::attr_kind_name(decls[k].kind) + ")");
    }
  }
}

int64_t GradContext::attr_int(std::string_view name) const {
  return require_attr(attrs, name, "derivative rule", false).i;
}

const std::vector<int64_t>& GradContext::attr_ints(std::string_view name) const {
  return require_attr(attrs, name, "derivative rule", true).ints;
}

int64_t OpCall::attr_int(std::string_view name) const { return require_attr(attrs, name, describe(), false).i; }

const std::vector<int64_t>& OpCall::attr_ints(std::string_view name) const {
  return require_attr(attrs, name, describe(), true).ints;
}

int64_t OpCall::attr_dim(std::string_view name, int64_t rank) const {
  int64_t d = attr_int(name);
  if (d < 0 || d >= std::max<int64_t>(rank, 1)) {
    throw IndexError(describe() + ": attribute '" + std::string(name) + "' = " + std::to_string(d) +
                     " is not a dimension of a rank-" + std::to_string(rank) + " input (0 to " +
                     std::to_string(std::max<int64_t>(rank, 1) - 1) + ")");
  }
  return d;
}

const std::vector<int64_t>& OpCall::attr_dims(std::string_view name, int64_t rank) const {
  const std::vector<int64_t>& dims = attr_ints(name);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0 || dims[k] >= rank || (k > 0 && dims[k] <= dims[k - 1])) {
      throw IndexError(describe() + ": attribute '" + std::string(name) + "' = " + shape_string(dims) +
                       " is not a strictly increasing list of dimensions of a rank-" + std::to_string(rank) +
                       " input");
    }
  }
  return dims;
}

DType OpCall::attr_dtype(std::string_view name) const {
  int64_t v = attr_int(name);
  if (!is_dtype_value(v)) {
    throw ValueError(describe() + ": attribute '" + std::string(name) + "' = " + std::to_string(v) +
                     " is not a dtype of the op set");
  }
  return static_cast<DType>(v);
}

std::string OpCall::describe() const {
  std::string s(op != nullptr ? op->name : "?");
  s += "(";
  for (int k = 0; k < n_inputs; ++k) {
    if (k > 0) s += ", ";
    s += type_string(in(k));
  }
  s += ")";
  if (device.valid()) s += " on " + device.str();
  return s;
}

void check_same_device(const OpCall& call) {
  for (int k = 1; k < call.n_inputs; ++k) {
    const Tensor& t = call.in(k);
    if (t.defined() && t.impl()->device != call.in(0).impl()->device) {
      throw DeviceError(call.describe() + ": expected all tensors on one device, found " + call.in(0).device().str() +
                        " (input 0) and " + t.device().str() + " (input " + std::to_string(k) +
                        "); move one explicitly with to()");
    }
  }
}

}  // namespace strata::detail
