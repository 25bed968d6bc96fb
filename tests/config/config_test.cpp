// Tests of the configuration loader (core/src/base/config.cpp): what good
// documents parse into, the exact shape of every class of error, the shipped
// configurations and the agreement between the loader and the JSON Schema.
#include <strata/config.hpp>
#include <strata/error.hpp>
#include <strata/runtime.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using strata::Config;
using strata::ConfigError;
using strata::DeviceConfig;
using strata::FallbackPolicy;

const std::string kDataDir = STRATA_TEST_CONFIG_DATA_DIR;
const std::string kShippedDir = STRATA_TEST_SHIPPED_CONFIG_DIR;
const std::string kBase = "/etc/strata";

Config parse(const std::string& text, const std::string& base = kBase) {
  return Config::from_string(text, "my.json", base);
}

/// The message of the ConfigError that parsing `text` throws, or a note that
/// none was thrown.
std::string error_of(const std::string& text, const std::string& source = "my.json") {
  try {
    Config::from_string(text, source, kBase);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string file_error_of(const std::string& path) {
  try {
    Config::from_file(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string plugin_dir() { return strata::library_directory() + "/strata/plugins"; }

/// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------------------
// Good documents
// ---------------------------------------------------------------------------

TEST(ConfigParse, EmptyObjectGivesTheDefaults) {
  Config c = parse("{}");
  EXPECT_EQ(c.source, "my.json");
  EXPECT_EQ(c.plugin_paths, std::vector<std::string>{plugin_dir()});
  EXPECT_TRUE(c.disabled_plugins.empty());
  EXPECT_FALSE(c.allow_insecure_permissions);
  EXPECT_EQ(c.prefer, (std::vector<std::string>{"cuda", "hip", "vulkan", "cpu"}));
  EXPECT_TRUE(c.devices.empty());
  EXPECT_EQ(c.fallback, FallbackPolicy::cpu);
  EXPECT_TRUE(c.fallback_ops.empty());
  EXPECT_EQ(c.log_level, "info");
  ASSERT_EQ(c.log_sinks.size(), 1u);
  EXPECT_EQ(c.log_sinks[0].type, "stderr");
  EXPECT_EQ(c.log_sinks[0].path, "");
}

TEST(ConfigParse, BuiltinDefault) {
  Config c = Config::builtin_default();
  EXPECT_EQ(c.source, "<built-in default>");
  EXPECT_EQ(c.plugin_paths, std::vector<std::string>{plugin_dir()});
  EXPECT_EQ(c.prefer, (std::vector<std::string>{"cuda", "hip", "vulkan", "cpu"}));
  EXPECT_EQ(c.fallback, FallbackPolicy::cpu);
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.device("cpu", 0).threads, 0);
}

TEST(ConfigParse, FullFileParsesIntoTheExpectedStruct) {
  const std::string path = kDataDir + "/full.json";
  Config c = Config::from_file(path);
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.plugin_paths, (std::vector<std::string>{
                                kDataDir + "/plugins",  // relative: against the file's folder
                                kDataDir + "/more/",
                                "/opt/strata/plugins",
                                plugin_dir(),
                            }));
  EXPECT_EQ(c.disabled_plugins, (std::vector<std::string>{"hip", "vulkan"}));
  EXPECT_TRUE(c.allow_insecure_permissions);
  EXPECT_EQ(c.prefer, (std::vector<std::string>{"vulkan", "cpu"}));

  ASSERT_EQ(c.devices.size(), 3u);
  const DeviceConfig& cpu = c.devices.at("cpu");
  EXPECT_EQ(cpu.memory_limit, std::optional<uint64_t>(8ULL << 30));
  EXPECT_FALSE(cpu.allocator_cache);
  EXPECT_EQ(cpu.threads, 4);
  // Verbatim: key order as written.
  EXPECT_EQ(cpu.options_json, R"({"isa":"avx2","numa":[0,1],"affinity":{"pin":true}})");
  EXPECT_EQ(c.devices.at("cuda").memory_limit, std::optional<uint64_t>(1000000));
  EXPECT_TRUE(c.devices.at("cuda").allocator_cache);
  EXPECT_EQ(c.devices.at("cuda").options_json, "{}");
  EXPECT_EQ(c.devices.at("cuda:1").memory_limit, std::nullopt);

  EXPECT_EQ(c.fallback, FallbackPolicy::error);
  EXPECT_EQ(c.fallback_ops.size(), 2u);
  EXPECT_EQ(c.log_level, "debug");
  ASSERT_EQ(c.log_sinks.size(), 2u);
  EXPECT_EQ(c.log_sinks[0].type, "stdout");
  EXPECT_EQ(c.log_sinks[0].path, "");
  EXPECT_EQ(c.log_sinks[1].type, "file");
  EXPECT_EQ(c.log_sinks[1].path, kDataDir + "/logs/strata.log");
}

TEST(ConfigParse, RelativeFilePathResolvesAgainstTheFilesFolder) {
  // from_file with a relative file name: the folder is made absolute.
  struct Chdir {
    fs::path old = fs::current_path();
    explicit Chdir(const fs::path& to) { fs::current_path(to); }
    ~Chdir() { fs::current_path(old); }
  } chdir(fs::path(kDataDir).parent_path());
  Config c = Config::from_file("data/full.json");
  EXPECT_EQ(c.source, "data/full.json");
  EXPECT_EQ(fs::path(c.plugin_paths[0]), fs::path(kDataDir) / "plugins");
  EXPECT_TRUE(fs::path(c.plugin_paths[0]).is_absolute());
}

struct SizeCase {
  const char* json;
  uint64_t bytes;
};

void PrintTo(const SizeCase& sc, std::ostream* os) { *os << sc.json << " -> " << sc.bytes; }

class ConfigSize : public ::testing::TestWithParam<SizeCase> {};

TEST_P(ConfigSize, ParsesToBytes) {
  const SizeCase& sc = GetParam();
  Config c = parse(std::string(R"({"devices": {"cpu": {"memory_limit": )") + sc.json + "}}}");
  EXPECT_EQ(c.devices.at("cpu").memory_limit, std::optional<uint64_t>(sc.bytes)) << sc.json;
}

INSTANTIATE_TEST_SUITE_P(
    EveryUnit, ConfigSize,
    ::testing::Values(SizeCase{R"("1B")", 1}, SizeCase{R"("1000B")", 1000},
                      SizeCase{R"("1KB")", 1000}, SizeCase{R"("2MB")", 2000000},
                      SizeCase{R"("3GB")", 3000000000ULL}, SizeCase{R"("4TB")", 4000000000000ULL},
                      SizeCase{R"("1KiB")", 1024}, SizeCase{R"("512MiB")", 512ULL << 20},
                      SizeCase{R"("8GiB")", 8ULL << 30}, SizeCase{R"("2TiB")", 2ULL << 40},
                      SizeCase{R"("1.5GiB")", 3ULL << 29}, SizeCase{R"("0.5KiB")", 512},
                      SizeCase{R"("2.25MB")", 2250000}, SizeCase{R"("1 GiB")", 1ULL << 30},
                      SizeCase{R"("1.0009KB")", 1000},  // rounds down to whole bytes
                      SizeCase{R"("007MiB")", 7ULL << 20},
                      SizeCase{R"("1024TiB")", 1ULL << 50},  // exactly 1 PiB: the largest
                      SizeCase{"4096", 4096}, SizeCase{"8e9", 8000000000ULL},
                      SizeCase{"1125899906842624", 1ULL << 50}),
    [](const ::testing::TestParamInfo<SizeCase>& param_info) {
      // "1.5GiB" -> "1_5GiB"; the index keeps names unique.
      std::string name;
      for (const char* c = param_info.param.json; *c != '\0'; ++c) {
        if (std::isalnum(static_cast<unsigned char>(*c))) name += *c;
        if (*c == '.') name += '_';
      }
      return std::to_string(param_info.index) + "_" + name;
    });

TEST(ConfigParse, NullMemoryLimitMeansUnlimited) {
  Config c = parse(R"({"devices": {"cpu": {"memory_limit": null}}})");
  EXPECT_EQ(c.devices.at("cpu").memory_limit, std::nullopt);
}

TEST(ConfigParse, DeviceIdEntryWinsOverBackendEntry) {
  Config c = parse(R"({"devices": {
      "cuda": {"threads": 2, "memory_limit": "1GiB"},
      "cuda:1": {"threads": 8},
      "my_backend-2:12": {"allocator_cache": false}}})");
  EXPECT_EQ(c.device("cuda", 1).threads, 8);
  // The id's entry replaces the backend's entirely: no merging.
  EXPECT_EQ(c.device("cuda", 1).memory_limit, std::nullopt);
  EXPECT_EQ(c.device("cuda", 0).threads, 2);
  EXPECT_EQ(c.device("cuda", 0).memory_limit, std::optional<uint64_t>(1ULL << 30));
  EXPECT_FALSE(c.device("my_backend-2", 12).allocator_cache);
  EXPECT_TRUE(c.device("my_backend-2", 0).allocator_cache);
  DeviceConfig none = c.device("hip", 0);
  EXPECT_EQ(none.threads, 0);
  EXPECT_TRUE(none.allocator_cache);
  EXPECT_EQ(none.memory_limit, std::nullopt);
  EXPECT_EQ(none.options_json, "{}");
}

TEST(ConfigParse, FallbackForUsesPerOpOverrides) {
  Config c = parse(R"({"fallback": {"policy": "cpu", "ops": {"matmul": "error"}}})");
  EXPECT_EQ(c.fallback_for("matmul"), FallbackPolicy::error);
  EXPECT_EQ(c.fallback_for("add"), FallbackPolicy::cpu);
  Config e = parse(R"({"fallback": {"policy": "error", "ops": {"softmax": "cpu"}}})");
  EXPECT_EQ(e.fallback_for("softmax"), FallbackPolicy::cpu);
  EXPECT_EQ(e.fallback_for("matmul"), FallbackPolicy::error);
}

TEST(ConfigParse, VariablesAreExpandedAndRelativePathsResolved) {
  ScopedEnv home("HOME", "/home/tester");
  Config c = parse(R"({"plugins": {"paths": [
      "${STRATA_LIBDIR}/strata/plugins",
      "${CONFIG_DIR}/plugins",
      "${HOME}/.local/lib/strata",
      "plugins",
      "./a/./b",
      "../lib/strata",
      "/opt/$dollar/x",
      "${HOME}"
    ]},
    "logging": {"sinks": [{"type": "file", "path": "log/strata.log"},
                          {"type": "file", "path": "${HOME}/strata.log"}]}})");
  EXPECT_EQ(c.plugin_paths, (std::vector<std::string>{
                                strata::library_directory() + "/strata/plugins",
                                "/etc/strata/plugins",
                                "/home/tester/.local/lib/strata",
                                "/etc/strata/plugins",
                                "/etc/strata/a/b",
                                "/etc/strata/../lib/strata",
                                "/opt/$dollar/x",
                                "/home/tester",
                            }));
  EXPECT_EQ(c.log_sinks[0].path, "/etc/strata/log/strata.log");
  EXPECT_EQ(c.log_sinks[1].path, "/home/tester/strata.log");
}

