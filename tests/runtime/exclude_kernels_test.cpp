// exclude_kernels_test.cpp — devices.<id>.exclude_kernels on the "mini" test
// accelerator (fill, copy and add f32): an excluded kernel is gone from the
// device (strata devices, DeviceInfo), its calls fall back as a missing
// kernel's do (counted; refused under "error"), the kernels not named keep
// running, and an entry that names no kernel is a warning of the plugin.
// DeviceInfo lists an excluded kernel marked `excluded`. An excluded kernel
// of the CPU plugin itself, the fallback target, makes its calls fail.
// Its own executable: the list is read when the device opens, which happens
// once a process.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace {

using namespace strata;

class ExcludeKernels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime().load_config(STRATA_EXCLUDE_CONFIG); }
  void SetUp() override { runtime().reset_fallback_stats(); }

  static const PluginInfo& mini_plugin() {
    static const PluginInfo info = [] {
      for (const PluginInfo& p : runtime().plugins()) {
        if (p.name == "mini") return p;
      }
      throw Error("the mini test plugin did not load");
    }();
    return info;
  }
};

TEST_F(ExcludeKernels, TheKernelIsGoneFromTheDevice) {
  const PluginInfo& p = mini_plugin();
  ASSERT_EQ(p.devices.size(), 1u);
  std::vector<std::string> kernels;  // the ones that run; the excluded one is listed, marked
  for (const KernelInfo& k : p.devices[0].kernels) kernels.push_back(k.op + " " + k.signature + (k.excluded ? " x" : ""));
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "strata::add f32,f32->f32 x"), 1);
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "strata::fill ->f32"), 1);
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "strata::copy f32->f32"), 1);
  EXPECT_EQ(p.devices[0].kernel_count, 2);  // the kernels that run
  const auto& missing = p.devices[0].missing_primitives;
  EXPECT_NE(std::find(missing.begin(), missing.end(), "add"), missing.end()) << "add has no kernel that runs";
}

TEST_F(ExcludeKernels, ItsCallsFallBackAndAreCounted) {
  const Device mini("mini:0");
  Tensor c = full({3}, 2.0, {.device = mini}) + full({3}, 5.0, {.device = mini});
  EXPECT_EQ(c.device(), mini);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{7, 7, 7}));
  bool add = false;
  for (const FallbackRecord& r : runtime().fallback_stats()) add = add || (r.device == "mini:0" && r.op == "add");
  EXPECT_TRUE(add) << "the excluded add kernel ran";
}

TEST_F(ExcludeKernels, KernelsNotNamedKeepRunning) {
  // copy falls under the "error" policy here: it must run on mini's kernel.
  Tensor a = full({2, 3}, 1.5, {.device = Device("mini:0")});
  Tensor b = a.transpose(0, 1).contiguous();
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(6, 1.5f));
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

// The CPU plugin's own kernels can be set aside too; a call of one has
// nowhere to fall back to (cpu:0 is the fallback) and is a DeviceError
// naming the op and the device, while its other signatures keep running.
TEST_F(ExcludeKernels, AnExcludedCpuKernelIsRefusedNotLooped) {
  const Tensor a = full({3}, 2.0), b = full({3}, 5.0);
  try {
    (void)maximum(a, b);
    FAIL() << "maximum f32 ran although its only kernel is excluded";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("maximum(f32[3], f32[3]) on cpu:0: no kernel for signature f32,f32->f32 (set aside by "
                        "devices.cpu:0.exclude_kernels), and the CPU plugin has no kernel either to fall back to"),
              std::string::npos)
        << what;
  }
  const Tensor a64 = full({3}, 2.0, {.dtype = DType::f64}), b64 = full({3}, 5.0, {.dtype = DType::f64});
  EXPECT_EQ(maximum(a64, b64).to_vector<double>(), (std::vector<double>{5, 5, 5}));
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{7, 7, 7}));
}

TEST_F(ExcludeKernels, AnEntryThatNamesNoKernelIsAWarning) {
  const std::vector<std::string>& w = mini_plugin().warnings;
  const auto named = [&](const std::string& text) {
    return std::any_of(w.begin(), w.end(), [&](const std::string& s) { return s.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(named(R"(mini:0: exclude_kernels: "strata::mul" names no kernel of the device)"));
  EXPECT_FALSE(named(R"("strata::add f32,f32->f32" names no kernel)"));
}

}  // namespace
