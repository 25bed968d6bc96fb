// The `strata` command line: exit codes, JSON output, error messages.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <strata/plugin/strata_plugin.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
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
  EXPECT_NE(r.out.find("plugin ABI " + std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR)),
            std::string::npos)
      << r.out;
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
  for (const char* f : {"CMakeLists.txt", "src/plugin.cpp", "README.md", "tests/step.json"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  }
  // A traced graph (the SDK test replays it with `strata trace diff`).
  std::ifstream step(dir / "tests" / "step.json");
  const nlohmann::json graph = nlohmann::json::parse(step, nullptr, false);
  ASSERT_FALSE(graph.is_discarded());
  EXPECT_EQ(graph.value("format", ""), "strata-graph");
  EXPECT_TRUE(graph.value("traced", false));
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

// ---- the plugin probe cache: a cached answer never outlives its causes ------------------

namespace {

/// A scratch folder for one test's probe cache, and a configuration that
/// loads only the plugins of STRATA_PLUGIN_PATH.
struct ProbeCacheScratch {
  std::filesystem::path dir;
  std::string config;
  explicit ProbeCacheScratch(const std::string& name) {
    dir = std::filesystem::temp_directory_path() / ("strata_probe_cache_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "cache");
    config = (dir / "config.json").string();
    std::ofstream(config) << R"({"version": 1, "plugins": {"paths": []}, "logging": {"level": "error"}})";
  }
  ~ProbeCacheScratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  /// `strata devices --json` with `env`: the outcome of plugin `name`.
  nlohmann::json plugin(const std::string& name, const std::string& env = "", const std::string& plugin_path = "") {
    const std::string path = plugin_path.empty() ? std::string(STRATA_TEST_ENV_PLUGIN_DIR) : plugin_path;
    Result r = run("devices --json --config " + config, false,
                   "timeout 60 env STRATA_CACHE_DIR=" + (dir / "cache").string() + " STRATA_PLUGIN_PATH=" + path +
                       " " + env);
    // 1: no device to select (every plugin refused, or op libraries only);
    // anything else — a signal, `timeout`'s 124 — is a failure.
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << "exit " << r.exit_code << ": " << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    if (!j.is_object()) return nlohmann::json::object();
    for (const auto& p : j["plugins"]) {
      if (p["name"] == name) return p;
    }
    ADD_FAILURE() << "no plugin " << name << " in " << r.out;
    return nlohmann::json::object();
  }
};

bool probed_in_child(const nlohmann::json& p) {
  return p.value("probed", std::string()).rfind("child process", 0) == 0;
}


// `strata trace ops`: a traced program (sum(tanh(x·w)·(x·w) + x·w), saved by
// Graph::save) run forward and backward on mini:0, which has kernels for
// fill, copy and add f32 only: each op with its signature and how the device
// serves it, the fallbacks' runs on cpu:0 listed too.
const char* const kTracedGraph =
    R"({"constants":[{"data":[0.5,0.5,0.5,0.5,0.5,0.5],"dtype":"f32","shape":[3,2],"value":1}],)"
    R"("format":"strata-graph","inputs":[{"dtype":"f32","shape":[4,3]}],"nodes":[)"
    R"({"attrs":[],"id":0,"inputs":[0,1],"op":"matmul","output_shapes":[[4,2]],"outputs":[2]},)"
    R"({"attrs":[],"id":1,"inputs":[2],"op":"tanh","output_shapes":[[4,2]],"outputs":[3]},)"
    R"({"attrs":[],"id":2,"inputs":[3,2],"op":"mul","output_shapes":[[4,2]],"outputs":[4]},)"
    R"({"attrs":[],"id":3,"inputs":[4,2],"op":"add","output_shapes":[[4,2]],"outputs":[5]},)"
    R"({"attrs":[{"kind":"ints","name":"dims","value":[0,1]}],"id":4,"inputs":[5],"op":"sum",)"
    R"("output_shapes":[[1,1]],"outputs":[6]},)"
    R"({"attrs":[],"id":5,"inputs":[6],"op":"reshape","output_shapes":[[1]],"outputs":[7]},)"
    R"({"attrs":[],"id":6,"inputs":[7],"op":"reshape","output_shapes":[[]],"outputs":[8]}],)"
    R"("outputs":[8],"traced":true,"version":1})";

bool has_line(const std::string& out, const std::string& pattern) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, std::regex(pattern))) return true;
  }
  return false;
}

