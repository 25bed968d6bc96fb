// plugin_loader.hpp — finding plugin files, reading their manifests with
// Boost.DLL, and initialising the chosen ones.
#pragma once

#include "runtime/device/device_record.hpp"

#include <strata/config.hpp>
#include <strata/plugin_info.hpp>

#include <memory>
#include <string>
#include <vector>

namespace strata::detail {

struct Candidate {
  std::string path;
  std::string name;   // from the file name
  std::string error;  // set when the search path itself is bad
  bool missing = false;  // the error is that the path does not exist
};

/// What the loader learned about a plugin before running any code of it
/// that may touch a driver: its table (manifest) and its probe's score.
struct Manifest {
  Candidate candidate;
  const strata_plugin_api* api = nullptr;
  void* library = nullptr;  // boost::dll::shared_library*, kept open for good (keep_loaded)
  int probe_score = 0;
};

/// Plugin files under the search paths (directories are scanned for
/// libstrata_plugin_<name>.so; files are taken as they are). A path that
/// does not exist, or cannot be read (a symbolic link loop, a name too long,
/// no permission), yields a Candidate with `error` set to the reason, the
/// path and the system's message. Never throws for a bad path.
std::vector<Candidate> discover_plugins(const std::vector<std::string>& paths);

/// Opens the library, checks its table against the ABI and runs `probe`.
/// On refusal returns nullptr and fills info.reason; never throws for a bad
/// plugin. Fills info.name/vendor/version/abi/score.
std::unique_ptr<Manifest> read_manifest(const Candidate& candidate, const Config& config, PluginInfo& info);

/// The checks of a plugin's table against the ABI that need no call into
/// it: size, ABI major and minor, required functions, name. Returns an
/// empty string and fills info.abi/name/vendor/version, or the reason for
/// refusal (never throws). read_manifest() runs it on the table the entry
/// point returned; the fuzzer fuzz_plugin_table runs it on tables it builds.
std::string validate_table(const strata_plugin_api* api, PluginInfo& info);

/// Calls the table's `probe` (the table passed validate_table()) with
/// `options_json`. Returns an empty string and sets info.score, or the
/// reason for refusal.
std::string run_probe(const strata_plugin_api* api, const std::string& options_json, PluginInfo& info);

/// Runs `init`. Returns nullptr (and info.reason) when init fails or the
/// initialised plugin is refused; such a plugin has been shut down already.
std::unique_ptr<LoadedPlugin> init_plugin(const Manifest& manifest, const Config& config, PluginInfo& info);

/// Reads the device properties and kernel table of device `index`.
/// Returns an empty string on success, else the reason for refusal; refused
/// kernel entries are reported in `warnings`.
std::string open_device(DeviceRecord& device, std::vector<std::string>& warnings);

/// Calls `shutdown` (when the plugin has one).
void shutdown_plugin(LoadedPlugin& plugin);

/// The name in libstrata_plugin_<name>.so, or "" when the file name does not
/// follow that pattern.
std::string plugin_name_from_path(const std::string& path);

/// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", or "" when the device reports none.
std::string uuid_string(const strata_device_props& props);

}  // namespace strata::detail
