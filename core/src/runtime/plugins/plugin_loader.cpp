// plugin_loader.cpp — loads plugin libraries and checks them against the ABI.
//
// Every check that can refuse a plugin happens here, and each refusal is a
// reason string, never an exception or a crash: the runtime records it and
// moves on to the next file.
#include "runtime/plugins/plugin_loader.hpp"

#include "base/logging.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/plugins/file_digest.hpp"
#include "runtime/plugins/plugin_host.hpp"
#include "runtime/plugins/plugin_probe.hpp"

#include <strata/error.hpp>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <system_error>
#include <vector>

namespace strata::detail {

namespace fs = std::filesystem;

namespace {

/// How a refusal for STRATA_ERROR_NO_DEVICE begins (also in a child probe's reason).
const std::string kNoDevicePrefix = "no usable device: ";


constexpr std::string_view kPrefix = "libstrata_plugin_";
constexpr std::string_view kSuffix = ".so";

/// Refuses files (and their directory) writable by group or others.
std::string insecure_reason(const std::string& path) {
  struct stat st {};
  for (const std::string& p : {path, fs::path(path).parent_path().string()}) {
    if (p.empty() || ::stat(p.c_str(), &st) != 0) continue;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return "\"" + p + "\" is writable by other users (set plugins.allow_insecure_permissions to load it anyway)";
    }
  }
  return {};
}

std::string options_for(const std::string& name, const Config& config) {
  DeviceConfig dc = config.device(name, 0);
  nlohmann::json options = nlohmann::json::parse(dc.options_json, nullptr, false);
  if (!options.is_object()) options = nlohmann::json::object();
  if (dc.threads != 0) options["threads"] = dc.threads;
  return options.dump();
}

/// The extensions of a table that the core knows, for `strata devices`.
std::vector<std::string> known_extensions(const LoadedPlugin& p) {
  std::vector<std::string> out;
  for (const char* name :
       {STRATA_EXT_NATIVE_HANDLES, STRATA_EXT_BUFFER_VIEWS, STRATA_EXT_GRAPH_EXECUTION, STRATA_EXT_COLLECTIVES,
        STRATA_EXT_TEST_CASES}) {
    if (const strata_extension* e = p.extension(name, 1)) out.push_back(std::string(name) + " v" + std::to_string(e->version));
  }
  return out;
}

}  // namespace

std::string plugin_name_from_path(const std::string& path) {
  std::string file = fs::path(path).filename().string();
  if (file.size() <= kPrefix.size() + kSuffix.size() || !file.starts_with(kPrefix) || !file.ends_with(kSuffix)) {
    return {};
  }
  return file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
}

namespace {

/// "\"<path>\"", the path cut to a readable length (a component of 300
/// characters stays recognisable).
std::string quoted_path(const std::string& path) {
  constexpr std::size_t kShown = 160;
  if (path.size() <= kShown) return "\"" + path + "\"";
  return "\"" + path.substr(0, kShown) + "...\" (" + std::to_string(path.size()) + " characters)";
}

/// The plugin files of one directory, in name order.
void scan_directory(const std::string& dir, std::vector<Candidate>& found) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    found.push_back({dir, "", "cannot read plugin directory " + quoted_path(dir) + ": " + ec.message()});
    return;
  }
  std::vector<std::string> files;
  // increment(ec), not ++: the operator throws filesystem_error.
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string file = it->path().string();
    if (!plugin_name_from_path(file).empty()) files.push_back(std::move(file));
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) found.push_back({f, plugin_name_from_path(f), {}});
  if (ec) {
    found.push_back({dir, "", "plugin directory " + quoted_path(dir) + " read only in part: " + ec.message()});
  }
}

}  // namespace

