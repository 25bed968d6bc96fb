// device_fixture.hpp — the fixture every ops_test suite derives from: one
// instance per device id, skipped (with the runtime's reason) when that
// device is not loaded, so every backend runs the same suite.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "reference.hpp"

namespace strata_test {

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

class DeviceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string id = GetParam();
    try {
      device_ = strata::Device(id);
    } catch (const strata::DeviceError&) {
      GTEST_SKIP() << "device " << id << " not available: " << unavailable_reason(id);
    }
    info_ = strata::runtime().device_info(device_);
  }

  /// A case that wanted a dtype the device does not store (stores() said
  /// no) is reported SKIPPED with the reason and what did run, never as a
  /// plain pass; a failure among the dtypes that ran still fails it.
  void TearDown() override {
    if (skipped_.empty() || HasFailure() || IsSkipped()) return;
    auto names = [](const std::vector<DType>& list) {
      std::string out;
      for (DType t : list) out += (out.empty() ? "" : ", ") + std::string(strata::dtype_name(t));
      return out;
    };
    GTEST_SKIP() << GetParam() << " does not store " << names(skipped_)
                 << (ran_.empty() ? "" : " (the case ran for " + names(ran_) + ")");
  }

  strata::Device dev() const { return device_; }

  /// Whether the device stores `dtype`: a backend without f64 skips those
  /// dtypes (the case then reads SKIPPED, see TearDown) instead of failing.
  bool stores(DType dtype) const {
    bool yes = std::find(info_.dtypes.begin(), info_.dtypes.end(), dtype) != info_.dtypes.end();
    std::vector<DType>& list = yes ? ran_ : skipped_;
    if (std::find(list.begin(), list.end(), dtype) == list.end()) list.push_back(dtype);
    return yes;
  }

  /// `wanted` minus the dtypes this device cannot store.
  std::vector<DType> dtypes(std::initializer_list<DType> wanted) const {
    std::vector<DType> out;
    for (DType t : wanted) {
      if (stores(t)) out.push_back(t);
    }
    return out;
  }

  Operand operand(const Shape& shape, DType dtype, Layout layout = Layout::contiguous, double lo = -2.0,
                  double hi = 2.0) {
    return random_operand(rng_, shape, dtype, device_, layout, lo, hi);
  }
  /// Integer-valued operand of any dtype (ties for comparisons, exact sums).
  Operand int_operand(const Shape& shape, DType dtype, Layout layout = Layout::contiguous, double lo = -3.0,
                      double hi = 3.0) {
    return random_operand(rng_, shape, dtype, device_, layout, lo, hi, true);
  }
  Tensor make(const HostTensor& h, DType dtype) const { return upload(h, dtype, device_); }
  Tensor make(const Shape& shape, std::vector<double> values, DType dtype) const {
    return upload(host_values(shape, std::move(values)), dtype, device_);
  }

  strata::Device device_;
  strata::DeviceInfo info_;
  mutable std::vector<DType> skipped_;  // wanted, not stored (stores())
  mutable std::vector<DType> ran_;      // wanted and stored
  std::mt19937 rng_{20240601u};
};

/// "cpu:0" -> "cpu_0".
inline std::string device_param_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

/// The device ids every suite runs on: the in-tree backends, plus any
/// listed in STRATA_TEST_DEVICES (comma-separated, e.g. "acme:0"), so a
/// third-party backend runs the same suite without editing it.
inline std::vector<const char*> test_devices() {
  static std::vector<std::string> ids = [] {
    std::vector<std::string> v{"cpu:0", "vulkan:0", "cuda:0", "hip:0"};
    if (const char* env = std::getenv("STRATA_TEST_DEVICES")) {
      std::string list = env;
      for (size_t start = 0; start <= list.size();) {
        size_t comma = std::min(list.find(',', start), list.size());
        std::string id = list.substr(start, comma - start);
        if (!id.empty() && std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
        start = comma + 1;
      }
    }
    return v;
  }();
  std::vector<const char*> out;
  for (const std::string& id : ids) out.push_back(id.c_str());
  return out;
}

}  // namespace strata_test

/// Runs a DeviceTest-derived suite on every device id.
#define STRATA_INSTANTIATE_ON_DEVICES(Suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(Devices, Suite, ::testing::ValuesIn(::strata_test::test_devices()), \
                           ::strata_test::device_param_name)

/// Skips the case, naming the device and the dtypes, unless the device
/// stores every dtype listed (for cases that need them throughout).
#define STRATA_NEEDS_DTYPES(...)                                             \
  do {                                                                       \
    std::string missing_dtypes_;                                             \
    for (DType wanted_dtype_ : {__VA_ARGS__}) {                              \
      if (stores(wanted_dtype_)) continue;                                   \
      missing_dtypes_ += missing_dtypes_.empty() ? "" : ", ";                \
      missing_dtypes_ += ::strata::dtype_name(wanted_dtype_);                \
    }                                                                        \
    if (!missing_dtypes_.empty()) {                                          \
      GTEST_SKIP() << GetParam() << " does not store " << missing_dtypes_;   \
    }                                                                        \
  } while (0)

/// SCOPED_TRACE text for a case.
#define STRATA_TRACE(...) SCOPED_TRACE(::testing::Message() << __VA_ARGS__)