TEST(ConfigParse, RelativeBaseDirIsMadeAbsolute) {
  Config c = Config::from_string(R"({"plugins": {"paths": ["p", "${CONFIG_DIR}"]}})", "x", "cfg");
  EXPECT_EQ(c.plugin_paths[0], (fs::current_path() / "cfg" / "p").string());
  EXPECT_EQ(c.plugin_paths[1], (fs::current_path() / "cfg").string());
  Config e = Config::from_string(R"({"plugins": {"paths": ["p"]}})", "x", "");
  EXPECT_EQ(e.plugin_paths[0], (fs::current_path() / "p").string());
}

TEST(ConfigParse, HomeFallsBackOnThePasswordDatabase) {
  ScopedEnv home("HOME", nullptr);
  const struct passwd* pw = getpwuid(getuid());
  if (pw == nullptr || pw->pw_dir == nullptr || pw->pw_dir[0] == '\0') {
    GTEST_SKIP() << "no password entry for this user";
  }
  EXPECT_EQ(strata::expand_path_variables("${HOME}/x", "/c"), std::string(pw->pw_dir) + "/x");
}

TEST(ConfigParse, ExpandPathVariables) {
  ScopedEnv home("HOME", "/h");
  EXPECT_EQ(strata::expand_path_variables("${CONFIG_DIR}/a:${HOME}", "/c"), "/c/a:/h");
  EXPECT_EQ(strata::expand_path_variables("${STRATA_LIBDIR}", "/c"), strata::library_directory());
  EXPECT_EQ(strata::expand_path_variables("rel/$x/{y}", "/c"), "rel/$x/{y}");
  try {
    strata::expand_path_variables("${NOPE}/x", "/c");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              R"(unknown variable ${NOPE} in "${NOPE}/x" (expected one of: ${STRATA_LIBDIR}, )"
              R"(${CONFIG_DIR}, ${HOME}))");
  }
}

TEST(ConfigParse, LibraryDirectoryHoldsLibstrata) {
  const std::string dir = strata::library_directory();
  EXPECT_TRUE(fs::path(dir).is_absolute()) << dir;
  EXPECT_TRUE(fs::equivalent(dir, STRATA_TEST_LIBRARY_DIR)) << dir;
}

// ---------------------------------------------------------------------------
// Errors: exact messages
// ---------------------------------------------------------------------------

