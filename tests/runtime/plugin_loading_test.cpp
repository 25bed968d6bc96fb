// Plugin loading outcomes: every broken plugin is refused with its reason and
// the good ones still load.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace {

using namespace strata;
namespace fs = std::filesystem;

class PluginLoading : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The nodevices plugin writes this file from its shutdown (ZeroDevicesIsRefused).
    fs::remove(shutdown_marker());
    ::setenv("STRATA_TEST_SHUTDOWN_MARKER", shutdown_marker().c_str(), 1);
    // A probe cache of this process alone: with the shared one, another run
    // (or an earlier case, each case being its own process under CTest) has
    // already probed nodevices, and its child probe would not run again.
    const fs::path cache = fs::temp_directory_path() / ("strata_probe_cache_" + std::to_string(::getpid()));
    fs::remove_all(cache);
    ::setenv("STRATA_CACHE_DIR", cache.c_str(), 1);
    runtime().load_config(STRATA_TEST_CONFIG);
  }

  static void TearDownTestSuite() {
    if (const char* cache = std::getenv("STRATA_CACHE_DIR")) fs::remove_all(cache);
    ::unsetenv("STRATA_CACHE_DIR");
  }

  static std::string shutdown_marker() {
    return (fs::temp_directory_path() / ("strata_shutdown_marker_" + std::to_string(::getpid()))).string();
  }

  static PluginInfo outcome_for(const std::string& file) {
    for (const PluginInfo& p : runtime().plugins()) {
      if (fs::path(p.path).filename() == file) return p;
    }
    ADD_FAILURE() << "no outcome recorded for " << file;
    return {};
  }
};

TEST_F(PluginLoading, GoodPluginsLoad) {
  EXPECT_EQ(abi_version(), "2.0");
  PluginInfo cpu = outcome_for("libstrata_plugin_cpu.so");
  EXPECT_TRUE(cpu.loaded) << cpu.reason;
  EXPECT_TRUE(cpu.initialized);
  EXPECT_EQ(cpu.abi, abi_version());
  EXPECT_GT(cpu.score, 0);
  ASSERT_EQ(cpu.devices.size(), 1u);
  EXPECT_EQ(cpu.devices[0].id, "cpu:0");
  PluginInfo mini = outcome_for("libstrata_plugin_mini.so");
  EXPECT_TRUE(mini.loaded) << mini.reason;
  EXPECT_TRUE(mini.initialized);
  EXPECT_EQ(mini.name, "mini");
  EXPECT_EQ(mini.abi, "2.0");
  EXPECT_EQ(mini.vendor, "Strata tests");
  EXPECT_EQ(mini.version, "2.0.0");
  EXPECT_EQ(mini.score, 5);  // from its probe
  EXPECT_TRUE(mini.warnings.empty()) << mini.warnings.front();
  EXPECT_TRUE(mini.ops.empty());
  ASSERT_EQ(mini.devices.size(), 1u);
  EXPECT_EQ(mini.devices[0].type, DeviceType::accelerator);
  EXPECT_EQ(mini.devices[0].kernel_count, 3);  // fill, copy, add
  EXPECT_EQ(mini.devices[0].uuid, "");
  EXPECT_EQ(mini.devices[0].pci_bus_id, "");
  EXPECT_TRUE(mini.devices[0].same_hardware_as.empty());
  EXPECT_FALSE(mini.devices[0].lost);
}

// badabi is a real ABI 1.0 build (tests/plugins/abi1).
TEST_F(PluginLoading, WrongAbiMajorIsRefused) {
  PluginInfo p = outcome_for("libstrata_plugin_badabi.so");
  EXPECT_FALSE(p.loaded);
  EXPECT_FALSE(p.initialized);
  EXPECT_NE(p.reason.find("ABI major mismatch: plugin built for ABI 1.0, this Strata speaks ABI 2.0"), std::string::npos)
      << p.reason;
}

TEST_F(PluginLoading, MissingEntrySymbolIsRefused) {
  PluginInfo p = outcome_for("libstrata_plugin_noentry.so");
  EXPECT_FALSE(p.loaded);
  EXPECT_FALSE(p.initialized);
  EXPECT_NE(p.reason.find("missing entry symbol \"strata_plugin_entry\""), std::string::npos) << p.reason;
}

