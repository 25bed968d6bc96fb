// device_fixture.hpp — the fixture every ops_test suite derives from: one
// instance per device id, so every backend runs the same suite. A device
// that is not loaded is skipped with the runtime's reason, unless
// STRATA_REQUIRED_DEVICES lists it: then it fails (common/required_devices.hpp).
// dtypes a device does not store are reported per dtype, never dropped in
// silence, and a device that runs zero cases of a whole suite fails.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <random>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../common/required_devices.hpp"
#include "reference.hpp"

namespace strata_test {

class DeviceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string id = GetParam();
    STRATA_ACQUIRE_DEVICE(id, device_);
    info_ = strata::runtime().device_info(device_);
  }

  /// dtypes skipped in this case are reported; a case whose dtype lists
  /// (dtypes()) all came back empty ran nothing and is skipped, naming each.
  void TearDown() override {
    if (skipped_dtypes_.empty() || HasFailure() || IsSkipped()) return;
    std::string list;
    for (const std::string& why : skipped_dtypes_) list += (list.empty() ? "" : "; ") + why;
    RecordProperty("skipped_dtypes", list);
    if (dtype_lists_ > 0 && nonempty_dtype_lists_ == 0) GTEST_SKIP() << list;
    // Not "[  SKIPPED ]": CTest takes that line for a skip of the whole case.
    std::printf("[ NO DTYPE ] %s (skipped in this case; the others ran)\n", list.c_str());
  }

  /// Once per suite: a device that is available and had every case of the
  /// suite selected, but ran none of them (all skipped), fails the suite.
  static void TearDownTestSuite() { check_suite_ran_something(); }

  strata::Device dev() const { return device_; }

  /// Whether the device stores `dtype`.
  bool stores(DType dtype) const {
    return std::find(info_.dtypes.begin(), info_.dtypes.end(), dtype) != info_.dtypes.end();
  }

  /// Whether this case runs `dtype` here: false (and the dtype is reported
  /// as skipped, with the reason) when the device does not store it.
  bool runs(DType dtype) {
    if (stores(dtype)) return true;
    std::string why = std::string(GetParam()) + " does not store " + std::string(strata::dtype_name(dtype));
    if (std::find(skipped_dtypes_.begin(), skipped_dtypes_.end(), why) == skipped_dtypes_.end()) {
      skipped_dtypes_.push_back(why);
    }
    return false;
  }

  /// `wanted` minus the dtypes this device cannot store (reported as skipped).
  std::vector<DType> dtypes(std::initializer_list<DType> wanted) {
    std::vector<DType> out;
    for (DType t : wanted) {
      if (runs(t)) out.push_back(t);
    }
    ++dtype_lists_;
    if (!out.empty()) ++nonempty_dtype_lists_;
    return out;
  }

  static void check_suite_ran_something();

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
  std::mt19937 rng_{20240601u};
  std::vector<std::string> skipped_dtypes_;  // "vulkan:0 does not store f64"
  int dtype_lists_ = 0, nonempty_dtype_lists_ = 0;
};

/// "cpu:0" -> "cpu_0".
inline std::string device_param_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

/// "Exp/cpu_0" -> "cpu:0".
inline std::string device_of_test_name(const std::string& name) {
  std::string id = name.substr(name.rfind('/') + 1);
  size_t us = id.rfind('_');
  if (us != std::string::npos) id[us] = ':';
  return id;
}

inline void DeviceTest::check_suite_ran_something() {
  const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
  if (suite == nullptr) return;
  struct Tally {
    int total = 0, selected = 0, ran = 0;
  };
  std::map<std::string, Tally> per_device;
  for (int i = 0; i < suite->total_test_count(); ++i) {
    const ::testing::TestInfo* t = suite->GetTestInfo(i);
    Tally& tally = per_device[device_of_test_name(t->name())];
    ++tally.total;
    if (!t->should_run()) continue;
    ++tally.selected;
    if (!t->result()->Skipped()) ++tally.ran;
  }
  for (const auto& [id, tally] : per_device) {
    if (tally.selected != tally.total || tally.ran > 0) continue;
    strata::Device d;
    if (!try_device(id, d).empty()) continue;  // not loaded: each case said why
    ADD_FAILURE() << id << " is available but ran none of the " << tally.total << " cases of " << suite->name()
                  << ": every one was skipped";
  }
}

/// The device ids every suite runs on: the in-tree backends, plus any
/// listed in STRATA_TEST_DEVICES (comma-separated, e.g. "acme:0"), so a
/// third-party backend runs the same suite without editing it.
inline std::vector<const char*> test_devices() {
  static std::vector<std::string> ids = [] {
    std::vector<std::string> v{"cpu:0", "vulkan:0", "cuda:0", "hip:0"};
    for (const std::string& id : split_ids(std::getenv("STRATA_TEST_DEVICES"))) {
      if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
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

/// Skips the case unless the device stores every dtype listed (for cases
/// that need them throughout), naming each one it does not store as the
/// other skips do ("vulkan:0 does not store f64; vulkan:0 does not store
/// bf16"), which the skip check (tests/skips) holds against the device's
/// own dtype list.
#define STRATA_NEEDS_DTYPES(...)                                                      \
  do {                                                                                \
    std::string missing_dtypes_;                                                      \
    for (DType wanted_dtype_ : {__VA_ARGS__}) {                                       \
      if (stores(wanted_dtype_)) continue;                                            \
      missing_dtypes_ += missing_dtypes_.empty() ? "" : "; ";                         \
      missing_dtypes_ += std::string(GetParam()) + " does not store " +               \
                         std::string(::strata::dtype_name(wanted_dtype_));            \
    }                                                                                 \
    if (!missing_dtypes_.empty()) GTEST_SKIP() << missing_dtypes_;                    \
  } while (0)

/// SCOPED_TRACE text for a case.
#define STRATA_TRACE(...) SCOPED_TRACE(::testing::Message() << __VA_ARGS__)
