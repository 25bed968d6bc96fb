// fuzz_test_cases.cpp — a plugin's strata.test_cases extension (ABI 2.4) as
// the host reads it before `strata plugin check` runs a case
// (read_test_cases, core/src/runtime/plugins/test_cases.cpp), on structs
// built from fuzz bytes: any struct_size, count, NULL array or element,
// dtype, rank, shape, value, attribute kind and tolerance. Every array is
// exactly as long as the count the fake plugin gives with it, so a read past
// a declared count is an AddressSanitizer report — the host's bug. (A plugin
// that gives fewer values than its shape declares breaks the ABI's promise;
// no host could see that, so the harness never does it.)
//
// A malformed case is the expected outcome (its `error` says why); a crash,
// a sanitizer report, an exception, or a well-formed case whose values do
// not match its shape is a bug.
#include "runtime/plugins/test_cases.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <limits>
#include <string>
#include <vector>

namespace {

/// Everything one input's structs point at; deques keep addresses stable.
struct Storage {
  std::deque<std::string> strings;
  std::deque<std::vector<int64_t>> shapes;
  std::deque<std::vector<double>> values;
  std::deque<strata_test_tensor> tensors;
  std::deque<std::vector<const strata_test_tensor*>> tensor_arrays;
  std::deque<std::vector<int64_t>> ints;
  std::deque<std::vector<double>> floats;
  std::deque<strata_attr> attrs;
  std::deque<std::vector<const strata_attr*>> attr_arrays;
  std::deque<strata_test_case> cases;
};

/// A struct size: mostly the whole struct, sometimes its minimum or less.
size_t struct_size(FuzzedDataProvider& in, size_t whole, size_t minimum) {
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: return minimum;
    case 1: return in.ConsumeIntegralInRange<size_t>(0, whole);
    default: return whole;
  }
}

const char* text(FuzzedDataProvider& in, Storage& s, const std::vector<const char*>& known) {
  const size_t k = in.ConsumeIntegralInRange<size_t>(0, known.size() + 1);
  if (k < known.size()) return known[k];
  if (k == known.size()) return nullptr;
  s.strings.push_back(in.ConsumeRandomLengthString(40));
  return s.strings.back().c_str();
}

double value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return in.ConsumeBool() ? HUGE_VAL : -HUGE_VAL;
    case 2: return static_cast<double>(in.ConsumeIntegralInRange<int64_t>(-3, 3));
    case 3: return std::ldexp(1.0, in.ConsumeIntegralInRange(30, 70));  // beyond i32, around 2^53
    default: return in.ConsumeFloatingPoint<double>();
  }
}

/// A tensor (or NULL) whose values array holds exactly the element count its
/// shape gives, when that count is small; else no array.
const strata_test_tensor* tensor(FuzzedDataProvider& in, Storage& s) {
  if (in.ConsumeIntegralInRange(0, 15) == 0) return nullptr;
  strata_test_tensor t{};
  t.struct_size = struct_size(in, sizeof(strata_test_tensor), STRATA_TEST_TENSOR_MIN_SIZE);
  t.dtype = static_cast<strata_dtype>(in.ConsumeIntegralInRange<int32_t>(-1, STRATA_DTYPE_COUNT + 1));
  t.ndim = in.ConsumeIntegralInRange<int32_t>(-1, STRATA_MAX_RANK + 1);
  std::vector<int64_t> shape;
  for (int32_t d = 0; d < std::max(t.ndim, 0); ++d) {
    shape.push_back(in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegral<int64_t>()
                                                         : in.ConsumeIntegralInRange<int64_t>(-1, 4));
  }
  s.shapes.push_back(std::move(shape));
  t.shape = t.ndim > 0 && in.ConsumeIntegralInRange(0, 15) != 0 ? s.shapes.back().data() : nullptr;
  // The element count the shape gives, when every size is in [0, 64]
  // (else -1: no values array, which the host must refuse or not read).
  int64_t numel = 1;
  for (int64_t size : s.shapes.back()) {
    if (numel < 0 || size < 0 || size > 64 || numel > 4096) {
      numel = -1;
    } else {
      numel *= size;
    }
  }
  std::vector<double> values;
  for (int64_t i = 0; i < std::min<int64_t>(numel, 4096); ++i) values.push_back(value(in));
  s.values.push_back(std::move(values));
  t.values = numel > 0 && numel <= 4096 && in.ConsumeIntegralInRange(0, 15) != 0 ? s.values.back().data() : nullptr;
  s.tensors.push_back(t);
  return &s.tensors.back();
}

