// runtime.cpp — the device manager: configuration, plugin loading, device
// table, default-device selection and fallback accounting.
#include "config_internal.hpp"
#include "device_record.hpp"
#include "dispatch_hooks.hpp"
#include "logging.hpp"
#include "op.hpp"
#include "plugin_host.hpp"
#include "plugin_loader.hpp"
#include "plugin_probe.hpp"
#include "runtime_internal.hpp"

#include <strata/error.hpp>
#include <strata/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <array>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

namespace strata {

using detail::DeviceRecord;
using detail::LoadedPlugin;

namespace {
constexpr size_t kMaxDevices = 256;
std::atomic<bool> g_shutting_down{false};
}  // namespace

struct Runtime::Impl {
  std::recursive_mutex mutex;
  std::atomic<bool> initialized{false};
  Config config;
  std::vector<PluginInfo> outcomes;
  std::vector<std::unique_ptr<LoadedPlugin>> plugins;
  std::vector<std::unique_ptr<DeviceRecord>> records;
  std::array<std::atomic<DeviceRecord*>, kMaxDevices> table{};
  std::atomic<int32_t> device_count{0};
  std::set<std::string> seen_paths;
  int32_t selected_slot = -1;
  int32_t override_slot = -1;
  /// Policy per op id; fixed size so readers on the dispatch path need no lock.
  std::array<std::atomic<uint8_t>, 1024> fallback_by_op{};

  std::mutex fallback_mutex;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> fallback_counts;

  void ensure_initialized();
  void apply(const Config& config);
  void load_plugins(const Config& config);
  void add_devices(LoadedPlugin& plugin, PluginInfo& info);
  void select_default();
  DeviceInfo info_of(const DeviceRecord& record);
};

namespace {

Config find_config() {
  if (const char* env = std::getenv("STRATA_CONFIG"); env != nullptr && *env != '\0') {
    return Config::from_file(env);
  }
  std::filesystem::path installed =
      std::filesystem::path(library_directory()) / ".." / "share" / "strata" / "configs" / "default.json";
  std::error_code ec;
  if (std::filesystem::exists(installed, ec)) return Config::from_file(installed.lexically_normal().string());
  return Config::builtin_default();
}

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

}  // namespace

void Runtime::Impl::ensure_initialized() {
  if (initialized.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex);
  if (initialized.load(std::memory_order_relaxed)) return;
  apply(find_config());
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

Runtime::Runtime() : impl_(std::make_unique<Impl>()) {}

Runtime& runtime() {
  static auto* rt = new Runtime();  // never destroyed: plugins outlive static teardown
  return *rt;
}

Runtime::Impl& Runtime::impl() { return *impl_; }

void Runtime::load_config(const std::string& path) { configure(Config::from_file(path)); }

void Runtime::configure(const Config& config) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->apply(config);
  }
  if (detail::dispatch_hooks().configured != nullptr) {
    detail::dispatch_hooks().configured();  // the "amp" lists may have changed
  }
}

Config Runtime::config() {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  return impl_->config;
}

Device Runtime::default_device() {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  int32_t slot = impl_->override_slot >= 0 ? impl_->override_slot : impl_->selected_slot;
  if (slot < 0) {
    std::string msg = "no device available: no plugin loaded (configuration " + impl_->config.source + ")";
    for (const PluginInfo& p : impl_->outcomes) msg += "\n  " + p.path + ": " + p.reason;
    throw DeviceError(msg);
  }
  return Device::from_slot(slot);
}

void Runtime::set_default_device(Device device) {
  impl_->ensure_initialized();
  detail::device_record(device);  // validates
  std::lock_guard lock(impl_->mutex);
  impl_->override_slot = device.slot();
}

std::vector<DeviceInfo> Runtime::devices() {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  std::vector<DeviceInfo> out;
  for (const auto& r : impl_->records) out.push_back(impl_->info_of(*r));
  return out;
}

DeviceInfo Runtime::device_info(Device device) {
  DeviceRecord& r = detail::device_record(device);
  std::lock_guard lock(impl_->mutex);
  return impl_->info_of(r);
}

