// reduce_test.cpp — sum, mean, prod, amax, amin, argmax, argmin.
#include <cmath>

#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

using ReduceFn = Tensor (*)(const Tensor&, const Shape&, bool);

class Reductions : public DeviceTest {
 protected:
  /// Dim lists worth testing for a tensor of rank `rank` (empty = all).
  static std::vector<Shape> dim_lists(int64_t rank) {
    std::vector<Shape> lists{{}};
    if (rank >= 1) lists.insert(lists.end(), {{0}, {-1}});
    if (rank >= 2) lists.insert(lists.end(), {{1}, {0, -1}, {-2}});
    if (rank >= 3) lists.insert(lists.end(), {{0, 2}, {-1, 1}, {2, 0, 1}});
    if (rank >= 4) lists.insert(lists.end(), {{1, 3}, {-3, -2}});
    return lists;
  }

  static int64_t reduced_count(const Shape& shape, Shape dims) {
    if (dims.empty()) return numel_of(shape);
    int64_t n = 1;
    for (int64_t d : dims) n *= shape[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(shape.size()) : d)];
    return n;
  }

  /// op vs the reference over shapes x dims x keepdim x layouts.
  void check(ReduceFn op, Reduce kind, std::initializer_list<DType> wanted, DType (*result)(DType), double lo,
             double hi, int64_t max_dim) {
    for (DType dtype : dtypes(wanted)) {
      std::vector<Shape> shapes{{}, {1}, {7}, {3, 4}, {2, 3, 4}};
      for (int i = 0; i < 3; ++i) shapes.push_back(random_shape(rng_, 1, 4, max_dim));
      for (const Shape& shape : shapes) {
        for (const Shape& dims : dim_lists(static_cast<int64_t>(shape.size()))) {
          for (bool keepdim : {false, true}) {
            for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided, Layout::expanded}) {
              STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " " << layout_name(layout) << " dims "
                                                << shape_str(dims) << " keepdim " << keepdim);
              Operand x = operand(shape, dtype, layout, lo, hi);
              Tolerance tol = tolerance(result(dtype));
              tol.atol *= static_cast<double>(std::max<int64_t>(reduced_count(shape, dims), 1));
              EXPECT_CLOSE(op(x.dev, dims, keepdim), reduce(x.host, dims, keepdim, kind), result(dtype), tol);
            }
          }
        }
      }
    }
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Reductions);

DType accumulate(DType t) { return s::is_floating(t) ? t : s::i64; }
DType same(DType t) { return t; }
DType floating(DType t) { return s::is_floating(t) ? t : s::f32; }

TEST_P(Reductions, Sum) { check(s::sum, Reduce::sum, {s::f32, s::f64, s::i32, s::i64}, accumulate, -3, 3, 5); }
TEST_P(Reductions, Mean) { check(s::mean, Reduce::mean, {s::f32, s::f64, s::i32, s::i64}, floating, -3, 3, 5); }
TEST_P(Reductions, Prod) { check(s::prod, Reduce::prod, {s::f32, s::f64}, same, 0.5, 1.5, 3); }
TEST_P(Reductions, ProdIntegers) { check(s::prod, Reduce::prod, {s::i32, s::i64}, accumulate, -2, 2, 3); }
TEST_P(Reductions, Amax) { check(s::amax, Reduce::max, {s::f32, s::f64, s::i32, s::i64}, same, -9, 9, 5); }
TEST_P(Reductions, Amin) { check(s::amin, Reduce::min, {s::f32, s::f64, s::i32, s::i64}, same, -9, 9, 5); }

TEST_P(Reductions, SumOfBoolCountsInI64) {
  Operand x = int_operand({4, 5}, s::boolean, Layout::transposed);
  EXPECT_CLOSE(s::sum(x.dev), reduce(x.host, {}, false, Reduce::sum), s::i64);
  EXPECT_CLOSE(s::sum(x.dev, {1}), reduce(x.host, {1}, false, Reduce::sum), s::i64);
  EXPECT_CLOSE(s::prod(x.dev, {0}, true), reduce(x.host, {0}, true, Reduce::prod), s::i64);
}

TEST_P(Reductions, KnownValues) {
  // [[1, 2, 3], [4, 5, 6]]
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Tensor x = make({2, 3}, {1, 2, 3, 4, 5, 6}, dtype);
    EXPECT_CLOSE(s::sum(x), host_values({}, {21}), accumulate(dtype));
    EXPECT_CLOSE(s::sum(x, {0}), host_values({3}, {5, 7, 9}), accumulate(dtype));
    EXPECT_CLOSE(s::sum(x, {-1}, true), host_values({2, 1}, {6, 15}), accumulate(dtype));
    EXPECT_CLOSE(s::prod(x, {1}), host_values({2}, {6, 120}), accumulate(dtype));
    EXPECT_CLOSE(s::mean(x, {0}), host_values({3}, {2.5, 3.5, 4.5}), floating(dtype));
    EXPECT_CLOSE(s::amax(x, {1}), host_values({2}, {3, 6}), dtype);
    EXPECT_CLOSE(s::amin(x), host_values({}, {1}), dtype);
    EXPECT_CLOSE(s::argmax(x, 1), host_values({2}, {2, 2}), s::i64);
    EXPECT_CLOSE(s::argmin(x, 0, true), host_values({1, 3}, {0, 0, 0}), s::i64);
  }
}

