// plugin_loader.cpp — loads plugin libraries and checks them against the ABI.
//
// Every check that can refuse a plugin happens here, and each refusal is a
// reason string, never an exception or a crash: the runtime records it and
// moves on to the next file.
#include "plugin_loader.hpp"

#include "logging.hpp"
#include "op.hpp"

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <system_error>

namespace strata::detail {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "libstrata_plugin_";
constexpr std::string_view kSuffix = ".so";

/// Size of the ABI 1.0 table up to and including its last required field.
constexpr size_t kMinTableSize = offsetof(strata_plugin_api, get_kernels) + sizeof(void*);

void host_log(strata_log_level level, const char* plugin_name, const char* message) {
  static constexpr spdlog::level::level_enum kLevels[] = {spdlog::level::trace, spdlog::level::debug,
                                                          spdlog::level::info, spdlog::level::warn,
                                                          spdlog::level::err};
  auto lvl = static_cast<int>(level) >= 0 && static_cast<int>(level) <= 4 ? kLevels[level] : spdlog::level::info;
  logger(plugin_name != nullptr ? plugin_name : "plugin")->log(lvl, "{}", message != nullptr ? message : "");
}

const strata_host_api kHostApi{sizeof(strata_host_api), STRATA_ABI_MAJOR, STRATA_ABI_MINOR, &host_log};

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

}  // namespace

std::string plugin_name_from_path(const std::string& path) {
  std::string file = fs::path(path).filename().string();
  if (file.size() <= kPrefix.size() + kSuffix.size() || !file.starts_with(kPrefix) || !file.ends_with(kSuffix)) {
    return {};
  }
  return file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
}

std::vector<Candidate> discover_plugins(const std::vector<std::string>& paths) {
  std::vector<Candidate> found;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        std::string name = plugin_name_from_path(entry.path().string());
        if (!name.empty()) files.push_back(entry.path().string());
      }
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) found.push_back({f, plugin_name_from_path(f), {}});
    } else if (fs::exists(p, ec)) {
      std::string name = plugin_name_from_path(p);
      found.push_back({p, name.empty() ? fs::path(p).filename().string() : name, {}});
    } else {
      found.push_back({p, "", "plugin search path does not exist"});
    }
  }
  return found;
}

std::unique_ptr<LoadedPlugin> load_plugin(const Candidate& candidate, const Config& config, PluginInfo& info) {
  info.path = candidate.path;
  info.name = candidate.name;
  auto refuse = [&](std::string reason) -> std::unique_ptr<LoadedPlugin> {
    info.loaded = false;
    info.reason = std::move(reason);
    logger("plugin")->warn("refused {}: {}", candidate.path, info.reason);
    return nullptr;
  };
  if (!candidate.error.empty()) return refuse(candidate.error);
  if (std::find(config.disabled_plugins.begin(), config.disabled_plugins.end(), candidate.name) !=
      config.disabled_plugins.end()) {
    return refuse("disabled by the configuration (plugins.disabled)");
  }
  if (!config.allow_insecure_permissions) {
    if (std::string why = insecure_reason(candidate.path); !why.empty()) return refuse(why);
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
  if (api == nullptr) return refuse("the entry point returned no table (the plugin declined this Strata version)");
  if (api->struct_size < offsetof(strata_plugin_api, abi_minor) + sizeof(uint32_t)) {
    return refuse("plugin table too small (struct_size " + std::to_string(api->struct_size) + ")");
  }
  info.abi = std::to_string(api->abi_major) + "." + std::to_string(api->abi_minor);
  if (api->abi_major != STRATA_ABI_MAJOR) {
    return refuse("ABI major mismatch: plugin built for ABI " + info.abi + ", this Strata speaks ABI " +
                  std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR));
  }
  if (api->struct_size < kMinTableSize) {
    return refuse("plugin table too small for ABI " + info.abi + " (struct_size " + std::to_string(api->struct_size) +
                  ", need " + std::to_string(kMinTableSize) + ")");
  }
  struct Required {
    const void* fn;
    const char* name;
  };
  for (Required r : {Required{reinterpret_cast<const void*>(api->init), "init"},
                     {reinterpret_cast<const void*>(api->score), "score"},
                     {reinterpret_cast<const void*>(api->device_count), "device_count"},
                     {reinterpret_cast<const void*>(api->device_props), "device_props"},
                     {reinterpret_cast<const void*>(api->alloc), "alloc"},
                     {reinterpret_cast<const void*>(api->free), "free"},
                     {reinterpret_cast<const void*>(api->copy_h2d), "copy_h2d"},
                     {reinterpret_cast<const void*>(api->copy_d2h), "copy_d2h"},
                     {reinterpret_cast<const void*>(api->copy_d2d), "copy_d2d"},
                     {reinterpret_cast<const void*>(api->get_kernels), "get_kernels"}}) {
    if (r.fn == nullptr) return refuse(std::string("plugin table lacks the required function \"") + r.name + "\"");
  }
  if (api->name == nullptr || *api->name == '\0') return refuse("plugin table has no name");
  info.name = api->name;
  info.vendor = api->vendor != nullptr ? api->vendor : "";
  info.version = api->version != nullptr ? api->version : "";
  if (!candidate.name.empty() && candidate.name != info.name) {
    logger("plugin")->warn("{}: file name says plugin \"{}\" but its table says \"{}\"", candidate.path,
                           candidate.name, info.name);
  }

  strata_error err{sizeof(strata_error), {}};
  strata_plugin_state state = nullptr;
  strata_status st = api->init(&kHostApi, options_for(info.name, config).c_str(), &state, &err);
  if (st != STRATA_OK) {
    std::string what = st == STRATA_ERROR_NO_DEVICE ? "no usable device" : "init failed";
    return refuse(what + ": " + (err.message[0] != '\0' ? err.message : "status " + std::to_string(st)));
  }
  info.score = api->score(state);
  if (info.score <= 0) return refuse("score " + std::to_string(info.score) + ": the plugin cannot run on this machine");
  if (api->device_count(state) <= 0) return refuse("the plugin reports no devices");

  auto plugin = std::make_unique<LoadedPlugin>();
  plugin->name = info.name;
  plugin->path = candidate.path;
  plugin->vendor = info.vendor;
  plugin->version = info.version;
  plugin->abi = info.abi;
  plugin->score = info.score;
  plugin->api = api;
  plugin->state = state;
  plugin->library = library.release();  // never unloaded (DESIGN: plugin lifetime)
  info.loaded = true;
  logger("plugin")->info("loaded {} {} (ABI {}, score {}) from {}", info.name, info.version, info.abi, info.score,
                         candidate.path);
  return plugin;
}

