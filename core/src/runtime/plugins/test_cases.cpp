// test_cases.cpp — read_test_cases (test_cases.hpp): a plugin's
// strata.test_cases extension read into host values, every field checked
// the way the host checks any struct that crosses the ABI (struct_size,
// counts, NULL arrays, dtypes, ranks, integral values), so that a malformed
// case becomes an error naming the case and the field, never a read out of
// bounds. fuzz_test_cases drives it with structs built from fuzz bytes.
#include "runtime/plugins/test_cases.hpp"

#include "runtime/plugins/plugin_host_internal.hpp"

#include <strata/error.hpp>

#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace strata::detail {

namespace {

/// Bounds on what a case may ask the checker to hold: far above any test's
/// needs, far below what would exhaust the host.
constexpr int32_t kMaxTensors = 64;
constexpr int32_t kMaxAttrs = 64;
constexpr int64_t kMaxElements = int64_t{1} << 24;
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

/// A malformed field: thrown with its path, caught per case.
struct Malformed {
  std::string what;
};

bool stored_dtype(int32_t t) {
  switch (t) {
    case STRATA_F32:
    case STRATA_F64:
    case STRATA_F16:
    case STRATA_BF16:
    case STRATA_I32:
    case STRATA_I64:
    case STRATA_BOOL: return true;
    default: return false;
  }
}

/// Checks one value of an integer or bool tensor: integral, in range.
void check_exact(double v, strata_dtype t, size_t index, const std::string& where) {
  const char* problem = nullptr;
  if (!std::isfinite(v) || v != std::trunc(v)) {
    problem = "is not an integer";
  } else if (t == STRATA_BOOL && v != 0.0 && v != 1.0) {
    problem = "is neither 0 nor 1";
  } else if (t == STRATA_I32 && (v < -2147483648.0 || v > 2147483647.0)) {
    problem = "is outside i32";
  } else if (t == STRATA_I64 && std::fabs(v) > kMaxExactInteger) {
    problem = "is beyond 2^53, which a double cannot hold exactly";
  }
  if (problem != nullptr) {
    throw Malformed{where + ".values[" + std::to_string(index) + "] = " + std::to_string(v) + " " + problem +
                    " (dtype " + std::string(dtype_name(static_cast<DType>(t))) + ")"};
  }
}

PluginTestTensor read_tensor(const strata_test_tensor* tp, const std::string& where) {
  if (tp == nullptr) throw Malformed{where + ": NULL"};
  const strata_test_tensor& t = *tp;
  if (t.struct_size < STRATA_TEST_TENSOR_MIN_SIZE) {
    throw Malformed{where + ": struct_size " + std::to_string(t.struct_size) + " below the minimum " +
                    std::to_string(STRATA_TEST_TENSOR_MIN_SIZE)};
  }
  const int32_t dtype = abi_enum(t.dtype);
  if (!stored_dtype(dtype)) {
    throw Malformed{where + ": dtype " + std::to_string(dtype) +
                    " is not one a test case may use (f32, f64, f16, bf16, i32, i64, bool; complex is not in "
                    "strata.test_cases v1)"};
  }
  if (t.ndim < 0 || t.ndim > STRATA_MAX_RANK) {
    throw Malformed{where + ": ndim " + std::to_string(t.ndim) + " is outside 0.." + std::to_string(STRATA_MAX_RANK)};
  }
  if (t.ndim > 0 && t.shape == nullptr) throw Malformed{where + ": ndim " + std::to_string(t.ndim) + " but no shape"};
  PluginTestTensor out;
  out.dtype = static_cast<DType>(dtype);
  int64_t numel = 1;
  for (int32_t d = 0; d < t.ndim; ++d) {
    const int64_t size = t.shape[d];
    if (size < 0) throw Malformed{where + ".shape[" + std::to_string(d) + "] = " + std::to_string(size) + " is negative"};
    if (size > 0 && numel > kMaxElements / size) {
      throw Malformed{where + ": more than " + std::to_string(kMaxElements) + " elements"};
    }
    numel *= size;
    out.shape.push_back(size);
  }
  if (numel > 0 && t.values == nullptr) {
    throw Malformed{where + ": " + std::to_string(numel) + " elements but no values"};
  }
  out.values.assign(t.values, t.values + numel);
  if (dtype != STRATA_F32 && dtype != STRATA_F64 && dtype != STRATA_F16 && dtype != STRATA_BF16) {
    for (size_t i = 0; i < out.values.size(); ++i) check_exact(out.values[i], static_cast<strata_dtype>(dtype), i, where);
  }
  return out;
}

std::vector<PluginTestTensor> read_tensors(const strata_test_tensor* const* array, int32_t n, const std::string& field) {
  if (n < 0 || n > kMaxTensors) {
    throw Malformed{"n_" + field + " " + std::to_string(n) + " is outside 0.." + std::to_string(kMaxTensors)};
  }
  if (n > 0 && array == nullptr) throw Malformed{"n_" + field + " " + std::to_string(n) + " but no " + field};
  std::vector<PluginTestTensor> out;
  for (int32_t k = 0; k < n; ++k) out.push_back(read_tensor(array[k], field + "[" + std::to_string(k) + "]"));
  return out;
}

/// A plugin's strata_attr, or why it is malformed.
Attr abi_attr(const strata_attr* a, const std::string& where) {
  try {
    return attr_from_abi(a, where);
  } catch (const ValueError& e) {
    throw Malformed{e.what()};
  }
}

/// An ABI attribute as the public OpAttr call_op takes.
OpAttr read_attr(const strata_attr* a, const std::string& where) {
  const Attr attr = abi_attr(a, where);
  OpAttr out{attr.name, int64_t{0}};
  switch (attr.kind) {
    case STRATA_ATTR_INT: out.value = attr.i; break;
    case STRATA_ATTR_BOOL: out.value = attr.i != 0; break;
    case STRATA_ATTR_FLOAT: out.value = attr.f; break;
    case STRATA_ATTR_INTS: out.value = attr.ints; break;
    case STRATA_ATTR_FLOATS: out.value = attr.floats; break;
    case STRATA_ATTR_STRING: out.value = attr.text; break;
    case STRATA_ATTR_DTYPE:
      if (attr.i < 0 || attr.i >= STRATA_DTYPE_COUNT) {
        throw Malformed{where + ": DTYPE attribute '" + out.name + "' holds " + std::to_string(attr.i) +
                        ", not a strata_dtype"};
      }
      out.value = static_cast<DType>(attr.i);
      break;
    case STRATA_ATTR_SCALAR:  // attr_from_abi checked scalar_dtype: I64, F64 or BOOL
      if (attr.scalar_dtype == STRATA_F64) {
        out.value = OpAttr::Scalar{attr.f};
      } else {
        out.value = OpAttr::Scalar{attr.i};
      }
      break;
    default: break;  // attr_from_abi refused the other kinds
  }
  return out;
}

PluginTestCase read_case(const strata_test_case* cp, std::set<std::string>& names) {
  if (cp == nullptr) throw Malformed{"NULL"};
  const strata_test_case& c = *cp;
  PluginTestCase out;
  if (c.struct_size < STRATA_TEST_CASE_MIN_SIZE) {
    throw Malformed{"struct_size " + std::to_string(c.struct_size) + " below the minimum " +
                    std::to_string(STRATA_TEST_CASE_MIN_SIZE)};
  }
  if (c.name == nullptr || *c.name == '\0') throw Malformed{"no name"};
  out.name = c.name;
  if (!names.insert(out.name).second) throw Malformed{"a second case of this name"};
  if (c.op == nullptr || *c.op == '\0') throw Malformed{"no op"};
  out.op = c.op;
  out.inputs = read_tensors(c.inputs, c.n_inputs, "inputs");
  out.expected = read_tensors(c.expected, c.n_expected, "expected");
  if (c.n_attrs < 0 || c.n_attrs > kMaxAttrs) {
    throw Malformed{"n_attrs " + std::to_string(c.n_attrs) + " is outside 0.." + std::to_string(kMaxAttrs)};
  }
  if (c.n_attrs > 0 && c.attrs == nullptr) throw Malformed{"n_attrs " + std::to_string(c.n_attrs) + " but no attrs"};
  for (int32_t a = 0; a < c.n_attrs; ++a) out.attrs.push_back(read_attr(c.attrs[a], "attrs[" + std::to_string(a) + "]"));
  for (const auto& [value, field] : {std::pair{c.rtol, "rtol"}, std::pair{c.atol, "atol"}}) {
    if (!std::isfinite(value) || value < 0.0) {
      throw Malformed{std::string(field) + " " + std::to_string(value) + " is not a finite number >= 0"};
    }
  }
  out.rtol = c.rtol;
  out.atol = c.atol;
  out.derivatives = (c.flags & STRATA_TEST_CASE_DERIVATIVES) != 0;  // other bits: ignored, as the header says
  return out;
}

}  // namespace

