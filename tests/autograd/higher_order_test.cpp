// higher_order_test.cpp — first, second and third derivatives of every
// differentiable op, end to end through the public API: the tape records the
// op, the engine runs its VJP, and the VJP's own ops are recorded again. Each
// order is checked with strata::gradcheck (f64, central differences) on a
// scalar projection of the previous order's gradient, on plain, broadcast
// and non-contiguous operands.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "op_cases.hpp"

#include "../common/test_device.hpp"

namespace {

using op_cases::case_names;
using op_cases::cases;
using op_cases::f64_uniform;
using op_cases::OpCase;
using strata::DType;
using strata::Fn;
using strata::Shape;
using strata::Tensor;
using strata_test::real_dtype;

/// d/dx of <∇g(x), w>: one order up from g, still a scalar function of x.
Fn order_up(const Fn& g, const Tensor& w) {
  Fn dg = strata::grad(g);
  return [dg, w](const Tensor& x) { return strata::sum(dg(x) * w); };
}

OpCase case_named(const std::string& name) {
  for (OpCase& c : cases())
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

class HigherOrder : public ::testing::TestWithParam<std::string> {};
// The cases with a second (third) derivative: piecewise-linear ops have none
// to compare, so they are not instantiated in these suites at all.
class HigherOrderSecond : public HigherOrder {};
class HigherOrderThird : public HigherOrder {};

TEST_P(HigherOrder, EachOrderMatchesFiniteDifferences) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const OpCase c = case_named(GetParam());
  Tensor x = f64_uniform(c.shape, c.lo, c.hi, 1);
  Tensor w_out;
  {
    Tensor y = c.op(x);
    w_out = f64_uniform(y.sizes(), 0.5, 1.5, 2);
  }
  Tensor w1 = f64_uniform(c.shape, -1.0, 1.0, 3);
  Tensor w2 = f64_uniform(c.shape, -1.0, 1.0, 4);
  auto op = c.op;
  Fn f = [op, w_out](const Tensor& t) { return strata::sum(op(t) * w_out); };
  std::vector<Fn> orders{f, order_up(f, w1)};
  orders.push_back(order_up(orders[1], w2));
  for (int order = 1; order <= c.max_order; ++order) {
    // Third order divides noise by eps^3 relative to the first: wider steps.
    strata::GradcheckOptions options{.eps = order == 1 ? 1e-6 : 1e-4, .atol = 1e-5, .rtol = 1e-3, .four_point = true};
    strata::GradcheckResult r = strata::gradcheck(orders[static_cast<size_t>(order - 1)], x, options);
    EXPECT_TRUE(r.ok) << c.name << ", derivative order " << order << ": " << r.message;
    // Not vacuous: comparing a zero derivative with zero differences checks
    // nothing (a linear op alone has zero second and third derivatives; the
    // cases compose linear ops with smooth ones).
    double largest = strata::amax(strata::abs(strata::grad(orders[static_cast<size_t>(order - 1)])(x))).item<double>();
    EXPECT_GT(largest, 1e-3) << c.name << ", derivative order " << order << " is zero: the check is vacuous";
  }
}

// The claim for linear ops themselves: their second derivatives are exactly
// zero (the composed cases above check the rules' own derivatives).
TEST(HigherOrderLinear, LinearOpsHaveExactlyZeroSecondDerivatives) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor b = f64_uniform({2, 3}, 0.5, 1.5, 21), w = f64_uniform({2, 3}, -1.0, 1.0, 22);
  Tensor x = f64_uniform({2, 3}, -1.0, 1.0, 23), v = f64_uniform({2, 3}, -1.0, 1.0, 24);
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> linear = {
      {"neg", [](const Tensor& t) { return strata::neg(t); }},
      {"add", [b](const Tensor& t) { return t + b; }},
      {"sub", [b](const Tensor& t) { return b - t; }},
      {"mul", [b](const Tensor& t) { return b * t; }},
      {"div", [b](const Tensor& t) { return t / b; }},
      {"sum", [](const Tensor& t) { return strata::sum(t, {1}, true) + 0.0 * t; }},
  };
  for (const auto& [name, op] : linear) {
    auto fn = op;
    Fn f = [fn, w](const Tensor& t) { return strata::sum(fn(t) * w); };
    Tensor g = strata::grad(f)(x);
    EXPECT_GT(strata::amax(strata::abs(g)).item<double>(), 0.1) << name << ": first derivative";
    Tensor h = strata::hvp(f, x, v);
    if (h.defined()) {
      EXPECT_EQ(strata::amax(strata::abs(h)).item<double>(), 0.0) << name << ": second derivative";
    }
  }
}

