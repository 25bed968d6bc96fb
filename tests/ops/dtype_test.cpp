// dtype_test.cpp — cast between every dtype pair, and f16/bf16 storage and
// arithmetic (with loose tolerances).
#include <cmath>

#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

constexpr DType kAll[] = {s::f32, s::f64, s::f16, s::bf16, s::i32, s::i64, s::boolean};

class Casts : public DeviceTest {};
STRATA_INSTANTIATE_ON_DEVICES(Casts);

TEST_P(Casts, EveryPairOnExactlyRepresentableValues) {
  // Exact in every numeric dtype, bf16 (8 significant bits) included.
  const std::vector<double> numbers{0, 1, -2, 3, 7, -64, 100, 255, -128, 16};
  const std::vector<double> bools{0, 1, 1, 0, 1, 0, 0, 1, 1, 0};
  for (DType from : kAll) {
    for (DType to : kAll) {
      if (!runs(from) || !runs(to)) continue;
      const std::vector<double>& values = from == s::boolean ? bools : numbers;
      HostTensor expected = host_values({2, 5}, values);
      if (to == s::boolean) expected = map(expected, [](double v) { return v != 0.0 ? 1.0 : 0.0; });
      Tensor x = make(host_values({2, 5}, values), from);
      STRATA_TRACE(s::dtype_name(from) << " -> " << s::dtype_name(to));
      EXPECT_CLOSE(s::cast(x, to), expected, to, {0.0, 0.0});
      EXPECT_CLOSE(x.to(to), expected, to, {0.0, 0.0});
      // Strided input: the transposed view.
      EXPECT_CLOSE(s::cast(x.mT(), to), permute(expected, {1, 0}), to, {0.0, 0.0});
      // Empty and 0-d.
      EXPECT_CLOSE(s::cast(make({0, 2}, {}, from), to), host_values({0, 2}, {}), to);
      EXPECT_CLOSE(s::cast(make({}, {values[1]}, from), to), host_values({}, {expected.data[1]}), to);
    }
  }
}

TEST_P(Casts, CastToSameDtypeReturnsTheTensor) {
  Tensor x = make({3}, {1, 2, 3}, s::f32);
  Tensor y = s::cast(x, s::f32);
  EXPECT_EQ(y.impl(), x.impl());
}

// fuzz/corpus/fuzz_checkpoint/crash-huge-scalar-hyperparameter.bin: a C++
// scalar beyond int64 (an Adam beta of 1.1e219 from a file) was cast to
// int64 to test whether it is whole: undefined behaviour. Such a scalar is
// a floating one: an integer tensor times it becomes f32.
TEST_P(Casts, ScalarsBeyondInt64AreFloating) {
  Tensor i = make({2}, {1, 2}, s::i64);
  Tensor y = i * 1.1e219;
  EXPECT_EQ(y.dtype(), s::f32);
  EXPECT_TRUE(std::isinf(y.to_vector<double>()[0]));
  EXPECT_EQ((i * 4.0).dtype(), s::i64);  // whole and within int64: stays integral
  EXPECT_EQ((i * -0x1p63).dtype(), s::i64);
  EXPECT_EQ((i * 0x1p63).dtype(), s::f32);
  Tensor f = make({2}, {1, 2}, s::f32);
  EXPECT_TRUE(std::isinf((f * -1e300).to_vector<double>()[1]));
}

TEST_P(Casts, FloatToIntegerTruncatesTowardZero) {
  const std::vector<double> values{2.5, -2.5, 2.75, -0.75, 100.5, -100.5, 0.25, -0.0};
  const std::vector<double> truncated{2, -2, 2, 0, 100, -100, 0, 0};
  for (DType from : {s::f32, s::f64, s::f16, s::bf16}) {
    for (DType to : {s::i32, s::i64}) {
      if (!runs(from) || !runs(to)) continue;
      STRATA_TRACE(s::dtype_name(from) << " -> " << s::dtype_name(to));
      EXPECT_CLOSE(s::cast(make({8}, values, from), to), host_values({8}, truncated), to);
    }
    if (!runs(from)) continue;
    // -> bool is x != 0, so -0.0 and 0.0 are false and 0.25 is true.
    EXPECT_CLOSE(s::cast(make({8}, values, from), s::boolean), host_values({8}, {1, 1, 1, 1, 1, 1, 1, 0}), s::boolean);
  }
}

