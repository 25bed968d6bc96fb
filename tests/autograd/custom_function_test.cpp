// custom_function_test.cpp — user-defined derivative rules (Function classes,
// custom_vjp, custom_jvp): any order, every nesting of tapes and forward mode,
// first-order-only rules, checkpointing, autocast, trace/replay and the errors.
#include "autograd_test_util.hpp"

#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;
using namespace autograd_test;

Tensor scalar(double v) { return full({}, v, {.dtype = real_dtype()}); }

/// Counts the rules that ran, so that a test can tell the rule from autodiff.
struct Counters {
  int forward = 0;
  int backward = 0;
  int jvp = 0;
};
Counters counts;

/// softplus(x) = log(1 + e^x), computed stably, with the stable derivative
/// sigmoid(x) (written with Strata ops, so differentiable to any order).
struct Softplus : Function<Softplus> {
  static constexpr const char* name = "softplus";
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ++counts.forward;
    ctx.save_for_backward({in[0]});
    return {relu(in[0]) + log1p(exp(-abs(in[0])))};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    ++counts.backward;
    return {g[0] * sigmoid(ctx.saved()[0])};
  }
};

/// The same function with the naive rule e^x / (1 + e^x), which overflows.
struct NaiveSoftplus : Function<NaiveSoftplus> {
  static constexpr const char* name = "naive_softplus";
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0]});
    return {log1p(exp(in[0]))};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    Tensor e = exp(ctx.saved()[0]);
    return {g[0] * e / (1.0 + e)};
  }
};

/// x·sin(x), whose rule uses a value the forward computed (cos x), not an
/// input or output: higher orders need it recomputed with its history.
struct XSinX : Function<XSinX> {
  static constexpr const char* name = "x_sin_x";
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ++counts.forward;
    Tensor s = sin(in[0]);
    ctx.save_for_backward({in[0], s, cos(in[0])});
    return {in[0] * s};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    const auto& s = ctx.saved();
    return {g[0] * (s[1] + s[0] * s[2])};
  }
};

/// a + b and a·b; the second output is often unused.
struct SumProduct : Function<SumProduct> {
  static constexpr const char* name = "sum_product";
  static constexpr int n_inputs = 2;
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0], in[1]});
    return {in[0] + in[1], in[0] * in[1]};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    ++counts.backward;
    const auto& s = ctx.saved();
    EXPECT_TRUE(g[1].defined());  // zeros when unused, never undefined
    return {g[0] + g[1] * s[1], g[0] + g[1] * s[0]};
  }
};

/// a + b with an identity rule: the perturbation-confusion building block.
struct Add : Function<Add> {
  static constexpr const char* name = "custom_add";
  static std::vector<Tensor> forward(FunctionContext&, const std::vector<Tensor>& in) { return {in[0] + in[1]}; }
  static std::vector<Tensor> backward(FunctionContext&, const std::vector<Tensor>& g) { return {g[0], g[0]}; }
  static std::vector<Tensor> jvp(FunctionContext&, const std::vector<Tensor>& t) { return {t[0] + t[1]}; }
};

/// a·b with a rule in terms of the inputs.
struct Mul : Function<Mul> {
  static constexpr const char* name = "custom_mul";
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0], in[1]});
    return {in[0] * in[1]};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    return {g[0] * ctx.saved()[1], g[0] * ctx.saved()[0]};
  }
};

/// cube with a rule that is not meant to be differentiated again.
struct FirstOrderCube : Function<FirstOrderCube> {
  static constexpr const char* name = "first_order_cube";
  static constexpr bool first_order_only = true;
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0]});
    return {in[0] * in[0] * in[0]};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    return {g[0] * 3.0 * square(ctx.saved()[0])};
  }
};

/// Scales by the attribute "alpha".
struct Scale : Function<Scale> {
  static constexpr const char* name = "scale";
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    return {in[0] * ctx.attr<double>("alpha")};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    return {g[0] * ctx.attr<double>("alpha")};
  }
};