std::vector<PluginInfo> Runtime::plugins() {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  std::vector<PluginInfo> out = impl_->outcomes;
  for (PluginInfo& p : out) {
    if (!p.loaded) continue;
    for (const auto& r : impl_->records) {
      if (r->plugin.path == p.path) p.devices.push_back(impl_->info_of(*r));
    }
  }
  return out;
}

MemoryStats Runtime::memory_stats(Device device) { return detail::device_record(device).allocator.stats(); }

namespace {
strata_memory_args memory_args(const DeviceRecord& r, strata_error& err) {
  strata_memory_args a{};
  a.struct_size = sizeof(a);
  a.state = r.plugin.state;
  a.device = r.index;
  a.error = &err;
  return a;
}
}  // namespace

DeviceMemoryInfo Runtime::device_memory_info(Device device) {
  DeviceRecord& r = detail::device_record(device);
  r.ensure_alive();
  DeviceMemoryInfo out;
  strata_error err = detail::fresh_error();
  strata_memory_args a = memory_args(r, err);
  if (r.plugin.has(&strata_plugin_api::memory_info)) {
    r.check(r.plugin.api->memory_info(&a), err, "memory_info");
    out.free_bytes = a.free_bytes;
    out.total_bytes = a.total_bytes;
  }
  if (r.plugin.has(&strata_plugin_api::memory_stats)) {
    r.check(r.plugin.api->memory_stats(&a), err, "memory_stats");
    out.plugin_bytes_in_use = a.bytes_in_use;
    out.plugin_bytes_reserved = a.bytes_reserved;
    out.plugin_peak_bytes_in_use = a.peak_bytes_in_use;
    out.plugin_allocations = a.allocations;
  }
  detail::PinnedStaging::Stats staging = r.staging.stats();
  out.staging_bytes = staging.held_bytes;
  out.staged_copies = staging.staged_copies;
  return out;
}

void Runtime::trim_memory(Device device) {
  DeviceRecord& r = detail::device_record(device);
  r.allocator.empty_cache();
  r.staging.trim();
  if (!r.plugin.has(&strata_plugin_api::memory_trim) || r.lost()) return;
  strata_error err = detail::fresh_error();
  strata_memory_args a = memory_args(r, err);
  r.check(r.plugin.api->memory_trim(&a), err, "memory_trim");
}

void Runtime::reset_peak_memory(Device device) { detail::device_record(device).allocator.reset_peak(); }

MemoryScope::MemoryScope(Device device) : device_(device) {
  detail::CachingAllocator& a = detail::device_record(device).allocator;
  MemoryStats s = a.stats();
  start_ = s.allocated_bytes;
  outer_peak_ = s.peak_allocated_bytes;
  a.reset_peak();
}

MemoryScope::~MemoryScope() { detail::device_record(device_).allocator.raise_peak(outer_peak_); }

uint64_t MemoryScope::peak_bytes() const {
  uint64_t peak = detail::device_record(device_).allocator.stats().peak_allocated_bytes;
  return peak > start_ ? peak - start_ : 0;
}

int64_t MemoryScope::current_bytes() const {
  uint64_t now = detail::device_record(device_).allocator.stats().allocated_bytes;
  return static_cast<int64_t>(now) - static_cast<int64_t>(start_);
}

void Runtime::empty_cache() {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  for (auto& r : impl_->records) r->allocator.empty_cache();
}

std::vector<OpInfo> Runtime::ops() {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  std::map<std::string, std::string> defined_by;
  for (const PluginInfo& p : impl_->outcomes) {
    for (const std::string& op : p.ops) defined_by[op] = p.name;
  }
  std::vector<OpInfo> out;
  for (const detail::OpDef* op : detail::all_ops()) {
    OpInfo info;
    info.name = std::string(op->kernel_name);
    info.kind = op->kind == detail::OpKind::primitive   ? "primitive"
                : op->kind == detail::OpKind::composite ? "composite"
                : op->kind == detail::OpKind::view      ? "view"
                : op->kind == detail::OpKind::join      ? "join"
                                                        : "transfer";
    info.n_inputs = op->n_inputs;
    info.n_outputs = op->n_outputs;
    info.version = op->version;
    info.differentiable = op->vjp != nullptr;
    info.forward_mode = op->jvp != nullptr;
    if (auto it = defined_by.find(info.name); it != defined_by.end()) info.plugin = it->second;
    info.doc = detail::op_doc(*op);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<FallbackRecord> Runtime::fallback_stats() {
  std::lock_guard lock(impl_->fallback_mutex);
  std::vector<FallbackRecord> out;
  for (const auto& [key, count] : impl_->fallback_counts) {
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), count});
  }
  return out;
}

