// Fallback policy, device mixing and memory limits, on the "mini" test
// accelerator (fill, copy and add only).
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include "mini_fixture.hpp"

namespace {

using namespace strata;

class Fallback : public strata_test::OnMini {};

TEST_F(Fallback, NativeKernelsDoNotFallBack) {
  Tensor a = full({3}, 2.0, {.device = mini});
  Tensor b = full({3}, 5.0, {.device = mini});
  Tensor c = a + b;
  EXPECT_EQ(c.device(), mini);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

TEST_F(Fallback, MissingKernelRunsOnCpuAndIsCounted) {
  Tensor a = full({2, 2}, 3.0, {.device = mini});
  Tensor b = full({2, 2}, 4.0, {.device = mini});
  Tensor c = a * b;
  EXPECT_EQ(c.device(), mini);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{12, 12, 12, 12}));
  c = a * b;
  auto stats = runtime().fallback_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].device, "mini:0");
  EXPECT_EQ(stats[0].op, "mul");
  EXPECT_EQ(stats[0].signature, "f32,f32->f32");
  EXPECT_EQ(stats[0].count, 2u);
}

TEST_F(Fallback, CompositesDecomposeIntoWhatTheDeviceHas) {
  Tensor x = full({2, 3}, 1.0, {.device = mini});
  Tensor y = softmax(x, 1);  // decomposes; the primitives it needs fall back
  EXPECT_EQ(y.device(), mini);
  for (float v : y.to_vector<float>()) EXPECT_NEAR(v, 1.0f / 3.0f, 1e-6f);
  bool softmax_itself = false;
  for (const auto& r : runtime().fallback_stats()) softmax_itself = softmax_itself || r.op == "softmax";
  EXPECT_FALSE(softmax_itself) << "a composite must decompose, not fall back whole";
}

TEST_F(Fallback, ErrorPolicyNamesOpSignatureAndDevice) {
  Tensor a = full({2}, 1.0, {.device = mini});
  try {
    Tensor c = pow(a, a);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("pow"), std::string::npos) << m;
    EXPECT_NE(m.find("f32,f32->f32"), std::string::npos) << m;
    EXPECT_NE(m.find("mini:0"), std::string::npos) << m;
    EXPECT_NE(m.find("fallback policy \"error\""), std::string::npos) << m;
  }
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

TEST_F(Fallback, MixingDevicesIsAnErrorNamingBoth) {
  Tensor a = full({2}, 1.0, {.device = mini});
  Tensor b = full({2}, 1.0, {.device = Device("cpu:0")});
  try {
    Tensor c = a + b;
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("mini:0"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu:0"), std::string::npos) << m;
    EXPECT_NE(m.find("to()"), std::string::npos) << m;
  }
  EXPECT_EQ((a + b.to(mini)).to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST_F(Fallback, CopiesRoundTripBetweenMemorySpaces) {
  Tensor x = arange(0.0, 12.0, 1.0, {.dtype = f32, .device = Device("cpu:0")}).reshape({3, 4});
  Tensor on_mini = x.to(mini);
  EXPECT_EQ(on_mini.device(), mini);
  EXPECT_EQ(on_mini.to(Device("cpu:0")).to_vector<float>(), x.to_vector<float>());
  // A non-contiguous view copies through the mini plugin's own copy kernel.
  Tensor t = on_mini.transpose(0, 1).contiguous();
  EXPECT_EQ(t.to_vector<float>(), x.transpose(0, 1).contiguous().to_vector<float>());
}

TEST_F(Fallback, MemoryLimitIsAClearErrorAndStateSurvives) {
  Tensor small = full({1024}, 1.0, {.device = mini});
  try {
    Tensor big = empty({1024, 1024}, {.device = mini});  // 4 MiB > 1 MiB limit
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("mini:0"), std::string::npos) << m;
    EXPECT_NE(m.find("memory_limit"), std::string::npos) << m;
  }
  EXPECT_EQ(sum(small.to(Device("cpu:0"))).item<float>(), 1024.0f);
  EXPECT_EQ(runtime().memory_stats(mini).limit_bytes, std::optional<uint64_t>(1u << 20));
}

}  // namespace
