// config.hpp — the JSON device configuration, parsed and validated.
//
// See docs/configuration.md for every key. Validation is strict: unknown
// keys, wrong types and bad values throw ConfigError with a message of the
// form
//   <file>: <JSON pointer>: expected <what>, found <what>
// and JSON syntax errors name the line and column. A configuration is at
// most 1 MiB of UTF-8 text without NUL bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata {

enum class FallbackPolicy { cpu, error };

/// Settings for one backend ("cpu") or one device ("cuda:1").
struct DeviceConfig {
  /// Hard cap on bytes allocated for tensors on the device (nullopt: none).
  std::optional<uint64_t> memory_limit;
  /// Keep freed blocks for reuse (the caching allocator).
  bool allocator_cache = true;
  /// Worker threads for the backend; 0 lets the backend decide.
  int threads = 0;
  /// Backend-specific options, as JSON object text, handed to the plugin.
  std::string options_json = "{}";
  /// Kernels of the device not to use, "op" (every signature) or "op
  /// signature" ("strata::mul", "strata::exp f16->f16"): their calls fall
  /// back as if the plugin had no such kernel (the fallback policy applies,
  /// and fallbacks are counted). Read when the device opens (the first
  /// configuration that loads its plugin); an entry that names no kernel of
  /// the device is a warning of the plugin's.
  std::vector<std::string> exclude_kernels;
};

struct LogSink {
  std::string type;  // "stderr", "stdout" or "file"
  std::string path;  // for "file"
};

/// The "checkpoint" object: the policy CheckpointContext() applies (see
/// checkpoint.hpp and docs/configuration.md).
struct CheckpointConfig {
  std::string policy = "none";  // none, every_n, sqrt_n, min_peak, memory_budget, selective
  int64_t every = 1;            // every_n
  uint64_t budget = 0;          // memory_budget, bytes
  std::optional<std::vector<std::string>> save_ops;  // selective; absent: linear, matmul
};

struct Config {
  /// Where the configuration came from: a file path or "<built-in default>".
  std::string source;

  /// Directories to scan and plugin files to load, variables expanded and
  /// relative paths resolved against the configuration file's directory.
  /// A file without "plugins.paths" gets the built-in default's
  /// {library_directory() + "/strata/plugins"}; "paths": [] gives none.
  std::vector<std::string> plugin_paths;
  /// Whether plugin_paths came from the document's "plugins.paths" (entry i
  /// is then /plugins/paths/i there) rather than the default.
  bool plugin_paths_given = false;
  /// Plugin names never loaded.
  std::vector<std::string> disabled_plugins;
  /// Load plugins from files or directories writable by other users.
  bool allow_insecure_permissions = false;
  /// Probe each plugin in a short-lived child process before loading it
  /// into this one ("plugins.isolate"; docs/configuration.md): a plugin that
  /// crashes, exits or hangs while probed is refused and cannot take the
  /// process down. Turn off only for trusted deployments.
  bool isolate_plugins = true;
  /// SHA-256 pins ("plugins.pins"): plugin name (as in its file name,
  /// libstrata_plugin_<name>.so) -> 64 lower-case hex digits. A file of a
  /// pinned plugin whose bytes hash otherwise is refused before any of its
  /// code runs; unpinned plugins load as usual.
  std::map<std::string, std::string> plugin_pins;
  /// How long a child probe may take before it is killed and the plugin
  /// refused ("plugins.probe_timeout_ms").
  int probe_timeout_ms = 10000;

  /// Backend names in order of preference for the default device.
  std::vector<std::string> prefer{"cuda", "hip", "vulkan", "cpu"};
  /// Keys: a backend name ("cpu") or a device id ("cuda:1"; wins over name).
  std::map<std::string, DeviceConfig> devices;

  FallbackPolicy fallback = FallbackPolicy::cpu;
  /// Per-op override of the fallback policy.
  std::map<std::string, FallbackPolicy> fallback_ops;

  /// Autocast op lists ("amp" object): each present list replaces the
  /// built-in one (see amp.hpp); absent lists keep the defaults.
  std::optional<std::vector<std::string>> amp_lower_precision;
  std::optional<std::vector<std::string>> amp_fp32;
  std::optional<std::vector<std::string>> amp_promote;
  /// Activation checkpointing policy; absent: none.
  std::optional<CheckpointConfig> checkpoint;

  std::string log_level = "info";  // trace, debug, info, warn, error, off
  std::vector<LogSink> log_sinks{{"stderr", ""}};

  /// Parses and validates a file. Throws ConfigError.
  static Config from_file(const std::string& path);
  /// Parses text; `source` names it in errors, relative paths resolve
  /// against `base_dir`. Throws ConfigError.
  static Config from_string(const std::string& text, const std::string& source,
                            const std::string& base_dir);
  /// The configuration used when no file is found.
  static Config builtin_default();
  /// The configuration the runtime loads when none is given: the file
  /// STRATA_CONFIG names, else the installed share/strata/configs/default.json,
  /// else builtin_default(). Parses only (loads no plugin). Throws ConfigError.
  static Config find();

  /// Settings for a device: its id's entry, else its backend's, else defaults.
  DeviceConfig device(const std::string& backend, int index) const;
  FallbackPolicy fallback_for(const std::string& op) const;
};

/// Expands ${STRATA_LIBDIR} (the folder holding libstrata.so), ${CONFIG_DIR}
/// and ${HOME} in a path.
std::string expand_path_variables(const std::string& path, const std::string& config_dir);

/// Folder of libstrata.so (for the build tree and installs alike).
std::string library_directory();

}  // namespace strata