std::string open_device(DeviceRecord& device) {
  const strata_plugin_api* api = device.plugin.api;
  strata_error err{sizeof(strata_error), {}};
  device.props.struct_size = sizeof(strata_device_props);
  if (api->device_props(device.plugin.state, device.index, &device.props, &err) != STRATA_OK) {
    return std::string("device_props failed: ") + err.message;
  }
  device.props.name[sizeof(device.props.name) - 1] = '\0';
  device.props.compute_capability[sizeof(device.props.compute_capability) - 1] = '\0';
  if (device.props.has_streams != 0 && api->stream_create != nullptr) {
    if (api->stream_create(device.plugin.state, device.index, &device.stream, &err) != STRATA_OK) {
      return std::string("stream_create failed: ") + err.message;
    }
  }
  const strata_kernel_entry* entries = nullptr;
  int32_t count = 0;
  if (api->get_kernels(device.plugin.state, device.index, &entries, &count, &err) != STRATA_OK) {
    return std::string("get_kernels failed: ") + err.message;
  }
  device.kernels.assign(all_ops().size(), {});
  auto log = logger("plugin");
  for (int32_t k = 0; k < count; ++k) {
    const strata_kernel_entry& e = entries[k];
    if (e.struct_size < sizeof(strata_kernel_entry) || e.op == nullptr || e.fn == nullptr) {
      log->warn("{}: kernel entry {} is malformed; ignored", device.id, k);
      continue;
    }
    const OpDef* op = find_op(e.op);
    if (op == nullptr) {
      log->debug("{}: kernel for unknown op \"{}\" ignored", device.id, e.op);
      continue;
    }
    uint64_t key = parse_signature(e.signature);
    if (key == 0) {
      log->warn("{}: kernel {} has a malformed signature \"{}\"; ignored", device.id, e.op,
                e.signature != nullptr ? e.signature : "(null)");
      continue;
    }
    auto& slots = device.kernels[static_cast<size_t>(op->id)];
    bool duplicate = std::any_of(slots.begin(), slots.end(), [&](const KernelSlot& s) { return s.signature == key; });
    if (duplicate) continue;
    slots.push_back({key, e.fn, e.flags});
    ++device.kernel_count;
  }
  return {};
}

}  // namespace strata::detail