/// x² and the mask x > 0, which is not differentiable.
struct WithMask : Function<WithMask> {
  static constexpr const char* name = "with_mask";
  static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.mark_non_differentiable({1});
    ctx.save_for_backward({in[0]});
    return {in[0] * in[0], cast(gt(in[0], zeros_like(in[0])), in[0].dtype())};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    EXPECT_EQ(value(sum(abs(g[1]))), 0.0);  // zeros for the non-differentiable output
    return {g[0] * 2.0 * ctx.saved()[0]};
  }
};

Tensor naive_softplus(const Tensor& x) { return NaiveSoftplus::apply(x); }
Tensor softplus(const Tensor& x) { return Softplus::apply(x); }

TEST(CustomFunction, ClassRuleGivesTheGradientAndIsUsed) {
  Tensor x = vec({-2.0, 0.5, 3.0});
  counts = {};
  Tensor g = grad([](const Tensor& t) { return sum(softplus(t)); })(x);
  expect_near(g, {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-3.0))}, 1e-14);
  EXPECT_EQ(counts.forward, 1);
  EXPECT_EQ(counts.backward, 1);
}

TEST(CustomFunction, WithoutDifferentiationNothingIsRecorded) {
  Tensor x = vec({1.0, 2.0});
  Tensor y = softplus(x);
  EXPECT_FALSE(y.requires_grad());
  Tensor w = vec({1.0, 2.0}).set_requires_grad();
  Tensor z = softplus(w);
  EXPECT_TRUE(z.requires_grad());
  sum(z).backward();
  expect_near(w.grad(), {1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(-2.0))}, 1e-14);
}

TEST(CustomFunction, StableRuleIsFiniteWhereTheNaiveOneOverflows) {
  Tensor x = vec({1000.0, -1000.0, 0.0});
  Fn stable = [](const Tensor& t) { return sum(softplus(t)); };
  Fn naive = [](const Tensor& t) { return sum(naive_softplus(t)); };
  Fn autodiff = [](const Tensor& t) { return sum(log1p(exp(t))); };
  expect_near(grad(stable)(x), {1.0, 0.0, 0.5}, 1e-15);
  EXPECT_TRUE(std::isnan(grad(naive)(x).to_vector<double>()[0]));
  EXPECT_TRUE(std::isnan(grad(autodiff)(x).to_vector<double>()[0]));
  // Higher orders stay finite too: sigmoid's derivative rule is stable.
  expect_near(nth_grad(stable, 2)(x), {0.0, 0.0, 0.25}, 1e-15);
}

TEST(CustomFunction, GradcheckToThirdOrder) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  manual_seed(1);
  Tensor x = randn({5}, {.dtype = f64});
  for (Fn f : {Fn([](const Tensor& t) { return sum(softplus(t) * t); }),
               Fn([](const Tensor& t) { return sum(XSinX::apply(t) * exp(t * 0.3)); })}) {
    GradcheckOptions o{.eps = 1e-5, .atol = 1e-7, .rtol = 1e-6, .four_point = true};
    GradcheckResult first = gradcheck(f, x, o);
    EXPECT_TRUE(first.ok) << first.message;
    GradcheckResult second = gradcheck([&](const Tensor& t) { return sum(nth_grad(f, 1)(t)); }, x, o);
    EXPECT_TRUE(second.ok) << second.message;
    GradcheckResult third = gradcheck([&](const Tensor& t) { return sum(nth_grad(f, 2)(t)); }, x, o);
    EXPECT_TRUE(third.ok) << third.message;
  }
}

TEST(CustomFunction, SavedIntermediatesAreRecomputedForHigherOrders) {
  // d³/dx³ x·sin x = -3 sin x - x cos x: only right when cos x carries its history.
  double xv = 0.7;
  counts = {};
  double third = value(nth_grad([](const Tensor& t) { return XSinX::apply(t); }, 3)(scalar(xv)));
  EXPECT_REAL_EQ(third, -3 * std::sin(xv) - xv * std::cos(xv));
  EXPECT_GT(counts.forward, 1);  // the forward ran again for the higher orders
  counts = {};
  double first = value(grad([](const Tensor& t) { return XSinX::apply(t); })(scalar(xv)));
  EXPECT_REAL_EQ(first, std::sin(xv) + xv * std::cos(xv));
  EXPECT_EQ(counts.forward, 1);  // ... but not for a first derivative
}

