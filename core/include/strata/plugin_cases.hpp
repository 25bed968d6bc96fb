// plugin_cases.hpp — the test cases a plugin exports through its
// strata.test_cases extension (strata_plugin.h, section 9), as the host read
// and checked them: what `strata plugin check` runs after the cases it
// derives itself (docs/writing-a-backend.md, "Cases of your own").
#pragma once

#include <strata/dtype.hpp>
#include <strata/ops.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// A host tensor of a plugin's test case: row-major values, held as doubles
/// whatever the dtype (integers and bool exactly; f16 and bf16 are rounded
/// when the tensor is made).
struct PluginTestTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // empty: a scalar
  std::vector<double> values;  // the shape's element count
};

/// One case: the op `op` called (as call_op() calls it) on `inputs` with
/// `attrs`, whose outputs must match `expected` — or, when the plugin gave
/// none, the reference device's outputs.
struct PluginTestCase {
  std::string name;  // the plugin's name for it, or "case <k>" when it gave none
  std::string op;    // "acme::softplus", "strata::add"
  std::vector<PluginTestTensor> inputs;
  std::vector<OpAttr> attrs;
  std::vector<PluginTestTensor> expected;  // empty: compare with a reference device
  /// |got - want| <= atol + rtol * |want|; both 0: the checker's tolerance
  /// for the output dtype.
  double rtol = 0.0;
  double atol = 0.0;
  /// Also check the op's derivative rules at these inputs
  /// (STRATA_TEST_CASE_DERIVATIVES).
  bool derivatives = false;
  /// Why the case is malformed, naming the case and the field
  /// ("strata.test_cases of acme: case 2 (\"big\"): inputs[0]: ndim 9 is
  /// outside 0..8"); empty when it is well formed. A malformed case's other
  /// fields hold what could be read.
  std::string error;
};

/// The cases the loaded plugin `plugin` exports, in its order; empty when
/// its table has no strata.test_cases extension. A malformed extension
/// (a negative count, a NULL array) is one case whose `error` says so.
/// Throws ValueError when no loaded plugin is called `plugin`.
std::vector<PluginTestCase> plugin_test_cases(const std::string& plugin);

}  // namespace strata