std::vector<PluginTestCase> read_test_cases(const strata_extension* any, const std::string& plugin) {
  if (any == nullptr) return {};
  const std::string prefix = std::string(STRATA_EXT_TEST_CASES) + " of " + plugin + ": ";
  std::vector<PluginTestCase> out;
  auto whole = [&](std::string why) {
    PluginTestCase bad;
    bad.name = "the extension";
    bad.error = prefix + why;
    out.push_back(std::move(bad));
    return out;
  };
  constexpr size_t kMinSize = STRATA_SIZE_UP_TO(strata_ext_test_cases, n_cases);
  if (any->struct_size < kMinSize) {
    return whole("struct_size " + std::to_string(any->struct_size) + " below the minimum " + std::to_string(kMinSize));
  }
  const auto& ext = *reinterpret_cast<const strata_ext_test_cases*>(any);
  if (ext.n_cases < 0) return whole("n_cases " + std::to_string(ext.n_cases) + " is negative");
  if (ext.n_cases > 0 && ext.cases == nullptr) return whole("n_cases " + std::to_string(ext.n_cases) + " but no cases");
  std::set<std::string> names;
  for (int32_t k = 0; k < ext.n_cases; ++k) {
    try {
      out.push_back(read_case(ext.cases[k], names));
    } catch (const Malformed& m) {
      PluginTestCase bad;
      const strata_test_case* c = ext.cases[k];
      const bool sized = c != nullptr && c->struct_size >= STRATA_TEST_CASE_MIN_SIZE;
      bad.name = sized && c->name != nullptr && *c->name != '\0' ? c->name : "case " + std::to_string(k);
      bad.op = sized && c->op != nullptr ? c->op : "";
      bad.error = prefix + "case " + std::to_string(k) + " (\"" + bad.name + "\"): " + m.what;
      out.push_back(std::move(bad));
    }
  }
  return out;
}

}  // namespace strata::detail
