// device_manager.cpp — what the device manager does when a configuration
// is applied: plugins found, probed, pinned and initialised (the best build
// of each name), their devices opened into the device table, the default
// device chosen; and the plugins shut down at exit.
#include "runtime/runtime_impl.hpp"

#include "base/config_internal.hpp"
#include "base/logging.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/plugins/plugin_host.hpp"
#include "runtime/plugins/plugin_probe.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace strata {

using detail::DeviceRecord;
using detail::LoadedPlugin;

namespace {

std::atomic<bool> g_shutting_down{false};

int type_rank(strata_device_type t) {
  switch (t) {
    case STRATA_DEVICE_GPU: return 0;
    case STRATA_DEVICE_IGPU: return 1;
    case STRATA_DEVICE_ACCELERATOR: return 2;
    default: return 3;
  }
}

/// At exit: stop returning memory to plugins, then let each initialised
/// plugin release its device resources. Libraries stay mapped (never
/// unloaded).
void shutdown_plugins() {
  g_shutting_down = true;
  for (const auto& plugin : runtime().impl().plugins) detail::shutdown_plugin(*plugin);
}

/// Whether two devices are one piece of hardware (same UUID or PCI bus id).
bool same_hardware(const DeviceRecord& a, const DeviceRecord& b) {
  if (&a == &b) return false;
  auto has_uuid = [](const strata_device_props& p) {
    return STRATA_HAS_FIELD(&p, strata_device_props, uuid) && (p.flags & STRATA_DEVICE_HAS_UUID) != 0;
  };
  if (has_uuid(a.props) && has_uuid(b.props) && std::memcmp(a.props.uuid, b.props.uuid, sizeof(a.props.uuid)) == 0) {
    return true;
  }
  bool has_pci = STRATA_HAS_FIELD(&a.props, strata_device_props, pci_bus_id) &&
                 STRATA_HAS_FIELD(&b.props, strata_device_props, pci_bus_id);
  return has_pci && a.props.pci_bus_id[0] != '\0' && std::strcmp(a.props.pci_bus_id, b.props.pci_bus_id) == 0;
}

/// STRATA_LOCAL_RANK (set by `strata launch`), or -1 when unset; a value
/// that is not a non-negative integer is named in a warning and ignored.
int env_local_rank() {
  const char* v = std::getenv("STRATA_LOCAL_RANK");
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || value < 0 || value > INT32_MAX) {
    detail::logger("runtime")->warn("STRATA_LOCAL_RANK=\"{}\" is not a local rank (a non-negative integer): ignored",
                                    v);
    return -1;
  }
  return static_cast<int>(value);
}

}  // namespace

std::vector<std::string> env_plugin_paths() {
  std::vector<std::string> paths;
  const char* env = std::getenv("STRATA_PLUGIN_PATH");
  if (env == nullptr) return paths;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ':')) {
    if (!item.empty()) paths.push_back(item);
  }
  return paths;
}

void Runtime::Impl::ensure_initialized() {
  if (initialized.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex);
  if (initialized.load(std::memory_order_relaxed)) return;
  apply(Config::find());
}

void Runtime::Impl::apply(const Config& new_config) {
  detail::configure_logging(new_config);
  for (auto& [id, dc] : new_config.devices) {
    if (dc.memory_limit && *dc.memory_limit == 0) {
      throw ConfigError(new_config.source + ": /devices/" + id + "/memory_limit: expected a positive size, found 0");
    }
  }
  config = new_config;
  load_plugins(config);
  // After loading: "fallback.ops" may name ops the plugins just defined.
  const auto& ops = detail::all_ops();
  for (size_t k = 0; k < ops.size() && k < fallback_by_op.size(); ++k) {
    fallback_by_op[k] = static_cast<uint8_t>(config.fallback_for(std::string(ops[k]->name)));
  }
  for (auto& record : records) {
    DeviceConfig dc = config.device(record->plugin.name, record->index);
    record->allocator.set_limit(dc.memory_limit);
    record->allocator.set_caching(dc.allocator_cache);
  }
  select_default();
  if (!initialized.exchange(true)) std::atexit(shutdown_plugins);
}