uint64_t Runtime::fallback_count() {
  std::lock_guard lock(impl_->fallback_mutex);
  uint64_t n = 0;
  for (const auto& [key, count] : impl_->fallback_counts) n += count;
  return n;
}

void Runtime::reset_fallback_stats() {
  std::lock_guard lock(impl_->fallback_mutex);
  impl_->fallback_counts.clear();
}

void Runtime::synchronize(Device device) { detail::device_record(device).synchronize(); }

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::gpu: return "gpu";
    case DeviceType::igpu: return "igpu";
    case DeviceType::accelerator: return "accelerator";
  }
  return "?";
}

std::vector<ConfigIssue> check_config(const Config& config) {
  std::vector<ConfigIssue> issues;
  auto add = [&](ConfigIssue::Severity severity, std::string message) {
    issues.push_back({severity, std::move(message)});
  };
  // Plugin search paths, as the loader will see them (the same discovery).
  auto check_paths = [&](const std::vector<std::string>& paths, auto where) {
    for (size_t i = 0; i < paths.size(); ++i) {
      for (const detail::Candidate& c : detail::discover_plugins({paths[i]})) {
        if (c.missing) {
          add(ConfigIssue::Severity::warning, where(i) + "plugin search path \"" + c.path + "\" does not exist");
        } else if (!c.error.empty()) {
          add(ConfigIssue::Severity::error, where(i) + c.error);
        } else if (std::string why = detail::plugin_file_problem(c.path); !why.empty()) {
          add(ConfigIssue::Severity::warning, where(i) + "\"" + c.path + "\" will be refused: " + why);
        }
      }
    }
  };
  check_paths(config.plugin_paths, [&](size_t i) {
    return config.source + ": " +
           (config.plugin_paths_given ? "/plugins/paths/" + std::to_string(i) : std::string("/plugins/paths (default)")) +
           ": ";
  });
  check_paths(env_plugin_paths(), [](size_t) { return std::string("STRATA_PLUGIN_PATH: "); });
  for (size_t i = 0; i < config.log_sinks.size(); ++i) {
    if (config.log_sinks[i].type != "file") continue;
    if (std::string why = detail::config::log_file_problem(config.log_sinks[i].path); !why.empty()) {
      add(ConfigIssue::Severity::error, config.source + ": /logging/sinks/" + std::to_string(i) + "/path: " + why);
    }
  }
  return issues;
}

std::string version() { return STRATA_VERSION_STRING; }
std::string abi_version() { return std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR); }

// --- Device ------------------------------------------------------------------

Device::Device(std::string_view spec) {
  Runtime::Impl& rt = runtime().impl();
  rt.ensure_initialized();
  std::string id(spec);
  if (id.find(':') == std::string::npos) id += ":0";
  std::string available;
  for (int32_t s = 0; s < rt.device_count.load(); ++s) {
    DeviceRecord* r = rt.table[static_cast<size_t>(s)].load(std::memory_order_acquire);
    if (r->id == id) {
      slot_ = s;
      return;
    }
    available += (available.empty() ? "" : ", ") + r->id;
  }
  throw DeviceError("unknown device \"" + std::string(spec) + "\" (available: " +
                    (available.empty() ? std::string("none") : available) + ")");
}

std::string Device::str() const { return valid() ? detail::device_record(*this).id : std::string("<no device>"); }
std::string Device::backend() const { return detail::device_record(*this).plugin.name; }
int Device::index() const { return detail::device_record(*this).index; }

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

DeviceTimer::DeviceTimer(Device device) : device_(device) {
  detail::DeviceRecord& r = detail::device_record(device);
  measured_ = r.can_time();
  if (!measured_) return;
  start_event_ = r.create_event(STRATA_EVENT_TIMING);
  try {
    stop_event_ = r.create_event(STRATA_EVENT_TIMING);
  } catch (...) {
    r.destroy_event(static_cast<strata_event>(start_event_));
    throw;
  }
}

