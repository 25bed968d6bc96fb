// The `strata` command line: exit codes, JSON output, error messages.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr together unless split
};

/// Runs the CLI with `args`; `env` is prepended as VAR=value assignments.
Result run(const std::string& args, bool with_stderr = true, const std::string& env = "") {
  std::string cmd = env + " " + std::string(STRATA_CLI) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  Result r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(Cli, Version) {
  Result r = run("version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("plugin ABI 2.0"), std::string::npos) << r.out;
}

TEST(Cli, DevicesJsonDescribesEveryPlugin) {
  Result r = run(std::string("devices --json --config ") + STRATA_TEST_CONFIG, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"], STRATA_TEST_CONFIG);
  EXPECT_EQ(j["selected"], "cpu:0");
  int loaded = 0, refused = 0;
  for (const auto& p : j["plugins"]) {
    ASSERT_TRUE(p.contains("name") && p.contains("path") && p.contains("status") && p.contains("devices"));
    if (p["name"] == "cuda" || p["name"] == "hip") {  // built when nvcc / hipcc are found; loaded with a GPU
      if (p["status"] == "refused") {
        EXPECT_NE(p["reason"].get<std::string>().find("no usable device"), std::string::npos) << p.dump();
      }
    } else if (p["status"] == "loaded") {
      ++loaded;
      EXPECT_TRUE(p.contains("abi") && p.contains("version") && p.contains("score"));
      for (const auto& d : p["devices"]) {
        EXPECT_TRUE(d.contains("id") && d.contains("type") && d.contains("name") && d.contains("memory_bytes") &&
                    d.contains("dtypes"));
      }
    } else if (p["name"] == "vulkan") {  // present when the Vulkan plugin is built; the test config disables it
      EXPECT_EQ(p["status"], "refused");
      EXPECT_NE(p["reason"].get<std::string>().find("disabled"), std::string::npos) << p.dump();
    } else {
      ++refused;
      EXPECT_EQ(p["status"], "refused");
      EXPECT_FALSE(p["reason"].get<std::string>().empty());
    }
  }
  EXPECT_EQ(loaded, 2);   // cpu and mini
  EXPECT_EQ(refused, 6);  // four broken plugins, the non-library, the missing folder
}

TEST(Cli, DevicesStatsListsMissingPrimitives) {
  Result r = run(std::string("devices --stats --config ") + STRATA_TEST_CONFIG, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Selected device: cpu:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("primitives without a kernel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Fallbacks to cpu:0"), std::string::npos) << r.out;
}

TEST(Cli, ConfigCheckAcceptsShippedConfigs) {
  for (const char* name : {"default.json", "cpu-only.json"}) {
    Result r = run(std::string("config check ") + STRATA_SOURCE_DIR + "/configs/" + name);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.out;
  }
}

TEST(Cli, ConfigCheckRejectsBadConfigWithPathAndExit2) {
  std::string path = write_temp("strata-cli-bad.json", "{\"devices\": {\"cpu\": {\"memory_limit\": -1}}}");
  Result r = run("config check " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/devices/cpu/memory_limit"), std::string::npos) << r.out;
}

/// A temporary folder holding a symbolic link loop, "loop -> loop".
std::string make_loop_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(dir / "loop", dir / "loop");
  return dir.string();
}

TEST(Cli, ConfigCheckReportsPathsTheMachineCannotUse) {
  std::string dir = make_loop_dir("strata-cli-check");
  std::ofstream(dir + "/file") << "x";
  std::string path = dir + "/config.json";
  std::ofstream(path) << R"({"plugins": {"paths": ["loop", "missing"]},)"
                      << R"( "logging": {"sinks": [{"type": "file", "path": "file/strata.log"}]}})";
  Result r = run("config check " + path, true, "STRATA_PLUGIN_PATH=" + dir + "/not-there");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("error: " + path + ": /plugins/paths/0: cannot read plugin search path \"" + dir +
                       "/loop\": Too many levels of symbolic links"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("warning: " + path + ": /plugins/paths/1: plugin search path \"" + dir +
                       "/missing\" does not exist"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("warning: STRATA_PLUGIN_PATH: plugin search path \"" + dir + "/not-there\" does not exist"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("error: " + path + ": /logging/sinks/0/path: cannot open log file"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, ConfigCheckStopsReadingEndlessInput) {
  Result r = run("config check /dev/zero", true, "timeout 20");  // a regression is killed, not hung
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/dev/zero: configuration file too large"), std::string::npos) << r.out;
}

TEST(Cli, DevicesShowsAnUnreadableSearchPathAsRefused) {
  std::string dir = make_loop_dir("strata-cli-devices");
  Result r = run(std::string("devices --json --config ") + STRATA_TEST_CONFIG, false,
                 "STRATA_PLUGIN_PATH=" + dir + "/loop");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["selected"], "cpu:0");
  bool refused = false;
  for (const auto& p : j["plugins"]) {
    if (p["path"] == dir + "/loop") {
      refused = p["status"] == "refused" &&
                p["reason"].get<std::string>().find("Too many levels of symbolic links") != std::string::npos;
    }
  }
  EXPECT_TRUE(refused) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, MalformedJsonGivesLineAndColumn) {
  std::string path = write_temp("strata-cli-syntax.json", "{\n  \"prefer\": [\"cpu\",]\n}\n");
  Result r = run("config check " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;
}

TEST(Cli, BadConfigForDevicesIsExit2) {
  std::string path = write_temp("strata-cli-unknown.json", "{\"prefered\": [\"cpu\"]}");
  Result r = run("devices --config " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown key"), std::string::npos) << r.out;
}

TEST(Cli, BadArgumentsAreExit2) {
  EXPECT_EQ(run("frobnicate").exit_code, 2);
  EXPECT_EQ(run("devices --no-such-flag").exit_code, 2);
  EXPECT_EQ(run("devices --config /no/such/file.json").exit_code, 2);
}

TEST(Cli, DemoRunsAndChecksItself) {
  Result r = run(std::string("demo --config ") + STRATA_TEST_CONFIG);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("demo OK"), std::string::npos) << r.out;
}

TEST(CliEnvironment, StrataConfigSelectsTheFile) {
  Result r = run("devices --json", false, std::string("STRATA_CONFIG=") + STRATA_TEST_CONFIG);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["config"], STRATA_TEST_CONFIG);
}

TEST(CliEnvironment, ExplicitConfigWinsOverStrataConfig) {
  std::string other = std::string(STRATA_SOURCE_DIR) + "/configs/cpu-only.json";
  Result r = run("devices --json --config " + other, false, std::string("STRATA_CONFIG=") + STRATA_TEST_CONFIG);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["config"], other);
}

TEST(CliEnvironment, InvalidStrataConfigIsExit2) {
  Result r = run("devices", true, "STRATA_CONFIG=/no/such/strata.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/no/such/strata.json"), std::string::npos) << r.out;
}

TEST(CliEnvironment, StrataPluginPathAddsPlugins) {
  Result r = run("devices --json", false, std::string("STRATA_PLUGIN_PATH=") + STRATA_TEST_PLUGIN_DIR);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  bool mini = false;
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& p : j["plugins"]) mini = mini || (p["name"] == "mini" && p["status"] == "loaded");
  EXPECT_TRUE(mini) << r.out;
}

TEST(CliEnvironment, StrataLogLevelOverridesTheConfig) {
  Result quiet = run("devices", true, "STRATA_LOG_LEVEL=off");
  EXPECT_EQ(quiet.out.find("[strata.plugin]"), std::string::npos) << quiet.out;
  Result verbose = run("devices", true, "STRATA_LOG_LEVEL=info");
  EXPECT_NE(verbose.out.find("[strata.plugin] info: loaded cpu"), std::string::npos) << verbose.out;
}

// Child probes are cached per file: a second program finds the answer in
// the cache; a rewritten plugin file (new ctime and mtime) is probed again.
TEST(CliEnvironment, ChildProbesAreCachedPerFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata-probe-cache-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "plugins");
  fs::copy_file(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_mini.so", dir / "plugins" / "libstrata_plugin_mini.so");
  const std::string env = "STRATA_CACHE_DIR=" + (dir / "cache").string() + " STRATA_PLUGIN_PATH=" + (dir / "plugins").string();
  auto probed = [&] {
    Result r = run("devices --json", false, env);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const auto& p : j["plugins"]) {
      if (p["name"] == "mini") return p.value("probed", std::string("<none>"));
    }
    return "<mini not listed> in " + r.out;
  };
  EXPECT_EQ(probed().rfind("child process, ", 0), 0u);
  EXPECT_TRUE(fs::exists(dir / "cache" / "plugin-probes.json"));
  EXPECT_EQ(probed(), "cached child probe");
  fs::copy_file(fs::path(STRATA_TEST_PLUGIN_DIR) / "libstrata_plugin_mini.so", dir / "plugins" / "libstrata_plugin_mini.so",
                fs::copy_options::overwrite_existing);
  EXPECT_EQ(probed().rfind("child process, ", 0), 0u) << "a rewritten file must be probed again";
  fs::remove_all(dir);
}

}  // namespace

// ---- strata new-backend ---------------------------------------------------------------

TEST(CliNewBackend, WritesAProjectIntoANewFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata-nb-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Result r = run("new-backend acme_npu --dir " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* f : {"CMakeLists.txt", "src/plugin.cpp", "README.md"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  std::ifstream cmake(dir / "CMakeLists.txt");
  std::string text((std::istreambuf_iterator<char>(cmake)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("strata_add_plugin(acme_npu src/plugin.cpp)"), std::string::npos) << text;
  EXPECT_EQ(text.find("@NAME@"), std::string::npos);
  fs::remove_all(dir);
}

TEST(CliNewBackend, RefusesAFolderThatIsNotEmptyAndWritesNothing) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata-nb-full-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "CMakeLists.txt") << "mine";
  Result r = run("new-backend acme --dir " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("exists and is not empty; nothing was written"), std::string::npos) << r.out;
  std::ifstream kept(dir / "CMakeLists.txt");
  std::string text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "mine");
  EXPECT_FALSE(fs::exists(dir / "src"));
  fs::remove_all(dir);
}

TEST(CliNewBackend, RefusesNamesThatCannotNameAPlugin) {
  for (const char* name : {"Acme", "9lives", "acme-npu", "cuda"}) {
    Result r = run(std::string("new-backend ") + name + " --dir /nonexistent/strata-never-written");
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.out;
    EXPECT_NE(r.out.find(std::string("invalid name \"") + name + "\""), std::string::npos) << r.out;
  }
}
