// Plugin isolation: plugins that crash, exit or hang when loaded, probed or
// initialised are probed in a child process first and refused with the
// signal, exit status or timeout named; the host process carries on.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace {

using namespace strata;
namespace fs = std::filesystem;

class PluginIsolation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata-isolation-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "plugins");
    // A fresh cache: every plugin of the test is probed for real.
    ::setenv("STRATA_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    runtime().load_config(STRATA_TEST_CONFIG);
  }
  void TearDown() override {
    runtime().load_config(STRATA_TEST_CONFIG);
    ::unsetenv("STRATA_CACHE_DIR");
    fs::remove_all(dir_);
  }

  /// Copies test-plugins-crash/libstrata_plugin_<name>.so into this test's folder.
  void add_crash_plugin(const std::string& name) {
    const std::string file = "libstrata_plugin_" + name + ".so";
    fs::copy_file(fs::path(STRATA_TEST_CRASH_PLUGIN_DIR) / file, dir_ / "plugins" / file);
  }

  /// Loads this test's folder (and the CPU plugin, already loaded) with a
  /// probe timeout; returns the outcome of each file of the folder.
  /// Configures the runtime with the plugins of dir_/plugins (and `pins`),
  /// and returns their outcomes by file name.
  std::map<std::string, PluginInfo> load(int timeout_ms = 2000, bool isolate = true,
                                         std::map<std::string, std::string> pins = {}) {
    Config c = runtime().config();
    c.plugin_paths = {STRATA_PLUGIN_DIR, (dir_ / "plugins").string()};
    c.plugin_pins = std::move(pins);
    c.probe_timeout_ms = timeout_ms;
    c.isolate_plugins = isolate;
    runtime().configure(c);
    std::map<std::string, PluginInfo> out;
    for (const PluginInfo& p : runtime().plugins()) {
      if (fs::path(p.path).parent_path() == dir_ / "plugins") out[fs::path(p.path).filename().string()] = p;
    }
    return out;
  }

  static bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

  static void expect_cpu_works() {
    Tensor y = ones({3}, {.device = Device("cpu:0")}) + 1.0;
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  }

  fs::path dir_;
};

TEST_F(PluginIsolation, CrashingPluginsAreRefusedWithTheSignalAndWhere) {
  for (const char* name : {"crashentry", "abortinit", "fpeinit", "crashkernels"}) add_crash_plugin(name);
  auto outcomes = load();
  ASSERT_EQ(outcomes.size(), 4u);
  struct Expected {
    const char* file;
    const char* signal;
    const char* stage;
  };
  for (Expected e : {Expected{"libstrata_plugin_crashentry.so", "signal 11", "loading the library and running its probe"},
                     Expected{"libstrata_plugin_abortinit.so", "signal 6", "running its init"},
                     Expected{"libstrata_plugin_fpeinit.so", "signal 8", "running its init"},
                     Expected{"libstrata_plugin_crashkernels.so", "signal 11", "opening device 0"}}) {
    const PluginInfo& p = outcomes[e.file];
    EXPECT_FALSE(p.loaded) << e.file;
    EXPECT_FALSE(p.initialized) << e.file << ": its init must never run in this process";
    EXPECT_TRUE(has(p.reason, "crashed in a child probe")) << p.reason;
    EXPECT_TRUE(has(p.reason, e.signal)) << p.reason;
    EXPECT_TRUE(has(p.reason, e.stage)) << p.reason;
    EXPECT_TRUE(p.probed.starts_with("child process, ")) << p.probed;
  }
  expect_cpu_works();
}

TEST_F(PluginIsolation, PluginThatExitsIsRefusedNamingTheExit) {
  add_crash_plugin("exitprobe");
  const PluginInfo p = load()["libstrata_plugin_exitprobe.so"];
  EXPECT_FALSE(p.loaded);
  EXPECT_TRUE(has(p.reason, "exit status 0")) << p.reason;
  EXPECT_TRUE(has(p.reason, "the plugin ended the process")) << p.reason;
  expect_cpu_works();
}

TEST_F(PluginIsolation, HangingPluginIsKilledAfterTheTimeout) {
  add_crash_plugin("hanginit");
  const auto start = std::chrono::steady_clock::now();
  const PluginInfo p = load(/*timeout_ms=*/500)["libstrata_plugin_hanginit.so"];
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(p.loaded);
  EXPECT_TRUE(has(p.reason, "hung in a child probe: no answer within 500 ms")) << p.reason;
  EXPECT_TRUE(has(p.reason, "running its init")) << p.reason;
  EXPECT_TRUE(has(p.reason, "killed")) << p.reason;
  EXPECT_LT(seconds, 30.0) << "the plugin sleeps ten minutes; the probe must not wait for it";
  expect_cpu_works();
}

