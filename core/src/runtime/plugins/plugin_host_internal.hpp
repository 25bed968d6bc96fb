// plugin_host_internal.hpp — what the two files of the host services share:
// plugin_host.cpp (the table, init identity, foreign kernels) and
// plugin_ops.cpp (ops a plugin defines, call_op).
#pragma once

#include "runtime/dispatch/op.hpp"
#include "runtime/plugins/plugin_host.hpp"

#include <strata/plugin/strata_plugin.h>
#include <strata/plugin_info.hpp>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

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

/// An enum field of a struct a plugin wrote, as the int32 it holds: a C
/// plugin may store any value there, and loading one outside the C++ enum's
/// range (a negative one) as the enum type is undefined behaviour (found by
/// fuzz_test_cases). Read enum fields of plugin structs through this, then
/// check the value, then convert.
template <class E>
int32_t abi_enum(const E& field) noexcept {
  static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int32_t));
  int32_t v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

/// A plugin's strata_attr as a core Attr (names interned). Throws
/// ValueError on a malformed one, naming `where`: a NULL, a short struct,
/// no name, an unknown kind, an array its count does not match, a SCALAR
/// whose scalar_dtype is not I64, F64 or BOOL.
Attr attr_from_abi(const strata_attr* a, const std::string& where);

}  // namespace strata::detail
