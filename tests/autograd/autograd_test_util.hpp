// autograd_test_util.hpp — small helpers the custom-function and implicit
// differentiation tests share.
#pragma once

#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "../common/test_device.hpp"

namespace autograd_test {

/// A 1-d tensor in strata_test::real_dtype(): f64 where the default device
/// stores it, f32 elsewhere.
inline strata::Tensor vec(std::vector<double> v) {
  return strata::from_data(std::span<const double>(v), {static_cast<int64_t>(v.size())},
                           {.dtype = strata_test::real_dtype()});
}

inline double value(const strata::Tensor& t) { return t.item<double>(); }

/// Every element of `a` within `tol` of `b`. `tol` is the bound of an f64
/// result; `a` in a narrower dtype (f32 on a device without f64) is held to
/// that dtype's tolerance (strata_test::tolerance) where it is looser.
inline void expect_near(const strata::Tensor& a, const std::vector<double>& b, double tol) {
  std::vector<double> x = a.to_vector<double>();
  ASSERT_EQ(x.size(), b.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], b[i], strata_test::bound_in(a.dtype(), tol, b[i])) << "element " << i;
  }
}

/// `f` throws a strata::Error whose message contains every piece.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const strata::Error& e) {
    for (const std::string& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace autograd_test