TEST_F(PluginLoading, FailingInitIsRefusedWithThePluginsMessage) {
  PluginInfo p = outcome_for("libstrata_plugin_initfail.so");
  EXPECT_FALSE(p.loaded);
  EXPECT_NE(p.reason.find("no usable device"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("no driver found (test plugin)"), std::string::npos) << p.reason;
}

// Refused by its child probe: its init never ran in this process (the host's
// own init-then-shutdown path is PluginIsolation.WithoutIsolationTheHostRunsInitAndShutdown).
TEST_F(PluginLoading, ZeroDevicesIsRefused) {
  PluginInfo p = outcome_for("libstrata_plugin_nodevices.so");
  EXPECT_FALSE(p.loaded);
  EXPECT_FALSE(p.initialized);
  EXPECT_NE(p.reason.find("no devices"), std::string::npos) << p.reason;
  // The child probe ran init and then shutdown, as the host would have.
  EXPECT_TRUE(fs::exists(shutdown_marker())) << "the child probe did not shut the refused plugin down";
  fs::remove(shutdown_marker());
}

// Refused before anything opens it as a library: it has no ELF magic number.
TEST_F(PluginLoading, NonLibraryFileIsRefusedBeforeLoading) {
  PluginInfo p = outcome_for("libstrata_plugin_garbage.so");
  EXPECT_FALSE(p.loaded);
  EXPECT_NE(p.reason.find("not a loadable shared library"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("not an ELF file"), std::string::npos) << p.reason;
}

TEST_F(PluginLoading, MissingSearchPathIsReported) {
  PluginInfo p = outcome_for("no-such-plugin-dir");
  EXPECT_FALSE(p.loaded);
  EXPECT_NE(p.reason.find("does not exist"), std::string::npos) << p.reason;
}

TEST_F(PluginLoading, PreferenceSelectsCpu) { EXPECT_EQ(runtime().default_device().str(), "cpu:0"); }

TEST_F(PluginLoading, UnknownDeviceNamesTheAvailableOnes) {
  try {
    Device d("cuda:3");
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cpu:0"), std::string::npos);
  }
}

TEST_F(PluginLoading, WorldWritablePluginIsRefused) {
  fs::path dir = fs::temp_directory_path() / ("strata-insecure-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_mini.so", dir / "libstrata_plugin_mini.so",
                fs::copy_options::overwrite_existing);
  ::chmod(dir.c_str(), 0777);
  Config c = runtime().config();
  c.plugin_paths.push_back(dir.string());
  runtime().configure(c);
  bool found = false;
  for (const PluginInfo& p : runtime().plugins()) {
    if (p.path.rfind(dir.string(), 0) == 0) {
      found = true;
      EXPECT_FALSE(p.loaded);
      EXPECT_NE(p.reason.find("writable by other users"), std::string::npos) << p.reason;
    }
  }
  EXPECT_TRUE(found);
  fs::remove_all(dir);
}

TEST_F(PluginLoading, SecondCopyOfAnActivePluginIsRefused) {
  fs::path dir = fs::temp_directory_path() / ("strata-dup-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0755);
  fs::copy_file(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_mini.so", dir / "libstrata_plugin_mini.so",
                fs::copy_options::overwrite_existing);
  ::chmod((dir / "libstrata_plugin_mini.so").c_str(), 0755);
  Config c = runtime().config();
  c.plugin_paths.push_back(dir.string());
  runtime().configure(c);
  bool found = false;
  for (const PluginInfo& p : runtime().plugins()) {
    if (p.path.rfind(dir.string(), 0) == 0) {
      found = true;
      EXPECT_FALSE(p.loaded);
      EXPECT_NE(p.reason.find("already active"), std::string::npos) << p.reason;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(Device("mini:0").str(), "mini:0");  // the first copy still serves
  fs::remove_all(dir);
}

TEST_F(PluginLoading, InvalidConfigKeepsThePreviousOne) {
  std::string before = runtime().config().source;
  fs::path bad = fs::temp_directory_path() / "strata-bad-config.json";
  std::ofstream(bad) << "{\"prefer\": [\"cpu\"], \"devices\": {\"cpu\": {\"memory_limit\": -5}}}";
  EXPECT_THROW(runtime().load_config(bad.string()), ConfigError);
  EXPECT_EQ(runtime().config().source, before);
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
  fs::remove(bad);
}

}  // namespace
