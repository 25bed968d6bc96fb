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

namespace {

using strata::DType;
using strata::Fn;
using strata::Shape;
using strata::Tensor;

Tensor f64_uniform(const Shape& shape, double lo, double hi, uint64_t seed) {
  strata::manual_seed(seed);
  return strata::rand(shape, {.dtype = DType::f64}) * (hi - lo) + lo;
}

/// The function whose derivatives are checked: an op applied to x (and to
/// fixed operands), projected to a scalar with fixed random weights so that
/// no symmetry hides a wrong rule.
struct OpCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  Shape shape;
  double lo = -1.5, hi = 1.5;
  int max_order = 3;  // 1 for ops that are piecewise linear (kinks)
};


/// d/dx of <∇g(x), w>: one order up from g, still a scalar function of x.
Fn order_up(const Fn& g, const Tensor& w) {
  Fn dg = strata::grad(g);
  return [dg, w](const Tensor& x) { return strata::sum(dg(x) * w); };
}

Tensor transposed(const Tensor& t) { return t.transpose(0, 1); }

std::vector<OpCase> cases() {
  Tensor b23 = f64_uniform({2, 3}, -1.0, 1.0, 7);
  Tensor b13 = f64_uniform({1, 3}, 0.5, 1.5, 8);
  Tensor b3 = f64_uniform({3}, 0.5, 1.5, 9);
  Tensor pos23 = f64_uniform({2, 3}, 0.5, 1.5, 10);
  Tensor m34 = f64_uniform({3, 4}, -1.0, 1.0, 11);
  Tensor y_soft = strata::softmax(f64_uniform({2, 3}, -1.0, 1.0, 12), 1);
  Tensor y_tanh = strata::tanh(f64_uniform({2, 3}, -1.0, 1.0, 13));
  Tensor y_sig = strata::sigmoid(f64_uniform({2, 3}, -1.0, 1.0, 14));
  Tensor idx = strata::from_data(std::vector<int64_t>{2, 0, 1, 1}, {4});
  Tensor gidx = strata::from_data(std::vector<int64_t>{0, 1, 1, 0, 1, 0}, {2, 3});
  using namespace strata;
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, {2, 3}},
      {"exp", [](const Tensor& x) { return exp(x); }, {2, 3}},
      {"log", [](const Tensor& x) { return log(x); }, {2, 3}, 0.5, 2.0},
      {"log1p", [](const Tensor& x) { return log1p(x); }, {2, 3}, 0.0, 2.0},
      {"expm1", [](const Tensor& x) { return expm1(x); }, {2, 3}},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, {2, 3}, 0.5, 2.0},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, {2, 3}, 0.5, 2.0},
      {"sin", [](const Tensor& x) { return sin(x); }, {2, 3}},
      {"cos", [](const Tensor& x) { return cos(x); }, {2, 3}},
      {"tanh", [](const Tensor& x) { return tanh(x); }, {2, 3}},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, {2, 3}},
      {"erf", [](const Tensor& x) { return erf(x); }, {2, 3}},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, {2, 3}, 0.5, 2.0},
      {"gelu", [](const Tensor& x) { return gelu(x); }, {2, 3}},
      {"silu", [](const Tensor& x) { return silu(x); }, {2, 3}},
      {"abs", [](const Tensor& x) { return abs(x); }, {2, 3}, 0.2, 1.5, 1},
      {"relu", [](const Tensor& x) { return relu(x); }, {2, 3}, 0.2, 1.5, 1},
      // binary, differentiated in each operand, with broadcasting
      {"add.a.broadcast", [b13](const Tensor& x) { return x + b13; }, {2, 3}},
      {"sub.b.broadcast", [b23](const Tensor& x) { return b23 - x; }, {1, 3}},
      {"mul.a", [b23](const Tensor& x) { return x * b23 * x; }, {2, 3}},
      {"mul.b.broadcast", [b23](const Tensor& x) { return b23 * x; }, {3}},
      {"div.a", [b13](const Tensor& x) { return x / b13; }, {2, 3}},
      {"div.b.broadcast", [b23](const Tensor& x) { return b23 / x; }, {1, 3}, 0.5, 2.0},
      {"pow.base", [b3](const Tensor& x) { return pow(x, b3); }, {2, 3}, 0.5, 2.0},
      {"pow.exponent", [pos23](const Tensor& x) { return pow(pos23, x); }, {2, 3}},
      {"pow.scalar", [](const Tensor& x) { return pow(x, 3.0); }, {2, 3}},
      {"maximum", [b23](const Tensor& x) { return maximum(x, b23); }, {2, 3}, -1.5, 1.5, 1},
      {"minimum", [b23](const Tensor& x) { return minimum(x, b23); }, {2, 3}, -1.5, 1.5, 1},
      {"where", [b23](const Tensor& x) { return where(gt(b23, 0.0 * b23), x * x, exp(x)); }, {2, 3}},
      // non-contiguous operands
      {"mul.noncontiguous", [b23](const Tensor& x) { return transposed(x) * transposed(b23) * transposed(x); },
       {2, 3}},
      {"tanh.noncontiguous", [](const Tensor& x) { return tanh(transposed(x)); }, {2, 3}},
      // reductions
      {"sum", [](const Tensor& x) { return sum(x * x, {1}); }, {2, 3}},
      {"mean", [](const Tensor& x) { return mean(exp(x), {0}); }, {2, 3}},
      {"prod", [](const Tensor& x) { return prod(x, {1}); }, {2, 3}, 0.5, 1.5},
      {"amax", [](const Tensor& x) { return amax(x, {1}) * amax(x, {1}); }, {2, 3}, -1.5, 1.5, 1},
      {"amin", [](const Tensor& x) { return amin(x, {0}); }, {2, 3}, -1.5, 1.5, 1},
      // linear algebra
      {"matmul.a", [m34](const Tensor& x) { return tanh(matmul(x, m34)); }, {2, 3}},
      {"matmul.b", [m34](const Tensor& x) { return tanh(matmul(m34.transpose(0, 1), x)); }, {3, 2}},
      {"matmul.noncontiguous", [](const Tensor& x) { return matmul(transposed(x), x); }, {3, 2}},
      // softmax family and the backward ops as functions of each operand
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }, {2, 3}},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 0); }, {2, 3}},
      {"softmax_backward.grad", [y_soft](const Tensor& x) { return softmax_backward(x * x, y_soft, 1); }, {2, 3}},
      {"softmax_backward.y", [b23](const Tensor& x) { return softmax_backward(b23, softmax(x, 1), 1); }, {2, 3}},
      {"log_softmax_backward.y",
       [b23](const Tensor& x) { return log_softmax_backward(b23, log_softmax(x, 1), 1); }, {2, 3}},
      {"tanh_backward.y", [b23](const Tensor& x) { return tanh_backward(b23, tanh(x)); }, {2, 3}},
      {"tanh_backward.grad", [y_tanh](const Tensor& x) { return tanh_backward(x * x, y_tanh); }, {2, 3}},
      {"sigmoid_backward.y", [b23](const Tensor& x) { return sigmoid_backward(b23, sigmoid(x)); }, {2, 3}},
      {"sigmoid_backward.grad", [y_sig](const Tensor& x) { return sigmoid_backward(exp(x), y_sig); }, {2, 3}},
      {"gelu_backward.x", [b23](const Tensor& x) { return gelu_backward(b23, x); }, {2, 3}},
      {"relu_backward.grad", [b23](const Tensor& x) { return relu_backward(x * x, b23); }, {2, 3}},
      // indexing and joins (linear in x: composed with a smooth op)
      {"index_select", [idx](const Tensor& x) { return exp(index_select(x, 1, idx)); }, {2, 3}},
      {"gather", [gidx](const Tensor& x) { return sin(gather(x, 0, gidx)); }, {2, 3}},
      {"scatter_add", [gidx, b23](const Tensor& x) { return exp(scatter_add(b23, 0, gidx, x * x)); }, {2, 3}},
      {"cat", [b23](const Tensor& x) { return exp(cat({x, b23, x * x}, 1)); }, {2, 3}},
      {"cat.promotes", [](const Tensor& x) {
         return sin(cat({x, strata::ones({1, 3}, {.dtype = DType::f32})}, 0));
       }, {2, 3}},
      {"stack", [b23](const Tensor& x) { return tanh(stack({x, b23}, 0)); }, {2, 3}},
      {"pad", [](const Tensor& x) { return exp(pad(x, {1, 2, 0, 1}, 0.5)); }, {2, 3}},
      {"views", [](const Tensor& x) { return exp(x.reshape({3, 2}).slice(0, 0, 3, 2).expand({4, 2, 2})); }, {2, 3}},
      {"select", [](const Tensor& x) { return sin(x.select(1, 2)); }, {2, 3}},
  };
}