TEST(CustomFunction, ForwardModeIsDerivedFromBackward) {
  Tensor x = vec({-1.0, 0.2, 2.0});
  Tensor v = vec({1.0, -2.0, 0.5});
  auto [y, t] = jvp([](const Tensor& a) { return softplus(a); }, x, v);
  std::vector<double> xs = x.to_vector<double>(), vs = v.to_vector<double>();
  std::vector<double> want;
  for (size_t i = 0; i < xs.size(); ++i) want.push_back(vs[i] / (1 + std::exp(-xs[i])));
  expect_near(t, want, 1e-14);
  Fn f = [](const Tensor& a) { return softplus(a * a); };
  std::vector<double> jf = jacfwd(f, x).to_vector<double>();
  std::vector<double> jr = jacrev(f, x).to_vector<double>();
  ASSERT_EQ(jf.size(), 9u);
  for (size_t i = 0; i < jf.size(); ++i) EXPECT_REAL_EQ(jf[i], jr[i]);
}

TEST(CustomFunction, HessianVectorProductForwardOverReverse) {
  // f(x) = sum(softplus(x)·x): H = diag(2σ(x) + x σ(x)(1 - σ(x))).
  Tensor x = vec({-1.5, 0.3, 2.2});
  Tensor v = vec({0.5, -1.0, 2.0});
  Fn f = [](const Tensor& a) { return sum(softplus(a) * a); };
  std::vector<double> xs = x.to_vector<double>(), vs = v.to_vector<double>(), want;
  for (size_t i = 0; i < xs.size(); ++i) {
    double s = 1 / (1 + std::exp(-xs[i]));
    want.push_back((2 * s + xs[i] * s * (1 - s)) * vs[i]);
  }
  expect_near(hvp(f, x, v, HvpMode::forward_over_reverse), want, 1e-13);
  expect_near(hvp(f, x, v, HvpMode::reverse_over_reverse), want, 1e-13);
}

TEST(CustomFunction, NestedTapes) {
  Tensor x = scalar(0.4);
  GradientTape outer;
  outer.watch(x);
  Tensor dy;
  {
    GradientTape inner({.higher_order = true});
    inner.watch(x);
    Tensor y = XSinX::apply(x);
    dy = inner.gradient(y, {x})[0];
  }
  Tensor d2 = outer.gradient(dy, {x})[0];
  EXPECT_REAL_EQ(value(d2), 2 * std::cos(0.4) - 0.4 * std::sin(0.4));
}

TEST(CustomFunction, TwoOutputsWithOneUnused) {
  Tensor a = vec({1.0, 2.0}), b = vec({3.0, -1.0});
  GradientTape tape;
  tape.watch(a);
  tape.watch(b);
  std::vector<Tensor> out = SumProduct::apply({a, b});
  ASSERT_EQ(out.size(), 2u);
  std::vector<Tensor> g = tape.gradient(sum(out[0] * out[0]), {a, b});  // out[1] unused
  expect_near(g[0], {8.0, 2.0}, 1e-15);
  expect_near(g[1], {8.0, 2.0}, 1e-15);
  GradientTape both;
  both.watch(a);
  both.watch(b);
  out = SumProduct::apply({a, b});
  g = both.gradient(sum(out[1]) + sum(out[0]), {a, b});
  expect_near(g[0], {4.0, 0.0}, 1e-15);
  expect_near(g[1], {2.0, 3.0}, 1e-15);
}

