// plugin_host_internal.hpp — what the two files of the host services share:
// plugin_host.cpp (the table, init identity, foreign kernels) and
// plugin_ops.cpp (ops a plugin defines, call_op).
#pragma once

#include "runtime/dispatch/op.hpp"
#include "runtime/plugins/plugin_host.hpp"

#include <strata/plugin/strata_plugin.h>
#include <strata/plugin_info.hpp>

#include <mutex>
#include <string>

namespace strata::detail {

/// The plugin whose init runs on this thread (set by PluginInitScope):
/// register_op and register_kernels are accepted only while it is set.
struct InitContext {
  const std::string* plugin_name = nullptr;
  PluginInfo* info = nullptr;
  std::string* refusal = nullptr;  // the scope's refusal()
};
InitContext& init_context();

/// Guards the interned names, the plugin ops' retirement and the foreign kernels.
std::mutex& host_mutex();

/// Host services of plugin_ops.cpp, for the table (host_api).
strata_status host_register_op(const strata_op_schema* schema, strata_error* error) noexcept;
strata_status host_call_op(strata_call_op_args* args) noexcept;
/// Every op `plugin_name` defined refuses calls from now on (under host_mutex()).
void retire_plugin_ops(const std::string& plugin_name);

/// A plugin's strata_attr as a core Attr (names interned). Throws
/// ValueError on a malformed one, naming `where`.
Attr attr_from_abi(const strata_attr* a, const std::string& where);

}  // namespace strata::detail
