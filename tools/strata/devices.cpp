// devices.cpp — `strata devices` and `strata config check`.
#include "commands.hpp"

#include <strata/strata.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace strata::cli {

namespace {


std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType t : dtypes) s.append(s.empty() ? "" : " ").append(dtype_name(t));
  return s;
}

nlohmann::json device_json(const DeviceInfo& d, bool stats) {
  nlohmann::json j{{"id", d.id},
                   {"type", device_type_name(d.type)},
                   {"name", d.name},
                   {"memory_bytes", d.memory_bytes},
                   {"dtypes", nlohmann::json::array()},
                   {"compute_dtypes", nlohmann::json::array()},
                   {"compute_capability", d.compute_capability},
                   {"streams", d.has_streams},
                   {"unified_memory", d.unified_memory},
                   {"kernels", d.kernel_count},
                   {"memory_limit", d.memory_limit ? nlohmann::json(*d.memory_limit) : nlohmann::json(nullptr)}};
  for (DType t : d.dtypes) j["dtypes"].push_back(dtype_name(t));
  for (DType t : d.compute_dtypes) j["compute_dtypes"].push_back(dtype_name(t));
  j["uuid"] = d.uuid;
  j["pci_bus_id"] = d.pci_bus_id;
  j["same_hardware_as"] = d.same_hardware_as;
  j["free_threaded"] = d.free_threaded;
  j["plugin_caches_memory"] = d.plugin_caches_memory;
  if (d.lost) j["lost"] = d.lost_reason;
  if (stats) {
    MemoryStats m = runtime().memory_stats(d.device);
    j["memory"] = {{"allocated_bytes", m.allocated_bytes},
                   {"cached_bytes", m.cached_bytes},
                   {"peak_allocated_bytes", m.peak_allocated_bytes},
                   {"device_allocations", m.device_allocations}};
    if (!d.lost) {
      DeviceMemoryInfo pm = runtime().device_memory_info(d.device);
      auto opt = [](const std::optional<uint64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
      j["plugin_memory"] = {{"free_bytes", opt(pm.free_bytes)},
                            {"total_bytes", opt(pm.total_bytes)},
                            {"bytes_in_use", opt(pm.plugin_bytes_in_use)},
                            {"bytes_reserved", opt(pm.plugin_bytes_reserved)},
                            {"peak_bytes_in_use", opt(pm.plugin_peak_bytes_in_use)},
                            {"allocations", opt(pm.plugin_allocations)}};
    }
    j["missing_primitives"] = d.missing_primitives;
  }
  return j;
}

/// "12.0 GiB free of 16.0 GiB; plugin: 1.0 MiB in use, ..." from what the plugin reports.
std::string plugin_memory_text(const DeviceMemoryInfo& m) {
  std::string s;
  if (m.free_bytes && m.total_bytes) s = format_bytes(*m.free_bytes) + " free of " + format_bytes(*m.total_bytes);
  if (m.plugin_bytes_in_use) {
    s += (s.empty() ? "" : "; ") + std::string("plugin: ") + format_bytes(*m.plugin_bytes_in_use) + " in use, " +
         format_bytes(m.plugin_bytes_reserved.value_or(0)) + " reserved, peak " +
         format_bytes(m.plugin_peak_bytes_in_use.value_or(0)) + ", " +
         std::to_string(m.plugin_allocations.value_or(0)) + " driver allocations";
  }
  return s.empty() ? "not reported by the plugin" : s;
}

}  // namespace