// DESIGN.md: d/dx [x · (d/dy (x + y))(y=1)] at x = 1 is 1, not 2, in every nesting.
TEST(CustomFunction, PerturbationConfusionWithACustomFunctionInside) {
  Tensor one = scalar(1.0);
  auto add = [](const Tensor& a, const Tensor& b) { return Add::apply({a, b})[0]; };
  auto rev_rev = [&](const Tensor& x) { return x * grad([&](const Tensor& y) { return add(x, y); })(one); };
  EXPECT_REAL_EQ(value(grad(rev_rev)(one)), 1.0);
  auto fwd_fwd = [&](const Tensor& x) { return x * jvp([&](const Tensor& y) { return add(x, y); }, one, one).second; };
  EXPECT_REAL_EQ(value(jvp(fwd_fwd, one, one).second), 1.0);
  EXPECT_REAL_EQ(value(jvp(rev_rev, one, one).second), 1.0);
  EXPECT_REAL_EQ(value(grad(fwd_fwd)(one)), 1.0);
  // With a product inside: d/dx [x · d/dy (x·y)] = d/dx x² = 2x.
  auto mul = [](const Tensor& a, const Tensor& b) { return Mul::apply({a, b})[0]; };
  Tensor three = scalar(3.0);
  auto prod_rev = [&](const Tensor& x) { return x * grad([&](const Tensor& y) { return mul(x, y); })(one); };
  EXPECT_REAL_EQ(value(grad(prod_rev)(three)), 6.0);
  auto prod_fwd = [&](const Tensor& x) { return x * jvp([&](const Tensor& y) { return mul(x, y); }, one, one).second; };
  EXPECT_REAL_EQ(value(jvp(prod_fwd, three, one).second), 6.0);
  EXPECT_REAL_EQ(value(grad(prod_fwd)(three)), 6.0);
  EXPECT_REAL_EQ(value(jvp(prod_rev, three, one).second), 6.0);
}

TEST(CustomVjp, FunctionalFormToThirdOrder) {
  // f(x) = exp(2x) with residual exp(2x) (an output): any order through the rule.
  int fwd_runs = 0, primal_runs = 0;
  CustomFunction f = custom_vjp(
      [&](const std::vector<Tensor>& in) {
        ++primal_runs;
        return std::vector<Tensor>{exp(in[0] * 2.0)};
      },
      [&](const std::vector<Tensor>& in) {
        ++fwd_runs;
        Tensor y = exp(in[0] * 2.0);
        return std::pair{std::vector<Tensor>{y}, std::vector<Tensor>{y}};
      },
      [](const std::vector<Tensor>& res, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0] * res[0] * 2.0}; },
      {.name = "exp2x"});
  double xv = 0.3;
  (void)f(scalar(xv));
  EXPECT_EQ(primal_runs, 1);
  EXPECT_EQ(fwd_runs, 0);
  for (int n = 1; n <= 3; ++n) {
    EXPECT_REAL_NEAR(value(nth_grad([&](const Tensor& t) { return f(t); }, n)(scalar(xv))),
                     std::pow(2.0, n) * std::exp(2 * xv), 1e-12)
        << n;
  }
  EXPECT_GT(fwd_runs, 0);
  auto [y, t] = jvp([&](const Tensor& a) { return f(a); }, scalar(xv), scalar(1.5));
  EXPECT_REAL_EQ(value(t), 3.0 * std::exp(2 * xv));
}