// A syntax error is "<file>: line L, column C: syntax error: <reason>". File,
// line, column (counted by Strata, in characters, at the start of the
// offending token) and the frame are Strata's and are compared exactly; the
// reason's wording is the JSON library's, so only what Strata does to it is
// checked: the library's prefixes ("[json.exception...] parse error at ...")
// and its "last read" part removed, the context moved to a closing
// "(while parsing ...)", and Strata's own hints appended.
::testing::AssertionResult IsSyntaxError(const std::string& msg, const std::string& where,
                                         const std::string& token = "", const std::string& hint = "") {
  const std::string frame = where + ": syntax error: ";
  if (msg.rfind(frame, 0) != 0) return ::testing::AssertionFailure() << "does not start with \"" << frame << "\": " << msg;
  std::string reason = msg.substr(frame.size());
  for (const char* library : {"[json.exception", "parse error", "last read", "syntax error", " - "}) {
    if (reason.find(library) != std::string::npos) {
      return ::testing::AssertionFailure() << "the reason keeps the JSON library's \"" << library << "\": " << msg;
    }
  }
  if (!hint.empty()) {
    if (reason.size() < hint.size() || reason.compare(reason.size() - hint.size(), hint.size(), hint) != 0) {
      return ::testing::AssertionFailure() << "does not end with Strata's hint \"" << hint << "\": " << msg;
    }
    reason.erase(reason.size() - hint.size());
  }
  const size_t context = reason.rfind(" (while parsing ");
  if (context == std::string::npos || context == 0 || reason.back() != ')') {
    return ::testing::AssertionFailure() << "no reason followed by \"(while parsing ...)\": " << msg;
  }
  if (!token.empty() && reason.find(token) == std::string::npos) {
    return ::testing::AssertionFailure() << "the reason does not name the offending " << token << ": " << msg;
  }
  return ::testing::AssertionSuccess();
}

TEST(ConfigSyntax, LineAndColumnOnAMultiLineFile) {
  const std::string path = kDataDir + "/syntax_error.json";
  EXPECT_TRUE(IsSyntaxError(file_error_of(path), path + ": line 4, column 28", "'}'"));
}

TEST(ConfigSyntax, MissingComma) {
  // The column is where the unexpected token starts, not where it ends.
  EXPECT_TRUE(IsSyntaxError(error_of("{\n  \"prefer\": [\"cpu\"]\n  \"version\": 1\n}\n"), "my.json: line 3, column 3"));
}

TEST(ConfigSyntax, BadLiteral) {
  EXPECT_TRUE(IsSyntaxError(error_of("{\n\t\"plugins\": {\"allow_insecure_permissions\": yes}\n}"),
                            "my.json: line 2, column 44"));
}

TEST(ConfigSyntax, ColumnsCountCharactersNotBytes) {
  // "é" is two bytes; the column of the stray comma counts it as one.
  EXPECT_TRUE(IsSyntaxError(error_of("{\"logging\": {\"level\": \"é\",}}"), "my.json: line 1, column 27", "'}'"));
}

TEST(ConfigSyntax, NewlineInsideAString) {
  EXPECT_TRUE(IsSyntaxError(error_of("{\n  \"prefer\": [\"cpu\n\"]}"), "my.json: line 2, column 18"));
}

TEST(ConfigSyntax, EndOfInput) {
  EXPECT_TRUE(IsSyntaxError(error_of("{\n  \"prefer\": [\"cpu\"],\n"), "my.json: line 3, column 1"));
  EXPECT_TRUE(IsSyntaxError(error_of(""), "my.json: line 1, column 1"));
}

TEST(ConfigSyntax, TrailingGarbage) {
  EXPECT_TRUE(IsSyntaxError(error_of("{}\n{}"), "my.json: line 2, column 1", "'{'"));
}

TEST(ConfigSyntax, CommentsAreNotJson) {
  const std::string hint = "; comments are not allowed in JSON";
  EXPECT_TRUE(IsSyntaxError(error_of("{\n  // comment\n}"), "my.json: line 2, column 3", "", hint));
  // The hint is Strata's: only where the bad literal starts with a slash.
  std::string bad = error_of("{\"a\": yes}");
  EXPECT_TRUE(IsSyntaxError(bad, "my.json: line 1, column 7"));
  EXPECT_EQ(bad.find(hint), std::string::npos) << bad;
}

TEST(ConfigSyntax, DuplicateKey) {
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {}, "cpu": {"threads": 2}}})"),
            R"(my.json: /devices/cpu: duplicate key "cpu" (each key may appear only once in an object))");
  EXPECT_EQ(error_of(R"({"prefer": ["cpu"], "prefer": ["cuda"]})"),
            R"(my.json: /prefer: duplicate key "prefer" (each key may appear only once in an object))");
}

TEST(ConfigFile, MissingFile) {
  EXPECT_EQ(file_error_of("/nonexistent/strata.json"),
            "/nonexistent/strata.json: cannot open configuration file: No such file or directory");
}

TEST(ConfigFile, DirectoryIsNotAFile) {
  EXPECT_EQ(file_error_of(kDataDir),
            kDataDir + ": cannot open configuration file: Is a directory");
}

TEST(ConfigErrors, RootMustBeAnObject) {
  EXPECT_EQ(error_of("[1, 2]"), "my.json: /: expected an object, found array [1,2]");
  EXPECT_EQ(error_of("null"), "my.json: /: expected an object, found null");
  EXPECT_EQ(error_of(R"("cpu")"), R"(my.json: /: expected an object, found string "cpu")");
}

TEST(ConfigParse, PinsAreLowerCasedByName) {
  const std::string upper(64, 'A');
  Config c = Config::from_string(R"({"plugins": {"pins": {"cpu": ")" + upper + R"("}}})", "my.json", kBase);
  ASSERT_EQ(c.plugin_pins.size(), 1u);
  EXPECT_EQ(c.plugin_pins.at("cpu"), std::string(64, 'a'));
}

TEST(ConfigErrors, PinsNeedANameAndSixtyFourHexDigits) {
  const std::string expected =
      "expected the plugin file's SHA-256 as 64 hexadecimal digits (sha256sum prints it), found ";
  EXPECT_EQ(error_of(R"({"plugins": {"pins": {"cpu": "abc"}}})"), "my.json: /plugins/pins/cpu: " + expected + "\"abc\"");
  // A long value is quoted shortened.
  EXPECT_EQ(error_of(R"({"plugins": {"pins": {"cpu": ")" + std::string(63, '0') + R"(g"}}})").rfind(
                "my.json: /plugins/pins/cpu: " + expected + "\"000", 0),
            0u);
  EXPECT_EQ(error_of(R"({"plugins": {"pins": {"cpu": 7}}})"), "my.json: /plugins/pins/cpu: " + expected + "number 7");
  EXPECT_NE(error_of(R"({"plugins": {"pins": {"CPU": "x"}}})").find("my.json: /plugins/pins/CPU: expected a plugin name"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"plugins": {"pins": []}})"), "my.json: /plugins/pins: expected an object, found array []");
}

