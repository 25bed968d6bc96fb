// plugin_host.cpp — the host services of the plugin ABI (strata_host_api):
// the table itself, who is calling during a plugin's init, kernels for
// another plugin's devices, extension lookup and logging. The ops a plugin
// defines and call_op are in plugin_ops.cpp.
#include "runtime/plugins/plugin_host_internal.hpp"

#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/log.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace strata::detail {

std::mutex& host_mutex() {
  static auto* m = new std::mutex();  // never destroyed: plugins call in during static teardown
  return *m;
}

const char* intern_name(std::string_view text) {
  static auto* names = new std::set<std::string, std::less<>>();
  std::lock_guard lock(host_mutex());
  auto it = names->find(text);
  if (it == names->end()) it = names->emplace(text).first;
  return it->c_str();
}

// --- Identity of the calling plugin during init ------------------------------------

namespace {
thread_local InitContext t_init;
}  // namespace

InitContext& init_context() { return t_init; }

namespace {

using plugin::fail;

// --- Kernels for another plugin's devices -------------------------------------------

struct ForeignKernels {
  std::string from;  // the registering plugin
  std::string target;
  std::vector<strata_kernel_entry> entries;  // copied (strings stay the plugin's: static)
};

std::vector<ForeignKernels>& foreign() {
  static auto* v = new std::vector<ForeignKernels>();
  return *v;
}

void apply_foreign(DeviceRecord& device, const ForeignKernels& fk, std::vector<std::string>& warnings) {
  for (size_t k = 0; k < fk.entries.size(); ++k) {
    const strata_kernel_entry& e = fk.entries[k];
    if (e.op == nullptr || !std::string_view(e.op).starts_with(fk.from + "::")) {
      warnings.push_back(device.id + ": kernel " + std::to_string(k) + " from plugin " + fk.from +
                         " refused: a plugin may add kernels only for its own ops (" + fk.from + "::...)");
      continue;
    }
    if (std::string why = device.add_kernel(&e, static_cast<int>(k), &kernel_op_ref); !why.empty()) {
      warnings.push_back(device.id + " (from plugin " + fk.from + "): " + why);
    }
  }
}

strata_status host_register_kernels(const strata_kernel_registration* reg, strata_error* error) noexcept {
  if (t_init.plugin_name == nullptr) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "register_kernels: only a plugin's init may register kernels");
  }
  try {
    if (reg == nullptr || reg->struct_size < STRATA_KERNEL_REGISTRATION_MIN_SIZE || reg->plugin_name == nullptr ||
        reg->n_entries < 0 || (reg->n_entries > 0 && reg->entries == nullptr)) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "register_kernels: malformed registration");
    }
    ForeignKernels fk{*t_init.plugin_name, reg->plugin_name, {}};
    for (int32_t k = 0; k < reg->n_entries; ++k) {
      const strata_kernel_entry* e = reg->entries[k];
      if (e == nullptr || e->struct_size < STRATA_KERNEL_ENTRY_MIN_SIZE) {
        t_init.info->warnings.push_back("register_kernels: entry " + std::to_string(k) + " has struct_size below " +
                                        std::to_string(STRATA_KERNEL_ENTRY_MIN_SIZE) + "; refused");
        continue;
      }
      strata_kernel_entry copy{};
      std::memcpy(&copy, e, std::min(sizeof(copy), e->struct_size));
      copy.struct_size = std::min(sizeof(copy), e->struct_size);
      fk.entries.push_back(copy);
    }
    std::lock_guard lock(host_mutex());
    for (DeviceRecord* d : all_device_records()) {
      if (d->plugin.name == fk.target) apply_foreign(*d, fk, t_init.info->warnings);
    }
    foreign().push_back(std::move(fk));
    return STRATA_OK;
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "register_kernels: %s", e.what());
  }
}

const strata_extension* host_find_extension(const char* plugin_name, const char* name, uint32_t min_version) noexcept {
  if (plugin_name == nullptr || name == nullptr) return nullptr;
  try {
    const LoadedPlugin* p = find_active_plugin(plugin_name);
    return p != nullptr ? p->extension(name, min_version) : nullptr;
  } catch (...) {
    return nullptr;
  }
}

void host_log(strata_log_level level, const char* plugin_name, const char* message) noexcept {
  // strata_log_level's values are LogLevel's; anything else is logged at info.
  const int l = static_cast<int>(level);
  log_message(plugin_name != nullptr ? plugin_name : "plugin",
              l >= 0 && l <= static_cast<int>(LogLevel::error) ? static_cast<LogLevel>(l) : LogLevel::info,
              message != nullptr ? message : "");
}

}  // namespace

const strata_host_api& host_api() {
  static const strata_host_api api{sizeof(strata_host_api), STRATA_ABI_MAJOR,      STRATA_ABI_MINOR,
                                   &host_log,               &host_register_op,     &host_call_op,
                                   &host_register_kernels,  &host_find_extension};
  return api;
}

PluginInitScope::PluginInitScope(const std::string& plugin_name, PluginInfo& info) {
  t_init.plugin_name = &plugin_name;
  t_init.info = &info;
  t_init.refusal = &refusal_;
}

PluginInitScope::~PluginInitScope() { t_init = {}; }

void retire_plugin_registrations(const std::string& plugin_name) {
  std::lock_guard lock(host_mutex());
  retire_plugin_ops(plugin_name);
  // Its kernels for other plugins' devices are only for its own (now
  // retired) ops; forget them so that devices opened later do not get them.
  std::erase_if(foreign(), [&](const ForeignKernels& fk) { return fk.from == plugin_name; });
}

void add_foreign_kernels(DeviceRecord& device, std::vector<std::string>& warnings) {
  std::lock_guard lock(host_mutex());
  for (const ForeignKernels& fk : foreign()) {
    if (fk.target == device.plugin.name) apply_foreign(device, fk, warnings);
  }
}

}  // namespace strata::detail
