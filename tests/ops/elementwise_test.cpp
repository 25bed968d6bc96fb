// elementwise_test.cpp — unary, binary, comparison, logical, where, clamp
// and the scalar operators, against the host reference.
#include <cmath>
#include <limits>

#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

class Unary : public DeviceTest {
 protected:
  /// Every float dtype x test shape x layout, values in [lo, hi].
  void check_float(Tensor (*op)(const Tensor&), double (*ref)(double), double lo, double hi) {
    std::vector<Shape> shapes = test_shapes(rng_);
    for (DType dtype : dtypes({s::f32, s::f64})) {
      for (const Shape& shape : shapes) {
        for (Layout layout : kAllLayouts) {
          STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " " << layout_name(layout));
          Operand x = operand(shape, dtype, layout, lo, hi);
          EXPECT_CLOSE(op(x.dev), map(x.host, ref), dtype);
        }
      }
    }
  }
  /// Integer dtypes: exact, same dtype.
  void check_integer(Tensor (*op)(const Tensor&), double (*ref)(double)) {
    for (DType dtype : dtypes({s::i32, s::i64})) {
      for (const Shape& shape : test_shapes(rng_, 2)) {
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
          STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " " << layout_name(layout));
          Operand x = operand(shape, dtype, layout, -50, 50);
          EXPECT_CLOSE(op(x.dev), map(x.host, ref), dtype);
        }
      }
    }
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Unary);

#define STRATA_UNARY_FLOAT_TEST(Name, op, lo, hi, expr) \
  TEST_P(Unary, Name) {                                 \
    check_float(op, [](double x) { return expr; }, lo, hi); \
  }

STRATA_UNARY_FLOAT_TEST(Neg, s::neg, -2, 2, -x)
STRATA_UNARY_FLOAT_TEST(Abs, s::abs, -2, 2, std::fabs(x))
STRATA_UNARY_FLOAT_TEST(Sign, s::sign, -2, 2, static_cast<double>((x > 0) - (x < 0)))
STRATA_UNARY_FLOAT_TEST(Relu, s::relu, -2, 2, x > 0 ? x : 0.0)
STRATA_UNARY_FLOAT_TEST(Exp, s::exp, -4, 4, std::exp(x))
STRATA_UNARY_FLOAT_TEST(Log, s::log, 0.05, 6, std::log(x))
STRATA_UNARY_FLOAT_TEST(Log1p, s::log1p, -0.7, 4, std::log1p(x))
STRATA_UNARY_FLOAT_TEST(Expm1, s::expm1, -2, 2, std::expm1(x))
STRATA_UNARY_FLOAT_TEST(Sqrt, s::sqrt, 0, 6, std::sqrt(x))
STRATA_UNARY_FLOAT_TEST(Rsqrt, s::rsqrt, 0.05, 6, 1.0 / std::sqrt(x))
STRATA_UNARY_FLOAT_TEST(Sin, s::sin, -4, 4, std::sin(x))
STRATA_UNARY_FLOAT_TEST(Cos, s::cos, -4, 4, std::cos(x))
STRATA_UNARY_FLOAT_TEST(Tanh, s::tanh, -4, 4, std::tanh(x))
STRATA_UNARY_FLOAT_TEST(Sigmoid, s::sigmoid, -6, 6, sigmoid(x))
STRATA_UNARY_FLOAT_TEST(Erf, s::erf, -2.5, 2.5, std::erf(x))
STRATA_UNARY_FLOAT_TEST(Floor, s::floor, -4, 4, std::floor(x))
STRATA_UNARY_FLOAT_TEST(Ceil, s::ceil, -4, 4, std::ceil(x))
STRATA_UNARY_FLOAT_TEST(Round, s::round, -4, 4, round_half_even(x))
STRATA_UNARY_FLOAT_TEST(Reciprocal, s::reciprocal, 0.2, 4, 1.0 / x)
STRATA_UNARY_FLOAT_TEST(Square, s::square, -3, 3, x * x)
STRATA_UNARY_FLOAT_TEST(Gelu, s::gelu, -4, 4, gelu(x))
STRATA_UNARY_FLOAT_TEST(Silu, s::silu, -6, 6, x * sigmoid(x))

