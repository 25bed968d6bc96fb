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
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <strata/strata.hpp>
#include <string>
#include <vector>

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

/// The floating dtype a device-generic case computes in when its subject is
/// not a dtype: f64 where the default device stores it (cpu:0, where the
/// hand-computed references hold to the last bits), f32 elsewhere. Read it
/// in the case, not at static initialization: the default device is chosen
/// before the first case runs.
inline strata::DType real_dtype() {
  return missing_dtypes({strata::DType::f64}).empty() ? strata::DType::f64 : strata::DType::f32;
}

/// How far a value computed in a dtype may lie from an exact (or f64)
/// reference: |actual - expected| <= atol + rtol * |expected|. The one
/// table of the tests (the op suites' `close` uses it too).
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
  Tolerance scaled(double factor) const { return {rtol * factor, atol * factor}; }
  /// atol + rtol * |expected|.
  double bound(double expected) const { return atol + rtol * std::fabs(expected); }
};

/// ~1e-5 relative for f32, 1e-12 for f64, 1e-2 for f16/bf16, exact for integers.
inline Tolerance tolerance(strata::DType dtype) {
  switch (dtype) {
    case strata::DType::f32:
      return {1e-5, 1e-6};
    case strata::DType::f64:
      return {1e-12, 1e-13};
    case strata::DType::f16:
      return {1e-2, 1e-2};
    case strata::DType::bf16:
      return {3e-2, 3e-2};
    default:
      return {0.0, 0.0};
  }
}

/// The bound a value computed in `dt` is held to when an f64 result would be
/// held to `f64_bound`: that bound, or `dt`'s tolerance of `expected` where
/// `dt` is narrower and its tolerance looser.
inline double bound_in(strata::DType dt, double f64_bound, double expected) {
  return dt == strata::DType::f64 ? f64_bound : std::max(f64_bound, tolerance(dt).bound(expected));
}

/// GoogleTest predicate of EXPECT_REAL_NEAR: |actual - expected| within
/// `f64_bound` when the case computes in f64; in a narrower real_dtype()
/// within that dtype's tolerance where that is looser.
/// The failure names the device and dtype the bound belongs to.
inline ::testing::AssertionResult real_near_bound(const char* actual_text, const char* expected_text,
                                                  const char* /*bound_text*/, double actual, double expected,
                                                  double f64_bound) {
  const strata::DType dt = real_dtype();
  const double bound = bound_in(dt, f64_bound, expected);
  if (std::fabs(actual - expected) <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << actual_text << " = " << actual << ", expected " << expected_text << " = "
                                       << expected << " within " << bound << " (" << strata::dtype_name(dt)
                                       << " on " << test_device().str() << ")";
}

/// GoogleTest predicate of EXPECT_REAL_EQ: |actual - expected| within
/// tolerance(real_dtype()).
inline ::testing::AssertionResult real_near(const char* actual_text, const char* expected_text, double actual,
                                            double expected) {
  return real_near_bound(actual_text, expected_text, "", actual, expected,
                         tolerance(strata::DType::f64).bound(expected));
}

/// The same, element by element, for two equally long vectors.
inline ::testing::AssertionResult reals_near(const char* actual_text, const char* expected_text,
                                             const std::vector<double>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << actual_text << " has " << actual.size() << " elements, " << expected_text
                                         << " " << expected.size();
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ::testing::AssertionResult one = real_near(actual_text, expected_text, actual[i], expected[i]);
    if (!one) return one << " at element " << i;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace strata_test

/// EXPECT_DOUBLE_EQ for a value the case computed in real_dtype(): on cpu:0
/// within f64's tolerance (1e-12 relative), on a device without f64 within
/// f32's (1e-5).
#define EXPECT_REAL_EQ(actual, expected) EXPECT_PRED_FORMAT2(::strata_test::real_near, actual, expected)
/// The same for std::vector<double>s (a tensor's to_vector<double>()).
#define EXPECT_REALS_EQ(actual, expected) EXPECT_PRED_FORMAT2(::strata_test::reals_near, actual, expected)
/// EXPECT_NEAR with the bound an f64 result is held to; a case computing in
/// f32 (a device without f64) is held to f32's tolerance where it is looser.
#define EXPECT_REAL_NEAR(actual, expected, f64_bound) \
  EXPECT_PRED_FORMAT3(::strata_test::real_near_bound, actual, expected, f64_bound)

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