/// The cases by name: tests are registered by name only, so no tensor is
/// created (and kept for the whole run) while tests are being registered.
std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const OpCase& c : cases()) names.push_back(c.name);
  return names;
}
OpCase case_named(const std::string& name) {
  for (OpCase& c : cases())
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

class HigherOrder : public ::testing::TestWithParam<std::string> {};

TEST_P(HigherOrder, EachOrderMatchesFiniteDifferences) {
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
  }
}

// Forward-over-reverse needs the tangents of outputs that rules saved (tanh,
// exp, softmax save y): it must agree with reverse-over-reverse for every op.
TEST_P(HigherOrder, ForwardOverReverseHvpEqualsReverseOverReverse) {
  const OpCase c = case_named(GetParam());
  if (c.max_order < 2) GTEST_SKIP() << c.name << " is piecewise linear: its Hessian is zero almost everywhere";
  Tensor x = f64_uniform(c.shape, c.lo, c.hi, 1);
  Tensor w_out = f64_uniform(c.op(x).sizes(), 0.5, 1.5, 2);
  Tensor v = f64_uniform(c.shape, -1.0, 1.0, 5);
  auto op = c.op;
  Fn f = [op, w_out](const Tensor& t) { return strata::sum(op(t) * w_out); };
  std::vector<double> a = strata::hvp(f, x, v, strata::HvpMode::forward_over_reverse).to_vector<double>();
  std::vector<double> b = strata::hvp(f, x, v, strata::HvpMode::reverse_over_reverse).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-10 * (1.0 + std::fabs(b[i]))) << c.name << " " << i;
}

INSTANTIATE_TEST_SUITE_P(Ops, HigherOrder, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

TEST(JoinTest, CatGradientsAreSlicesOfTheOutputGradient) {
  Tensor a = strata::ones({2, 1}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = strata::ones({2, 2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor w = strata::from_data(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  strata::sum(strata::cat({a, b}, 1) * w).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 3, 5, 6}));
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