TEST_P(Unary, IntegerNegAbsSignRelu) {
  check_integer(s::neg, [](double x) { return -x; });
  check_integer(s::abs, [](double x) { return std::fabs(x); });
  check_integer(s::sign, [](double x) { return static_cast<double>((x > 0) - (x < 0)); });
  check_integer(s::relu, [](double x) { return x > 0 ? x : 0.0; });
  check_integer(s::square, [](double x) { return x * x; });
}

TEST_P(Unary, RoundHalfToEvenFloorCeilAtBoundaries) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    std::vector<double> v{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, -3.0, 0.0, 2.25, -2.75};
    Tensor x = make({11}, v, dtype);
    EXPECT_CLOSE(s::round(x), host_values({11}, {0, 2, 2, -0.0, -2, -2, 3, -3, 0, 2, -3}), dtype);
    EXPECT_CLOSE(s::floor(x), host_values({11}, {0, 1, 2, -1, -2, -3, 3, -3, 0, 2, -3}), dtype);
    EXPECT_CLOSE(s::ceil(x), host_values({11}, {1, 2, 3, -0.0, -1, -2, 3, -3, 0, 3, -2}), dtype);
    EXPECT_CLOSE(s::sign(x), host_values({11}, {1, 1, 1, -1, -1, -1, 1, -1, 0, 1, -1}), dtype);
  }
}

TEST_P(Unary, FloatOpsTurnIntegerAndBoolInputsIntoF32) {
  for (DType dtype : dtypes({s::i32, s::i64, s::boolean})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand x = int_operand({3, 4}, dtype, Layout::contiguous, 0, 5);
    EXPECT_CLOSE(s::exp(x.dev), map(x.host, [](double v) { return std::exp(v); }), s::f32);
    EXPECT_CLOSE(s::sqrt(x.dev), map(x.host, [](double v) { return std::sqrt(v); }), s::f32);
    EXPECT_CLOSE(s::sigmoid(x.dev), map(x.host, sigmoid), s::f32);
  }
}

TEST_P(Unary, LogicalNot) {
  for (DType dtype : dtypes({s::boolean, s::f32, s::i64})) {
    for (const Shape& shape : test_shapes(rng_, 2)) {
      STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape));
      Operand x = int_operand(shape, dtype, Layout::strided, -1, 1);
      EXPECT_CLOSE(s::logical_not(x.dev), map(x.host, [](double v) { return v == 0.0 ? 1.0 : 0.0; }), s::boolean);
    }
  }
}

// --- binary ----------------------------------------------------------------------

struct ShapePair {
  Shape a, b;
};

class Binary : public DeviceTest {
 protected:
  std::vector<ShapePair> shape_pairs() {
    std::vector<ShapePair> pairs{{{3, 4}, {3, 4}},
                                 {{3, 4}, {4}},
                                 {{2, 1, 4}, {3, 1}},
                                 {{}, {2, 3}},
                                 {{5}, {}},
                                 {{}, {}},
                                 {{1}, {3, 1, 2}},
                                 {{0, 3}, {3}},
                                 {{2, 0}, {1}},
                                 {{4, 1, 3}, {1, 5, 1}},
                                 {{2, 3, 4, 5}, {3, 1, 5}}};
    for (int i = 0; i < 3; ++i) {  // random pairs: b drops leading dims and sets some to 1
      Shape a = random_shape(rng_, 1, 4, 5);
      Shape b(a.begin() + random_int(rng_, 0, static_cast<int64_t>(a.size()) - 1), a.end());
      for (int64_t& d : b) d = random_int(rng_, 0, 2) == 0 ? 1 : d;
      if (random_int(rng_, 0, 1) == 1) std::swap(a, b);
      pairs.push_back({a, b});
    }
    return pairs;
  }

