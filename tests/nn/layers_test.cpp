// layers_test.cpp — Linear, LayerNorm, Embedding, Flatten, Dropout,
// activations, Sequential and the initialisers, against hand-computed
// references, with gradients checked by finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <strata/strata.hpp>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;
using namespace nn_test;

/// Sets a module's state from f64 values (the module converted to f64).
void set_param(Tensor& p, const Tensor& value) {
  NoGradGuard no_grad;
  p.detach().copy_(value);
}

TEST(Linear, ForwardMatchesLoops) {
  nn::Linear lin(3, 2);
  lin.to(real_dtype());
  Tensor w = random_real({2, 3}, 1), b = random_real({2}, 2), x = random_real({4, 3}, 3);
  set_param(lin.weight, w);
  set_param(lin.bias, b);
  auto wv = w.to_vector<double>(), bv = b.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> expected;
  for (int n = 0; n < 4; ++n) {
    for (int o = 0; o < 2; ++o) {
      double s = bv[o];
      for (int i = 0; i < 3; ++i) s += xv[n * 3 + i] * wv[o * 3 + i];
      expected.push_back(s);
    }
  }
  Tensor y = lin(x);
  EXPECT_EQ(y.sizes(), (Shape{4, 2}));
  expect_values(y, expected, 1e-12);
  // Extra leading dims.
  EXPECT_EQ(lin(x.reshape({2, 2, 3})).sizes(), (Shape{2, 2, 2}));
  expect_error<ShapeError>([&] { lin(random_real({4, 5}, 4)); }, {"[4, 5]", "[2, 3]"});
  EXPECT_THROW(nn::Linear(0, 2), ValueError);
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  nn::Linear lin(3, 2);
  lin.to(DType::f64);
  Tensor x = random_real({4, 3}, 5);
  GradcheckResult rx = gradcheck([&](const Tensor& in) { return sum(square(lin(in))); }, x);
  EXPECT_TRUE(rx.ok) << rx.message;
  Tensor b = lin.bias.detach();
  GradcheckResult rw = gradcheck([&](const Tensor& w) { return sum(square(nn::functional::linear(x, w, b))); },
                                 lin.weight.detach().clone());
  EXPECT_TRUE(rw.ok) << rw.message;
}

TEST(Linear, DefaultInitIsPyTorchsAndSeeded) {
  manual_seed(42);
  nn::Linear a(64, 256);
  manual_seed(42);
  nn::Linear b(64, 256);
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  EXPECT_EQ(a.bias.to_vector<float>(), b.bias.to_vector<float>());
  // kaiming_uniform(a=√5) gives U(-1/√fan_in, 1/√fan_in); std = bound/√3.
  const double bound = 1.0 / std::sqrt(64.0);
  std::vector<double> w = a.weight.to_vector<double>();
  double mean = std::accumulate(w.begin(), w.end(), 0.0) / static_cast<double>(w.size());
  double var = 0.0, max_abs = 0.0;
  for (double v : w) {
    var += (v - mean) * (v - mean);
    max_abs = std::max(max_abs, std::abs(v));
  }
  var /= static_cast<double>(w.size());
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.95 * bound);
  EXPECT_NEAR(std::sqrt(var), bound / std::sqrt(3.0), 0.03 * bound);
  EXPECT_NEAR(mean, 0.0, 0.02 * bound);
  for (double v : a.bias.to_vector<double>()) EXPECT_LE(std::abs(v), bound);
}

TEST(LayerNorm, ForwardMatchesLoopsAndGradcheck) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  nn::LayerNorm ln({3}, 1e-5);
  ln.to(DType::f64);
  Tensor w = random_real({3}, 6, 0.5, 1.5), b = random_real({3}, 7);
  set_param(ln.weight, w);
  set_param(ln.bias, b);
  Tensor x = random_real({2, 2, 3}, 8, -3.0, 3.0);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expected;
  for (int r = 0; r < 4; ++r) {
    double m = (xv[r * 3] + xv[r * 3 + 1] + xv[r * 3 + 2]) / 3.0, v = 0.0;
    for (int i = 0; i < 3; ++i) v += (xv[r * 3 + i] - m) * (xv[r * 3 + i] - m) / 3.0;
    for (int i = 0; i < 3; ++i) expected.push_back((xv[r * 3 + i] - m) / std::sqrt(v + 1e-5) * wv[i] + bv[i]);
  }
  expect_values(ln(x), expected, 1e-10);
  GradcheckResult r = gradcheck([&](const Tensor& in) { return sum(ln(in) * random_real({2, 2, 3}, 9)); }, x);
  EXPECT_TRUE(r.ok) << r.message;
  // Over two trailing dims, without affine parameters.
  nn::LayerNorm ln2({2, 3}, 1e-5, false);
  EXPECT_TRUE(ln2.parameters().empty());
  Tensor y2 = ln2(x.to(DType::f32));
  expect_values(mean(y2, {1, 2}), {0.0, 0.0}, 1e-6);
  expect_error<ShapeError>([&] { ln(random_real({2, 4}, 1)); }, {"[2, 4]", "[3]"});
}