TEST(ConfigErrors, PluginIsolationSettings) {
  EXPECT_EQ(error_of(R"({"plugins": {"probe_timeout_ms": 5}})"),
            "my.json: /plugins/probe_timeout_ms: expected an integer from 100 to 600000 (milliseconds), found 5");
  EXPECT_EQ(error_of(R"({"plugins": {"probe_timeout_ms": "1s"}})"),
            R"(my.json: /plugins/probe_timeout_ms: expected an integer from 100 to 600000 (milliseconds), found string "1s")");
  EXPECT_NE(error_of(R"({"plugins": {"isolate": "no"}})").find("my.json: /plugins/isolate: expected"), std::string::npos);
}

TEST(ConfigErrors, UnknownKeyAtEveryDepth) {
  EXPECT_EQ(error_of(R"({"preferred": ["cpu"]})"),
            R"(my.json: /preferred: unknown key "preferred" (expected one of: $schema, version, )"
            R"(plugins, prefer, devices, fallback, amp, checkpoint, logging); did you mean "prefer"?)");
  EXPECT_EQ(error_of(R"({"plugins": {"pathz": []}})"),
            R"(my.json: /plugins/pathz: unknown key "pathz" (expected one of: paths, disabled, )"
            R"(allow_insecure_permissions, isolate, probe_timeout_ms, pins); did you mean "paths"?)");
  EXPECT_EQ(error_of(R"({"devices": {"cuda:1": {"thread": 1}}})"),
            R"(my.json: /devices/cuda:1/thread: unknown key "thread" (expected one of: )"
            R"(memory_limit, allocator_cache, threads, options, exclude_kernels); did you mean "threads"?)");
  EXPECT_EQ(error_of(R"({"fallback": {"default": "cpu"}})"),
            R"(my.json: /fallback/default: unknown key "default" (expected one of: policy, ops))");
  EXPECT_EQ(error_of(R"({"logging": {"level": "info", "sink": []}})"),
            R"(my.json: /logging/sink: unknown key "sink" (expected one of: level, sinks); )"
            R"(did you mean "sinks"?)");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{"type": "stderr"}, {"type": "file", "file": "x"}]}})"),
            R"(my.json: /logging/sinks/1/file: unknown key "file" (expected one of: type, path))");
}

TEST(ConfigErrors, PointersEscapeSlashAndTilde) {
  EXPECT_EQ(error_of(R"({"a/b~c": 1})"),
            R"(my.json: /a~1b~0c: unknown key "a/b~c" (expected one of: $schema, version, )"
            R"(plugins, prefer, devices, fallback, amp, checkpoint, logging))");
  // An op key is checked before its policy (document order).
  EXPECT_EQ(error_of(R"({"fallback": {"ops": {"x/y": "gpu"}}})"),
            R"(my.json: /fallback/ops/x~1y: expected the name of an op (docs/ops.md), found "x/y")");
  EXPECT_EQ(error_of(R"({"fallback": {"ops": {"acme::x/y": "gpu"}}})"),
            R"(my.json: /fallback/ops/acme::x~1y: expected one of "cpu", "error", found "gpu")");
}

TEST(ConfigErrors, WrongType) {
  EXPECT_EQ(error_of(R"({"prefer": ["cuda", 3]})"),
            "my.json: /prefer/1: expected a string, found number 3");
  EXPECT_EQ(error_of(R"({"prefer": "cuda"})"),
            R"(my.json: /prefer: expected an array of backend names, found string "cuda")");
  EXPECT_EQ(error_of(R"({"plugins": {"paths": "/x"}})"),
            R"(my.json: /plugins/paths: expected an array of paths, found string "/x")");
  EXPECT_EQ(error_of(R"({"plugins": {"paths": [null]}})"),
            "my.json: /plugins/paths/0: expected a path (a string), found null");
  EXPECT_EQ(error_of(R"({"plugins": {"allow_insecure_permissions": "no"}})"),
            R"(my.json: /plugins/allow_insecure_permissions: expected true or false, found string "no")");
  EXPECT_EQ(error_of(R"({"plugins": []})"),
            "my.json: /plugins: expected an object, found array []");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"allocator_cache": 1}}})"),
            "my.json: /devices/cpu/allocator_cache: expected true or false, found number 1");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"options": [1, 2]}}})"),
            "my.json: /devices/cpu/options: expected an object, found array [1,2]");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": true}})"),
            "my.json: /devices/cpu: expected an object, found boolean true");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": {"type": "stderr"}}})"),
            R"(my.json: /logging/sinks: expected an array of sinks, found object {"type":"stderr"})");
  EXPECT_EQ(error_of(R"({"$schema": 1})"), "my.json: /$schema: expected a string, found number 1");
}

TEST(ConfigErrors, LongValuesAreTruncated) {
  EXPECT_EQ(error_of(R"({"prefer": [{"a": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]})"),
            R"(my.json: /prefer/0: expected a string, found object {"a":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...)");
}

TEST(ConfigErrors, Version) {
  EXPECT_EQ(error_of(R"({"version": 2})"),
            "my.json: /version: expected 1 (the only configuration version this Strata reads), "
            "found 2");
  EXPECT_EQ(error_of(R"({"version": "1"})"),
            R"(my.json: /version: expected the integer 1, found string "1")");
  EXPECT_NO_THROW(parse(R"({"version": 1})"));
}

TEST(ConfigErrors, MemoryLimitNegative) {
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": -5}}})", "configs/bad.json"),
            R"(configs/bad.json: /devices/cpu/memory_limit: expected a positive size (integer )"
            R"(bytes or a string like "512MiB"), found -5)");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "-5MiB"}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a positive size (integer bytes or a )"
            R"(string like "512MiB"), found "-5MiB")");
}

TEST(ConfigErrors, MemoryLimitZero) {
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": 0}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a positive size (integer bytes or a )"
            R"(string like "512MiB"), found 0 (a memory limit must be positive; use null for no )"
            R"(limit))");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "0GiB"}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a positive size (integer bytes or a )"
            R"(string like "512MiB"), found "0GiB" (a memory limit must be positive; use null for )"
            R"(no limit))");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "0.1B"}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a positive size (integer bytes or a )"
            R"(string like "512MiB"), found "0.1B" (a memory limit must be positive; use null for )"
            R"(no limit))");
}

TEST(ConfigErrors, MemoryLimitAbsurd) {
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "1025TiB"}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a size of at most 1PiB )"
            R"((1125899906842624 bytes), found "1025TiB", an absurd memory limit)");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": 1125899906842625}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a size of at most 1PiB )"
            R"((1125899906842624 bytes), found 1125899906842625, an absurd memory limit)");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": 1e30}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a size of at most 1PiB )"
            R"((1125899906842624 bytes), found 1e+30, an absurd memory limit)");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "99999999999999999999999999KB"}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a size of at most 1PiB )"
            R"((1125899906842624 bytes), found "99999999999999999999999999KB", an absurd )"
            R"(memory limit)");
}

