// complex_values.hpp — complex tensors to and from host vectors of
// std::complex<double>, and comparing them, for the complex suites
// (tests/ops/complex_test.cpp, tests/autograd/complex_grad_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <complex>
#include <cstddef>
#include <random>
#include <sstream>
#include <string>
#include <strata/strata.hpp>
#include <vector>

namespace strata_test {

using cd = std::complex<double>;
using CValues = std::vector<cd>;

/// A tensor of `dtype` (complex: the values; real: their real parts) on `device`.
inline strata::Tensor ctensor(const CValues& values, const strata::Shape& shape, strata::DType dtype = strata::c128,
                              strata::Device device = strata::Device("cpu:0")) {
  return strata::from_data(std::span<const cd>(values), shape, {.dtype = dtype, .device = device});
}

inline CValues cvalues(const strata::Tensor& t) { return t.to_vector<cd>(); }

/// n values with parts uniform in [lo, hi), from a fixed seed.
inline CValues random_complex(size_t n, unsigned seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  CValues v(n);
  for (cd& z : v) z = cd(u(rng), u(rng));
  return v;
}

/// n values whose modulus lies in [0.3, 2] (away from the branch point 0 of
/// log, sqrt, angle, abs and from the negative real axis's cut by an angle
/// in (-2.5, 2.5)).
inline CValues away_from_cuts(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> r(0.3, 2.0), theta(-2.5, 2.5);
  CValues v(n);
  for (cd& z : v) z = std::polar(r(rng), theta(rng));
  return v;
}

/// Every element within atol + rtol·|want| of `want`.
inline ::testing::AssertionResult close(const CValues& got, const CValues& want, double rtol, double atol = 0.0) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(got[i] - want[i]);
    if (!(error <= atol + rtol * std::abs(want[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << want[i]
                                           << " (|error| " << error << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

/// The relative tolerance of a complex dtype's arithmetic.
inline double tolerance(strata::DType dtype) { return dtype == strata::c64 ? 2e-6 : 1e-13; }

}  // namespace strata_test
