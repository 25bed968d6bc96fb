// nn_test_util.hpp — small helpers for the nn tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../common/test_device.hpp"

namespace nn_test {

using strata::Shape;
using strata::Tensor;

/// A tensor of strata_test::real_dtype() from values: f64 where the default
/// device stores it, f32 elsewhere (docs/testing.md, "Every suite on every
/// device").
inline Tensor make_real(const std::vector<double>& values, const Shape& shape) {
  return strata::from_data(std::span<const double>(values), shape, {.dtype = strata_test::real_dtype()});
}

/// An i64 tensor from values.
inline Tensor make_i64(const std::vector<int64_t>& values, const Shape& shape) {
  return strata::from_data(std::span<const int64_t>(values), shape);
}

/// Deterministic pseudo-random doubles in [lo, hi).
inline std::vector<double> random_values(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> out(n);
  uint64_t s = seed * 2654435761u + 12345u;
  for (auto& v : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = lo + (hi - lo) * static_cast<double>(s >> 11) / static_cast<double>(1ull << 53);
  }
  return out;
}

/// Element count of a shape.
inline size_t count(const Shape& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

/// A random tensor of strata_test::real_dtype().
inline Tensor random_real(const Shape& shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return make_real(random_values(count(shape), seed, lo, hi), shape);
}

/// Expects `t`'s values to equal `expected` within `tol` (absolute + relative),
/// the bound of an f64 result; `t` in a narrower dtype (f32 on a device
/// without f64) is held to that dtype's tolerance where it is looser.
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol,
                          const std::string& what = "") {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = strata_test::bound_in(t.dtype(), tol * (1.0 + std::abs(expected[i])), expected[i]);
    EXPECT_NEAR(got[i], expected[i], bound) << what << " at flat index " << i;
  }
}

/// Runs `fn`, expecting it to throw E with a message containing every
/// string of `parts`.
template <typename E, typename F>
void expect_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace nn_test
