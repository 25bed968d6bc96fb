// reference.hpp — naive host reference implementations of the op set, random
// operand generation and tolerant comparison for ops_test.
//
// Everything here computes in double on row-major host arrays (HostTensor),
// independently of the library: a reference must not call the op it checks.
// The only library calls are the plain host <-> device transfers (from_data,
// to_vector on a contiguous tensor), which run no kernel.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../common/test_device.hpp"  // Tolerance, tolerance(dtype)

namespace strata_test {

using strata::DType;
using strata::Shape;
using strata::Tensor;

/// A row-major host array of doubles.
struct HostTensor {
  Shape shape;
  std::vector<double> data;

  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  /// Element at a full multi-index.
  double at(const Shape& index) const;
};

int64_t numel_of(const Shape& shape);
std::string shape_str(const Shape& shape);
/// Multi-index of row-major position `flat`.
Shape unravel(int64_t flat, const Shape& shape);
/// Row-major position of a multi-index.
int64_t ravel(const Shape& index, const Shape& shape);
/// A host tensor of `shape` whose element at flat position i is f(i).
HostTensor generate(const Shape& shape, const std::function<double(int64_t)>& f);
HostTensor host_values(const Shape& shape, std::vector<double> values);

// --- host <-> device ---------------------------------------------------------

/// The tensor's values (any layout) and shape.
HostTensor to_host(const Tensor& t);
/// A compact tensor of `dtype` on `device` holding `h` (values converted).
Tensor upload(const HostTensor& h, DType dtype, strata::Device device);
/// `values` rounded to what `dtype` stores (by a transfer round trip).
std::vector<double> round_to(const std::vector<double>& values, DType dtype, strata::Device device);

// --- random operands ---------------------------------------------------------

/// Memory layouts an operand is produced in. All but `contiguous` yield
/// non-contiguous tensors (where the shape allows it).
enum class Layout { contiguous, transposed, strided, expanded };
inline constexpr Layout kAllLayouts[] = {Layout::contiguous, Layout::transposed, Layout::strided, Layout::expanded};
const char* layout_name(Layout layout);

struct Operand {
  HostTensor host;  // the values the device tensor holds, row-major
  Tensor dev;
};

/// Values uniform in [lo, hi] (integers for integer dtypes or when
/// `integers`, 0/1 for bool), rounded to `dtype`, placed on `device` in `layout`.
Operand random_operand(std::mt19937& rng, const Shape& shape, DType dtype, strata::Device device,
                       Layout layout = Layout::contiguous, double lo = -2.0, double hi = 2.0, bool integers = false);
/// A random shape of rank in [min_rank, max_rank] with dims in [1, max_dim]
/// (or [0, max_dim] when allow_empty).
Shape random_shape(std::mt19937& rng, int min_rank, int max_rank, int64_t max_dim, bool allow_empty = false);
/// A few shapes for elementwise tests: random ones plus 0-d, empty and 1-element.
std::vector<Shape> test_shapes(std::mt19937& rng, int n_random = 3);
int64_t random_int(std::mt19937& rng, int64_t lo, int64_t hi);

// --- reference ops -------------------------------------------------------------

HostTensor map(const HostTensor& x, const std::function<double(double)>& f);
/// NumPy broadcast of two shapes (the shapes must be compatible).
Shape broadcast_shape(const Shape& a, const Shape& b);
HostTensor broadcast_to(const HostTensor& x, const Shape& shape);
HostTensor zip(const HostTensor& a, const HostTensor& b, const std::function<double(double, double)>& f);
HostTensor where(const HostTensor& cond, const HostTensor& a, const HostTensor& b);
HostTensor permute(const HostTensor& x, const Shape& dims);

enum class Reduce { sum, prod, max, min, mean, argmax, argmin };
/// Reduction over `dims` (empty: all; negative count from the end).
HostTensor reduce(const HostTensor& x, Shape dims, bool keepdim, Reduce kind);
/// NumPy matmul (1-D promotion, batch broadcasting).
HostTensor matmul(const HostTensor& a, const HostTensor& b);
HostTensor index_select(const HostTensor& x, int64_t dim, const std::vector<int64_t>& index);
HostTensor gather(const HostTensor& x, int64_t dim, const HostTensor& index);
HostTensor scatter_add(const HostTensor& base, int64_t dim, const HostTensor& index, const HostTensor& src);
HostTensor cat(const std::vector<HostTensor>& parts, int64_t dim);
HostTensor stack(const std::vector<HostTensor>& parts, int64_t dim);
/// Applies f to every 1-D lane of the tensors along `dim` (all of one shape);
/// f gets the lanes of every input and returns the output lane.
HostTensor along(const std::vector<HostTensor>& xs, int64_t dim,
                 const std::function<std::vector<double>(const std::vector<std::vector<double>>&)>& f);
HostTensor softmax(const HostTensor& x, int64_t dim);
HostTensor log_softmax(const HostTensor& x, int64_t dim);

// Scalar formulas shared by several tests.
double sigmoid(double x);
double gelu(double x);
double normal_cdf(double x);
double normal_pdf(double x);
/// Round half to even.
double round_half_even(double x);

// --- comparison ------------------------------------------------------------------

/// Checks actual's dtype and shape, then every element:
/// |a - e| <= atol + rtol * |e| (NaN matches NaN, infinities must be equal).
/// On failure names the worst element with its index.
::testing::AssertionResult close(const Tensor& actual, const HostTensor& expected, DType dtype, Tolerance tol);
/// Same, with tolerance(dtype).
::testing::AssertionResult close(const Tensor& actual, const HostTensor& expected, DType dtype);

/// Runs `f`, expecting exception E whose message contains every fragment.
template <class E, class F>
::testing::AssertionResult throws(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
  } catch (const E& e) {
    std::string msg = e.what();
    for (const std::string& part : fragments) {
      if (msg.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << part << "\"";
      }
    }
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// A data-dependent error (an out-of-range index): a ValueError from the call
/// itself, or — on an asynchronous device (docs/ops.md, "Data-dependent
/// errors may be deferred") — a DeviceError at the next synchronisation of
/// `device`. Either way the message must contain every fragment.
template <class F>
::testing::AssertionResult data_error(F&& f, strata::Device device, std::initializer_list<std::string> fragments) {
  auto check = [&](const std::string& msg) {
    for (const std::string& part : fragments) {
      if (msg.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << part << "\"";
      }
    }
    return ::testing::AssertionSuccess() << msg;
  };
  try {
    f();
  } catch (const strata::ValueError& e) {
    return check(e.what());
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "the call threw another exception type: " << e.what();
  }
  try {
    strata::runtime().synchronize(device);
  } catch (const strata::DeviceError& e) {
    return check(e.what());
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "synchronize threw another exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "neither the call nor the next synchronisation reported an error";
}

}  // namespace strata_test

/// EXPECT_TRUE(close(...)), except that an exception thrown while computing
/// the actual or expected value fails only this check, so that a loop over
/// cases goes on and reports every failing case.
#define EXPECT_CLOSE(...)                                                        \
  do {                                                                           \
    try {                                                                        \
      EXPECT_TRUE(::strata_test::close(__VA_ARGS__));                            \
    } catch (const std::exception& close_error_) {                               \
      ADD_FAILURE() << "close(" #__VA_ARGS__ ") threw: " << close_error_.what(); \
    }                                                                            \
  } while (0)
