// plugin_cases.cpp — plugin_test_cases() (strata/plugin_cases.hpp): the
// strata.test_cases extension of a loaded plugin, read by
// runtime/plugins/test_cases.cpp.
#include "runtime/runtime_impl.hpp"

#include "runtime/plugins/test_cases.hpp"

#include <strata/error.hpp>
#include <strata/plugin/strata_plugin.h>
#include <strata/plugin_cases.hpp>

#include <string>
#include <vector>

namespace strata {

std::vector<PluginTestCase> plugin_test_cases(const std::string& plugin) {
  Runtime::Impl& impl = runtime().impl();
  impl.ensure_initialized();
  std::lock_guard lock(impl.mutex);
  const detail::LoadedPlugin* found = nullptr;
  for (const auto& p : impl.plugins) {
    if (p->name == plugin) found = p.get();
  }
  if (found == nullptr) throw ValueError("plugin_test_cases: no loaded plugin is called \"" + plugin + "\"");
  return detail::read_test_cases(found->extension(STRATA_EXT_TEST_CASES, STRATA_EXT_TEST_CASES_VERSION), plugin);
}

}  // namespace strata