  /// op on dtype x shape pairs x layout pairs; `result` maps the input dtype
  /// to the expected result dtype.
  void check(Tensor (*op)(const Tensor&, const Tensor&), double (*ref)(double, double),
             std::initializer_list<DType> wanted, DType (*result)(DType), double alo, double ahi, double blo,
             double bhi) {
    const std::pair<Layout, Layout> layouts[] = {{Layout::contiguous, Layout::contiguous},
                                                 {Layout::transposed, Layout::strided},
                                                 {Layout::expanded, Layout::transposed},
                                                 {Layout::strided, Layout::expanded}};
    for (DType dtype : dtypes(wanted)) {
      for (const ShapePair& p : shape_pairs()) {
        for (auto [la, lb] : layouts) {
          STRATA_TRACE(s::dtype_name(dtype) << " " << shape_str(p.a) << " " << layout_name(la) << " with "
                                            << shape_str(p.b) << " " << layout_name(lb));
          Operand a = operand(p.a, dtype, la, alo, ahi);
          Operand b = operand(p.b, dtype, lb, blo, bhi);
          EXPECT_CLOSE(op(a.dev, b.dev), zip(a.host, b.host, ref), result(dtype));
        }
      }
    }
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Binary);

DType same(DType t) { return t; }
DType floating(DType t) { return s::is_floating(t) ? t : s::f32; }
DType to_bool(DType) { return s::boolean; }

#define STRATA_BINARY_TEST(Name, op, dtypes_, result, alo, ahi, blo, bhi, expr) \
  TEST_P(Binary, Name) {                                                        \
    auto ref = [](double a, double b) { return expr; };                         \
    check(op, ref, dtypes_, result, alo, ahi, blo, bhi);                        \
  }
#define STRATA_NUMERIC {s::f32, s::f64, s::i32, s::i64}

STRATA_BINARY_TEST(Add, s::add, STRATA_NUMERIC, same, -9, 9, -9, 9, a + b)
STRATA_BINARY_TEST(Sub, s::sub, STRATA_NUMERIC, same, -9, 9, -9, 9, a - b)
STRATA_BINARY_TEST(Mul, s::mul, STRATA_NUMERIC, same, -9, 9, -9, 9, a * b)
STRATA_BINARY_TEST(Div, s::div, STRATA_NUMERIC, floating, -9, 9, 1, 5, a / b)
STRATA_BINARY_TEST(DivNegativeDivisor, s::div, STRATA_NUMERIC, floating, -9, 9, -5, -1, a / b)
STRATA_BINARY_TEST(Pow, s::pow, STRATA_NUMERIC, floating, 1, 4, -2, 3, std::pow(a, b))
STRATA_BINARY_TEST(Maximum, s::maximum, STRATA_NUMERIC, same, -4, 4, -4, 4, std::max(a, b))
STRATA_BINARY_TEST(Minimum, s::minimum, STRATA_NUMERIC, same, -4, 4, -4, 4, std::min(a, b))

TEST_P(Binary, IntegerDivisionIsTrueDivisionInF32) {
  for (DType dtype : dtypes({s::i32, s::i64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Tensor a = make({6}, {7, -7, 7, -7, 1, 0}, dtype);
    Tensor b = make({6}, {2, 2, -2, -2, 0, 0}, dtype);
    double inf = std::numeric_limits<double>::infinity();
    double nan = std::numeric_limits<double>::quiet_NaN();
    EXPECT_CLOSE(s::div(a, b), host_values({6}, {3.5, -3.5, -3.5, 3.5, inf, nan}), s::f32);
  }
}

TEST_P(Binary, MaximumMinimumPropagateNaN) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    double nan = std::numeric_limits<double>::quiet_NaN();
    Tensor a = make({3}, {nan, 1, 2}, dtype);
    Tensor b = make({3}, {1, nan, 3}, dtype);
    EXPECT_CLOSE(s::maximum(a, b), host_values({3}, {nan, nan, 3}), dtype);
    EXPECT_CLOSE(s::minimum(a, b), host_values({3}, {nan, nan, 2}), dtype);
  }
}

TEST_P(Binary, PowWithScalarExponent) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand x = operand({4, 5}, dtype, Layout::transposed, 0.1, 3);
    EXPECT_CLOSE(s::pow(x.dev, 2.0), map(x.host, [](double v) { return v * v; }), dtype);
    EXPECT_CLOSE(s::pow(x.dev, -0.5), map(x.host, [](double v) { return 1.0 / std::sqrt(v); }), dtype);
  }
}

