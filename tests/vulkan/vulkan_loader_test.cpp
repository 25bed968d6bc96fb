// vulkan_loader_test.cpp — a configuration whose "loader" option names a file
// that does not exist: the Vulkan plugin is refused with the loader's own
// reason, the CPU plugin still loads and becomes the default device. Its own
// program, because a process loads each plugin once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <strata/strata.hpp>
#include <string>

namespace {

TEST(VulkanLoader, MissingLoaderRefusesThePluginWithTheReason) {
  namespace fs = std::filesystem;
  const fs::path config = fs::temp_directory_path() / ("strata-vk-loader-" + std::to_string(::getpid()) + ".json");
  const std::string loader = "/nonexistent/strata-test/libvulkan.so.1";
  std::ofstream(config) << R"({"version": 1, "plugins": {"paths": [")" << STRATA_PLUGIN_DIR << R"("]},
    "prefer": ["vulkan", "cpu"],
    "devices": {"vulkan": {"options": {"loader": ")"
                        << loader << R"("}}},
    "logging": {"level": "off"}})";
  strata::runtime().load_config(config.string());
  fs::remove(config);

  bool saw_vulkan = false;
  bool saw_cpu = false;
  for (const strata::PluginInfo& p : strata::runtime().plugins()) {
    if (p.name == "vulkan") {
      saw_vulkan = true;
      EXPECT_FALSE(p.loaded);
      EXPECT_NE(p.reason.find("no usable device"), std::string::npos) << p.reason;
      EXPECT_NE(p.reason.find(loader), std::string::npos) << p.reason;
      // dlopen's own text for a missing file.
      EXPECT_NE(p.reason.find("No such file or directory"), std::string::npos) << p.reason;
    }
    if (p.name == "cpu") {
      saw_cpu = true;
      EXPECT_TRUE(p.loaded) << p.reason;
    }
  }
  EXPECT_TRUE(saw_vulkan);
  EXPECT_TRUE(saw_cpu);
  EXPECT_THROW(strata::Device("vulkan:0"), strata::DeviceError);
  // The runtime carries on with the CPU.
  EXPECT_EQ(strata::runtime().default_device().str(), "cpu:0");
  EXPECT_FLOAT_EQ(strata::sum(strata::full({4}, 2.0)).item<float>(), 8.0f);
}

}  // namespace
