// An op library: "opslibonly" (tests/plugins/opslib built with
// OPSLIB_NO_DEVICE) defines opslibonly::cube and its backward op and
// registers their kernels on the CPU plugin's devices, but serves no device
// itself. The runtime keeps it (a plugin with neither devices nor ops is
// refused), and the ops run and differentiate on cpu:0 with fallback policy
// "error", so any missing kernel would fail.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <algorithm>

namespace {

using namespace strata;

class OpLibrary : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime().load_config(STRATA_PLUGIN_OPLIB_CONFIG); }
};

TEST_F(OpLibrary, IsLoadedWithItsOpsAndNoDevice) {
  bool found = false;
  for (const PluginInfo& p : runtime().plugins()) {
    if (p.name != "opslibonly") continue;
    found = true;
    EXPECT_TRUE(p.loaded) << p.reason;
    EXPECT_TRUE(p.devices.empty());
    EXPECT_NE(std::find(p.ops.begin(), p.ops.end(), "opslibonly::cube"), p.ops.end());
  }
  EXPECT_TRUE(found);
}

TEST_F(OpLibrary, ItsOpRunsAndDifferentiatesOnTheCpu) {
  Tensor x = from_data(std::vector<double>{0.5, -1.0, 2.0}, {3}, {.dtype = DType::f64});
  x.set_requires_grad();
  Tensor y = call_op("opslibonly::cube", {x}, {{"a", 0.75}})[0];  // 0.75 x^3
  const std::vector<double> v = y.to_vector<double>();
  EXPECT_DOUBLE_EQ(v[0], 0.75 * 0.125);
  EXPECT_DOUBLE_EQ(v[2], 0.75 * 8.0);
  sum(y).backward();
  Tensor g = x.grad();  // 2.25 x^2
  const std::vector<double> gv = g.to_vector<double>();
  EXPECT_DOUBLE_EQ(gv[1], 2.25);
  EXPECT_DOUBLE_EQ(gv[2], 9.0);
  EXPECT_EQ(runtime().fallback_stats().size(), 0u);
}

}  // namespace