TEST(CustomJvp, ReverseModeTransposesTheRule) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  int rule_runs = 0;
  // tanh with the rule t·(1 - y²) in terms of its output.
  CustomFunction f = custom_jvp([](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0])}; },
                                [&](const std::vector<Tensor>&, const std::vector<Tensor>& out, const std::vector<Tensor>& t) {
                                  ++rule_runs;
                                  return std::vector<Tensor>{t[0] * (1.0 - square(out[0]))};
                                },
                                {.name = "my_tanh"});
  Tensor x = vec({-0.5, 0.1, 1.2});
  Fn fs = [&](const Tensor& a) { return sum(f(a)); };
  std::vector<double> xs = x.to_vector<double>(), d1, d2, d3;
  for (double v : xs) {
    double th = std::tanh(v), s = 1 - th * th;
    d1.push_back(s);
    d2.push_back(-2 * th * s);
    d3.push_back(-2 * s * s + 4 * th * th * s);
  }
  expect_near(grad(fs)(x), d1, 1e-14);
  EXPECT_GT(rule_runs, 0);
  expect_near(nth_grad(fs, 2)(x), d2, 1e-13);
  expect_near(nth_grad(fs, 3)(x), d3, 1e-12);
  Tensor v = vec({1.0, 2.0, -1.0});
  auto [y, t] = jvp([&](const Tensor& a) { return f(a); }, x, v);
  expect_near(t, {d1[0] * 1.0, d1[1] * 2.0, -d1[2]}, 1e-14);
  GradcheckResult r = gradcheck([&](const Tensor& a) { return sum(nth_grad(fs, 2)(a)); }, x,
                                {.eps = 1e-5, .atol = 1e-7, .rtol = 1e-6, .four_point = true});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(CustomFunction, AttributesReachTheRules) {
  Tensor x = scalar(2.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = Scale::apply({x}, {{"alpha", 2.5}})[0];
  EXPECT_REAL_EQ(value(y), 5.0);
  EXPECT_REAL_EQ(value(tape.gradient(y, {x})[0]), 2.5);
  expect_error([&] { Scale::apply({x}); }, {"custom function 'scale'", "no attribute 'alpha'"});
  expect_error([&] { Scale::apply({x}, {{"alpha", std::string("big")}}); }, {"'alpha'", "another kind"});
  expect_error([&] { Scale::apply({x}, {{"function", 1.0}}); }, {"'scale'", "reserved"});
}

TEST(CustomFunction, NonDifferentiableOutputs) {
  Tensor x = vec({-1.0, 2.0}).set_requires_grad();
  std::vector<Tensor> out = WithMask::apply(std::vector<Tensor>{x});
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  sum(out[0] * 3.0 + out[1]).backward();
  expect_near(x.grad(), {-6.0, 12.0}, 1e-15);
}

TEST(CustomFunction, FirstOrderOnlyErrsOnlyWhenDifferentiatedTwice) {
  Tensor x = scalar(2.0);
  Fn cube = [](const Tensor& t) { return FirstOrderCube::apply(t); };
  EXPECT_REAL_EQ(value(grad(cube)(x)), 12.0);  // grad() records with higher order on: no error yet
  for (const auto& second : std::vector<std::function<void()>>{
           [&] { nth_grad(cube, 2)(x); },
           [&] { hvp([&](const Tensor& a) { return cube(a); }, x, scalar(1.0)); },
           [&] { hvp([&](const Tensor& a) { return cube(a); }, x, scalar(1.0), HvpMode::reverse_over_reverse); },
           [&] {
             Tensor w = scalar(2.0).set_requires_grad();
             Tensor g = grad(cube)(w);  // recorded on level 0
             g.backward();
           }}) {
    expect_error(second, {"custom function 'first_order_cube'", "first-order"});
  }
  // The first-order rule without a jvp rule cannot give forward mode.
  expect_error([&] { jvp(cube, x, scalar(1.0)); }, {"'first_order_cube'", "jvp"});
}

TEST(CustomFunction, WrongGradientsAreErrorsNamingTheFunction) {
  auto make = [](std::function<std::vector<Tensor>(const std::vector<Tensor>&)> bwd) {
    return custom_vjp({},
                      [](const std::vector<Tensor>& in) {
                        return std::pair{std::vector<Tensor>{in[0] * in[1]}, std::vector<Tensor>{in[0], in[1]}};
                      },
                      [bwd](const std::vector<Tensor>&, const std::vector<Tensor>& g) { return bwd(g); },
                      {.name = "bad_mul"});
  };
  Tensor a = zeros({2, 3}, {.dtype = real_dtype()}), b = ones({3}, {.dtype = real_dtype()});
  auto run = [&](const CustomFunction& f) {
    GradientTape tape;
    tape.watch(a);
    tape.watch(b);
    Tensor y = f({a, b})[0];
    tape.gradient(sum(y), {a, b});
  };
  expect_error([&] { run(make([](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; })); },
               {"custom function 'bad_mul'", "backward returned 1 gradient", "2 input"});
  expect_error([&] {
    run(make([](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0], g[0]}; }));
  }, {"custom function 'bad_mul'", "shape [2, 3]", "input 1", "shape [3]"});
  EXPECT_THROW(run(make([](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0], g[0]}; })), ShapeError);
  // A jvp rule with a wrong shape.
  CustomFunction bad_jvp = custom_jvp([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; },
                                      [](const std::vector<Tensor>&, const std::vector<Tensor>&,
                                         const std::vector<Tensor>& t) { return std::vector<Tensor>{sum(t[0])}; },
                                      {.name = "bad_jvp"});
  expect_error([&] { jvp([&](const Tensor& x) { return bad_jvp(x); }, a, ones_like(a)); },
               {"custom function 'bad_jvp'", "jvp returned a tangent of shape []", "output 0", "[2, 3]"});
}