TEST(ConfigErrors, MemoryLimitMalformed) {
  const std::string prefix =
      R"(my.json: /devices/cpu/memory_limit: expected a positive size (integer bytes or a )"
      R"(string like "512MiB"), found )";
  const std::string units = "; units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)";
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "8 gigs"}}})"),
            prefix + R"("8 gigs" (unknown unit "gigs")" + units);
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "8gib"}}})"),
            prefix + R"("8gib" (units are case-sensitive: did you mean "GiB"?)" + units);
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "512"}}})"),
            prefix + R"("512" (it has no unit)" + units);
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "GiB"}}})"),
            prefix + R"("GiB" (it must start with a number)" + units);
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "1.GiB"}}})"),
            prefix + R"("1.GiB" (a decimal point must be followed by digits)" + units);
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": "2PiB"}}})"),
            prefix + R"("2PiB" (unknown unit "PiB")" + units);
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": 1.5}}})"),
            prefix + "1.5 (a number of bytes must be whole)");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"memory_limit": true}}})"),
            R"(my.json: /devices/cpu/memory_limit: expected a positive size (integer bytes or a )"
            R"(string like "512MiB") or null, found boolean true)");
}

TEST(ConfigErrors, BadEnumValue) {
  EXPECT_EQ(error_of(R"({"fallback": {"policy": "gpu"}})"),
            R"(my.json: /fallback/policy: expected one of "cpu", "error", found "gpu")");
  EXPECT_EQ(error_of(R"({"fallback": {"policy": 1}})"),
            R"(my.json: /fallback/policy: expected one of "cpu", "error", found number 1)");
  EXPECT_EQ(error_of(R"({"fallback": {"ops": {"matmul": "errror"}}})"),
            R"(my.json: /fallback/ops/matmul: expected one of "cpu", "error", found "errror"; )"
            R"(did you mean "error"?)");
  EXPECT_EQ(error_of(R"({"logging": {"level": "warning"}})"),
            R"(my.json: /logging/level: expected one of "trace", "debug", "info", "warn", )"
            R"("error", "off", found "warning"; did you mean "warn"?)");
  EXPECT_EQ(error_of(R"({"logging": {"level": "wran"}})"),
            R"(my.json: /logging/level: expected one of "trace", "debug", "info", "warn", )"
            R"("error", "off", found "wran"; did you mean "warn"?)");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{"type": "syslog"}]}})"),
            R"(my.json: /logging/sinks/0/type: expected one of "stderr", "stdout", "file", )"
            R"(found "syslog")");
}

TEST(ConfigErrors, Sinks) {
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{}]}})"),
            R"(my.json: /logging/sinks/0: missing key "type" (expected one of "stderr", )"
            R"("stdout", "file"))");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{"type": "file"}]}})"),
            R"(my.json: /logging/sinks/0: missing key "path" (a sink of type "file" needs the )"
            R"(path of its log file))");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{"path": "x.log", "type": "stderr"}]}})"),
            R"(my.json: /logging/sinks/0/path: unexpected key "path" for a sink of type )"
            R"("stderr" (only "file" sinks have a path))");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{"type": "file", "path": ""}]}})"),
            R"(my.json: /logging/sinks/0/path: expected a non-empty path, found "")");
}

TEST(ConfigErrors, Prefer) {
  EXPECT_EQ(error_of(R"({"prefer": ["cuda", "cpu", "cuda"]})"),
            R"(my.json: /prefer/2: expected each backend once, found "cuda" again (first at )"
            R"(/prefer/0))");
  EXPECT_EQ(error_of(R"({"prefer": []})"),
            "my.json: /prefer: expected at least one backend name, found []");
  EXPECT_EQ(error_of(R"({"prefer": ["cpu", ""]})"),
            R"(my.json: /prefer/1: expected a backend name (lower case letters, digits, '_' or )"
            R"('-', like "cuda"), found "")");
  EXPECT_EQ(error_of(R"({"plugins": {"disabled": ["HIP"]}})"),
            R"(my.json: /plugins/disabled/0: expected a plugin name (lower case letters, digits, )"
            R"('_' or '-', like "hip"), found "HIP")");
}

TEST(ConfigErrors, Threads) {
  const std::string prefix = "my.json: /devices/cpu/threads: expected an integer from 0 to 1024, found ";
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"threads": 2000}}})"), prefix + "2000");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"threads": -1}}})"), prefix + "-1");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"threads": 2.5}}})"), prefix + "2.5");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"threads": "4"}}})"), prefix + R"(string "4")");
  EXPECT_EQ(parse(R"({"devices": {"cpu": {"threads": 1024}}})").devices.at("cpu").threads, 1024);
  EXPECT_EQ(parse(R"({"devices": {"cpu": {"threads": 4.0}}})").devices.at("cpu").threads, 4);
}

TEST(ConfigErrors, ExcludeKernels) {
  const std::string form = R"(expected a kernel as "namespace::op" or "namespace::op signature" ("strata::mul", )"
                           R"("strata::mul f32,f32->f32"), found )";
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"exclude_kernels": ["strata::mul", "mul"]}}})"),
            "my.json: /devices/cpu/exclude_kernels/1: " + form + R"("mul")");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"exclude_kernels": ["strata::mul f32 f32"]}}})"),
            "my.json: /devices/cpu/exclude_kernels/0: " + form + R"("strata::mul f32 f32")");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"exclude_kernels": [3]}}})"),
            "my.json: /devices/cpu/exclude_kernels/0: " + form + "3");
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"exclude_kernels": "strata::mul"}}})"),
            R"(my.json: /devices/cpu/exclude_kernels: expected an array of kernels, found string "strata::mul")");
  const Config c = parse(R"({"devices": {"cpu": {"exclude_kernels": ["strata::mul", "strata::fill ->bf16"]}}})");
  EXPECT_EQ(c.devices.at("cpu").exclude_kernels, (std::vector<std::string>{"strata::mul", "strata::fill ->bf16"}));
}

TEST(ConfigErrors, DeviceKeys) {
  const std::string problem =
      R"(expected a backend name like "cpu" or a device id like "cuda:1" as key (lower case, )"
      R"(index without leading zeros), found )";
  EXPECT_EQ(error_of(R"({"devices": {"cuda:x": {}}})"),
            "my.json: /devices/cuda:x: " + problem + R"("cuda:x")");
  EXPECT_EQ(error_of(R"({"devices": {"CPU": {}}})"), "my.json: /devices/CPU: " + problem + R"("CPU")");
  EXPECT_EQ(error_of(R"({"devices": {"cuda:01": {}}})"),
            "my.json: /devices/cuda:01: " + problem + R"("cuda:01")");
  EXPECT_EQ(error_of(R"({"devices": {"": {}}})"), "my.json: /devices/: " + problem + R"("")");
}

