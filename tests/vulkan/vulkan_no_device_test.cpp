// vulkan_no_device_test.cpp — a Vulkan loader that finds no driver (the
// driver search pointed at a manifest that does not exist): the Vulkan
// plugin is refused with the reason, the CPU plugin loads and becomes the
// default device. Its own program, because the loader reads its environment
// once per process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <strata/strata.hpp>
#include <string>

namespace {

TEST(VulkanNoDevice, ALoaderWithoutDriversRefusesThePluginWithTheReason) {
  namespace fs = std::filesystem;
  // Both spellings: VK_DRIVER_FILES (loader 1.3.207+) and VK_ICD_FILENAMES.
  ::setenv("VK_DRIVER_FILES", "/nonexistent/strata-test/icd.json", 1);
  ::setenv("VK_ICD_FILENAMES", "/nonexistent/strata-test/icd.json", 1);
  const fs::path config = fs::temp_directory_path() / ("strata-vk-nodev-" + std::to_string(::getpid()) + ".json");
  std::ofstream(config) << R"({"version": 1, "plugins": {"paths": [")" << STRATA_PLUGIN_DIR << R"("]},
    "prefer": ["vulkan", "cpu"], "logging": {"level": "off"}})";
  strata::runtime().load_config(config.string());
  fs::remove(config);

  bool saw_vulkan = false;
  for (const strata::PluginInfo& p : strata::runtime().plugins()) {
    if (p.name == "vulkan") {
      saw_vulkan = true;
      EXPECT_FALSE(p.loaded);
      EXPECT_NE(p.reason.find("no usable device"), std::string::npos) << p.reason;
      // The loader fails vkCreateInstance without a driver; the plugin says what that means.
      EXPECT_NE(p.reason.find("no Vulkan driver is installed"), std::string::npos) << p.reason;
    }
    if (p.name == "cpu") {
      EXPECT_TRUE(p.loaded) << p.reason;
    }
  }
  EXPECT_TRUE(saw_vulkan);
  EXPECT_THROW(strata::Device("vulkan:0"), strata::DeviceError);
  EXPECT_EQ(strata::runtime().default_device().str(), "cpu:0");
  EXPECT_FLOAT_EQ(strata::sum(strata::full({4}, 2.0)).item<float>(), 8.0f);
}

}  // namespace