TEST_P(Binary, MixedDtypesPromote) {
  struct Case {
    DType a, b, result;
  };
  const Case cases[] = {{s::i32, s::f64, s::f64},     {s::i64, s::f32, s::f32}, {s::i32, s::i64, s::i64},
                        {s::boolean, s::i32, s::i32}, {s::f32, s::f64, s::f64}, {s::boolean, s::f32, s::f32},
                        {s::f16, s::bf16, s::f32},    {s::f16, s::f32, s::f32}, {s::i64, s::bf16, s::bf16}};
  for (const Case& c : cases) {
    if (!runs(c.a) || !runs(c.b)) continue;
    STRATA_TRACE(s::dtype_name(c.a) << " + " << s::dtype_name(c.b));
    Operand a = int_operand({3, 1}, c.a, Layout::contiguous, 0, 1);
    Operand b = int_operand({4}, c.b, Layout::contiguous, -3, 3);
    EXPECT_CLOSE(s::add(a.dev, b.dev), zip(a.host, b.host, [](double x, double y) { return x + y; }), c.result);
    EXPECT_CLOSE(s::mul(b.dev, a.dev), zip(b.host, a.host, [](double x, double y) { return x * y; }), c.result);
  }
}

TEST_P(Binary, ScalarOperatorsKeepTheTensorCategory) {
  Operand f = operand({2, 3}, s::f32, Layout::transposed, 1, 3);
  EXPECT_CLOSE(f.dev + 2.5, map(f.host, [](double v) { return v + 2.5; }), s::f32);
  EXPECT_CLOSE(2.0 - f.dev, map(f.host, [](double v) { return 2.0 - v; }), s::f32);
  EXPECT_CLOSE(f.dev * -3.0, map(f.host, [](double v) { return v * -3.0; }), s::f32);
  EXPECT_CLOSE(1.0 / f.dev, map(f.host, [](double v) { return 1.0 / v; }), s::f32);
  EXPECT_CLOSE(f.dev / 4.0, map(f.host, [](double v) { return v / 4.0; }), s::f32);
  EXPECT_CLOSE(-f.dev, map(f.host, [](double v) { return -v; }), s::f32);
  Operand i = int_operand({5}, s::i64, Layout::strided, -9, 9);
  EXPECT_CLOSE(i.dev * 2.0, map(i.host, [](double v) { return v * 2.0; }), s::i64);
  EXPECT_CLOSE(i.dev - 1.0, map(i.host, [](double v) { return v - 1.0; }), s::i64);
  EXPECT_CLOSE(i.dev * 2.5, map(i.host, [](double v) { return v * 2.5; }), s::f32);
  if (runs(s::i32)) {
    Operand i32 = int_operand({5}, s::i32, Layout::contiguous, -9, 9);
    EXPECT_CLOSE(3.0 + i32.dev, map(i32.host, [](double v) { return v + 3.0; }), s::i32);
  }
  Operand b = int_operand({4}, s::boolean, Layout::contiguous);
  EXPECT_CLOSE(b.dev + 1.0, map(b.host, [](double v) { return v + 1.0; }), s::i64);
  if (runs(s::f64)) {
    Operand d = operand({3}, s::f64);
    EXPECT_CLOSE(d.dev * 0.1, map(d.host, [](double v) { return v * 0.1; }), s::f64);
  }
}

