// probe_child.cpp — the probe helper's side (strata-plugin-probe, core/probe):
// in a child process, with a runtime of no plugins, one plugin is loaded,
// checked against the ABI, probed, initialised, its devices opened and shut
// down, each stage reported on stdout, then one JSON result line. It drives
// the device manager and the loader, so it sits at the top of the runtime
// layer; the parent's side is plugins/plugin_probe.cpp.
#include "runtime/device/device_record.hpp"
#include "runtime/plugins/plugin_loader.hpp"
#include "runtime/plugins/plugin_probe.hpp"
#include "runtime/plugins/probe_cache.hpp"

#include <strata/runtime.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace strata::detail {

namespace {

/// The table's probe_environment (ABI 2.1) as JSON: null when the table
/// lacks the field or leaves it NULL; at most kMaxDeclaredNames names (a
/// list without its terminator within that many counts as none).
nlohmann::json declared_environment(const strata_plugin_api& api) {
  if (!STRATA_HAS_FIELD(&api, strata_plugin_api, probe_environment) || api.probe_environment == nullptr) {
    return nullptr;
  }
  nlohmann::json names = nlohmann::json::array();
  for (size_t k = 0; k <= kMaxDeclaredNames; ++k) {
    const char* name = api.probe_environment[k];
    if (name == nullptr) return names;
    if (k == kMaxDeclaredNames || std::strlen(name) > kMaxDeclaredNameBytes) break;
    names.push_back(name);
  }
  return nullptr;
}

}  // namespace

int plugin_probe_main(int argc, char** argv) {
  std::string path, options = "{}";
  for (int k = 1; k + 1 < argc; k += 2) {
    const std::string flag = argv[k];
    if (flag == "--plugin") path = argv[k + 1];
    if (flag == "--options") options = argv[k + 1];
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: strata-plugin-probe --plugin PATH [--options JSON]\n"
                         "Probes one Strata plugin for the runtime, which starts it; not meant to be run by hand.\n");
    return 2;
  }
  auto stage = [](const std::string& what) {
    std::printf("stage %s\n", what.c_str());
    std::fflush(stdout);
  };
  auto result = [](bool ok, const std::string& reason, nlohmann::json environment = nullptr) {
    const nlohmann::json line{{"ok", ok}, {"reason", reason}, {"environment", std::move(environment)}};
    std::printf("result %s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  };
  try {
    // A runtime with no plugins, so that host services the plugin calls
    // (register_kernels looks at the devices) never load plugins here.
    ::unsetenv("STRATA_PLUGIN_PATH");
    Config empty = Config::builtin_default();
    empty.plugin_paths.clear();
    runtime().configure(empty);

    Config cfg = empty;
    cfg.allow_insecure_permissions = true;  // the parent checked
    cfg.isolate_plugins = false;
    Candidate candidate{path, plugin_name_from_path(path), {}};
    if (!candidate.name.empty()) {
      DeviceConfig dc;
      dc.options_json = options;
      cfg.devices[candidate.name] = dc;
    }
    PluginInfo info;
    stage("loading the library and running its probe");
    std::unique_ptr<Manifest> manifest = read_manifest(candidate, cfg, info);
    if (!manifest) {
      result(false, info.reason);
      std::_Exit(0);
    }
    stage("running its init");
    std::unique_ptr<LoadedPlugin> plugin = init_plugin(*manifest, cfg, info);
    if (!plugin) {
      result(false, info.reason);
      std::_Exit(0);
    }
    std::vector<std::string> warnings;
    for (int32_t i = 0; i < plugin->device_count; ++i) {
      stage("opening device " + std::to_string(i) + " (device_props, get_kernels)");
      auto* record = new DeviceRecord(*plugin, i, i);  // never freed: the process ends below
      record->id = plugin->name + ":" + std::to_string(i);
      open_device(*record, warnings);  // a refused device is the parent's to report
    }
    stage("running its shutdown");
    shutdown_plugin(*plugin);
    result(true, "", declared_environment(*manifest->api));
  } catch (const std::exception& e) {
    result(false, std::string("the child probe failed: ") + e.what());
  }
  std::_Exit(0);
}

}  // namespace strata::detail
