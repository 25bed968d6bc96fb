// clip_test.cpp — gradient clipping (by total norm, by value), non-finite
// gradients, and per-parameter gradient statistics.
#include <gtest/gtest.h>

#include <strata/strata.hpp>

#include <cmath>
#include <limits>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using namespace nn_test;

/// A leaf parameter whose grad() is `g`.
Tensor param_with_grad(const std::vector<double>& g) {
  Tensor p = zeros({static_cast<int64_t>(g.size())}, {.dtype = DType::f64, .requires_grad = true});
  p.set_grad(make_real(g, {static_cast<int64_t>(g.size())}));
  return p;
}

TEST(ClipGradNorm, ScalesToTheMaximumAndReturnsTheTotalNorm) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor a = param_with_grad({3.0, 0.0});
  Tensor b = param_with_grad({0.0, 4.0, 0.0});
  Tensor none = zeros({2}, {.dtype = DType::f64, .requires_grad = true});  // no gradient: skipped
  double total = nn::clip_grad_norm_({a, b, none}, 1.0);
  EXPECT_DOUBLE_EQ(total, 5.0);
  double scale = 1.0 / (5.0 + 1e-6);
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 3.0 * scale, 1e-15);
  EXPECT_NEAR(b.grad().to_vector<double>()[1], 4.0 * scale, 1e-15);
  EXPECT_FALSE(none.grad().defined());
  // Below the maximum: unchanged.
  Tensor c = param_with_grad({0.3, 0.4});
  EXPECT_NEAR(nn::clip_grad_norm_({c}, 1.0), 0.5, 1e-15);
  EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{0.3, 0.4}));
}

TEST(ClipGradNorm, OtherNorms) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor a = param_with_grad({3.0, -4.0});
  Tensor b = param_with_grad({-6.0});
  EXPECT_DOUBLE_EQ(nn::clip_grad_norm_({a, b}, 100.0, {.norm_type = 1.0}), 13.0);
  EXPECT_DOUBLE_EQ(nn::clip_grad_norm_({a, b}, 100.0, {.norm_type = std::numeric_limits<double>::infinity()}), 6.0);
  EXPECT_NEAR(nn::clip_grad_norm_({a, b}, 100.0, {.norm_type = 3.0}), std::cbrt(27.0 + 64.0 + 216.0), 1e-12);
  double total = nn::clip_grad_norm_({a, b}, 3.0, {.norm_type = std::numeric_limits<double>::infinity()});
  EXPECT_DOUBLE_EQ(total, 6.0);
  EXPECT_NEAR(b.grad().item<double>(), -3.0, 1e-6);
  EXPECT_THROW(nn::clip_grad_norm_({a}, -1.0), ValueError);
  EXPECT_THROW(nn::clip_grad_norm_({a}, 1.0, {.norm_type = 0.0}), ValueError);
}

TEST(ClipGradNorm, NonFiniteGradientsPropagateOrAreNamed) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = param_with_grad({1.0, 2.0});
  Tensor b = param_with_grad({inf, 1.0, NAN});
  std::vector<double> a_before = a.grad().to_vector<double>();
  try {
    nn::clip_grad_norm_(nn::NamedTensors{{"fc.weight", a}, {"fc.bias", b}}, 1.0, {.nonfinite = nn::NonFinite::error});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("parameter 'fc.bias' (f64[3])"), std::string::npos) << what;
    EXPECT_NE(what.find("has 2 NaN or infinite elements"), std::string::npos) << what;
  }
  EXPECT_EQ(a.grad().to_vector<double>(), a_before);  // nothing changed
  try {
    nn::clip_grad_norm_({a, b}, 1.0, {.nonfinite = nn::NonFinite::error});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1 (f64[3])"), std::string::npos) << e.what();
  }
  // Propagate (PyTorch's default): a NaN norm makes every gradient NaN.
  double total = nn::clip_grad_norm_({a, b}, 1.0);
  EXPECT_TRUE(std::isnan(total));
  EXPECT_TRUE(std::isnan(a.grad().to_vector<double>()[0]));
  // An infinite norm scales by zero.
  Tensor c = param_with_grad({inf, 1.0});
  EXPECT_EQ(nn::clip_grad_norm_({c}, 1.0), inf);
  std::vector<double> cg = c.grad().to_vector<double>();
  EXPECT_TRUE(std::isnan(cg[0]));
  EXPECT_EQ(cg[1], 0.0);
}

TEST(ClipGradNorm, HalfPrecisionGradientsAreNormedInF32) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor p = zeros({2}, {.dtype = DType::f16, .requires_grad = true});
  p.set_grad(cast(make_real({300.0, 400.0}, {2}), DType::f16));  // 300² overflows f16
  EXPECT_NEAR(nn::clip_grad_norm_({p}, 1000.0), 500.0, 1e-3);
}

TEST(ClipGradValue, ClampsEveryElement) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor a = param_with_grad({-3.0, 0.5, 2.0, NAN});
  nn::clip_grad_value_({a}, 1.0);
  std::vector<double> g = a.grad().to_vector<double>();
  EXPECT_EQ(g[0], -1.0);
  EXPECT_EQ(g[1], 0.5);
  EXPECT_EQ(g[2], 1.0);
  EXPECT_TRUE(std::isnan(g[3]));
  EXPECT_THROW(nn::clip_grad_value_({a}, -0.5), ValueError);
}

TEST(GradStats, PerParameterSummaries) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  nn::Linear layer(3, 2);
  Tensor x = make_real({1.0, 2.0, 3.0}, {1, 3});
  sum(layer(cast(x, layer.weight.dtype()))).backward();
  layer.bias.set_grad(cast(make_real({NAN, 1.0}, {2}), layer.bias.dtype()));
  std::vector<nn::GradStats> stats = nn::grad_stats(layer);
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "weight");
  EXPECT_EQ(stats[0].numel, 6);
  EXPECT_TRUE(stats[0].has_grad);
  // d sum(W x + b) / dW = [x; x]: norm sqrt(2·14), max 3, mean 2.
  EXPECT_NEAR(stats[0].norm, std::sqrt(28.0), 1e-5);
  EXPECT_NEAR(stats[0].max_abs, 3.0, 1e-6);
  EXPECT_NEAR(stats[0].mean, 2.0, 1e-6);
  EXPECT_EQ(stats[0].nonfinite, 0);
  EXPECT_EQ(stats[1].name, "bias");
  EXPECT_EQ(stats[1].nonfinite, 1);
  layer.zero_grad();
  stats = nn::grad_stats(layer);
  EXPECT_FALSE(stats[0].has_grad);
  std::string table = nn::format_grad_stats(stats);
  EXPECT_NE(table.find("weight"), std::string::npos);
  EXPECT_NE(table.find("no grad"), std::string::npos);
}

}  // namespace