// --- comparisons and logical ops ------------------------------------------------------

#define STRATA_COMPARE_TEST(Name, op, expr)                                         \
  TEST_P(Binary, Name) {                                                            \
    auto ref = [](double a, double b) { return (expr) ? 1.0 : 0.0; };               \
    check(op, ref, STRATA_NUMERIC, to_bool, -2, 2, -2, 2);                          \
    /* integer values in every dtype, so that ties occur */                         \
    for (DType dtype : dtypes(STRATA_NUMERIC)) {                                    \
      STRATA_TRACE("ties " << s::dtype_name(dtype));                                \
      Operand lhs = int_operand({4, 1, 3}, dtype, Layout::transposed, -2, 2);       \
      Operand rhs = int_operand({5, 3}, dtype, Layout::strided, -2, 2);             \
      EXPECT_CLOSE(op(lhs.dev, rhs.dev), zip(lhs.host, rhs.host, ref), s::boolean); \
    }                                                                               \
  }

STRATA_COMPARE_TEST(Eq, s::eq, a == b)
STRATA_COMPARE_TEST(Ne, s::ne, a != b)
STRATA_COMPARE_TEST(Lt, s::lt, a < b)
STRATA_COMPARE_TEST(Le, s::le, a <= b)
STRATA_COMPARE_TEST(Gt, s::gt, a > b)
STRATA_COMPARE_TEST(Ge, s::ge, a >= b)

TEST_P(Binary, EqNeOnBoolAndMixedDtypes) {
  Operand a = int_operand({3, 4}, s::boolean, Layout::transposed);
  Operand b = int_operand({4}, s::boolean, Layout::strided);
  EXPECT_CLOSE(s::eq(a.dev, b.dev), zip(a.host, b.host, [](double x, double y) { return x == y ? 1.0 : 0.0; }),
               s::boolean);
  EXPECT_CLOSE(s::ne(a.dev, b.dev), zip(a.host, b.host, [](double x, double y) { return x != y ? 1.0 : 0.0; }),
               s::boolean);
  if (runs(s::i32)) {
    Operand i = int_operand({3, 4}, s::i32, Layout::contiguous, -2, 2);
    Operand f = int_operand({4}, s::f32, Layout::contiguous, -2, 2);
    EXPECT_CLOSE(s::lt(i.dev, f.dev), zip(i.host, f.host, [](double x, double y) { return x < y ? 1.0 : 0.0; }),
                 s::boolean);
  }
}

TEST_P(Binary, LogicalAndOr) {
  for (DType dtype : dtypes({s::boolean, s::f32, s::i32})) {
    for (const ShapePair& p : shape_pairs()) {
      STRATA_TRACE(s::dtype_name(dtype) << " " << shape_str(p.a) << " with " << shape_str(p.b));
      Operand a = int_operand(p.a, dtype, Layout::expanded, -1, 1);
      Operand b = int_operand(p.b, dtype, Layout::transposed, -1, 1);
      EXPECT_CLOSE(s::logical_and(a.dev, b.dev),
                   zip(a.host, b.host, [](double x, double y) { return x != 0 && y != 0 ? 1.0 : 0.0; }), s::boolean);
      EXPECT_CLOSE(s::logical_or(a.dev, b.dev),
                   zip(a.host, b.host, [](double x, double y) { return x != 0 || y != 0 ? 1.0 : 0.0; }), s::boolean);
    }
  }
}

// --- where and clamp ------------------------------------------------------------------------

