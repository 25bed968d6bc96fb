// runtime.cpp — the Runtime API (configuration, devices, plugins, ops,
// fallback accounting) over the device manager's state (runtime_impl.hpp),
// and the device table as the layers below read it (device_table.hpp).
#include "runtime/dispatch/vmap_state.hpp"
#include "runtime/runtime_impl.hpp"

#include "base/config_internal.hpp"
#include "base/logging.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/dispatch_hooks.hpp"
#include "runtime/dispatch/op_census.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/plugins/plugin_host.hpp"
#include "runtime/plugins/plugin_probe.hpp"

#include <strata/error.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <map>
#include <string>
#include <vector>

namespace strata {

using detail::DeviceRecord;

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

void Runtime::set_local_rank(int local_rank) {
  impl_->ensure_initialized();
  std::lock_guard lock(impl_->mutex);
  impl_->local_rank = local_rank < 0 ? -1 : local_rank;
  impl_->local_rank_set = true;
  impl_->select_default();
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
    info.differentiable = op->derivative.vjp != nullptr;
    info.forward_mode = op->derivative.jvp != nullptr;
    if (auto it = defined_by.find(info.name); it != defined_by.end()) info.plugin = it->second;
    info.doc = detail::op_doc(*op);
    info.tags = detail::op_tag_names(op->tags);
    info.tag_bits = op->tags;
    for (const detail::AttrDecl& a : op->attrs) {
      info.attrs.push_back({a.name, plugin::attr_kind_name(a.kind), a.required});
    }
    info.dtypes = detail::dtype_family_name(op->dtypes);
    info.takes_complex = op->takes_complex;
    info.complex_only = op->complex_only;
    info.autocast = detail::autocast_category_name(op->autocast);
    info.batching = detail::batching_kind(*op);
    const detail::TestDomain& d = op->domain;
    info.domain = {.lo = d.lo, .hi = d.hi, .grid = d.grid, .orders = d.orders, .nonzero_input = d.nonzero_input,
                   .flat_inputs = d.flat_inputs, .declared = detail::op_domain_declared(*op)};
    out.push_back(std::move(info));
  }
  return out;
}

void Runtime::start_op_census() { detail::open_op_census(); }

std::vector<OpUse> Runtime::stop_op_census() { return detail::close_op_census(); }

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

std::vector<AttrMisread> Runtime::attr_misreads() {
  std::vector<AttrMisread> out;
  for (detail::AttrMisread& m : detail::attr_misreads()) {
    out.push_back({std::move(m.device), std::move(m.op), std::move(m.attribute), std::move(m.declared), m.count});
  }
  return out;
}

void Runtime::reset_fallback_stats() {
  std::lock_guard lock(impl_->fallback_mutex);
  impl_->fallback_counts.clear();
  impl_->declined.clear();
}

std::vector<DeclinedKernelRecord> Runtime::declined_kernels() {
  std::lock_guard lock(impl_->fallback_mutex);
  std::vector<DeclinedKernelRecord> out;
  for (const auto& [key, value] : impl_->declined) {
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), value.first, value.second});
  }
  return out;
}

void Runtime::synchronize(Device device) { detail::device_record(device).synchronize(); }

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

void record_declined(const DeviceRecord& device, std::string_view op, const std::string& signature,
                     const std::string& reason) {
  Runtime::Impl& rt = runtime().impl();
  bool first = false;
  {
    std::lock_guard lock(rt.fallback_mutex);
    auto& [latest, n] = rt.declined[{device.id, std::string(op), signature}];
    latest = reason;
    first = n++ == 0;
  }
  if (first) {
    logger("dispatch")->info("{} {} on {}: {}; decomposed into its ops there, counted in declined_kernels()", op,
                             signature, device.id, reason);
  }
}
}  // namespace strata::detail
