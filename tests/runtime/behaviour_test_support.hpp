// What the behaviour tests (abi_behaviour_test.cpp, abi_fault_test.cpp)
// share: finding a loaded behaviour plugin and its probe extension, and
// checking that a call throws.
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
#include <exception>
#include <string>

namespace behaviour_test {

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The outcome for plugin `name`, with a test failure when it did not load.
inline strata::PluginInfo loaded_plugin(const std::string& name) {
  for (const strata::PluginInfo& p : strata::runtime().plugins()) {
    if (p.name != name) continue;
    EXPECT_TRUE(p.loaded) << name << " was refused: " << p.reason;
    EXPECT_EQ(p.devices.size(), 1u) << name;
    return p;
  }
  ADD_FAILURE() << "plugin " << name << " not found in " << STRATA_TEST_BEHAVIOUR_PLUGIN_DIR;
  return {};
}

/// Runs `f`, which must throw E; returns its message (empty, with a test
/// failure, when it threw nothing or something else).
template <class E, class F>
std::string message_of(const std::string& what, F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": expected another error type, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << what << ": threw nothing";
  return {};
}

/// Extension `name` (at least `version`, of type T) on the table of the
/// plugin the runtime loaded from `path` (dlopen with RTLD_NOLOAD finds that
/// very library), or nullptr.
template <class T>
const T* probe_extension(const std::string& path, const char* name, uint32_t version) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  auto entry = reinterpret_cast<strata_plugin_entry_fn>(dlsym(handle, STRATA_PLUGIN_ENTRY_SYMBOL));
  const strata_plugin_api* api = entry != nullptr ? entry(STRATA_ABI_MAJOR, STRATA_ABI_MINOR) : nullptr;
  if (api == nullptr || !STRATA_HAS_FIELD(api, strata_plugin_api, extensions)) return nullptr;
  for (const strata_extension* e = api->extensions; e != nullptr; e = e->next) {
    if (std::strcmp(e->name, name) == 0 && e->version >= version && e->struct_size >= sizeof(T)) {
      return reinterpret_cast<const T*>(e);
    }
  }
  return nullptr;
}

/// Loads the behaviour configuration before each test.
class Behaviour : public ::testing::Test {
 protected:
  void SetUp() override {
    strata::runtime().load_config(STRATA_BEHAVIOUR_CONFIG);
    strata::runtime().reset_fallback_stats();
  }
};

}  // namespace behaviour_test