TEST(Embedding, LooksUpRowsAndAccumulatesGradients) {
  nn::Embedding emb(5, 3);
  Tensor idx = make_i64({4, 0, 4, 2}, {2, 2});
  Tensor y = emb(idx);
  EXPECT_EQ(y.sizes(), (Shape{2, 2, 3}));
  std::vector<float> w = emb.weight.to_vector<float>(), got = y.to_vector<float>();
  const int rows[] = {4, 0, 4, 2};
  for (int k = 0; k < 4; ++k) {
    for (int d = 0; d < 3; ++d) EXPECT_EQ(got[k * 3 + d], w[rows[k] * 3 + d]);
  }
  sum(y).backward();
  expect_values(emb.weight.grad(), {1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 2, 2, 2}, 0.0);
  expect_error<ValueError>([&] { emb(make_i64({1, 5}, {2})); }, {"5", "[0, 5)"});
  expect_error<DTypeError>([&] { emb(zeros({2})); }, {"f32"});
}

TEST(Flatten, MergesDims) {
  Tensor x = zeros({2, 3, 4, 5});
  EXPECT_EQ(nn::Flatten()(x).sizes(), (Shape{2, 60}));
  EXPECT_EQ(nn::Flatten(0)(x).sizes(), (Shape{120}));
  EXPECT_EQ(nn::Flatten(1, 2)(x).sizes(), (Shape{2, 12, 5}));
  EXPECT_THROW(nn::Flatten(3, 1)(x), IndexError);
}

TEST(Activations, MatchScalarFormulas) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor x = random_real({7}, 10, -3.0, 3.0);
  std::vector<double> xv = x.to_vector<double>();
  auto expect_map = [&](nn::Module& m, double (*f)(double)) {
    std::vector<double> e;
    for (double v : xv) e.push_back(f(v));
    expect_values(m(x), e, 1e-12, m.name());
    GradcheckResult r = gradcheck([&](const Tensor& in) { return sum(m(in)); }, x);
    EXPECT_TRUE(r.ok) << m.name() << ": " << r.message;
  };
  nn::ReLU relu_m;
  nn::Tanh tanh_m;
  nn::Sigmoid sigmoid_m;
  nn::GELU gelu_m;
  nn::SiLU silu_m;
  expect_map(relu_m, [](double v) { return v > 0 ? v : 0.0; });
  expect_map(tanh_m, [](double v) { return std::tanh(v); });
  expect_map(sigmoid_m, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  expect_map(gelu_m, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
  expect_map(silu_m, [](double v) { return v / (1.0 + std::exp(-v)); });

  Tensor m = random_real({2, 3}, 11, -2.0, 2.0);
  std::vector<double> mv = m.to_vector<double>(), soft, logsoft;
  for (int r = 0; r < 2; ++r) {
    double z = 0.0;
    for (int c = 0; c < 3; ++c) z += std::exp(mv[r * 3 + c]);
    for (int c = 0; c < 3; ++c) {
      soft.push_back(std::exp(mv[r * 3 + c]) / z);
      logsoft.push_back(mv[r * 3 + c] - std::log(z));
    }
  }
  expect_values(nn::Softmax(1)(m), soft, 1e-12);
  expect_values(nn::LogSoftmax(-1)(m), logsoft, 1e-12);
}

TEST(Dropout, ScalesKeptElementsAndIsIdentityInEval) {
  nn::Dropout drop(0.25);
  Tensor x = ones({200, 50}, {.dtype = real_dtype(), .requires_grad = true});
  manual_seed(5);
  Tensor y = drop(x);
  manual_seed(5);
  Tensor y_again = drop(x);
  EXPECT_EQ(y.to_vector<double>(), y_again.to_vector<double>());  // seeded
  std::vector<double> v = y.to_vector<double>();
  size_t zeros_seen = 0;
  for (double e : v) {
    if (e == 0.0) {
      ++zeros_seen;
    } else {
      EXPECT_REAL_EQ(e, 1.0 / 0.75);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / static_cast<double>(v.size()), 0.25, 0.02);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), v);  // d/dx (x·mask/(1-p)) = mask/(1-p)
  drop.eval();
  Tensor same = drop(x);
  EXPECT_EQ(same.to_vector<double>(), x.to_vector<double>());
  EXPECT_THROW(nn::Dropout(1.5), ValueError);
  EXPECT_REALS_EQ(nn::functional::dropout(x, 1.0).to_vector<double>(), std::vector<double>(10000, 0.0));
}

TEST(Sequential, ChainsChildren) {
  manual_seed(8);
  nn::Sequential seq;
  auto first = seq.emplace_back<nn::Linear>(3, 4);
  seq.push_back(std::make_shared<nn::Tanh>());
  auto last = seq.emplace_back<nn::Linear>(4, 1);
  Tensor x = randn({5, 3});
  Tensor expected = (*last)(tanh((*first)(x)));
  EXPECT_EQ(seq(x).to_vector<float>(), expected.to_vector<float>());
  EXPECT_EQ(seq.parameters().size(), 4u);
}

