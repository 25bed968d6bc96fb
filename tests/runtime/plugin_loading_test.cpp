// Plugin loading outcomes: every broken plugin is refused with its reason and
// the good ones still load.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>

namespace {

using namespace strata;
namespace fs = std::filesystem;

class PluginLoading : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime().load_config(STRATA_TEST_CONFIG); }

  static PluginInfo outcome_for(const std::string& file) {
    for (const PluginInfo& p : runtime().plugins()) {
      if (fs::path(p.path).filename() == file) return p;
    }
    ADD_FAILURE() << "no outcome recorded for " << file;
    return {};
  }
};

TEST_F(PluginLoading, GoodPluginsLoad) {
  EXPECT_EQ(abi_version(), "2.7");  // STRATA_ABI_MAJOR.STRATA_ABI_MINOR: a bump is seen here
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
  EXPECT_EQ(mini.abi, abi_version());  // built against the SDK's header
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
  EXPECT_NE(p.reason.find("ABI major mismatch: plugin built for ABI 1.0, this Strata speaks ABI " + abi_version()),
            std::string::npos)
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

// ---------------------------------------------------------------------------
// Search paths the file system cannot use (fuzzing regressions): each one is
// refused with the system's reason, and everything else still loads.
// ---------------------------------------------------------------------------

/// A folder of its own under the temporary directory, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("strata-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
    ::chmod(path.c_str(), 0755);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// Applies the test configuration plus `extra` search paths on another
/// thread. A load that blocks (opening a FIFO waits for a writer) fails the
/// test: `release` is then run to unblock it.
void configure_with(const std::vector<std::string>& extra, const std::function<void()>& release = {}) {
  Config c = runtime().config();
  for (const std::string& p : extra) c.plugin_paths.push_back(p);
  auto done = std::async(std::launch::async, [c] { runtime().configure(c); });
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "configure() still running after 20 s: a plugin file was opened and blocks";
    if (release) release();
  }
  done.get();  // rethrows what configure threw
}

PluginInfo outcome_at(const std::string& path) {
  for (const PluginInfo& p : runtime().plugins()) {
    if (p.path == path) return p;
  }
  ADD_FAILURE() << "no outcome recorded for " << path;
  return {};
}

TEST_F(PluginLoading, SymbolicLinkLoopIsRefusedAndTheRestLoads) {
  TempDir dir("loop");
  fs::create_symlink(dir.path / "loop", dir.path / "loop");
  std::string loop = (dir.path / "loop").string();
  std::string inside = (dir.path / "loop" / "plugins").string();
  EXPECT_NO_THROW(configure_with({loop, inside}));
  for (const std::string& p : {loop, inside}) {
    PluginInfo info = outcome_at(p);
    EXPECT_FALSE(info.loaded);
    EXPECT_NE(info.reason.find("cannot read plugin search path \"" + p + "\": Too many levels of symbolic links"),
              std::string::npos)
        << info.reason;
  }
  // Every later call works (it used to throw filesystem_error each time).
  EXPECT_NO_THROW(runtime().plugins());
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
  EXPECT_TRUE(outcome_for("libstrata_plugin_mini.so").loaded);
}

TEST_F(PluginLoading, OverlongPathComponentIsRefused) {
  std::string path = (fs::temp_directory_path() / std::string(300, 'p') / "plugins").string();
  EXPECT_NO_THROW(configure_with({path}));
  PluginInfo info = outcome_at(path);
  EXPECT_FALSE(info.loaded);
  EXPECT_NE(info.reason.find("cannot read plugin search path"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("File name too long"), std::string::npos) << info.reason;
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
}

TEST_F(PluginLoading, MissingStrataPluginPathEntryIsReported) {
  std::string missing = (fs::temp_directory_path() / ("strata-no-such-dir-" + std::to_string(::getpid()))).string();
  ::setenv("STRATA_PLUGIN_PATH", (missing + "::" + std::string(STRATA_TEST_PLUGIN_DIR)).c_str(), 1);
  EXPECT_NO_THROW(configure_with({}));
  std::vector<ConfigIssue> issues = check_config(runtime().config());
  ::unsetenv("STRATA_PLUGIN_PATH");
  PluginInfo info = outcome_at(missing);
  EXPECT_FALSE(info.loaded);
  EXPECT_EQ(info.reason, "STRATA_PLUGIN_PATH entry: plugin search path does not exist");
  bool warned = false;
  for (const ConfigIssue& issue : issues) {
    if (issue.message == "STRATA_PLUGIN_PATH: plugin search path \"" + missing + "\" does not exist") {
      warned = true;
      EXPECT_EQ(issue.severity, ConfigIssue::Severity::warning);
    }
  }
  EXPECT_TRUE(warned) << "check_config did not report the missing STRATA_PLUGIN_PATH entry";
}

TEST_F(PluginLoading, FifoAndDirectoryNamedLikePluginsAreRefusedUnopened) {
  TempDir dir("fifo");
  fs::path fifo = dir.path / "libstrata_plugin_fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directories(dir.path / "libstrata_plugin_dir.so");
  std::ofstream(dir.path / "libstrata_plugin_empty.so").close();
  ::chmod((dir.path / "libstrata_plugin_empty.so").c_str(), 0644);
  auto release = [&] {  // a writer lets a blocked open() of the FIFO return
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  };
  configure_with({dir.path.string()}, release);
  PluginInfo f = outcome_at(fifo.string());
  EXPECT_FALSE(f.loaded);
  EXPECT_EQ(f.reason, "not a regular file (a FIFO); a plugin is a shared library file");
  PluginInfo d = outcome_at((dir.path / "libstrata_plugin_dir.so").string());
  EXPECT_EQ(d.reason, "not a regular file (a directory); a plugin is a shared library file");
  PluginInfo e = outcome_at((dir.path / "libstrata_plugin_empty.so").string());
  EXPECT_EQ(e.reason, "empty file; a plugin is a shared library file");
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
}

TEST_F(PluginLoading, UnopenableLogFileNamesItsPointer) {
  TempDir dir("log");
  std::ofstream(dir.path / "file") << "x";
  Config c = runtime().config();
  const size_t sinks_before = c.log_sinks.size();
  c.log_sinks = {{"stderr", ""}, {"file", (dir.path / "file" / "strata.log").string()}};
  try {
    runtime().configure(c);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), c.source + ": /logging/sinks/1/path: cannot open log file \"" +
                                         (dir.path / "file" / "strata.log").string() +
                                         "\" for appending: Not a directory");
  }
  EXPECT_EQ(runtime().config().log_sinks.size(), sinks_before);  // the previous configuration stays
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
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