TEST(Cli, TraceOpsNamesHowTheDeviceServesEachOp) {
  const std::string graph = write_temp("strata_cli_trace_ops.json", kTracedGraph);
  Result r = run("trace ops " + graph + " --device mini:0 --config " + STRATA_TEST_CONFIG, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "^Ops of .* on mini:0 \\(forward and backward\\):$")) << r.out;
  EXPECT_TRUE(has_line(r.out, "^  strata::add f32,f32->f32 +mini:0 +[0-9]+ x  kernel$")) << r.out;
  EXPECT_TRUE(has_line(r.out, "^  strata::matmul f32,f32->f32 +mini:0 +2 x  fallback$")) << r.out;
  EXPECT_TRUE(has_line(r.out, "^  strata::matmul f32,f32->f32 +cpu:0 +2 x  kernel$")) << r.out;
  EXPECT_TRUE(has_line(r.out, "^  strata::tanh_backward f32,f32->f32 +mini:0 +1 x  decomposition$")) << r.out;
  EXPECT_TRUE(has_line(r.out, "^[0-9]+ on kernels of mini:0, 1 decomposed, [1-9][0-9]* fall back to the CPU$"))
      << r.out;

  r = run("trace ops " + graph + " --forward-only --json --device mini:0 --config " + STRATA_TEST_CONFIG, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "mini:0");
  EXPECT_EQ(j["backward"], false);
  bool tanh_fallback = false, any_backward = false;
  for (const auto& op : j["ops"]) {
    const bool on_mini = op["device"] == "mini:0";
    tanh_fallback = tanh_fallback || (op["op"] == "strata::tanh" && on_mini && op["how"] == "fallback");
    any_backward = any_backward || op["op"] == "strata::tanh_backward";
  }
  EXPECT_TRUE(tanh_fallback) << r.out;
  EXPECT_FALSE(any_backward) << r.out;
}

TEST(Cli, TraceOpsRefusesAFileThatIsNoGraphWithExit2) {
  Result r = run("trace ops /nonexistent/graph.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/graph.json"), std::string::npos) << r.out;
  const std::string bad = write_temp("strata_cli_trace_ops_bad.json", R"({"format":"strata-graph","version":1})");
  r = run("trace ops " + bad);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("strata: trace ops: "), std::string::npos) << r.out;
}

// `strata trace --explain-fusion`: tanh, mul and add of the graph above read
// one tensor (the matmul's result) and become one region; the fused graph it
// writes runs on mini:0 (no kernel for the fused op there: decomposed).
TEST(Cli, TraceExplainFusionListsTheRegionsAndWritesTheFusedGraph) {
  const std::string graph = write_temp("strata_cli_trace_fuse.json", kTracedGraph);
  const std::string fused = graph + ".fused.json";
  Result r = run("trace --explain-fusion " + graph + " --fused-output " + fused);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "^Fusion of .*: 7 nodes -> 5 \\(1 fused region\\)$")) << r.out;
  EXPECT_TRUE(has_line(r.out, "^region at node #3: 3 ops \\(tanh mul add\\), 1 input, f32\\[4, 2\\]$")) << r.out;
  r = run("trace ops " + fused + " --device mini:0 --config " + STRATA_TEST_CONFIG, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "^  strata::fused_elementwise f32->f32 +mini:0 +1 x  decomposition$")) << r.out;
  std::remove(fused.c_str());
  r = run("trace --explain-fusion " + graph + " --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["regions"].size(), 1u) << r.out;
  EXPECT_EQ(j["regions"][0]["ops"], nlohmann::json({"tanh", "mul", "add"}));
  EXPECT_EQ(j["regions"][0]["program"], "in 1\n%1 = tanh %0\n%2 = mul %1 %0\n%3 = add %2 %0\nout %3");
  EXPECT_EQ(j["regions"][0]["saved"], 0);
  // As compile fuses a differentiated call: tanh's value (its derivative
  // reads it) is one more output.
  r = run("trace --explain-fusion " + graph + " --save-for-backward", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has_line(r.out,
                       "^region at node #3: 3 ops \\(tanh mul add\\), 1 input, 2 outputs, 1 saved for the "
                       "backward pass, f32\\[4, 2\\]$"))
      << r.out;
  r = run("trace --explain-fusion " + graph + " --save-for-backward --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["regions"][0]["program"],
            "in 1\n%1 = tanh %0\n%2 = mul %1 %0\n%3 = add %2 %0\nout %3 %1");
  r = run("trace --explain-fusion /nonexistent/graph.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/graph.json"), std::string::npos) << r.out;
  r = run("trace");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--explain-fusion"), std::string::npos) << r.out;
}

}  // namespace