/// How many nodes of `op` the recorded history of `t` holds.
size_t count_nodes(const Tensor& t, const std::string& op) {
  const Graph g = recorded_graph({t});
  return static_cast<size_t>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const GraphNode& n) { return n.op == op; }));
}

// Sequential runs a Linear followed by a ReLU as one fused op (strata::linear
// with its relu), unless a backward hook on either needs the layers apart.
TEST(Sequential, FusesLinearAndReluUnlessHooksNeedThemApart) {
  STRATA_REQUIRE_KERNELS("linear");  // counts linear nodes, which a decomposition does not record
  manual_seed(9);
  nn::Sequential seq;
  auto first = seq.emplace_back<nn::Linear>(3, 4);
  seq.emplace_back<nn::ReLU>();
  auto last = seq.emplace_back<nn::Linear>(4, 2);
  Tensor x = randn({5, 3});
  Tensor unfused = (*last)(relu((*first)(x)));
  Tensor fused = seq(x);
  EXPECT_EQ(count_nodes(fused, "linear"), 2u);
  EXPECT_EQ(count_nodes(fused, "relu"), 0u);
  expect_values(fused, unfused.to_vector<double>(), 1e-6);

  // The gradients are those of the layers run apart.
  sum(square(fused)).backward();
  const std::vector<double> fused_grad = first->weight.grad().to_vector<double>();
  first->weight.zero_grad();
  sum(square(unfused)).backward();
  expect_values(first->weight.grad(), fused_grad, 1e-5);

  // A hook on the Linear sees its own output's gradient, [5, 4]: no fusion.
  nn::BackwardHookManager hooks;
  Shape seen;
  hooks.add(*first, [&](nn::Module&, const Tensor& g) { seen = g.sizes(); });
  Tensor hooked = seq(x);
  EXPECT_EQ(count_nodes(hooked, "relu"), 1u);
  sum(hooked).backward();
  EXPECT_EQ(seen, (Shape{5, 4}));
}

TEST(Init, GainsAndFans) {
  using nn::init::Nonlinearity;
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::relu), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::leaky_relu, std::sqrt(5.0)), std::sqrt(2.0 / 6.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::sigmoid), 1.0);
  auto [in, out] = nn::init::fan_in_and_fan_out(zeros({8, 3, 5, 5}));
  EXPECT_EQ(in, 75);
  EXPECT_EQ(out, 200);
  Tensor v = zeros({4});
  expect_error<ValueError>([&] { nn::init::xavier_uniform_(v); }, {"at least 2 dims", "[4]"});
}

/// Sample std of a tensor's values.
double sample_std(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()), s = 0.0;
  for (double e : v) s += (e - m) * (e - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(Init, DistributionsHaveTheirScales) {
  Tensor w = zeros({300, 200}, {.requires_grad = true});
  manual_seed(9);
  nn::init::xavier_uniform_(w);
  double r = std::sqrt(6.0 / 500.0);
  std::vector<float> first = w.to_vector<float>();
  for (float e : first) EXPECT_LE(std::abs(e), r + 1e-6);
  EXPECT_NEAR(sample_std(w), r / std::sqrt(3.0), 0.02 * r);
  EXPECT_TRUE(w.is_leaf());  // initialising records nothing
  EXPECT_TRUE(w.requires_grad());
  manual_seed(9);
  nn::init::xavier_uniform_(w);
  EXPECT_EQ(w.to_vector<float>(), first);

  nn::init::xavier_normal_(w, 2.0);
  EXPECT_NEAR(sample_std(w), 2.0 * std::sqrt(2.0 / 500.0), 0.02 * 2.0 * std::sqrt(2.0 / 500.0));
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
  EXPECT_NEAR(sample_std(w), std::sqrt(2.0) / std::sqrt(300.0), 0.02 * std::sqrt(2.0 / 300.0));
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
  double bound = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(200.0);
  EXPECT_NEAR(sample_std(w), bound / std::sqrt(3.0), 0.02 * bound);
  nn::init::normal_(w, 3.0, 0.5);
  EXPECT_NEAR(mean(w).item<double>(), 3.0, 0.01);
  nn::init::uniform_(w, 2.0, 4.0);
  EXPECT_GE(amin(w).item<double>(), 2.0);
  EXPECT_LT(amax(w).item<double>(), 4.0);
  nn::init::constant_(w, 0.5);
  EXPECT_EQ(amin(w).item<float>(), 0.5f);
  nn::init::zeros_(w);
  EXPECT_EQ(amax(abs(w)).item<float>(), 0.0f);
  nn::init::ones_(w);
  EXPECT_EQ(amin(w).item<float>(), 1.0f);
  Tensor ints = zeros({2, 2}, {.dtype = DType::i64});
  EXPECT_THROW(nn::init::normal_(ints), DTypeError);
  EXPECT_THROW(nn::init::uniform_(w, 1.0, 0.0), ValueError);
}

}  // namespace
