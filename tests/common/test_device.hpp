// test_device.hpp — what a device-generic case needs to know about the
// device it runs on (docs/testing.md, "Every suite on every device").
//
// The device-generic suites (CTest label "device_generic") create their
// tensors on the runtime's default device, which STRATA_TEST_DEVICE chooses
// (test_device.cpp). A case that needs a dtype the device does not store
// says so with STRATA_REQUIRE_DTYPES; the answer comes from the device's own
// dtype list, and the skip reads
//
//   not applicable on vulkan:0: does not store f64
//
// which the expected-skip list (tests/expected-skips.json) explains with the
// condition "device-lacks $device f64", decided on the machine.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <strata/strata.hpp>
#include <string>

namespace strata_test {

/// The device the device-generic cases run on: the runtime's default.
inline strata::Device test_device() { return strata::runtime().default_device(); }

/// "" when the default device stores every dtype of `dtypes`; otherwise
/// one "not applicable on <device>: does not store <dtype>" per dtype it
/// lacks, joined by "; ".
inline std::string missing_dtypes(std::initializer_list<strata::DType> dtypes) {
  const strata::DeviceInfo info = strata::runtime().device_info(test_device());
  std::string why;
  for (strata::DType dt : dtypes) {
    if (std::find(info.dtypes.begin(), info.dtypes.end(), dt) != info.dtypes.end()) continue;
    if (!why.empty()) why += "; ";
    why += "not applicable on " + info.id + ": does not store " + std::string(strata::dtype_name(dt));
  }
  return why;
}

/// "" when the default device has a kernel of every op of `ops` ("linear",
/// or "acme::swiglu"); otherwise one "not applicable on <device>: no
/// kernel of <op> (it decomposes there)" per op it lacks, joined by "; ".
inline std::string missing_kernels(std::initializer_list<const char*> ops) {
  const strata::DeviceInfo info = strata::runtime().device_info(test_device());
  std::string why;
  for (const char* op : ops) {
    const std::string name = std::string(op).find("::") == std::string::npos ? "strata::" + std::string(op) : op;
    const bool has = std::any_of(info.kernels.begin(), info.kernels.end(),
                                 [&](const strata::KernelInfo& k) { return k.op == name; });
    if (has) continue;
    if (!why.empty()) why += "; ";
    why += "not applicable on " + info.id + ": no kernel of " + op + " (it decomposes there)";
  }
  return why;
}

}  // namespace strata_test

/// Skips the case when the default device lacks one of the dtypes, naming
/// the device and each dtype (from the device's own list); a statement.
#define STRATA_REQUIRE_DTYPES(...)                                                                                \
  if (const std::string strata_missing_ = ::strata_test::missing_dtypes({__VA_ARGS__}); !strata_missing_.empty()) \
  GTEST_SKIP() << strata_missing_

/// Skips the case when the default device has no kernel of one of the ops
/// (a case about the op's own node, which a decomposition does not record).
#define STRATA_REQUIRE_KERNELS(...)                                                              \
  if (const std::string strata_missing_ = ::strata_test::missing_kernels({__VA_ARGS__});         \
      !strata_missing_.empty())                                                                  \
  GTEST_SKIP() << strata_missing_