// A plugin that declares what its probe depends on (minienv:
// STRATA_TEST_CRASH_INIT): cached while that is unchanged, whatever else
// changes; probed again, and refused, once its init would crash — the host
// never runs it unprobed.
TEST(ProbeCache, ADeclaredVariableThatChangesProbesAgainInAChild) {
  ProbeCacheScratch s("declared");
  nlohmann::json p = s.plugin("minienv");
  EXPECT_EQ(p["status"], "loaded") << p.dump();
  EXPECT_TRUE(probed_in_child(p)) << p.dump();
  p = s.plugin("minienv", "STRATA_TEST_UNRELATED=1");
  EXPECT_EQ(p["status"], "loaded") << p.dump();
  EXPECT_EQ(p["probed"], "cached child probe") << "a variable the plugin did not declare changed";
  p = s.plugin("minienv", "STRATA_TEST_CRASH_INIT=1");
  EXPECT_EQ(p["status"], "refused") << p.dump();
  EXPECT_NE(p.value("reason", "").find("crashed in a child probe: signal 11"), std::string::npos) << p.dump();
  // The refusal is not cached: with the cause gone the plugin loads again.
  p = s.plugin("minienv");
  EXPECT_EQ(p["status"], "loaded") << p.dump();
}

// A plugin that declares nothing (minienvall): every variable but the
// shell's own counts, so any change probes again.
TEST(ProbeCache, APluginThatDeclaresNothingCountsTheWholeEnvironment) {
  ProbeCacheScratch s("undeclared");
  EXPECT_TRUE(probed_in_child(s.plugin("minienvall")));
  EXPECT_EQ(s.plugin("minienvall")["probed"], "cached child probe");
  nlohmann::json p = s.plugin("minienvall", "STRATA_TEST_UNRELATED=1");
  EXPECT_TRUE(probed_in_child(p)) << p.dump();
  p = s.plugin("minienvall", "STRATA_TEST_CRASH_INIT=1");
  EXPECT_EQ(p["status"], "refused") << p.dump();
  EXPECT_NE(p.value("reason", "").find("crashed in a child probe"), std::string::npos) << p.dump();
}

// The fuzzing probe's case: a refusal caused by the environment
// (STRATA_NUM_THREADS=abc) stuck after the variable was fixed. Refusals are
// never cached, and a declared variable's new value probes again.
TEST(ProbeCache, ARefusalIsNotCached) {
  ProbeCacheScratch s("refusal");
  const std::string cpu_dir =
      (std::filesystem::path(STRATA_CLI).parent_path().parent_path() / "lib" / "strata" / "plugins").string();
  nlohmann::json p = s.plugin("cpu", "STRATA_NUM_THREADS=abc", cpu_dir);
  EXPECT_EQ(p["status"], "refused") << p.dump();
  EXPECT_NE(p.value("reason", "").find("STRATA_NUM_THREADS"), std::string::npos) << p.dump();
  p = s.plugin("cpu", "", cpu_dir);
  EXPECT_EQ(p["status"], "loaded") << p.dump();
  EXPECT_TRUE(probed_in_child(p)) << p.dump();
  EXPECT_EQ(s.plugin("cpu", "", cpu_dir)["probed"], "cached child probe");
  EXPECT_TRUE(probed_in_child(s.plugin("cpu", "STRATA_NUM_THREADS=1", cpu_dir)));
}

