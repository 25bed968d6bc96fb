// devices.cpp — `strata devices` and `strata config check`.
#include "commands.hpp"

#include <strata/strata.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace strata::cli {

namespace {

std::string bytes_text(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType t : dtypes) s += (s.empty() ? "" : " ") + std::string(dtype_name(t));
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
  if (stats) {
    MemoryStats m = runtime().memory_stats(d.device);
    j["memory"] = {{"allocated_bytes", m.allocated_bytes},
                   {"cached_bytes", m.cached_bytes},
                   {"peak_allocated_bytes", m.peak_allocated_bytes},
                   {"device_allocations", m.device_allocations}};
    j["missing_primitives"] = d.missing_primitives;
  }
  return j;
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
      }
      pj["devices"] = nlohmann::json::array();
      for (const DeviceInfo& d : p.devices) pj["devices"].push_back(device_json(d, options.stats));
      out["plugins"].push_back(pj);
    }
    if (options.stats) {
      out["fallbacks"] = nlohmann::json::array();
      for (const FallbackRecord& f : fallbacks) {
        out["fallbacks"].push_back({{"device", f.device}, {"op", f.op}, {"signature", f.signature}, {"count", f.count}});
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
    for (const DeviceInfo& d : p.devices) {
      std::cout << "    " << d.id << "  " << device_type_name(d.type) << "  " << d.name << "\n"
                << "           memory " << bytes_text(d.memory_bytes)
                << (d.memory_limit ? ", limit " + bytes_text(*d.memory_limit) : std::string()) << ", "
                << d.compute_capability << ", " << d.kernel_count << " kernels\n"
                << "           dtypes: " << dtype_list(d.dtypes) << " (compute: " << dtype_list(d.compute_dtypes)
                << ")\n";
      if (options.stats) {
        MemoryStats m = rt.memory_stats(d.device);
        std::cout << "           allocator: " << bytes_text(m.allocated_bytes) << " live, " << bytes_text(m.cached_bytes)
                  << " cached, peak " << bytes_text(m.peak_allocated_bytes) << ", " << m.device_allocations
                  << " device allocations\n";
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
    std::cout << path << ": OK\n"
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
