// required_devices.hpp — which devices a test run must have.
//
// STRATA_REQUIRED_DEVICES (comma-separated ids, e.g. "cpu:0,vulkan:0,mini:0")
// lists the devices this machine is supposed to have. A test that needs one
// of them and finds it missing fails, naming why the runtime refused its
// plugin; a device that is not listed (CUDA, HIP on a machine without the
// hardware) is skipped with the same reason. CI exports the variable, and
// CTest sets it on the suites that use it (tests/CMakeLists.txt), so a
// missing device can never turn a run into a quiet row of skips.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <strata/strata.hpp>
#include <string>
#include <vector>

namespace strata_test {

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_ids(const char* list) {
  std::vector<std::string> out;
  if (list == nullptr) return out;
  std::string s = list;
  for (size_t start = 0; start <= s.size();) {
    size_t comma = std::min(s.find(',', start), s.size());
    std::string id = s.substr(start, comma - start);
    id.erase(0, id.find_first_not_of(" \t"));
    id.erase(id.find_last_not_of(" \t") + 1);
    if (!id.empty() && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    start = comma + 1;
  }
  return out;
}

/// The ids of STRATA_REQUIRED_DEVICES.
inline const std::vector<std::string>& required_devices() {
  static const std::vector<std::string> ids = split_ids(std::getenv("STRATA_REQUIRED_DEVICES"));
  return ids;
}

inline bool is_required(const std::string& id) {
  const std::vector<std::string>& r = required_devices();
  return std::find(r.begin(), r.end(), id) != r.end();
}

/// Why `id` ("vulkan:0") is not available, from runtime().plugins().
inline std::string unavailable_reason(const std::string& id) {
  std::string name = id.substr(0, id.find(':'));
  for (const strata::PluginInfo& p : strata::runtime().plugins()) {
    if (p.name != name) continue;
    if (!p.loaded) return "plugin " + name + " (" + p.path + ") not loaded: " + p.reason;
    return "plugin " + name + " is loaded but has no device " + id;
  }
  return "no plugin named " + name + " found";
}

/// Tries to open `id` into `out`; on failure, why (empty when it opened).
inline std::string try_device(const std::string& id, strata::Device& out) {
  try {
    out = strata::Device(id);
    return "";
  } catch (const strata::DeviceError&) {
    return unavailable_reason(id);
  }
}

}  // namespace strata_test

/// In SetUp (or a test body): opens device `id` into `out`, or ends the test
/// with a failure (the device is required) or a skip (it is not), naming why.
#define STRATA_ACQUIRE_DEVICE(id, out)                                                                     \
  if (const std::string strata_why_ = ::strata_test::try_device(id, out); !strata_why_.empty()) {          \
    if (::strata_test::is_required(id)) {                                                                  \
      GTEST_FAIL() << "device " << (id) << " is required (STRATA_REQUIRED_DEVICES) but not available: "    \
                   << strata_why_;                                                                         \
    }                                                                                                      \
    GTEST_SKIP() << "device " << (id) << " not available: " << strata_why_;                                \
  }