TEST(CustomFunction, BadDefinitionsAndCalls) {
  EXPECT_THROW(CustomFunction({.name = "", .forward = [](FunctionContext&, const std::vector<Tensor>& in) { return in; }}),
               ValueError);
  expect_error(
      [] { CustomFunction({.name = "no_rules", .forward = [](FunctionContext&, const std::vector<Tensor>& in) { return in; }}); },
      {"'no_rules'", "backward rule, a jvp rule"});
  expect_error([] { Softplus::apply(std::vector<Tensor>{Tensor()}); }, {"'softplus'", "input 0 is undefined"});
  expect_error([] { Softplus::apply(std::vector<Tensor>{}); }, {"'softplus'", "at least one input"});
  expect_error([] { SumProduct::apply(scalar(1.0)); }, {"'sum_product'", "takes 2 input(s), got 1"});
}

TEST(CustomFunction, AThrowingForwardLeavesNoNode) {
  CustomFunction boom({.name = "boom",
                       .forward = [](FunctionContext&, const std::vector<Tensor>&) -> std::vector<Tensor> {
                         throw ValueError("boom inside");
                       },
                       .backward = [](FunctionContext&, const std::vector<Tensor>& g) { return g; }});
  Tensor x = scalar(1.0).set_requires_grad();
  EXPECT_THROW(boom(x), ValueError);
  EXPECT_EQ(implicit_graph_saved_bytes(), 0u);
  EXPECT_TRUE(x.is_leaf());
}

TEST(CustomFunction, InsideACheckpointedFunction) {
  manual_seed(5);
  Tensor w = randn({4, 4}, {.dtype = real_dtype()});
  Tensor x = randn({3, 4}, {.dtype = real_dtype()});
  auto block = [&](const Tensor& in) { return XSinX::apply(matmul(in, w)) + softplus(in); };
  GradientTape plain_tape;
  plain_tape.watch(w);
  std::vector<Tensor> plain = plain_tape.gradient(sum(block(x)), {w});
  counts = {};
  GradientTape tape;
  tape.watch(w);
  Tensor y = checkpoint(block, x);
  EXPECT_EQ(counts.forward, 2);  // one softplus and one x_sin_x, not recorded
  std::vector<Tensor> ckpt = tape.gradient(sum(y), {w});
  EXPECT_EQ(counts.forward, 4);  // the recomputation ran (and recorded) them again
  EXPECT_EQ(plain[0].to_vector<double>(), ckpt[0].to_vector<double>());
  // Higher order through the checkpoint and the custom rules.
  Fn f = [&](const Tensor& t) { return sum(checkpoint(block, t)); };
  Fn g = [&](const Tensor& t) { return sum(block(t)); };
  Tensor v = randn({3, 4}, {.dtype = real_dtype()});
  std::vector<double> a = hvp(f, x, v).to_vector<double>(), b = hvp(g, x, v).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_REAL_EQ(a[i], b[i]);
}