// Forward-over-reverse needs the tangents of outputs that rules saved (tanh,
// exp, softmax save y): it must agree with reverse-over-reverse for every op.
TEST_P(HigherOrderSecond, ForwardOverReverseHvpEqualsReverseOverReverse) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const OpCase c = case_named(GetParam());
  Tensor x = f64_uniform(c.shape, c.lo, c.hi, 1);
  Tensor w_out = f64_uniform(c.op(x).sizes(), 0.5, 1.5, 2);
  Tensor v = f64_uniform(c.shape, -1.0, 1.0, 5);
  auto op = c.op;
  Fn f = [op, w_out](const Tensor& t) { return strata::sum(op(t) * w_out); };
  std::vector<double> a = strata::hvp(f, x, v, strata::HvpMode::forward_over_reverse).to_vector<double>();
  std::vector<double> b = strata::hvp(f, x, v, strata::HvpMode::reverse_over_reverse).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-10 * (1.0 + std::fabs(b[i]))) << c.name << " " << i;
}

// Third order through nested forward mode: the jvp of a forward-over-reverse
// Hessian-vector product differentiates tangents that VJP rules read from
// saved outputs (exp, tanh, sigmoid use y); it must equal the jvp of the
// reverse-over-reverse one, and finite differences of either.
TEST_P(HigherOrderThird, JvpOfForwardOverReverseHvpEqualsReverseOverReverse) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const OpCase c = case_named(GetParam());
  Tensor x = f64_uniform(c.shape, c.lo, c.hi, 1);
  Tensor w_out = f64_uniform(c.op(x).sizes(), 0.5, 1.5, 2);
  Tensor v = f64_uniform(c.shape, -1.0, 1.0, 5);
  auto op = c.op;
  Fn f = [op, w_out](const Tensor& t) { return strata::sum(op(t) * w_out); };
  auto third = [&](strata::HvpMode mode) {
    Fn h = [f, v, mode](const Tensor& t) { return strata::hvp(f, t, v, mode); };
    return strata::jvp(h, x, v).second.to_vector<double>();
  };
  std::vector<double> a = third(strata::HvpMode::forward_over_reverse);
  std::vector<double> b = third(strata::HvpMode::reverse_over_reverse);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-9 * (1.0 + std::fabs(b[i]))) << c.name << " " << i;
}

std::string case_test_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  for (char& ch : n)
    if (ch == '.') ch = '_';
  return n;
}
INSTANTIATE_TEST_SUITE_P(Ops, HigherOrder, ::testing::ValuesIn(case_names()), case_test_name);
INSTANTIATE_TEST_SUITE_P(Ops, HigherOrderSecond, ::testing::ValuesIn(case_names(2)), case_test_name);
INSTANTIATE_TEST_SUITE_P(Ops, HigherOrderThird, ::testing::ValuesIn(case_names(3)), case_test_name);

TEST(JoinTest, CatGradientsAreSlicesOfTheOutputGradient) {
  Tensor a = strata::ones({2, 1}, {.dtype = real_dtype(), .requires_grad = true});
  Tensor b = strata::ones({2, 2}, {.dtype = real_dtype(), .requires_grad = true});
  Tensor w = strata::from_data(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = real_dtype()});
  strata::sum(strata::cat({a, b}, 1) * w).backward();
  EXPECT_REALS_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 4}));
  EXPECT_REALS_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 3, 5, 6}));
}