TEST_F(PluginIsolation, TruncatedPluginIsRefused) {
  std::ifstream in(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_mini.so", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  std::ofstream(dir_ / "plugins" / "libstrata_plugin_truncated.so", std::ios::binary)
      .write(bytes.data(), 2048);  // the ELF and program headers, none of the segments
  const PluginInfo p = load()["libstrata_plugin_truncated.so"];
  EXPECT_FALSE(p.loaded);
  // dlopen either says so or dies of SIGBUS reading past the end: in the child.
  EXPECT_TRUE(has(p.reason, "not a loadable shared library") || has(p.reason, "crashed in a child probe")) << p.reason;
  expect_cpu_works();
}

TEST_F(PluginIsolation, GoodPluginPassesTheChildProbeAndLoads) {
  fs::copy_file(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_mini.so",
                dir_ / "plugins" / "libstrata_plugin_mini.so");
  // mini is active already (from the test configuration): this second copy
  // is refused as such, after passing its child probe.
  const PluginInfo p = load()["libstrata_plugin_mini.so"];
  EXPECT_TRUE(p.probed.starts_with("child process, ")) << p.probed;
  EXPECT_TRUE(has(p.reason, "already")) << p.reason;
}

// With plugins.isolate false the plugin runs in this process: a plugin
// refused after its init gets its shutdown from the host.
TEST_F(PluginIsolation, WithoutIsolationTheHostRunsInitAndShutdown) {
  fs::copy_file(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_nodevices.so",
                dir_ / "plugins" / "libstrata_plugin_nodevices.so");
  const fs::path marker = dir_ / "shutdown-marker";
  ::setenv("STRATA_TEST_SHUTDOWN_MARKER", marker.c_str(), 1);
  const PluginInfo p = load(2000, /*isolate=*/false)["libstrata_plugin_nodevices.so"];
  ::unsetenv("STRATA_TEST_SHUTDOWN_MARKER");
  EXPECT_FALSE(p.loaded);
  EXPECT_TRUE(p.initialized);
  EXPECT_EQ(p.probed, "in this process (plugins.isolate is false)");
  EXPECT_TRUE(has(p.reason, "no devices")) << p.reason;
  EXPECT_TRUE(fs::exists(marker)) << "the refused plugin's shutdown did not run";
}

/// sha256sum's answer for a file.
std::string sha256sum(const fs::path& file) {
  std::string cmd = "sha256sum '" + file.string() + "'";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  char hex[65] = {};
  const bool ok = pipe != nullptr && std::fread(hex, 1, 64, pipe) == 64;
  if (pipe != nullptr) ::pclose(pipe);
  return ok ? std::string(hex, 64) : std::string();
}

// plugins.pins: a pinned file is hashed before anything else reads it; a
// mismatch is refused naming both hashes, a match goes on as usual.
TEST_F(PluginIsolation, PinnedPluginsAreCheckedBeforeTheyRun) {
  add_crash_plugin("abortinit");
  add_crash_plugin("fpeinit");
  const std::string abort_hash = sha256sum(dir_ / "plugins" / "libstrata_plugin_abortinit.so");
  ASSERT_EQ(abort_hash.size(), 64u);
  const std::string fpe_hash = sha256sum(dir_ / "plugins" / "libstrata_plugin_fpeinit.so");
  auto outcomes = load(2000, true, {{"abortinit", std::string(64, '0')}, {"fpeinit", fpe_hash}});
  const PluginInfo& wrong = outcomes["libstrata_plugin_abortinit.so"];
  EXPECT_EQ(wrong.reason, "SHA-256 mismatch: the file's is " + abort_hash + ", plugins.pins.abortinit expects " +
                              std::string(64, '0'));
  EXPECT_TRUE(wrong.probed.empty()) << "a file refused by its pin must not be probed: " << wrong.probed;
  const PluginInfo& right = outcomes["libstrata_plugin_fpeinit.so"];
  EXPECT_EQ(right.sha256, fpe_hash);
  EXPECT_TRUE(has(right.reason, "crashed in a child probe")) << "the pin matched, so the probe ran: " << right.reason;
  expect_cpu_works();
}

}  // namespace