TEST_P(Reductions, EmptyInputs) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Tensor x = make({0, 3}, {}, dtype);
    DType acc = accumulate(dtype);
    EXPECT_CLOSE(s::sum(x), host_values({}, {0}), acc);
    EXPECT_CLOSE(s::sum(x, {0}), host_values({3}, {0, 0, 0}), acc);
    EXPECT_CLOSE(s::sum(x, {0}, true), host_values({1, 3}, {0, 0, 0}), acc);
    EXPECT_CLOSE(s::sum(x, {1}), host_values({0}, {}), acc);
    EXPECT_CLOSE(s::sum(x, {1}, true), host_values({0, 1}, {}), acc);
    EXPECT_CLOSE(s::prod(x, {0}), host_values({3}, {1, 1, 1}), acc);
    EXPECT_CLOSE(s::prod(x), host_values({}, {1}), acc);
    EXPECT_CLOSE(s::amax(x, {1}), host_values({0}, {}), dtype);
    EXPECT_CLOSE(s::argmin(x, 1, true), host_values({0, 1}, {}), s::i64);
    EXPECT_CLOSE(s::mean(x, {1}), host_values({0}, {}), floating(dtype));
    // Max of nothing has no value.
    EXPECT_THROW(s::amax(x, {0}), s::ShapeError);
    EXPECT_THROW(s::amin(x), s::ShapeError);
    EXPECT_THROW(s::argmax(x, 0), s::ShapeError);
    // An empty tensor of a larger rank, reduced over a non-empty dim.
    Tensor y = make({2, 0, 4}, {}, dtype);
    EXPECT_CLOSE(s::sum(y, {0, 2}), host_values({0}, {}), acc);
    EXPECT_CLOSE(s::sum(y, {1}), host_values({2, 4}, std::vector<double>(8, 0.0)), acc);
  }
}

TEST_P(Reductions, ZeroDimensionalInputs) {
  for (DType dtype : dtypes({s::f32, s::i64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Tensor x = make({}, {5}, dtype);
    EXPECT_CLOSE(s::sum(x), host_values({}, {5}), accumulate(dtype));
    EXPECT_CLOSE(s::sum(x, {0}), host_values({}, {5}), accumulate(dtype));
    EXPECT_CLOSE(s::sum(x, {-1}, true), host_values({}, {5}), accumulate(dtype));
    EXPECT_CLOSE(s::amax(x), host_values({}, {5}), dtype);
    EXPECT_CLOSE(s::mean(x), host_values({}, {5}), floating(dtype));
    EXPECT_CLOSE(s::argmax(x, 0), host_values({}, {0}), s::i64);
    EXPECT_CLOSE(s::argmin(x, -1, true), host_values({}, {0}), s::i64);
  }
}

TEST_P(Reductions, ArgmaxArgminFirstOccurrenceWins) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    std::vector<Shape> shapes{{6}, {3, 4}, {2, 3, 4}, {1, 5}};
    for (int i = 0; i < 3; ++i) shapes.push_back(random_shape(rng_, 1, 4, 5));
    for (const Shape& shape : shapes) {
      auto rank = static_cast<int64_t>(shape.size());
      for (int64_t dim = -rank; dim < rank; ++dim) {
        for (bool keepdim : {false, true}) {
          for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
            STRATA_TRACE(s::dtype_name(dtype)
                         << shape_str(shape) << " " << layout_name(layout) << " dim " << dim << " keepdim " << keepdim);
            Operand x = int_operand(shape, dtype, layout, -2, 2);  // many ties
            EXPECT_CLOSE(s::argmax(x.dev, dim, keepdim), reduce(x.host, {dim}, keepdim, Reduce::argmax), s::i64);
            EXPECT_CLOSE(s::argmin(x.dev, dim, keepdim), reduce(x.host, {dim}, keepdim, Reduce::argmin), s::i64);
          }
        }
      }
    }
  }
}

TEST_P(Reductions, AllEqualArgmaxIsZero) {
  Tensor x = make({2, 5}, std::vector<double>(10, 3.0), s::f32);
  EXPECT_CLOSE(s::argmax(x, 1), host_values({2}, {0, 0}), s::i64);
  EXPECT_CLOSE(s::argmin(x, 0), host_values({5}, {0, 0, 0, 0, 0}), s::i64);
}

TEST_P(Reductions, LargeSumsAccumulateAccurately) {
  // 100000 x 0.1f: a naive sequential f32 sum is off by ~1.5e-4 relative;
  // blocked/pairwise accumulation (what the CPU plugin and GPU trees do)
  // stays within 1e-5.
  const int64_t n = 100000;
  Tensor x = s::full({n}, 0.1, {.dtype = s::f32, .device = dev()});
  double expected = static_cast<double>(n) * static_cast<double>(0.1f);
  EXPECT_CLOSE(s::sum(x), host_values({}, {expected}), s::f32, {1e-5, 0.0});
  EXPECT_CLOSE(s::mean(x.reshape({100, 1000}), {1}), generate({100}, [](int64_t) { return double(0.1f); }), s::f32);
  if (runs(s::i32)) {
    // i32 sums in i64: no overflow at 2^31.
    Tensor big = s::full({4}, 1.0e9, {.dtype = s::i32, .device = dev()});
    EXPECT_CLOSE(s::sum(big), host_values({}, {4.0e9}), s::i64);
  }
}

}  // namespace
}  // namespace strata_test