DeviceTimer::~DeviceTimer() {
  if (!measured_) return;
  detail::DeviceRecord& r = detail::device_record(device_);
  r.destroy_event(static_cast<strata_event>(start_event_));
  r.destroy_event(static_cast<strata_event>(stop_event_));
}

namespace {
double host_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void DeviceTimer::start() {
  detail::DeviceRecord& r = detail::device_record(device_);
  if (measured_) {
    r.record(static_cast<strata_event>(start_event_));
  } else {
    r.synchronize();
    start_host_ms_ = host_ms();
  }
  started_ = true;
  stopped_ = false;
}

void DeviceTimer::stop() {
  if (!started_) throw Error("DeviceTimer on " + device_.str() + ": stop() before start()");
  detail::DeviceRecord& r = detail::device_record(device_);
  if (measured_) {
    r.record(static_cast<strata_event>(stop_event_));
  } else {
    r.synchronize();
    stop_host_ms_ = host_ms();
  }
  stopped_ = true;
}

double DeviceTimer::elapsed_ms() {
  if (!started_ || !stopped_) {
    throw Error("DeviceTimer on " + device_.str() + ": elapsed_ms() needs start() and then stop()");
  }
  if (!measured_) return stop_host_ms_ - start_host_ms_;
  return detail::device_record(device_).elapsed_ms(static_cast<strata_event>(start_event_),
                                                   static_cast<strata_event>(stop_event_));
}

}  // namespace strata

namespace strata::detail {

DeviceRecord& device_record(Device device) {
  Runtime::Impl& rt = runtime().impl();
  int32_t slot = device.slot();
  if (slot < 0 || slot >= rt.device_count.load(std::memory_order_acquire)) {
    throw DeviceError("invalid device handle (slot " + std::to_string(slot) + ")");
  }
  return *rt.table[static_cast<size_t>(slot)].load(std::memory_order_acquire);
}

DeviceRecord& default_device_record() { return device_record(runtime().default_device()); }

FallbackPolicy fallback_policy(int op_id) {
  Runtime::Impl& rt = runtime().impl();
  if (op_id < 0 || static_cast<size_t>(op_id) >= rt.fallback_by_op.size()) return FallbackPolicy::cpu;
  return static_cast<FallbackPolicy>(rt.fallback_by_op[static_cast<size_t>(op_id)].load(std::memory_order_relaxed));
}

std::vector<DeviceRecord*> all_device_records() {
  Runtime::Impl& rt = runtime().impl();
  std::vector<DeviceRecord*> out;
  for (int32_t s = 0; s < rt.device_count.load(); ++s) out.push_back(rt.table[static_cast<size_t>(s)].load(std::memory_order_acquire));
  return out;
}

const LoadedPlugin* find_active_plugin(std::string_view name) {
  for (DeviceRecord* r : all_device_records()) {
    if (r->plugin.name == name) return &r->plugin;
  }
  return nullptr;
}

DeviceRecord* cpu_device() {
  Runtime::Impl& rt = runtime().impl();
  for (int32_t s = 0; s < rt.device_count.load(); ++s) {
    DeviceRecord* r = rt.table[static_cast<size_t>(s)].load(std::memory_order_acquire);
    if (r->plugin.name == "cpu") return r;
  }
  return nullptr;
}

void record_fallback(const DeviceRecord& device, std::string_view op, const std::string& signature,
                     const std::string& reason) {
  Runtime::Impl& rt = runtime().impl();
  bool first = false;
  {
    std::lock_guard lock(rt.fallback_mutex);
    uint64_t& n = rt.fallback_counts[{device.id, std::string(op), signature}];
    first = n++ == 0;
  }
  if (first) {
    logger("dispatch")->warn("{} on {} falls back to cpu:0 ({}); counted in fallback_stats()", op, device.id, reason);
  }
}

bool shutting_down() { return g_shutting_down.load(std::memory_order_relaxed); }

}  // namespace strata::detail