TEST(JoinTest, PadRejectsBadPaddingsNamingThem) {
  Tensor x = strata::ones({2, 3});
  EXPECT_THROW(strata::pad(x, {1}), strata::ValueError);
  EXPECT_THROW(strata::pad(x, {1, 1, 1, 1, 1, 1}), strata::ValueError);
  try {
    strata::pad(x, {0, -1});
    FAIL() << "negative padding accepted";
  } catch (const strata::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("padding 1 is -1"), std::string::npos) << e.what();
  }
  Tensor p = strata::pad(x, {1, 0, 0, 2}, 7.0);
  EXPECT_EQ(p.sizes(), (Shape{4, 4}));
  EXPECT_EQ(p.to_vector<float>()[0], 7.0f);
  EXPECT_EQ(p.to_vector<float>()[1], 1.0f);
}

}  // namespace

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(JoinTest, PadMatchesAHandComputedTensor) {
  // (2, 3) padded by {1, 2} on the last dim and {0, 1} on the first, with 0.5.
  Tensor x = strata::from_data(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = real_dtype()});
  Tensor p = strata::pad(x, {1, 2, 0, 1}, 0.5);
  ASSERT_EQ(p.sizes(), (Shape{3, 6}));
  EXPECT_EQ(values(p), (std::vector<double>{0.5, 1, 2, 3, 0.5, 0.5,  //
                                            0.5, 4, 5, 6, 0.5, 0.5,  //
                                            0.5, 0.5, 0.5, 0.5, 0.5, 0.5}));
  // A non-contiguous input, padded before on the first dim only.
  Tensor q = strata::pad(x.transpose(0, 1), {0, 0, 2, 0}, -1.0);
  ASSERT_EQ(q.sizes(), (Shape{5, 2}));
  EXPECT_EQ(values(q), (std::vector<double>{-1, -1, -1, -1, 1, 4, 2, 5, 3, 6}));
}

TEST(GradientFlow, DetachCutsItsPath) {
  Tensor x = strata::from_data(std::vector<double>{0.5, -1.0, 2.0}, {3}, {.dtype = real_dtype()});
  // d/dx sum(exp(x) * detach(x)) = exp(x) * x: the detached factor is a constant.
  Tensor g = strata::grad([](const Tensor& t) { return strata::sum(strata::exp(t) * t.detach()); })(x);
  std::vector<double> xv = values(x), gv = values(g);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_REAL_EQ(gv[i], std::exp(xv[i]) * xv[i]) << i;
  // Through the detached path alone there is no gradient: zero, or no path at all.
  Tensor leaf = strata::from_data(std::vector<double>{1, 2}, {2}, {.dtype = real_dtype()}).set_requires_grad(true);
  Tensor y = strata::sum(leaf.detach() * 3.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_FALSE(leaf.detach().requires_grad());
}

TEST(GradientFlow, CastGradientsCastBack) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (auto [from, to_binding] : {std::pair{DType::f32, DType::f64}, std::pair{DType::f64, DType::f32}}) {
    const DType to = to_binding;  // clang 14 (the fuzz preset) cannot capture a structured binding
    Tensor x = strata::cast(strata::from_data(std::vector<double>{0.5, -1.5, 2.0}, {3}), from);
    Tensor w = strata::from_data(std::vector<double>{1.0, 2.0, -3.0}, {3});
    Tensor g = strata::grad([to, w](const Tensor& t) {
      Tensor c = strata::cast(t, to);
      EXPECT_EQ(c.dtype(), to);
      return strata::sum(c * c * strata::cast(w, to));
    })(x);
    EXPECT_EQ(g.dtype(), from) << "the gradient is cast back to the input's dtype";
    EXPECT_EQ(values(g), (std::vector<double>{1.0, -6.0, -12.0}));  // 2 x w, exact in both
  }
}

}  // namespace