std::vector<Candidate> discover_plugins(const std::vector<std::string>& paths) {
  std::vector<Candidate> found;
  for (const std::string& p : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(p, ec);  // follows symbolic links; never opens the file
    if (st.type() == fs::file_type::not_found) {
      Candidate c{p, "", "plugin search path does not exist"};
      c.missing = true;
      found.push_back(std::move(c));
    } else if (ec) {
      found.push_back({p, "", "cannot read plugin search path " + quoted_path(p) + ": " + ec.message()});
    } else if (fs::is_directory(st)) {
      scan_directory(p, found);
    } else {
      std::string name = plugin_name_from_path(p);
      found.push_back({p, name.empty() ? fs::path(p).filename().string() : name, {}});
    }
  }
  return found;
}

namespace {

/// Keeps a plugin's library open for the life of the process (plugins are
/// never unloaded: docs/architecture.md, "Device manager") in a registry
/// that is itself never destroyed, so nothing closes them at exit. Every
/// handle stays reachable from here: released into a Manifest alone, the
/// handle of a plugin refused or superseded after this point was lost (a
/// leak LeakSanitizer reported).
void* keep_loaded(std::unique_ptr<boost::dll::shared_library> library) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::unique_ptr<boost::dll::shared_library>>();
  std::lock_guard lock(mutex);
  kept->push_back(std::move(library));
  return kept->back().get();
}

}  // namespace

std::string validate_table(const strata_plugin_api* api, PluginInfo& info) {
  if (api == nullptr) return "the entry point returned no table (the plugin declined this Strata version)";
  // struct_size, abi_major and abi_minor sit at the same place in every
  // version's table, so a plugin of another major is named correctly.
  if (api->struct_size < STRATA_SIZE_UP_TO(strata_plugin_api, abi_minor)) {
    return "plugin table too small (struct_size " + std::to_string(api->struct_size) + ")";
  }
  info.abi = std::to_string(api->abi_major) + "." + std::to_string(api->abi_minor);
  if (api->abi_major != STRATA_ABI_MAJOR) {
    return "ABI major mismatch: plugin built for ABI " + info.abi + ", this Strata speaks ABI " +
           std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR);
  }
  if (api->struct_size < STRATA_PLUGIN_API_MIN_SIZE) {
    return "plugin table too small for ABI " + info.abi + " (struct_size " + std::to_string(api->struct_size) +
           ", need at least " + std::to_string(STRATA_PLUGIN_API_MIN_SIZE) + ")";
  }
  if (api->min_host_minor > STRATA_ABI_MINOR) {
    return "the plugin needs a Strata core of ABI " + std::to_string(STRATA_ABI_MAJOR) + "." +
           std::to_string(api->min_host_minor) + " or later; this one speaks " + std::to_string(STRATA_ABI_MAJOR) +
           "." + std::to_string(STRATA_ABI_MINOR);
  }
  struct Required {
    const void* fn;
    const char* name;
  };
  for (Required r : {Required{reinterpret_cast<const void*>(api->probe), "probe"},
                     {reinterpret_cast<const void*>(api->init), "init"},
                     {reinterpret_cast<const void*>(api->device_props), "device_props"},
                     {reinterpret_cast<const void*>(api->get_kernels), "get_kernels"},
                     {reinterpret_cast<const void*>(api->alloc), "alloc"},
                     {reinterpret_cast<const void*>(api->free), "free"},
                     {reinterpret_cast<const void*>(api->copy), "copy"}}) {
    if (r.fn == nullptr) return std::string("plugin table lacks the required function \"") + r.name + "\"";
  }
  if (api->name == nullptr || *api->name == '\0') return "plugin table has no name";
  info.name = api->name;
  info.vendor = api->vendor != nullptr ? api->vendor : "";
  info.version = api->version != nullptr ? api->version : "";
  return {};
}

std::string run_probe(const strata_plugin_api* api, const std::string& options_json, PluginInfo& info) {
  strata_error err = fresh_error();
  strata_probe_args probe{};
  probe.struct_size = sizeof(probe);
  probe.options_json = options_json.c_str();
  probe.error = &err;
  strata_status st = api->probe(&probe);
  if (st != STRATA_OK) return "probe failed: " + message_of(st, err);
  if (probe.score <= 0) {
    return "probe: score " + std::to_string(probe.score) + ": the plugin cannot run here" +
           (err.message[0] != '\0' ? " (" + message_text(err) + ")" : "");
  }
  info.score = probe.score;
  return {};
}