/// An array of `n` tensors (n from the input, possibly negative), or NULL.
const strata_test_tensor* const* tensors(FuzzedDataProvider& in, Storage& s, int32_t& n) {
  n = in.ConsumeIntegralInRange<int32_t>(-1, 4);
  std::vector<const strata_test_tensor*> array;
  for (int32_t k = 0; k < std::max(n, 0); ++k) array.push_back(tensor(in, s));
  s.tensor_arrays.push_back(std::move(array));
  return in.ConsumeIntegralInRange(0, 15) == 0 ? nullptr : s.tensor_arrays.back().data();
}

const strata_attr* attr(FuzzedDataProvider& in, Storage& s) {
  if (in.ConsumeIntegralInRange(0, 15) == 0) return nullptr;
  strata_attr a{};
  a.struct_size = struct_size(in, sizeof(strata_attr), STRATA_ATTR_MIN_SIZE);
  a.name = text(in, s, {"a", "s", "dim", "value"});
  a.kind = static_cast<strata_attr_kind>(in.ConsumeIntegralInRange<int32_t>(-1, 9));
  a.scalar_dtype = static_cast<strata_dtype>(in.ConsumeIntegralInRange<int32_t>(-1, STRATA_DTYPE_COUNT + 1));
  a.i = in.ConsumeIntegral<int64_t>();
  a.f = value(in);
  a.count = in.ConsumeIntegralInRange<int64_t>(-1, 5);
  std::vector<int64_t> ints;
  std::vector<double> floats;
  for (int64_t k = 0; k < a.count; ++k) {
    ints.push_back(in.ConsumeIntegral<int64_t>());
    floats.push_back(value(in));
  }
  s.ints.push_back(std::move(ints));
  s.floats.push_back(std::move(floats));
  a.ints = in.ConsumeBool() ? s.ints.back().data() : nullptr;
  a.floats = in.ConsumeBool() ? s.floats.back().data() : nullptr;
  a.string = text(in, s, {"mode", ""});
  s.attrs.push_back(a);
  return &s.attrs.back();
}

const strata_test_case* test_case(FuzzedDataProvider& in, Storage& s) {
  if (in.ConsumeIntegralInRange(0, 15) == 0) return nullptr;
  strata_test_case c{};
  c.struct_size = struct_size(in, sizeof(strata_test_case), STRATA_TEST_CASE_MIN_SIZE);
  c.name = text(in, s, {"one", "two", ""});
  c.op = text(in, s, {"strata::add", "acme::softplus", ""});
  c.inputs = tensors(in, s, c.n_inputs);
  c.expected = tensors(in, s, c.n_expected);
  c.n_attrs = in.ConsumeIntegralInRange<int32_t>(-1, 3);
  std::vector<const strata_attr*> attrs;
  for (int32_t k = 0; k < std::max(c.n_attrs, 0); ++k) attrs.push_back(attr(in, s));
  s.attr_arrays.push_back(std::move(attrs));
  c.attrs = in.ConsumeIntegralInRange(0, 15) == 0 ? nullptr : s.attr_arrays.back().data();
  c.rtol = in.ConsumeBool() ? 0.0 : value(in);
  c.atol = in.ConsumeBool() ? 0.0 : value(in);
  c.flags = in.ConsumeIntegral<uint32_t>();
  s.cases.push_back(c);
  return &s.cases.back();
}

/// A well-formed case's tensors hold exactly their shape's element count.
void check_read(const strata::PluginTestTensor& t) {
  int64_t numel = 1;
  for (int64_t size : t.shape) numel *= size;
  if (static_cast<size_t>(numel) != t.values.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Storage s;
  strata_ext_test_cases ext{};
  ext.base.struct_size = struct_size(in, sizeof(strata_ext_test_cases), STRATA_EXTENSION_MIN_SIZE);
  ext.base.name = STRATA_EXT_TEST_CASES;
  ext.base.version = STRATA_EXT_TEST_CASES_VERSION;
  ext.n_cases = in.ConsumeIntegralInRange<int32_t>(-1, 6);
  std::vector<const strata_test_case*> cases;
  for (int32_t k = 0; k < std::max(ext.n_cases, 0); ++k) cases.push_back(test_case(in, s));
  ext.cases = in.ConsumeIntegralInRange(0, 15) == 0 ? nullptr : cases.data();
  const std::vector<strata::PluginTestCase> read = strata::detail::read_test_cases(&ext.base, "fuzz");
  for (const strata::PluginTestCase& c : read) {
    if (!c.error.empty()) continue;
    for (const strata::PluginTestTensor& t : c.inputs) check_read(t);
    for (const strata::PluginTestTensor& t : c.expected) check_read(t);
  }
  return 0;
}
