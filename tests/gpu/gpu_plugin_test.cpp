// gpu_plugin_test.cpp — the CUDA and HIP plugins as this machine sees them,
// through the public API, with the default configuration (which prefers
// cuda, then hip). On a machine with the hardware, the plugin serves devices
// with real properties and the first GPU is the default device; without it
// (CI), the plugin is refused with the driver's own reason and everything
// else works. A plugin that was not built (no nvcc / no hipcc) is skipped,
// naming why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <strata/strata.hpp>
#include <string>

namespace {

const strata::PluginInfo* find_plugin(const std::string& name) {
  static bool configured = [] {
    namespace fs = std::filesystem;
    const fs::path config = fs::temp_directory_path() / ("strata-gpu-plugin-" + std::to_string(::getpid()) + ".json");
    std::ofstream(config) << R"({"version": 1, "plugins": {"paths": [")" << STRATA_PLUGIN_DIR << R"("]},
      "prefer": ["cuda", "hip", "vulkan", "cpu"], "logging": {"level": "off"}})";
    strata::runtime().load_config(config.string());
    fs::remove(config);
    return true;
  }();
  (void)configured;
  static std::vector<strata::PluginInfo> plugins = strata::runtime().plugins();
  for (const strata::PluginInfo& p : plugins) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void check_plugin(const std::string& name, bool built, const char* driver_call) {
  if (!built) GTEST_SKIP() << "the " << name << " plugin is not built here (its compiler was not found at configure time)";
  const strata::PluginInfo* p = find_plugin(name);
  ASSERT_NE(p, nullptr) << "the " << name << " plugin was built but not found in " << STRATA_PLUGIN_DIR;
  if (!p->loaded) {
    // No driver or no device: refused with the driver's own words.
    EXPECT_NE(p->reason.find("no usable device"), std::string::npos) << p->reason;
    EXPECT_NE(p->reason.find(std::string(name) + ": "), std::string::npos) << p->reason;
    const bool driver_said = p->reason.find(driver_call) != std::string::npos ||
                             p->reason.find("the driver reports 0 devices") != std::string::npos;
    EXPECT_TRUE(driver_said) << p->reason;
    try {
      strata::Device d(name + ":0");
      ADD_FAILURE() << name << ":0 opened although its plugin was refused";
    } catch (const strata::DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(name + ":0"), std::string::npos) << e.what();
    }
    // The rest of Strata works, on a device of another plugin.
    EXPECT_NE(strata::runtime().default_device().str().rfind(name, 0), 0u);
    EXPECT_FLOAT_EQ(strata::sum(strata::full({4}, 2.0)).item<float>(), 8.0f);
    return;
  }
  ASSERT_FALSE(p->devices.empty());
  for (const strata::DeviceInfo& d : p->devices) {
    EXPECT_FALSE(d.name.empty()) << d.id;
    EXPECT_GT(d.memory_bytes, 0u) << d.id;
    EXPECT_TRUE(d.has_streams) << d.id;
    EXPECT_FALSE(d.compute_capability.empty()) << d.id;
    EXPECT_FALSE(d.pci_bus_id.empty()) << d.id;
    EXPECT_TRUE(d.missing_primitives.empty()) << d.id << " lacks kernels for " << d.missing_primitives.size()
                                              << " primitives, the first " << d.missing_primitives.front();
  }
}

TEST(GpuPlugins, CudaServesItsDevicesOrIsRefusedWithTheDriversReason) {
#if defined(STRATA_TEST_BUILT_CUDA)
  check_plugin("cuda", true, "cudaGetDeviceCount");
#else
  check_plugin("cuda", false, "");
#endif
}

TEST(GpuPlugins, HipServesItsDevicesOrIsRefusedWithTheDriversReason) {
#if defined(STRATA_TEST_BUILT_HIP)
  check_plugin("hip", true, "hipGetDeviceCount");
#else
  check_plugin("hip", false, "");
#endif
}

TEST(GpuPlugins, AMachineWithACudaDeviceSelectsItByDefault) {
  const strata::PluginInfo* p = find_plugin("cuda");
  if (p == nullptr || !p->loaded) GTEST_SKIP() << "no cuda device here: " << (p ? p->reason : "plugin not built");
  EXPECT_EQ(strata::runtime().default_device().str(), "cuda:0");
}

}  // namespace