// A FIFO or a folder where the cache file belongs: no hang (`timeout 60`
// would end it with 124), no exception; the plugins are probed in a child.
// The answer is then written by renaming a new file into place, which
// replaces a FIFO (the next run finds a real cache) and fails on a folder
// (every run probes in a child).
TEST(ProbeCache, AFifoOrAFolderInPlaceOfTheCacheIsIgnored) {
  for (const char* kind : {"fifo", "folder"}) {
    SCOPED_TRACE(kind);
    ProbeCacheScratch s(kind);
    const std::filesystem::path file = s.dir / "cache" / "plugin-probes.json";
    if (std::string(kind) == "fifo") {
      ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    } else {
      std::filesystem::create_directories(file / "inside");
    }
    nlohmann::json p = s.plugin("minienv");
    EXPECT_EQ(p["status"], "loaded") << p.dump();
    EXPECT_TRUE(probed_in_child(p)) << p.dump();
    p = s.plugin("minienv");
    EXPECT_EQ(p["status"], "loaded") << p.dump();
    if (std::string(kind) == "fifo") {
      EXPECT_EQ(p["probed"], "cached child probe") << p.dump();
      EXPECT_TRUE(std::filesystem::is_regular_file(file));
    } else {
      EXPECT_TRUE(probed_in_child(p)) << p.dump();
    }
  }
}

// A cache file whose members have other types than a cache's ("version"
// an object, found by fuzz_probe_cache: json::value() threw past the
// reader and ended the process) is another file: ignored, probed again.
TEST(ProbeCache, MembersOfAnotherTypeAreIgnored) {
  for (const char* text : {R"({"version": {"major": 2}, "entries": {}})", R"({"version": "2", "entries": []})",
                           R"({"version": 2, "entries": {"k": {"environment": 5, "fingerprint": []}}})"}) {
    SCOPED_TRACE(text);
    ProbeCacheScratch s("types");
    std::ofstream(s.dir / "cache" / "plugin-probes.json") << text;
    const nlohmann::json p = s.plugin("minienv");
    EXPECT_EQ(p["status"], "loaded") << p.dump();
    EXPECT_TRUE(probed_in_child(p)) << p.dump();
  }
}

// STRATA_LOG_LEVEL of an unknown level is said once per process.
TEST(Cli, AnUnknownLogLevelIsSaidOnce) {
  Result r = run("devices", true, "STRATA_LOG_LEVEL=bogus");
  size_t count = 0;
  for (size_t at = r.out.find("ignoring STRATA_LOG_LEVEL"); at != std::string::npos;
       at = r.out.find("ignoring STRATA_LOG_LEVEL", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << r.out;
}

// A pin naming no plugin found protects nothing: refused, naming the pin.
TEST(Cli, APinForAPluginThatIsNotThereIsRefused) {
  const std::string config = write_temp(
      "strata_pin_misspelt.json",
      R"({"version": 1, "plugins": {"pins": {"cpuu": ")" + std::string(64, '0') + R"("}}})");
  Result r = run("devices --config " + config);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("/plugins/pins/cpuu: no plugin named \"cpuu\" was found"), std::string::npos) << r.out;
}

// Two op libraries of 600 ops each do not fit the op table together: the
// process goes on (an earlier core called abort()), the first plugin keeps
// its ops, and the second is refused, naming the op that did not fit and
// who holds the table.
TEST(ManyOps, APluginWhoseOpsDoNotFitIsRefusedByName) {
  ProbeCacheScratch s("manyops");
  nlohmann::json a = s.plugin("manyopsa", "", STRATA_TEST_MANYOPS_PLUGIN_DIR);
  nlohmann::json b = s.plugin("manyopsb", "", STRATA_TEST_MANYOPS_PLUGIN_DIR);
  EXPECT_EQ(a["status"], "loaded") << a.dump().substr(0, 400);
  EXPECT_EQ(a["ops"].size(), 600u);
  EXPECT_EQ(b["status"], "refused") << b.dump().substr(0, 400);
  const std::string reason = b.value("reason", "");
  EXPECT_NE(reason.find("does not fit the op table, which holds 1024 ops"), std::string::npos) << reason;
  EXPECT_NE(reason.find("600 of plugin manyopsa"), std::string::npos) << reason;
  EXPECT_NE(reason.find("of plugin manyopsb"), std::string::npos) << reason;
}