TEST(CustomFunction, BackwardRunsUnderTheForwardsAutocastState) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  bool autocast_in_backward = false;
  DType product_dtype = DType::f64;
  CustomFunction f({.name = "mm",
                    .forward = [](FunctionContext& ctx, const std::vector<Tensor>& in) {
                      ctx.save_for_backward({in[0], in[1]});
                      return std::vector<Tensor>{matmul(in[0], in[1])};
                    },
                    .backward = [&](FunctionContext& ctx, const std::vector<Tensor>& g) {
                      autocast_in_backward = autocast_enabled();
                      Tensor da = matmul(g[0], ctx.saved()[1].mT());
                      product_dtype = da.dtype();
                      return std::vector<Tensor>{da, matmul(ctx.saved()[0].mT(), g[0])};
                    }});
  Tensor a = randn({2, 3}), b = randn({3, 2});
  GradientTape tape;
  tape.watch(a);
  Tensor loss;
  {
    Autocast ac({.dtype = DType::bf16});
    loss = sum(cast(f({a, b})[0], DType::f32));
  }
  ASSERT_FALSE(autocast_enabled());
  Tensor da = tape.gradient(loss, {a})[0];
  EXPECT_TRUE(autocast_in_backward);
  EXPECT_EQ(product_dtype, DType::bf16);
  EXPECT_EQ(da.dtype(), DType::f32);  // converted to the input's dtype
  EXPECT_FALSE(autocast_enabled());
}

TEST(CustomFunction, TracedCallsReplayTheFunctionAndItsRule) {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{softplus(in[0] * 2.0) * 3.0}; };
  Tensor example = vec({0.5, 1.0});
  Graph g = trace(fn, {example});
  int custom_nodes = 0;
  for (const GraphNode& n : g.nodes) {
    custom_nodes += n.op == "custom_function" ? 1 : 0;
    EXPECT_NE(n.op, "log1p");  // the function's own ops are not in the graph
  }
  EXPECT_EQ(custom_nodes, 1);
  Tensor x = vec({500.0, -2.0});
  EXPECT_EQ(g.run({x})[0].to_vector<double>(), fn({x})[0].to_vector<double>());
  counts = {};
  Tensor dx = grad([&](const Tensor& t) { return sum(g.run({t})[0]); })(x);
  EXPECT_EQ(counts.backward, 1);  // the replay was differentiated by the rule
  expect_near(dx, {6.0, 6.0 / (1 + std::exp(4.0))}, 1e-14);  // finite: the stable rule, not autodiff of log1p(exp)
  // Saving needs the function registered under its name (a fresh name per
  // run: the registry lives as long as the process).
  static int runs = 0;
  const std::string local_name = "twice_" + std::to_string(++runs);
  CustomFunction local = custom_jvp([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; },
                                    [](const std::vector<Tensor>&, const std::vector<Tensor>&,
                                       const std::vector<Tensor>& t) { return std::vector<Tensor>{t[0] * 2.0}; },
                                    {.name = local_name});
  Graph unregistered = trace([&](const std::vector<Tensor>& in) { return local(in); }, {example});
  std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("strata_custom_trace_" + std::to_string(::getpid()) + ".json");
  expect_error([&] { unregistered.save(file); }, {"custom function '" + local_name + "'", "not registered"});
  EXPECT_FALSE(std::filesystem::exists(file));
  register_custom_function(Softplus::function());
  register_custom_function(Softplus::function());  // again: a no-op
  g.save(file);
  Graph loaded = Graph::load(file);
  std::filesystem::remove(file);
  EXPECT_EQ(loaded.run({x})[0].to_vector<double>(), fn({x})[0].to_vector<double>());
  counts = {};
  Tensor dl = grad([&](const Tensor& t) { return sum(loaded.run({t})[0]); })(x);
  EXPECT_EQ(counts.backward, 1);
  EXPECT_EQ(dl.to_vector<double>(), dx.to_vector<double>());
  // Another function under the taken name is refused.
  EXPECT_THROW(register_custom_function(custom_jvp(
                   [](const std::vector<Tensor>& in) { return in; },
                   [](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& t) { return t; },
                   {.name = "softplus"})),
               ValueError);
}