int run_devices(const DevicesOptions& options) {
  Runtime& rt = runtime();
  std::vector<PluginInfo> plugins = rt.plugins();
  std::string selected;
  try {
    selected = rt.default_device().str();
  } catch (const Error&) {
    selected.clear();  // no device: reported below
  }
  std::vector<FallbackRecord> fallbacks = rt.fallback_stats();

  if (options.json) {
    nlohmann::json out{{"config", rt.config().source},
                       {"version", version()},
                       {"abi", abi_version()},
                       {"selected", selected.empty() ? nlohmann::json(nullptr) : nlohmann::json(selected)},
                       {"plugins", nlohmann::json::array()}};
    for (const PluginInfo& p : plugins) {
      nlohmann::json pj{{"name", p.name}, {"path", p.path}, {"status", p.loaded ? "loaded" : "refused"}};
      if (!p.reason.empty()) pj["reason"] = p.reason;
      if (!p.abi.empty()) pj["abi"] = p.abi;
      if (p.loaded) {
        pj["version"] = p.version;
        pj["vendor"] = p.vendor;
        pj["score"] = p.score;
        pj["ops"] = p.ops;
        pj["extensions"] = p.extensions;
      }
      pj["initialized"] = p.initialized;
      if (!p.probed.empty()) pj["probed"] = p.probed;
      if (!p.sha256.empty()) pj["sha256"] = p.sha256;
      if (!p.warnings.empty()) pj["warnings"] = p.warnings;
      pj["devices"] = nlohmann::json::array();
      for (const DeviceInfo& d : p.devices) pj["devices"].push_back(device_json(d, options.stats));
      out["plugins"].push_back(pj);
    }
    if (options.stats) {
      out["fallbacks"] = nlohmann::json::array();
      for (const FallbackRecord& f : fallbacks) {
        out["fallbacks"].push_back({{"device", f.device}, {"op", f.op}, {"signature", f.signature}, {"count", f.count}});
      }
      out["vmap_loops"] = nlohmann::json::array();
      for (const VmapFallback& f : vmap_fallback_stats()) {
        out["vmap_loops"].push_back({{"op", f.op}, {"reason", f.reason}, {"calls", f.calls}, {"lanes", f.lanes}});
      }
    }
    std::cout << out.dump(2) << "\n";
    return selected.empty() ? kFailure : kOk;
  }

  std::cout << "Strata " << version() << ", plugin ABI " << abi_version() << "\n";
  std::cout << "Configuration: " << rt.config().source << "\n";
  std::cout << "Plugins:\n";
  if (plugins.empty()) std::cout << "  (none found)\n";
  for (const PluginInfo& p : plugins) {
    if (!p.loaded) {
      std::cout << "  refused  " << (p.name.empty() ? "?" : p.name) << "  " << p.path << "\n           " << p.reason
                << "\n";
      continue;
    }
    std::cout << "  loaded   " << p.name << " " << p.version << " (" << p.vendor << "), ABI " << p.abi << ", score "
              << p.score << "  " << p.path << "\n";
    if (!p.probed.empty()) std::cout << "           probed: " << p.probed << "\n";
    for (const std::string& e : p.extensions) std::cout << "           extension " << e << "\n";
    for (const std::string& op : p.ops) std::cout << "           defines op " << op << "\n";
    for (const std::string& w : p.warnings) std::cout << "           warning: " << w << "\n";
    for (const DeviceInfo& d : p.devices) {
      std::cout << "    " << d.id << "  " << device_type_name(d.type) << "  " << d.name << "\n"
                << "           memory " << format_bytes(d.memory_bytes)
                << (d.memory_limit ? ", limit " + format_bytes(*d.memory_limit) : std::string()) << ", "
                << d.compute_capability << ", " << d.kernel_count << " kernels"
                << (d.free_threaded ? ", free-threaded" : "") << (d.has_streams ? ", streams" : "") << "\n"
                << "           dtypes: " << dtype_list(d.dtypes) << " (compute: " << dtype_list(d.compute_dtypes)
                << ")\n";
      if (!d.uuid.empty() || !d.pci_bus_id.empty()) {
        std::cout << "           identity:" << (d.uuid.empty() ? "" : " uuid " + d.uuid)
                  << (d.pci_bus_id.empty() ? "" : " pci " + d.pci_bus_id) << "\n";
      }
      for (const std::string& other : d.same_hardware_as) {
        std::cout << "           same hardware as " << other << " (counted once; \"prefer\" decides which is used)\n";
      }
      if (d.lost) std::cout << "           LOST: " << d.lost_reason << "\n";
      if (options.stats) {
        MemoryStats m = rt.memory_stats(d.device);
        std::cout << "           allocator: " << format_bytes(m.allocated_bytes) << " live, " << format_bytes(m.cached_bytes)
                  << " cached, peak " << format_bytes(m.peak_allocated_bytes) << ", " << m.device_allocations
                  << " device allocations\n";
        if (!d.lost) std::cout << "           device memory: " << plugin_memory_text(rt.device_memory_info(d.device)) << "\n";
        std::cout << "           primitives without a kernel (fall back): "
                  << (d.missing_primitives.empty() ? std::string("none") : std::string()) << "";
        for (const std::string& op : d.missing_primitives) std::cout << op << " ";
        std::cout << "\n";
      }
    }
  }
  if (options.stats) {
    std::cout << "Fallbacks to cpu:0 in this process: " << (fallbacks.empty() ? "none" : "") << "\n";
    for (const FallbackRecord& f : fallbacks) {
      std::cout << "  " << f.device << "  " << f.op << " " << f.signature << "  x" << f.count << "\n";
    }
    const std::vector<VmapFallback> loops = vmap_fallback_stats();
    std::cout << "Ops vmap ran lane by lane in this process: " << (loops.empty() ? "none" : "") << "\n";
    for (const VmapFallback& f : loops) {
      std::cout << "  " << f.op << " (" << f.reason << ")  " << f.calls << " calls, " << f.lanes << " lanes\n";
    }
  }
  if (selected.empty()) {
    std::cout << "Selected device: none (no plugin could be loaded)\n";
    return kFailure;
  }
  std::cout << "Selected device: " << selected << "\n";
  return kOk;
}

int run_config_check(const std::string& path) {
  try {
    Config c = Config::from_file(path);
    // What needs this machine: search paths, log files (nothing is loaded).
    std::vector<ConfigIssue> issues = check_config(c);
    int errors = 0;
    for (const ConfigIssue& issue : issues) {
      bool error = issue.severity == ConfigIssue::Severity::error;
      errors += error ? 1 : 0;
      std::cerr << (error ? "error: " : "warning: ") << issue.message << "\n";
    }
    if (errors > 0) {
      std::cerr << path << ": " << errors << " error(s)\n";
      return kBadInput;
    }
    std::cout << path << ": OK" << (issues.empty() ? "" : " (with warnings)") << "\n"
              << "  plugin paths: " << c.plugin_paths.size() << ", prefer:";
    for (const std::string& p : c.prefer) std::cout << " " << p;
    std::cout << ", fallback: " << (c.fallback == FallbackPolicy::cpu ? "cpu" : "error") << ", log level "
              << c.log_level << "\n";
    return kOk;
  } catch (const ConfigError& e) {
    std::cerr << e.what() << "\n";
    return kBadInput;
  }
}

}  // namespace strata::cli