TEST_P(Casts, LargeIntegersSurviveI64ToF64AndBack) {
  if (!runs(s::f64)) GTEST_SKIP() << GetParam() << " does not store f64";
  const std::vector<double> values{9007199254740992.0, -4503599627370496.0, 2147483648.0};  // 2^53, -2^52, 2^31
  Tensor x = make({3}, values, s::i64);
  EXPECT_CLOSE(s::cast(x, s::f64), host_values({3}, values), s::f64, {0.0, 0.0});
  EXPECT_CLOSE(s::cast(s::cast(x, s::f64), s::i64), host_values({3}, values), s::i64);
}

// --- f16 / bf16 ------------------------------------------------------------------

class HalfTypes : public DeviceTest {
 protected:
  std::vector<DType> halves() { return dtypes({s::f16, s::bf16}); }
};
STRATA_INSTANTIATE_ON_DEVICES(HalfTypes);

TEST_P(HalfTypes, StorageRoundTripsRepresentableValues) {
  for (DType dtype : halves()) {
    STRATA_TRACE(s::dtype_name(dtype));
    std::vector<double> values{0.5, -2, 1024, 0.125, -0.0, 3.5, -96, 0.0078125};
    values.push_back(dtype == s::f16 ? 65504.0 : 3.3895313892515355e38);  // largest finite
    Tensor x = make({9}, values, dtype);
    EXPECT_EQ(x.to_vector<double>(), values);
    EXPECT_EQ(x.dtype(), dtype);
    // Copies (contiguous() of a strided view) keep the values.
    Tensor two = make(
        {2, 9},
        [&] {
          auto v = values;
          v.insert(v.end(), values.begin(), values.end());
          return v;
        }(),
        dtype);
    EXPECT_CLOSE(two.mT().contiguous().mT(), host_values({2, 9}, two.to_vector<double>()), dtype, {0.0, 0.0});
  }
}

TEST_P(HalfTypes, ValuesRoundToNearest) {
  if (runs(s::f16)) {
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even give 1.
    Tensor x = make({3}, {1.0 + std::ldexp(1.0, -11), 1.0 + 3 * std::ldexp(1.0, -11), 70000.0}, s::f16);
    std::vector<double> v = x.to_vector<double>();
    EXPECT_EQ(v[0], 1.0);
    EXPECT_EQ(v[1], 1.0 + std::ldexp(1.0, -9));
    EXPECT_TRUE(std::isinf(v[2])) << "70000 overflows f16, got " << v[2];
  }
  if (runs(s::bf16)) {
    Tensor x = make({2}, {1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8)}, s::bf16);
    std::vector<double> v = x.to_vector<double>();
    EXPECT_EQ(v[0], 1.0);
    EXPECT_EQ(v[1], 1.0 + std::ldexp(1.0, -6));
  }
}

