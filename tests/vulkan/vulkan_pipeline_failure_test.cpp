// vulkan_pipeline_failure_test.cpp — a compute pipeline that fails to build,
// seen through strata's C++ API. The plugin's test hook option
// "test_fail_pipeline" makes the pipeline of one (shader variant, kernel)
// fail as if vkCreateComputePipelines had refused it; the op must throw a
// DeviceError that names op, dtype, shape and device, every time, without
// running on the CPU behind the user's back, and vulkan:0 must go on working.
// Its own program, because a process loads each plugin once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../common/required_devices.hpp"

namespace {

namespace fs = std::filesystem;
using strata::Device;
using strata::Tensor;

class VulkanPipelineFailure : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path config = fs::temp_directory_path() / ("strata-vk-pipeline-" + std::to_string(::getpid()) + ".json");
    // Fallback "cpu": a device failure must still be an error, not a fallback.
    std::ofstream(config) << R"({"version": 1, "plugins": {"paths": [")" << STRATA_PLUGIN_DIR << R"("]},
      "prefer": ["vulkan"],
      "devices": {"vulkan": {"options": {"pipeline_cache": false, "test_fail_pipeline": "unary_f32_f32/exp"}}},
      "fallback": {"policy": "cpu"},
      "logging": {"level": "error"}})";
    strata::runtime().load_config(config.string());
    fs::remove(config);
  }
  void SetUp() override {
    STRATA_ACQUIRE_DEVICE("vulkan:0", vk_);  // a failure where STRATA_REQUIRED_DEVICES lists it
  }
  Device vk_;
  Device cpu_{"cpu:0"};
};

TEST_F(VulkanPipelineFailure, IsADeviceErrorNamingTheCallAndTheDeviceCarriesOn) {
  const std::vector<float> values{-1.5f, -0.25f, 0.0f, 0.5f, 1.0f, 2.0f};
  Tensor x = strata::from_data(std::span<const float>(values), {2, 3}, {.device = cpu_}).to(vk_);
  strata::runtime().reset_fallback_stats();
  for (int attempt = 0; attempt < 2; ++attempt) {  // every call fails the same way
    try {
      Tensor y = strata::exp(x);
      FAIL() << "exp ran although its pipeline cannot be built";
    } catch (const strata::DeviceError& e) {
      const std::string m = e.what();
      for (const char* part : {"exp", "f32", "[2, 3]", "vulkan:0", "unary_f32_f32", "VK_ERROR_INITIALIZATION_FAILED"})
        EXPECT_NE(m.find(part), std::string::npos) << "\"" << part << "\" missing from: " << m;
    }
  }
  EXPECT_EQ(strata::runtime().fallback_count(), 0u);

  // The same shader variant for another op, other shaders, reductions and
  // gradients all still run on vulkan:0, and x is intact.
  EXPECT_EQ(x.to(cpu_).to_vector<float>(), values);
  Tensor w = x.clone();
  strata::GradientTape tape;
  tape.watch(w);
  EXPECT_THROW(strata::exp(w), strata::DeviceError);  // leaves the tape usable
  Tensor loss = strata::sum(strata::neg(w) * w);
  std::vector<Tensor> g = tape.gradient(loss, {w});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].device(), vk_);
  std::vector<float> grad = g[0].to(cpu_).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) EXPECT_FLOAT_EQ(grad[i], -2.0f * values[i]) << i;
  EXPECT_EQ(strata::runtime().fallback_count(), 0u);
}

}  // namespace