TEST_P(Binary, WhereBroadcastsAndPromotes) {
  struct Case {
    Shape c, a, b;
  };
  const Case cases[] = {{{3, 4}, {3, 4}, {3, 4}}, {{3, 1}, {1, 4}, {}}, {{4}, {2, 3, 1}, {3, 4}},
                        {{0, 2}, {2}, {1}},       {{}, {2, 2}, {2}},    {{2, 1, 3}, {5, 1}, {1, 1, 3}}};
  for (DType dtype : dtypes(STRATA_NUMERIC)) {
    for (const Case& c : cases) {
      STRATA_TRACE(s::dtype_name(dtype) << " cond " << shape_str(c.c) << " a " << shape_str(c.a) << " b "
                                        << shape_str(c.b));
      Operand cond = int_operand(c.c, s::boolean, Layout::strided);
      Operand a = int_operand(c.a, dtype, Layout::transposed, -9, 9);
      Operand b = int_operand(c.b, dtype, Layout::expanded, -9, 9);
      EXPECT_CLOSE(s::where(cond.dev, a.dev, b.dev), where(cond.host, a.host, b.host), dtype);
    }
  }
  // A numeric condition is cast to bool; a and b are promoted.
  if (runs(s::i32)) {
    Operand cond = int_operand({2, 3}, s::f32, Layout::contiguous, -1, 1);
    Operand a = int_operand({2, 3}, s::i32, Layout::contiguous, -9, 9);
    Operand b = operand({3}, s::f32);
    EXPECT_CLOSE(s::where(cond.dev, a.dev, b.dev), where(cond.host, a.host, b.host), s::f32);
  }
}

TEST_P(Binary, Clamp) {
  for (DType dtype : dtypes(STRATA_NUMERIC)) {
    for (const Shape& shape : test_shapes(rng_, 2)) {
      STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape));
      Operand x = operand(shape, dtype, Layout::transposed, -5, 5);
      EXPECT_CLOSE(s::clamp(x.dev, -2, 3), map(x.host, [](double v) { return std::min(std::max(v, -2.0), 3.0); }),
                   dtype);
      EXPECT_CLOSE(s::clamp(x.dev, 1, 1), map(x.host, [](double) { return 1.0; }), dtype);
    }
  }
  Operand x = operand({3}, s::f32);
  try {
    s::clamp(x.dev, 2.0, 1.0);
    ADD_FAILURE() << "clamp with lo > hi did not throw";
  } catch (const s::Error& e) {
    EXPECT_NE(std::string(e.what()).find("clamp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata_test

namespace strata_test {
namespace {

// Tensors large enough for a backend's vectorised/library path (the CPU
// plugin hands f32 tanh/exp/sigmoid/log of >= 4096 elements to oneDNN).
class LargeUnary : public DeviceTest {};
STRATA_INSTANTIATE_ON_DEVICES(LargeUnary);

TEST_P(LargeUnary, TranscendentalsMatchTheHostOnLargeTensors) {
  const int64_t n = 10007;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = -6.0f + 12.0f * static_cast<float>(i) / n;
  strata::Tensor x = strata::from_data(std::span<const float>(values), {n}, {.device = dev()});
  strata::Tensor positive = strata::abs(x) + 0.01;
  struct Case {
    const char* name;
    strata::Tensor got;
    double (*ref)(double);
    bool positive_input;
  };
  std::vector<Case> cases{
      {"tanh", strata::tanh(x), [](double v) { return std::tanh(v); }, false},
      {"exp", strata::exp(x), [](double v) { return std::exp(v); }, false},
      {"sigmoid", strata::sigmoid(x), [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, false},
      {"log", strata::log(positive), [](double v) { return std::log(v); }, true},
  };
  std::vector<float> pos = positive.to_vector<float>();
  for (const Case& c : cases) {
    std::vector<float> got = c.got.to_vector<float>();
    ASSERT_EQ(got.size(), values.size()) << c.name;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      double in = c.positive_input ? pos[i] : values[i];
      double want = c.ref(in);
      worst = std::max(worst, std::fabs(got[i] - want) / std::max(1.0, std::fabs(want)));
    }
    EXPECT_LT(worst, 1e-5) << c.name;  // the suite's f32 tolerance
  }
}

}  // namespace
}  // namespace strata_test