TEST_P(HalfTypes, ElementwiseOps) {
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  struct BinaryCase {
    const char* name;
    Binary op;
    double (*ref)(double, double);
  };
  const BinaryCase binary[] = {
      {"add", s::add, [](double a, double b) { return a + b; }},
      {"sub", s::sub, [](double a, double b) { return a - b; }},
      {"mul", s::mul, [](double a, double b) { return a * b; }},
      {"div", s::div, [](double a, double b) { return a / b; }},
      {"maximum", s::maximum, [](double a, double b) { return std::max(a, b); }},
      {"minimum", s::minimum, [](double a, double b) { return std::min(a, b); }},
      {"pow", s::pow, [](double a, double b) { return std::pow(a, b); }},
  };
  using Unary = Tensor (*)(const Tensor&);
  struct UnaryCase {
    const char* name;
    Unary op;
    double (*ref)(double);
  };
  const UnaryCase unary[] = {
      {"neg", s::neg, [](double x) { return -x; }},
      {"abs", s::abs, [](double x) { return std::fabs(x); }},
      {"exp", s::exp, [](double x) { return std::exp(x); }},
      {"tanh", s::tanh, [](double x) { return std::tanh(x); }},
      {"sigmoid", s::sigmoid, sigmoid},
      {"relu", s::relu, [](double x) { return std::max(x, 0.0); }},
      {"sqrt", s::sqrt, [](double x) { return std::sqrt(std::fabs(x)); }},
      {"gelu", s::gelu, gelu},
  };
  for (DType dtype : halves()) {
    Tolerance tol = tolerance(dtype);
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::expanded}) {
      Operand a = operand({3, 4}, dtype, layout, 0.5, 3);
      Operand b = operand({4}, dtype, Layout::strided, 0.5, 2);
      for (const BinaryCase& c : binary) {
        STRATA_TRACE(s::dtype_name(dtype) << " " << c.name << " " << layout_name(layout));
        EXPECT_CLOSE(c.op(a.dev, b.dev), zip(a.host, b.host, c.ref), dtype, tol);
      }
      Operand x = operand({3, 4}, dtype, layout, -2, 2);
      for (const UnaryCase& c : unary) {
        STRATA_TRACE(s::dtype_name(dtype) << " " << c.name << " " << layout_name(layout));
        Tensor in = std::string(c.name) == "sqrt" ? s::abs(x.dev) : x.dev;
        EXPECT_CLOSE(c.op(in), map(x.host, c.ref), dtype, tol);
      }
      STRATA_TRACE(s::dtype_name(dtype) << " " << layout_name(layout));
      auto gt = [](double p, double q) { return p > q ? 1.0 : 0.0; };
      EXPECT_CLOSE(s::gt(a.dev, b.dev), zip(a.host, b.host, gt), s::boolean);
      EXPECT_CLOSE(s::where(s::gt(a.dev, b.dev), a.dev, b.dev),
                   zip(a.host, b.host, [](double p, double q) { return std::max(p, q); }), dtype, tol);
      EXPECT_CLOSE(s::clamp(x.dev, -1, 1), map(x.host, [](double v) { return std::clamp(v, -1.0, 1.0); }), dtype, tol);
    }
  }
}

TEST_P(HalfTypes, ReductionsSoftmaxAndMatmul) {
  for (DType dtype : halves()) {
    STRATA_TRACE(s::dtype_name(dtype));
    Tolerance tol = tolerance(dtype);
    Operand x = operand({4, 6}, dtype, Layout::transposed, -2, 2);
    Tolerance sum_tol{tol.rtol, tol.atol * 6};
    EXPECT_CLOSE(s::sum(x.dev, {1}), reduce(x.host, {1}, false, Reduce::sum), dtype, sum_tol);
    EXPECT_CLOSE(s::sum(x.dev), reduce(x.host, {}, false, Reduce::sum), dtype, sum_tol.scaled(4));
    EXPECT_CLOSE(s::mean(x.dev, {0}, true), reduce(x.host, {0}, true, Reduce::mean), dtype, tol);
    EXPECT_CLOSE(s::amax(x.dev, {-1}), reduce(x.host, {-1}, false, Reduce::max), dtype, {0.0, 0.0});
    EXPECT_CLOSE(s::amin(x.dev, {0}), reduce(x.host, {0}, false, Reduce::min), dtype, {0.0, 0.0});
    EXPECT_CLOSE(s::argmax(x.dev, 1), reduce(x.host, {1}, false, Reduce::argmax), s::i64);
    EXPECT_CLOSE(s::softmax(x.dev, 1), softmax(x.host, 1), dtype, tol);
    Operand b = operand({6, 3}, dtype, Layout::contiguous, -1, 1);
    EXPECT_CLOSE(s::matmul(x.dev, b.dev), matmul(x.host, b.host), dtype, tol.scaled(6));
    // Half + f32 computes in f32.
    Operand f = operand({6}, s::f32);
    EXPECT_CLOSE(s::add(x.dev, f.dev), zip(x.host, f.host, [](double p, double q) { return p + q; }), s::f32);
  }
}

}  // namespace
}  // namespace strata_test