void Runtime::Impl::load_plugins(const Config& cfg) {
  std::vector<detail::Candidate> candidates = detail::discover_plugins(cfg.plugin_paths);
  for (detail::Candidate& c : detail::discover_plugins(env_plugin_paths())) {
    if (!c.error.empty()) c.error = "STRATA_PLUGIN_PATH entry: " + c.error;
    candidates.push_back(std::move(c));
  }
  // 0. A pin that names no plugin found protects nothing: a misspelt name
  //    would let the real plugin load unpinned while the user believes it is
  //    pinned. Refused before anything loads.
  for (const auto& pin : cfg.plugin_pins) {
    const std::string& name = pin.first;  // not a structured binding: clang 14 cannot capture one in a lambda
    const bool found = std::any_of(candidates.begin(), candidates.end(),
                                   [&](const detail::Candidate& c) { return c.name == name; });
    if (found) continue;
    std::set<std::string> names;
    for (const detail::Candidate& c : candidates) {
      if (!c.name.empty()) names.insert(c.name);
    }
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw ConfigError(cfg.source + ": /plugins/pins/" + name + ": no plugin named \"" + name +
                      "\" was found in the plugin paths (found: " + (list.empty() ? std::string("none") : list) +
                      "); a pin that matches no plugin protects nothing");
  }
  // 1. Manifests: every new file's table is checked and probed; nothing that
  //    may touch a driver has run yet.
  struct Found {
    std::unique_ptr<detail::Manifest> manifest;
    PluginInfo info;
  };
  std::vector<Found> found;
  for (const detail::Candidate& candidate : candidates) {
    std::error_code ec;
    std::string key = std::filesystem::weakly_canonical(candidate.path, ec).string();
    if (ec) key = candidate.path;  // a path the system cannot resolve: its refusal says why
    if (!seen_paths.insert(key).second) continue;
    PluginInfo info;
    auto manifest = detail::read_manifest(candidate, cfg, info);
    found.push_back({std::move(manifest), std::move(info)});
  }
  // 2. Several builds of one backend: the highest probe score is initialised
  //    (ggml's model); the others are superseded without running their init.
  //    When the best one's init fails, the next build gets its chance. A
  //    name already active from an earlier configuration stays. Names are
  //    taken in the order they were first found, so devices keep the search
  //    order.
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> group_of;
  for (size_t k = 0; k < found.size(); ++k) {
    if (!found[k].manifest) continue;
    auto [it, fresh] = group_of.try_emplace(found[k].info.name, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(k);
  }
  for (std::vector<size_t>& group : groups) {
    std::stable_sort(group.begin(), group.end(), [&](size_t a, size_t b) {
      return found[a].manifest->probe_score > found[b].manifest->probe_score;
    });
    const Found* chosen = nullptr;
    for (size_t k : group) {
      Found& f = found[k];
      const std::string& name = f.info.name;
      if (chosen != nullptr) {
        f.info.reason = "superseded by " + chosen->manifest->candidate.path + " (probe score " +
                        std::to_string(chosen->manifest->probe_score) + " >= " +
                        std::to_string(f.manifest->probe_score) + "); its init never ran";
        continue;
      }
      auto active = std::find_if(plugins.begin(), plugins.end(), [&](const auto& p) { return p->name == name; });
      if (active != plugins.end()) {
        f.info.reason = "a plugin named \"" + name + "\" is already active from " + (*active)->path;
        continue;
      }
      auto plugin = detail::init_plugin(*f.manifest, cfg, f.info);
      if (!plugin) continue;  // the next build of this name gets its chance
      chosen = &f;
      LoadedPlugin& loaded = *plugins.emplace_back(std::move(plugin));
      add_devices(loaded, f.info);
    }
  }
  for (Found& f : found) outcomes.push_back(std::move(f.info));
}

void Runtime::Impl::add_devices(LoadedPlugin& plugin, PluginInfo& info) {
  for (int32_t i = 0; i < plugin.device_count; ++i) {
    int32_t slot = device_count.load();
    if (static_cast<size_t>(slot) >= kMaxDevices) {
      detail::logger("core")->warn("device table full; {}:{} ignored", plugin.name, i);
      break;
    }
    auto record = std::make_unique<DeviceRecord>(plugin, i, slot);
    record->id = plugin.name + ":" + std::to_string(i);
    if (std::string why = detail::open_device(*record, info.warnings); !why.empty()) {
      detail::logger("plugin")->warn("{}: device refused: {}", record->id, why);
      info.reason += (info.reason.empty() ? "" : "; ") + record->id + ": " + why;
      continue;
    }
    for (const std::string& entry :
         record->exclude_kernels(config.device(plugin.name, i).exclude_kernels, &detail::kernel_op_ref)) {
      info.warnings.push_back(record->id + ": exclude_kernels: \"" + entry + "\" names no kernel of the device");
      detail::logger("plugin")->warn("{}", info.warnings.back());
    }
    table[static_cast<size_t>(slot)].store(record.get(), std::memory_order_release);
    device_count.store(slot + 1);
    records.push_back(std::move(record));
  }
}

void Runtime::Impl::select_default() {
  const auto& prefer = config.prefer;
  auto prefer_index = [&](const std::string& name) {
    auto it = std::find(prefer.begin(), prefer.end(), name);
    return it == prefer.end() ? prefer.size() : static_cast<size_t>(it - prefer.begin());
  };
  bool any_preferred = std::any_of(records.begin(), records.end(),
                                   [&](const auto& r) { return prefer_index(r->plugin.name) < prefer.size(); });
  // Real accelerators first, in preference order, then by score; CPU-class
  // devices (including software rasterisers) after them, by score, so that
  // llvmpipe never beats the CPU plugin by accident.
  auto key = [&](const DeviceRecord& r) {
    bool cpu_class = r.props.type == STRATA_DEVICE_CPU;
    size_t pref = prefer_index(r.plugin.name);
    return cpu_class ? std::make_tuple(1, -r.plugin.score, pref, type_rank(r.props.type), r.slot)
                     : std::make_tuple(0, static_cast<int>(pref), size_t{0}, type_rank(r.props.type), r.slot);
  };
  // One piece of hardware seen through two plugins is one candidate: the
  // member whose plugin the configuration prefers (then the earlier one).
  auto shadowed = [&](const DeviceRecord& r) {
    for (const auto& other : records) {
      if (!same_hardware(r, *other)) continue;
      auto mine = std::make_pair(prefer_index(r.plugin.name), r.slot);
      auto theirs = std::make_pair(prefer_index(other->plugin.name), other->slot);
      if (theirs < mine) return true;
    }
    return false;
  };
  const DeviceRecord* best = nullptr;
  for (const auto& r : records) {
    if (r->lost() || shadowed(*r)) continue;
    if (any_preferred && prefer_index(r->plugin.name) >= prefer.size()) continue;
    if (best == nullptr || key(*r) < key(*best)) best = r.get();
  }
  if (!local_rank_set) local_rank = env_local_rank();
  if (best != nullptr && local_rank >= 0 && best->props.type != STRATA_DEVICE_CPU) {
    // Each rank of a node its own device of the chosen plugin.
    std::vector<const DeviceRecord*> siblings;
    for (const auto& r : records) {
      if (&r->plugin == &best->plugin && !r->lost() && !shadowed(*r)) siblings.push_back(r.get());
    }
    if (siblings.size() > 1) {
      const DeviceRecord* mine = siblings[static_cast<size_t>(local_rank) % siblings.size()];
      if (static_cast<size_t>(local_rank) >= siblings.size()) {
        detail::logger("runtime")->warn("local rank {} but {} has {} devices: the default is {}, which another rank "
                                        "of this host shares",
                                        local_rank, best->plugin.name, siblings.size(), mine->id);
      }
      best = mine;
    }
  }
  selected_slot = best != nullptr ? best->slot : -1;
}

DeviceInfo Runtime::Impl::info_of(const DeviceRecord& r) {
  DeviceInfo d;
  d.device = r.device();
  d.id = r.id;
  d.name = r.props.name;
  d.type = static_cast<DeviceType>(std::clamp(static_cast<int>(r.props.type), 0, 3));
  d.memory_bytes = r.props.memory_bytes;
  for (DType t : kAllDTypes) {  // bits of reserved or unknown values are ignored (ABI section 1)
    if ((r.props.dtype_mask & STRATA_DTYPE_BIT(static_cast<unsigned>(t))) != 0) d.dtypes.push_back(t);
    if ((r.props.compute_dtype_mask & STRATA_DTYPE_BIT(static_cast<unsigned>(t))) != 0) d.compute_dtypes.push_back(t);
  }
  d.compute_capability = r.props.compute_capability;
  d.has_streams = r.has_streams;
  d.unified_memory = (r.props.flags & STRATA_DEVICE_UNIFIED_MEMORY) != 0;
  d.free_threaded = r.free_threaded;
  d.plugin_caches_memory = (r.props.flags & STRATA_DEVICE_CACHES_MEMORY) != 0;
  d.uuid = detail::uuid_string(r.props);
  if (STRATA_HAS_FIELD(&r.props, strata_device_props, pci_bus_id)) d.pci_bus_id = r.props.pci_bus_id;
  for (const auto& other : records) {
    if (same_hardware(r, *other)) d.same_hardware_as.push_back(other->id);
  }
  d.lost = r.lost();
  if (d.lost) d.lost_reason = r.lost_reason();
  d.memory_limit = config.device(r.plugin.name, r.index).memory_limit;
  d.kernel_count = r.kernel_count;
  d.kernels = r.kernel_list;
  const bool stores_complex = r.stores(DType::c64) || r.stores(DType::c128);
  for (const detail::OpDef* op : detail::all_ops()) {
    if (op->kind == detail::OpKind::primitive && op->plugin_op == nullptr && (stores_complex || !op->complex_only) &&
        r.kernels[static_cast<size_t>(op->id)].empty()) {
      d.missing_primitives.emplace_back(op->name);
    }
  }
  return d;
}

}  // namespace strata

namespace strata::detail {

bool shutting_down() { return g_shutting_down.load(std::memory_order_relaxed); }

}  // namespace strata::detail
