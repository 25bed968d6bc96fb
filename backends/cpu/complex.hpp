// complex.hpp — the complex storage types c64 and c128 for the kernel
// templates: std::complex<float> and std::complex<double>, whose layout (a
// real, imaginary pair) is the ABI's. They compute as themselves.
#pragma once

#include "dtype.hpp"

#include <complex>

namespace strata::cpu {

using c64 = std::complex<float>;
using c128 = std::complex<double>;

template <>
struct Scalar<c64> : PlainScalar<c64, c64> {};
template <>
struct Scalar<c128> : PlainScalar<c128, c128> {};

using ComplexTypes = TypeList<c64, c128>;

}  // namespace strata::cpu