constexpr const char* kDisabledReason = "disabled by the configuration (plugins.disabled)";

std::unique_ptr<Manifest> read_manifest(const Candidate& candidate, const Config& config, PluginInfo& info) {
  info.path = candidate.path;
  info.name = candidate.name;
  auto refuse = [&](std::string reason) -> std::unique_ptr<Manifest> {
    info.loaded = false;
    info.reason = std::move(reason);
    // A child probe's "no usable device: ..." is the plugin's init finding no
    // hardware, and a plugin the configuration disables is the user's choice:
    // both logged at info, as in load_plugin; every other refusal warns.
    const bool expected = info.reason.rfind(kNoDevicePrefix, 0) == 0 || info.reason == kDisabledReason;
    logger("plugin")->log(expected ? spdlog::level::info : spdlog::level::warn, "refused {}: {}", candidate.path,
                          info.reason);
    return nullptr;
  };
  if (!candidate.error.empty()) return refuse(candidate.error);
  if (std::find(config.disabled_plugins.begin(), config.disabled_plugins.end(), candidate.name) !=
      config.disabled_plugins.end()) {
    return refuse(kDisabledReason);
  }
  // Before anything opens it: dlopen of a FIFO blocks until a writer comes.
  if (std::string why = plugin_file_problem(candidate.path); !why.empty()) return refuse(why);
  if (auto pin = config.plugin_pins.find(candidate.name); pin != config.plugin_pins.end()) {
    try {
      info.sha256 = file_sha256(candidate.path);
    } catch (const Error& e) {
      return refuse(e.what());
    }
    if (info.sha256 != pin->second) {
      return refuse("SHA-256 mismatch: the file's is " + info.sha256 + ", plugins.pins." + pin->first + " expects " +
                    pin->second);
    }
  }
  if (!config.allow_insecure_permissions) {
    if (std::string why = insecure_reason(candidate.path); !why.empty()) return refuse(why);
  }
  if (!config.isolate_plugins) {
    info.probed = "in this process (plugins.isolate is false)";
  } else {
    ChildProbe child = probe_in_child(candidate.path, options_for(candidate.name, config), config.probe_timeout_ms);
    if (child.how.empty()) {
      info.probed = "in this process: the probe helper " + probe_helper_path() + " is missing";
      info.warnings.push_back("not isolated: " + info.probed);
    } else {
      info.probed = child.how;
      if (!child.ok) return refuse(child.reason);
    }
  }

  auto library = std::make_unique<boost::dll::shared_library>();
  try {
    library->load(candidate.path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    // Keep the loader's own words (dlerror), without Boost's wrapping.
    std::string what = e.what();
    const std::string marker = "dlerror system message: ";
    if (size_t at = what.find(marker); at != std::string::npos) {
      what = what.substr(at + marker.size());
      if (size_t close = what.rfind("):"); close != std::string::npos) what.resize(close);
    }
    return refuse("not a loadable shared library: " + what);
  }
  if (!library->has(STRATA_PLUGIN_ENTRY_SYMBOL)) {
    return refuse(std::string("missing entry symbol \"") + STRATA_PLUGIN_ENTRY_SYMBOL + "\"");
  }
  auto entry = library->get<const strata_plugin_api*(uint32_t, uint32_t)>(STRATA_PLUGIN_ENTRY_SYMBOL);
  const strata_plugin_api* api = entry(STRATA_ABI_MAJOR, STRATA_ABI_MINOR);
  if (std::string why = validate_table(api, info); !why.empty()) return refuse(why);
  if (!candidate.name.empty() && candidate.name != info.name) {
    logger("plugin")->warn("{}: file name says plugin \"{}\" but its table says \"{}\"", candidate.path,
                           candidate.name, info.name);
  }
  if (std::string why = run_probe(api, options_for(info.name, config), info); !why.empty()) return refuse(why);
  const int score = info.score;
  auto manifest = std::make_unique<Manifest>();
  manifest->candidate = candidate;
  manifest->api = api;
  manifest->probe_score = score;
  manifest->library = keep_loaded(std::move(library));
  return manifest;
}

void shutdown_plugin(LoadedPlugin& plugin) {
  if (plugin.has(&strata_plugin_api::shutdown)) plugin.api->shutdown(plugin.state);
}

std::unique_ptr<LoadedPlugin> init_plugin(const Manifest& m, const Config& config, PluginInfo& info) {
  const strata_plugin_api* api = m.api;
  auto plugin = std::make_unique<LoadedPlugin>();
  plugin->name = info.name;
  plugin->path = m.candidate.path;
  plugin->vendor = info.vendor;
  plugin->version = info.version;
  plugin->abi = info.abi;
  plugin->api = api;
  plugin->library = m.library;

  strata_error err = fresh_error();
  strata_init_args args{};
  args.struct_size = sizeof(args);
  args.host = plugin->host = &host_api();
  std::string options = options_for(info.name, config);
  args.options_json = options.c_str();
  args.score = m.probe_score;
  args.error = &err;
  strata_status st;
  std::string forced_refusal;
  {
    PluginInitScope scope(plugin->name, info);
    st = api->init(&args);
    forced_refusal = scope.refusal();
  }
  auto refuse = [&](std::string reason, spdlog::level::level_enum level = spdlog::level::warn)
      -> std::unique_ptr<LoadedPlugin> {
    info.loaded = false;
    info.reason = std::move(reason);
    for (const std::string& op : info.ops) info.warnings.push_back("op " + op + " retired: the plugin was refused");
    info.ops.clear();
    logger("plugin")->log(level, "refused {}: {}", m.candidate.path, info.reason);
    return nullptr;
  };
  if (st != STRATA_OK) {
    retire_plugin_registrations(plugin->name);  // what a failed init registered must not stay active
    // No driver or no device is a normal outcome (a CUDA plugin on a
    // machine without an NVIDIA GPU): recorded, shown by `strata devices`,
    // logged at info. A failing init is a problem: logged as a warning.
    if (st == STRATA_ERROR_NO_DEVICE) return refuse(kNoDevicePrefix + message_of(st, err), spdlog::level::info);
    return refuse("init failed: " + message_of(st, err));
  }
  info.initialized = true;
  plugin->state = args.state;
  plugin->score = args.score;
  info.score = args.score;
  if (!forced_refusal.empty()) {
    retire_plugin_registrations(plugin->name);
    shutdown_plugin(*plugin);  // it ran init: it gets its shutdown
    return refuse(forced_refusal);
  }
  plugin->extensions_seen = known_extensions(*plugin);
  info.extensions = plugin->extensions_seen;
  // A plugin without devices is kept when it defined ops: an op library
  // whose kernels run on other plugins' devices (ABI section 8).
  if (args.score <= 0 || (args.device_count <= 0 && info.ops.empty())) {
    retire_plugin_registrations(plugin->name);
    shutdown_plugin(*plugin);  // it ran init: it gets its shutdown
    return refuse(args.score <= 0 ? "init lowered the score to " + std::to_string(args.score) +
                                        ": the plugin cannot run on this machine"
                                  : "the plugin reports no devices and defines no ops");
  }
  plugin->device_count = std::max<int32_t>(args.device_count, 0);
  plugin->active = true;
  info.loaded = true;
  logger("plugin")->info("loaded {} {} (ABI {}, score {}) from {}", info.name, info.version, info.abi, info.score,
                         m.candidate.path);
  return plugin;
}

std::string uuid_string(const strata_device_props& props) {
  if (!STRATA_HAS_FIELD(&props, strata_device_props, uuid) || (props.flags & STRATA_DEVICE_HAS_UUID) == 0) return {};
  std::string s;
  char hex[3];
  for (int k = 0; k < 16; ++k) {
    if (k == 4 || k == 6 || k == 8 || k == 10) s += '-';
    std::snprintf(hex, sizeof(hex), "%02x", props.uuid[k]);
    s += hex;
  }
  return s;
}

std::string open_device(DeviceRecord& device, std::vector<std::string>& warnings) {
  const strata_plugin_api* api = device.plugin.api;
  const LoadedPlugin& plugin = device.plugin;
  strata_error err = fresh_error();
  device.props = strata_device_props{};
  device.props.struct_size = sizeof(strata_device_props);  // our capacity
  strata_device_args args{};
  args.struct_size = sizeof(args);
  args.state = plugin.state;
  args.device = device.index;
  args.props = &device.props;
  args.error = &err;
  if (strata_status st = api->device_props(&args); st != STRATA_OK) {
    return "device_props failed: " + message_of(st, err);
  }
  if (device.props.struct_size < STRATA_DEVICE_PROPS_MIN_SIZE || device.props.struct_size > sizeof(strata_device_props)) {
    return "device_props wrote struct_size " + std::to_string(device.props.struct_size) + " (expected " +
           std::to_string(STRATA_DEVICE_PROPS_MIN_SIZE) + ".." + std::to_string(sizeof(strata_device_props)) + ")";
  }
  device.props.name[sizeof(device.props.name) - 1] = '\0';
  device.props.compute_capability[sizeof(device.props.compute_capability) - 1] = '\0';
  if (STRATA_HAS_FIELD(&device.props, strata_device_props, pci_bus_id)) {
    device.props.pci_bus_id[sizeof(device.props.pci_bus_id) - 1] = '\0';
  }
  device.free_threaded = (device.props.flags & STRATA_DEVICE_FREE_THREADED) != 0;
  if ((device.props.flags & STRATA_DEVICE_HAS_STREAMS) != 0) {
    bool complete = plugin.has(&strata_plugin_api::stream_create) && plugin.has(&strata_plugin_api::stream_destroy) &&
                    plugin.has(&strata_plugin_api::stream_synchronize) &&
                    plugin.has(&strata_plugin_api::event_create) && plugin.has(&strata_plugin_api::event_destroy) &&
                    plugin.has(&strata_plugin_api::event_record) &&
                    plugin.has(&strata_plugin_api::stream_wait_event) &&
                    plugin.has(&strata_plugin_api::event_synchronize);
    if (!complete) {
      warnings.push_back(device.id + ": declares streams but its table lacks stream or event functions; treated as "
                                     "synchronous");
    } else {
      strata_stream_args sa{};
      sa.struct_size = sizeof(sa);
      sa.state = plugin.state;
      sa.device = device.index;
      sa.error = &err;
      if (strata_status st = api->stream_create(&sa); st != STRATA_OK) {
        return "stream_create failed: " + message_of(st, err);
      }
      device.stream = sa.stream;
      device.has_streams = true;
    }
  }
  if ((device.props.flags & STRATA_DEVICE_STAGE_PINNED) != 0) {
    if (device.has_streams && plugin.has(&strata_plugin_api::event_query)) {
      device.staging.enabled = true;
    } else {
      warnings.push_back(device.id + ": asks for pinned staging (STAGE_PINNED) without streams and event_query; its "
                                     "copies stay synchronous");
    }
  }
  args.props = nullptr;
  if (strata_status st = api->get_kernels(&args); st != STRATA_OK) {
    return "get_kernels failed: " + message_of(st, err);
  }
  if (args.n_entries < 0 || (args.n_entries > 0 && args.entries == nullptr)) {
    return "get_kernels returned " + std::to_string(args.n_entries) + " entries and no array";
  }
  device.kernels.assign(kMaxOps, {});
  auto log = logger("plugin");
  for (int32_t k = 0; k < args.n_entries; ++k) {
    if (std::string why = device.add_kernel(args.entries[k], k, &kernel_op_ref); !why.empty()) {
      log->warn("{}: {}; ignored", device.id, why);
      warnings.push_back(device.id + ": " + why);
    }
  }
  add_foreign_kernels(device, warnings);
  return {};
}

}  // namespace strata::detail
