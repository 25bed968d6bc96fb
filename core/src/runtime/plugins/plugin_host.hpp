// plugin_host.hpp — the services the core offers plugins (strata_host_api):
// logging, ops a plugin defines (schema, shape rule, derivatives written with
// call_op), kernels for another plugin's devices, and extension lookup.
#pragma once

#include "runtime/device/device_record.hpp"

#include <strata/plugin/strata_plugin.h>
#include <strata/plugin_info.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace strata::detail {

struct OpDef;

/// `text` as a string that lives as long as the process (attribute and op
/// names: recorded nodes keep pointers to them).
const char* intern_name(std::string_view text);

/// The one host table handed to every plugin and kernel.
const strata_host_api& host_api();

/// While alive, host-service calls on this thread belong to `plugin_name`'s
/// init: register_op and register_kernels are accepted and reported into
/// `info` (ops, warnings).
class PluginInitScope {
 public:
  PluginInitScope(const std::string& plugin_name, PluginInfo& info);
  ~PluginInitScope();
  PluginInitScope(const PluginInitScope&) = delete;
  PluginInitScope& operator=(const PluginInitScope&) = delete;
  /// Why the core must refuse the plugin whatever its init returns ("" when
  /// nothing says so): its ops did not fit the op table.
  const std::string& refusal() const { return refusal_; }

 private:
  std::string refusal_;
};

/// After the core refused a plugin whose init registered ops or kernels:
/// its ops refuse every call from now on, its foreign kernels are dropped.
void retire_plugin_registrations(const std::string& plugin_name);

/// The one-line description a plugin gave its op ("" for the core's ops).
std::string op_doc(const OpDef& op);
/// Whether the op's test domain was declared: the core's ops always, a
/// plugin op when its schema gave one (ABI 2.3).
bool op_domain_declared(const OpDef& op);

/// Adds to `device` the kernels other plugins registered for its plugin's
/// devices (host service register_kernels); refusals go to `warnings`.
void add_foreign_kernels(DeviceRecord& device, std::vector<std::string>& warnings);

}  // namespace strata::detail
