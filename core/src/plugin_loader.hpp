// plugin_loader.hpp — finding plugin files and loading one with Boost.DLL.
#pragma once

#include "device_record.hpp"

#include <strata/config.hpp>
#include <strata/runtime.hpp>

#include <memory>
#include <string>
#include <vector>

namespace strata::detail {

struct Candidate {
  std::string path;
  std::string name;   // from the file name
  std::string error;  // set when the search path itself is bad
};

/// Plugin files under the search paths (directories are scanned for
/// libstrata_plugin_<name>.so; files are taken as they are). A path that
/// does not exist yields a Candidate with `error` set.
std::vector<Candidate> discover_plugins(const std::vector<std::string>& paths);

/// Loads and initialises one plugin. On refusal returns nullptr and fills
/// info.reason; never throws for a bad plugin.
std::unique_ptr<LoadedPlugin> load_plugin(const Candidate& candidate, const Config& config, PluginInfo& info);

/// Reads the device properties and kernel table of device `index`.
/// Returns an empty string on success, else the reason for refusal.
std::string open_device(DeviceRecord& device);

/// The name in libstrata_plugin_<name>.so, or "" when the file name does not
/// follow that pattern.
std::string plugin_name_from_path(const std::string& path);

}  // namespace strata::detail