TEST(ConfigErrors, UnknownVariable) {
  EXPECT_EQ(error_of(R"({"plugins": {"paths": ["/ok", "${PREFIX}/lib/strata"]}})"),
            R"(my.json: /plugins/paths/1: unknown variable ${PREFIX} in "${PREFIX}/lib/strata" )"
            R"((expected one of: ${STRATA_LIBDIR}, ${CONFIG_DIR}, ${HOME}))");
  EXPECT_EQ(error_of(R"({"plugins": {"paths": ["${STRATA_LIB_DIR}/p"]}})"),
            R"(my.json: /plugins/paths/0: unknown variable ${STRATA_LIB_DIR} in )"
            R"("${STRATA_LIB_DIR}/p" (expected one of: ${STRATA_LIBDIR}, ${CONFIG_DIR}, )"
            R"(${HOME}); did you mean ${STRATA_LIBDIR}?)");
  EXPECT_EQ(error_of(R"({"logging": {"sinks": [{"type": "file", "path": "${TMPDIR}/s.log"}]}})"),
            R"(my.json: /logging/sinks/0/path: unknown variable ${TMPDIR} in "${TMPDIR}/s.log" )"
            R"((expected one of: ${STRATA_LIBDIR}, ${CONFIG_DIR}, ${HOME}))");
  EXPECT_EQ(error_of(R"({"plugins": {"paths": ["${HOME/lib"]}})"),
            R"(my.json: /plugins/paths/0: unterminated variable reference "${" in "${HOME/lib")");
}

TEST(ConfigErrors, EmptyPathAndOpName) {
  EXPECT_EQ(error_of(R"({"plugins": {"paths": [""]}})"),
            R"(my.json: /plugins/paths/0: expected a non-empty path, found "")");
  EXPECT_EQ(error_of(R"({"fallback": {"ops": {"": "cpu"}}})"),
            R"(my.json: /fallback/ops/: expected an op name as key, found "")");
}

TEST(ConfigErrors, FirstErrorInDocumentOrder) {
  EXPECT_EQ(error_of(R"({"logging": {"level": "loud"}, "devices": {"cpu": {"threads": -1}}})"),
            R"(my.json: /logging/level: expected one of "trace", "debug", "info", "warn", )"
            R"("error", "off", found "loud")");
}

TEST(ConfigErrors, DeepNestingIsRefused) {
  std::string deep = R"({"devices": {"cpu": {"options": {"x": )" + std::string(300, '[') +
                     std::string(300, ']') + "}}}}";
  std::string msg = error_of(deep);
  EXPECT_EQ(msg.rfind("my.json: /devices/cpu/options/x/0/0/", 0), 0u) << msg;
  EXPECT_NE(msg.find(": expected at most 256 levels of nesting, found more"), std::string::npos)
      << msg;
}

// ---------------------------------------------------------------------------
// Loader and schema agree on a table of documents
// ---------------------------------------------------------------------------

TEST(ConfigCases, LoaderAcceptsExactlyTheValidCases) {
  ScopedEnv home("HOME", "/home/tester");
  auto table = nlohmann::json::parse(read_file(kDataDir + "/cases.json"));
  ASSERT_GT(table.at("cases").size(), 40u);
  for (const auto& c : table.at("cases")) {
    const std::string name = c.at("name");
    const std::string msg = error_of(c.at("doc").dump(), "case.json");
    if (c.at("valid").get<bool>()) {
      EXPECT_EQ(msg, "<no error>") << name;
    } else {
      EXPECT_EQ(msg.rfind("case.json: /", 0), 0u) << name << ": " << msg;
    }
  }
}

// ---------------------------------------------------------------------------
// Shipped configurations
// ---------------------------------------------------------------------------

TEST(ShippedConfigs, DefaultParses) {
  Config c = Config::from_file(kShippedDir + "/default.json");
  EXPECT_EQ(c.prefer, (std::vector<std::string>{"cuda", "hip", "vulkan", "cpu"}));
  EXPECT_EQ(c.plugin_paths, std::vector<std::string>{plugin_dir()});
  EXPECT_TRUE(c.disabled_plugins.empty());
  EXPECT_FALSE(c.allow_insecure_permissions);
  EXPECT_EQ(c.fallback, FallbackPolicy::cpu);
  EXPECT_EQ(c.log_level, "warn");
  ASSERT_EQ(c.log_sinks.size(), 1u);
  EXPECT_EQ(c.log_sinks[0].type, "stderr");
  ASSERT_EQ(c.devices.count("cpu"), 1u);
  EXPECT_TRUE(c.devices.at("cpu").allocator_cache);
}

TEST(ShippedConfigs, CpuOnlyParses) {
  Config c = Config::from_file(kShippedDir + "/cpu-only.json");
  EXPECT_EQ(c.prefer, std::vector<std::string>{"cpu"});
  EXPECT_EQ(c.disabled_plugins, (std::vector<std::string>{"cuda", "hip", "vulkan"}));
  EXPECT_EQ(c.plugin_paths, std::vector<std::string>{plugin_dir()});
  EXPECT_EQ(c.fallback, FallbackPolicy::error);
  EXPECT_EQ(c.fallback_for("matmul"), FallbackPolicy::error);
}

// ---------------------------------------------------------------------------
// Limits, op names and what `strata config check` adds (fuzzing regressions)
// ---------------------------------------------------------------------------

/// A folder of its own under the temporary directory, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("strata-config-test-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

/// Runs `fn` on another thread; if it has not returned within `seconds`,
/// the test fails and the process ends, so that a regression (a read that
/// never ends) fails the test instead of hanging it.
template <class Fn>
auto within(int seconds, Fn fn) {
  auto result = std::async(std::launch::async, std::move(fn));
  if (result.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: still running after %d s (a read without a bound?)\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  return result.get();
}

TEST(ConfigLimits, FileOverOneMebibyteIsRefusedNamingItsSize) {
  TempDir dir("size");
  const std::string big = dir / "big.json";
  std::string text = R"({"prefer": ["cpu"]})";
  text.resize(2 * 1024 * 1024, ' ');  // valid JSON: only whitespace after the object
  std::ofstream(big) << text;
  EXPECT_EQ(file_error_of(big),
            big + ": configuration file too large: 2097152 bytes (at most 1048576 bytes, 1 MiB)");
  // The same text handed over as a string is refused too.
  EXPECT_EQ(error_of(text), "my.json: configuration too large: 2097152 bytes (at most 1048576 bytes, 1 MiB)");
  // Exactly at the limit is fine.
  const std::string edge = dir / "edge.json";
  text.resize(1024 * 1024);
  std::ofstream(edge) << text;
  EXPECT_EQ(Config::from_file(edge).prefer, std::vector<std::string>{"cpu"});
}

TEST(ConfigLimits, EndlessDeviceAndFifoStopQuickly) {
  std::string zero = within(20, [] { return file_error_of("/dev/zero"); });
  EXPECT_EQ(zero, "/dev/zero: configuration file too large: read more than the limit of 1048576 bytes (1 MiB) "
                  "without reaching its end");
  // A FIFO without a writer: opening it must not wait for one.
  TempDir dir("fifo");
  const std::string fifo = dir / "config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg = within(20, [&] { return file_error_of(fifo); });
  EXPECT_EQ(msg.rfind(fifo + ": line 1, column 1: syntax error: ", 0), 0u) << msg;  // empty: nothing to parse
}

TEST(ConfigLimits, NulByteIsAnErrorNamingItsOffset) {
  const std::string head = "{\"prefer\": [\"cpu\"]}";
  // nlohmann's lexer takes NUL for the end of the input: the rest was ignored.
  std::string text = head + std::string(1, '\0') + "{\"nonsense\": 1}";
  EXPECT_EQ(error_of(text), "my.json: byte offset 19 (line 1, column 20): expected UTF-8 text, found a NUL byte "
                            "(a configuration holds no NUL bytes)");
  std::string in_string = "{\n  \"prefer\": [\"c" + std::string(1, '\0') + "pu\"]\n}";
  EXPECT_EQ(error_of(in_string).rfind("my.json: byte offset 17 (line 2, column 16): expected UTF-8 text", 0), 0u)
      << error_of(in_string);
  TempDir dir("nul");
  const std::string file = dir / "nul.json";
  std::ofstream(file, std::ios::binary) << text;
  EXPECT_EQ(file_error_of(file).rfind(file + ": byte offset 19 (line 1, column 20): ", 0), 0u) << file_error_of(file);
}

TEST(ConfigLimits, LongListsAndObjectsAreCheckedInLinearTime) {
  // 100,000 backend names (about 0.9 MB): uniqueness was checked pairwise.
  constexpr int kNames = 100000;
  std::string names;
  for (int i = 0; i < kNames; ++i) names += (i == 0 ? "\"b" : ",\"b") + std::to_string(i) + "\"";
  auto start = std::chrono::steady_clock::now();
  Config c = parse("{\"prefer\": [" + names + "]}");
  ASSERT_EQ(c.prefer.size(), static_cast<size_t>(kNames));
  EXPECT_EQ(c.prefer.back(), "b99999");
  // A repeat at the very end is still found, naming the first occurrence.
  EXPECT_EQ(error_of("{\"prefer\": [" + names + ",\"b5\"]}"),
            R"(my.json: /prefer/100000: expected each backend once, found "b5" again (first at /prefer/5))");
  // An object of 50,000 keys: duplicate keys were looked up linearly.
  std::string keys;
  for (int i = 0; i < 50000; ++i) keys += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":" + std::to_string(i);
  Config o = parse(R"({"devices": {"cpu": {"options": {)" + keys + "}}}}");
  EXPECT_EQ(o.devices.at("cpu").options_json.rfind(R"({"k0":0,"k1":1,)", 0), 0u);  // key order kept
  EXPECT_EQ(error_of(R"({"devices": {"cpu": {"options": {)" + keys + R"(,"k7":1}}}})"),
            R"(my.json: /devices/cpu/options/k7: duplicate key "k7" (each key may appear only once in an object))");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "quadratic again? (about 0.1 s when linear; 13 s before)";
}

TEST(ConfigErrors, UnknownOpNamesSuggestTheNearest) {
  EXPECT_EQ(error_of(R"({"fallback": {"ops": {"matmul": "cpu", "matmull": "error"}}})"),
            R"(my.json: /fallback/ops/matmull: expected the name of an op (docs/ops.md), found "matmull"; )"
            R"(did you mean "matmul"?)");
  EXPECT_EQ(error_of(R"({"fallback": {"ops": {"strata::softmax": "error"}}})"),
            R"(my.json: /fallback/ops/strata::softmax: expected the name of an op (docs/ops.md), found )"
            R"("strata::softmax"; did you mean "softmax"?)");
  EXPECT_EQ(error_of(R"({"amp": {"fp32": ["softmax", "sofmax"]}})"),
            R"(my.json: /amp/fp32/1: expected the name of an op (docs/ops.md), found "sofmax"; )"
            R"(did you mean "softmax"?)");
  EXPECT_EQ(error_of(R"({"amp": {"lower_precision": ["matmal"]}})"),
            R"(my.json: /amp/lower_precision/0: expected the name of an op (docs/ops.md), found "matmal"; )"
            R"(did you mean "matmul"?)");
  EXPECT_EQ(error_of(R"({"amp": {"promote": ["add", "zzz"]}})"),
            R"(my.json: /amp/promote/1: expected the name of an op (docs/ops.md), found "zzz")");
  // Ops a plugin defines exist only once it is loaded: not checked here.
  EXPECT_EQ(parse(R"({"fallback": {"ops": {"acme::swiglu": "error"}}})").fallback_for("acme::swiglu"),
            FallbackPolicy::error);
}

/// The messages of check_config's findings of one severity.
std::vector<std::string> issues_of(const Config& c, strata::ConfigIssue::Severity severity) {
  std::vector<std::string> out;
  for (const strata::ConfigIssue& issue : strata::check_config(c)) {
    if (issue.severity == severity) out.push_back(issue.message);
  }
  return out;
}
constexpr auto kError = strata::ConfigIssue::Severity::error;
constexpr auto kWarning = strata::ConfigIssue::Severity::warning;

TEST(ConfigCheck, UnopenableLogFileIsAnErrorWithItsPointer) {
  ScopedEnv plugin_path("STRATA_PLUGIN_PATH", nullptr);
  TempDir dir("log");
  std::ofstream(dir / "file") << "x";
  fs::create_directories(dir / "a-directory");
  const std::string sinks = R"({"plugins": {"paths": []}, "logging": {"sinks": [{"type": "stderr"}, )";
  // Below a regular file: it can never be created.
  Config under_file = parse(sinks + R"({"type": "file", "path": "file/strata.log"}]}})", dir.str());
  EXPECT_EQ(issues_of(under_file, kError),
            std::vector<std::string>{"my.json: /logging/sinks/1/path: cannot open log file \"" +
                                     (dir / "file/strata.log") + "\" for appending: Not a directory"});
  Config a_directory = parse(sinks + R"({"type": "file", "path": "a-directory"}]}})", dir.str());
  EXPECT_EQ(issues_of(a_directory, kError),
            std::vector<std::string>{"my.json: /logging/sinks/1/path: cannot open log file \"" +
                                     (dir / "a-directory") + "\" for appending: it is a directory"});
  // A new file in missing folders is fine (they are created), and nothing is created by the check.
  Config fine = parse(sinks + R"({"type": "file", "path": "new/logs/strata.log"}]}})", dir.str());
  EXPECT_TRUE(strata::check_config(fine).empty());
  EXPECT_FALSE(fs::exists(dir / "new"));
}

TEST(ConfigCheck, UnreadablePluginPathsAreErrorsWithTheirPointer) {
  ScopedEnv plugin_path("STRATA_PLUGIN_PATH", nullptr);
  TempDir dir("paths");
  fs::create_symlink(dir / "loop", dir / "loop");  // a symbolic link to itself
  const std::string long_name = std::string(300, 'x');
  Config c = parse(R"({"plugins": {"paths": ["loop", "missing", ")" + long_name + R"("]}})", dir.str());
  std::vector<std::string> errors = issues_of(c, kError);
  ASSERT_EQ(errors.size(), 2u) << ::testing::PrintToString(errors);
  EXPECT_EQ(errors[0], "my.json: /plugins/paths/0: cannot read plugin search path \"" + (dir / "loop") +
                           "\": Too many levels of symbolic links");
  EXPECT_EQ(errors[1].rfind("my.json: /plugins/paths/2: cannot read plugin search path \"", 0), 0u) << errors[1];
  EXPECT_NE(errors[1].find(" characters): File name too long"), std::string::npos) << errors[1];
  EXPECT_EQ(issues_of(c, kWarning), std::vector<std::string>{"my.json: /plugins/paths/1: plugin search path \"" +
                                                             (dir / "missing") + "\" does not exist"});
  // The default search path is named as such.
  Config d = parse("{}");
  for (const std::string& w : issues_of(d, kWarning)) EXPECT_NE(w.find("/plugins/paths (default)"), std::string::npos) << w;
}

TEST(ConfigCheck, StrataPluginPathEntriesAndNonFilesAreWarnings) {
  TempDir dir("env");
  fs::create_directories(dir / "plugins");
  ASSERT_EQ(::mkfifo((dir / "plugins/libstrata_plugin_fifo.so").c_str(), 0644), 0);
  fs::create_directories(dir / "plugins/libstrata_plugin_dir.so");
  std::string env = dir / "nope" + "::" + (dir / "plugins");
  ScopedEnv plugin_path("STRATA_PLUGIN_PATH", env.c_str());
  Config c = parse(R"({"plugins": {"paths": []}})", dir.str());
  std::vector<std::string> warnings = within(20, [&] { return issues_of(c, kWarning); });
  EXPECT_EQ(warnings,
            (std::vector<std::string>{
                "STRATA_PLUGIN_PATH: plugin search path \"" + (dir / "nope") + "\" does not exist",
                "STRATA_PLUGIN_PATH: \"" + (dir / "plugins/libstrata_plugin_dir.so") +
                    "\" will be refused: not a regular file (a directory); a plugin is a shared library file",
                "STRATA_PLUGIN_PATH: \"" + (dir / "plugins/libstrata_plugin_fifo.so") +
                    "\" will be refused: not a regular file (a FIFO); a plugin is a shared library file",
            }));
  EXPECT_TRUE(issues_of(c, kError).empty());
}

// ---------------------------------------------------------------------------
// The JSON Schema
// ---------------------------------------------------------------------------

class Schema : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = nlohmann::json::parse(read_file(kShippedDir + "/strata-config.schema.json"));
  }

  /// Follows "$ref": "#/$defs/..." (the only kind the schema uses).
  const nlohmann::json& deref(const nlohmann::json& s) const {
    if (s.contains("$ref")) {
      std::string ref = s.at("$ref");
      EXPECT_EQ(ref.rfind("#/", 0), 0u) << ref;
      return schema_.at(nlohmann::json::json_pointer(ref.substr(1)));
    }
    return s;
  }

  std::set<std::string> schema_keys(const nlohmann::json& s) const {
    std::set<std::string> keys;
    for (const auto& [k, v] : deref(s).at("properties").items()) keys.insert(k);
    return keys;
  }

  /// The keys the loader accepts in the object at `where` of `doc_with_hole`,
  /// read from its unknown-key message: "... (expected one of: a, b, c)".
  static std::set<std::string> loader_keys(const std::string& doc) {
    const std::string msg = error_of(doc);
    const std::string marker = "(expected one of: ";
    auto start = msg.find(marker);
    auto end = msg.find(')', start);
    EXPECT_NE(start, std::string::npos) << msg;
    std::set<std::string> keys;
    if (start == std::string::npos || end == std::string::npos) return keys;
    std::stringstream list(msg.substr(start + marker.size(), end - start - marker.size()));
    std::string key;
    while (std::getline(list, key, ',')) {
      if (!key.empty() && key[0] == ' ') key.erase(0, 1);
      keys.insert(key);
    }
    return keys;
  }

  nlohmann::json schema_;
};

TEST_F(Schema, IsDraft202012) {
  EXPECT_EQ(schema_.at("$schema"), "https://json-schema.org/draft/2020-12/schema");
  EXPECT_EQ(schema_.at("type"), "object");
}

TEST_F(Schema, TopLevelPropertiesAreTheKeysTheLoaderAccepts) {
  std::set<std::string> expected{"$schema", "version",  "plugins", "prefer",    "amp",
                                 "devices", "fallback", "logging", "checkpoint"};
  EXPECT_EQ(schema_keys(schema_), expected);
  EXPECT_EQ(loader_keys(R"({"zzzz": 1})"), expected);
}

TEST_F(Schema, NestedPropertiesAreTheKeysTheLoaderAccepts) {
  const auto& props = schema_.at("properties");
  EXPECT_EQ(schema_keys(props.at("plugins")), loader_keys(R"({"plugins": {"zzzz": 1}})"));
  EXPECT_EQ(schema_keys(props.at("devices").at("additionalProperties")),
            loader_keys(R"({"devices": {"cpu": {"zzzz": 1}}})"));
  EXPECT_EQ(schema_keys(props.at("fallback")), loader_keys(R"({"fallback": {"zzzz": 1}})"));
  EXPECT_EQ(schema_keys(props.at("logging")), loader_keys(R"({"logging": {"zzzz": 1}})"));
  EXPECT_EQ(schema_keys(props.at("amp")), loader_keys(R"({"amp": {"zzzz": 1}})"));
  EXPECT_EQ(schema_keys(props.at("checkpoint")), loader_keys(R"({"checkpoint": {"zzzz": 1}})"));
  EXPECT_EQ(schema_keys(props.at("logging").at("properties").at("sinks").at("items")),
            loader_keys(R"({"logging": {"sinks": [{"zzzz": 1}]}})"));
}

TEST_F(Schema, EveryObjectIsClosedAndEveryPropertyDescribed) {
  int objects = 0;
  int properties = 0;
  // Walks every subschema; a subschema with "properties" must forbid others.
  std::vector<std::pair<std::string, const nlohmann::json*>> todo{{"", &schema_}};
  while (!todo.empty()) {
    auto [where, s] = todo.back();
    todo.pop_back();
    if (!s->is_object()) continue;
    if (s->contains("properties")) {
      ++objects;
      EXPECT_EQ(s->value("additionalProperties", nlohmann::json(true)), false) << where;
      for (const auto& [k, v] : s->at("properties").items()) {
        ++properties;
        EXPECT_TRUE(v.contains("description")) << where << "/properties/" << k;
      }
    }
    for (const auto& [k, v] : s->items()) {
      if (k == "if" || k == "examples") continue;  // conditions and samples, not object schemas
      if (v.is_object()) todo.emplace_back(where + "/" + k, &v);
      if (v.is_array()) {
        for (const auto& item : v) todo.emplace_back(where + "/" + k + "/[]", &item);
      }
    }
  }
  EXPECT_GE(objects, 6);   // root, plugins, fallback, logging, device, sink
  EXPECT_GE(properties, 20);
}

}  // namespace