TEST(CustomFunction, LoadingAGraphWithAnUnknownFunctionNamesIt) {
  static int runs = 0;  // a fresh name per run: the registry lives as long as the process
  CustomFunction f = custom_jvp([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; },
                                [](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& t) {
                                  return std::vector<Tensor>{t[0] * 2.0};
                                },
                                {.name = "double_it_" + std::to_string(++runs)});
  Graph g = trace([&](const std::vector<Tensor>& in) { return f(in, {{"note", std::string("x")}, {"k", int64_t{3}}}); },
                  {vec({1.0})});
  std::string text = g.to_json();
  // Traced before registration, the node names "double_it_<n>#<id>", which is registered nowhere.
  expect_error([&] { Graph::from_json(text, "mem.json"); }, {"mem.json", "/nodes/0/attrs", "is not registered"});
  register_custom_function(f);
  Graph reg = trace([&](const std::vector<Tensor>& in) { return f(in, {{"note", std::string("x")}}); }, {vec({1.0})});
  Graph loaded = Graph::from_json(reg.to_json(), "mem.json");
  expect_near(loaded.run({vec({4.0})})[0], {8.0}, 0.0);
}

}  // namespace

namespace {

// Custom rules on complex tensors follow the built-in ops' convention
// (docs/complex.md): written rules are used as given, and derived ones —
// reverse from a jvp rule, forward from a backward rule — transpose through
// the real inner product Re Σ conj(a)·b, so f(z) = z² defined either way
// differentiates like z * z.
TEST(CustomFunctionComplex, WrittenAndDerivedRulesMatchTheBuiltInOps) {
  STRATA_REQUIRE_DTYPES(strata::DType::c128);
  using C = std::complex<double>;
  const std::vector<C> zv{{0.5, -1.0}, {2.0, 0.25}, {-1.5, 0.75}}, wv{{1.0, 2.0}, {-0.5, 0.5}, {0.25, -1.0}};
  const Tensor z = from_data(std::span<const C>(zv), {3}), w = from_data(std::span<const C>(wv), {3});
  CustomFunction by_vjp = custom_vjp(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[0]}; },
      [](const std::vector<Tensor>& in) {
        return std::pair{std::vector<Tensor>{in[0] * in[0]}, std::vector<Tensor>{in[0]}};
      },
      // PyTorch's convention for a holomorphic f: g · conj(f'(z)).
      [](const std::vector<Tensor>& res, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{g[0] * conj(res[0] * 2.0)};
      },
      {.name = "square_by_vjp"});
  CustomFunction by_jvp = custom_jvp([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[0]}; },
                                     [](const std::vector<Tensor>& in, const std::vector<Tensor>&,
                                        const std::vector<Tensor>& t) { return std::vector<Tensor>{t[0] * in[0] * 2.0}; },
                                     {.name = "square_by_jvp"});
  // A real loss of f(z): L = Re Σ conj(w)·f(z).
  auto gradient = [&](const std::function<Tensor(const Tensor&)>& f) {
    GradientTape tape;
    Tensor zw = z.detach();
    tape.watch(zw);
    return tape.gradient(real(sum(conj(w) * f(zw))), {zw})[0].to_vector<C>();
  };
  const std::vector<C> expected = gradient([](const Tensor& a) { return a * a; });
  for (const auto& [name, function] :
       std::vector<std::pair<std::string, CustomFunction>>{{"vjp", by_vjp}, {"jvp", by_jvp}}) {
    const CustomFunction& f = function;  // clang 14 (the fuzz preset) cannot capture a structured binding
    const std::vector<C> got = gradient([&f](const Tensor& a) { return f(a); });
    for (size_t k = 0; k < expected.size(); ++k) EXPECT_LT(std::abs(got[k] - expected[k]), 1e-12) << name << " " << k;
    // Forward mode: J t = 2 z t.
    auto [y, t] = jvp([&f](const Tensor& a) { return f(a); }, z, w);
    const std::vector<C> tv = t.to_vector<C>();
    for (size_t k = 0; k < zv.size(); ++k) EXPECT_LT(std::abs(tv[k] - 2.0 * zv[k] * wv[k]), 1e-12) << name << " " << k;
  }
}

}  // namespace
