// loss_test.cpp — mse_loss, nll_loss, cross_entropy (with label smoothing):
// values against scalar formulas, gradients, and the input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <strata/strata.hpp>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;
using namespace nn_test;
namespace F = strata::nn::functional;
using nn::Reduction;

TEST(MseLoss, ReductionsAndGradient) {
  Tensor a = make_real({1, 2, 3, 4}, {2, 2}), b = make_real({0, 2, 5, 1}, {2, 2});
  expect_values(F::mse_loss(a, b, Reduction::none), {1, 0, 4, 9}, 0.0);
  expect_values(F::mse_loss(a, b, Reduction::sum), {14}, 0.0);
  expect_values(F::mse_loss(a, b), {3.5}, 0.0);
  Tensor x = a.clone().set_requires_grad();
  F::mse_loss(x, b).backward();
  expect_values(x.grad(), {0.5, 0.0, -1.0, 1.5}, 1e-15);  // 2(a-b)/N
  const std::string dt(dtype_name(real_dtype()));
  expect_error<ShapeError>([&] { F::mse_loss(a, make_real({1, 2}, {2})); }, {dt + "[2, 2]", dt + "[2]"});
}

/// −log softmax(logits)[target] per row, by scalar arithmetic, with label
/// smoothing eps.
std::vector<double> reference_ce(const std::vector<double>& logits, const std::vector<int64_t>& targets, int64_t c,
                                 double eps) {
  std::vector<double> out;
  for (size_t r = 0; r < targets.size(); ++r) {
    double mx = -1e300;
    for (int64_t k = 0; k < c; ++k) mx = std::max(mx, logits[r * static_cast<size_t>(c) + static_cast<size_t>(k)]);
    double z = 0.0;
    for (int64_t k = 0; k < c; ++k) z += std::exp(logits[r * static_cast<size_t>(c) + static_cast<size_t>(k)] - mx);
    double lse = mx + std::log(z), loss = 0.0;
    for (int64_t k = 0; k < c; ++k) {
      double q = (k == targets[r] ? 1.0 - eps : 0.0) + eps / static_cast<double>(c);
      loss -= q * (logits[r * static_cast<size_t>(c) + static_cast<size_t>(k)] - lse);
    }
    out.push_back(loss);
  }
  return out;
}

TEST(CrossEntropy, MatchesScalarFormula) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor logits = random_real({4, 5}, 1, -3.0, 3.0);
  std::vector<int64_t> t = {0, 4, 2, 2};
  Tensor targets = make_i64(t, {4});
  for (double eps : {0.0, 0.1}) {
    std::vector<double> ref = reference_ce(logits.to_vector<double>(), t, 5, eps);
    expect_values(F::cross_entropy(logits, targets, Reduction::none, eps), ref, 1e-12);
    double s = ref[0] + ref[1] + ref[2] + ref[3];
    expect_values(F::cross_entropy(logits, targets, Reduction::sum, eps), {s}, 1e-12);
    expect_values(F::cross_entropy(logits, targets, Reduction::mean, eps), {s / 4}, 1e-12);
    GradcheckResult r =
        gradcheck([&](const Tensor& x) { return F::cross_entropy(x, targets, Reduction::mean, eps); }, logits);
    EXPECT_TRUE(r.ok) << r.message;
  }
  // Gradient of the mean loss: (softmax − onehot) / N.
  Tensor x = logits.clone().set_requires_grad();
  F::cross_entropy(x, targets).backward();
  std::vector<double> sm = softmax(logits, 1).to_vector<double>(), expected;
  for (size_t i = 0; i < sm.size(); ++i) {
    expected.push_back((sm[i] - (static_cast<int64_t>(i % 5) == t[i / 5] ? 1.0 : 0.0)) / 4.0);
  }
  expect_values(x.grad(), expected, 1e-12);
  // nll_loss on log-probabilities gives the same numbers.
  expect_values(F::nll_loss(log_softmax(logits, 1), targets, Reduction::none),
                reference_ce(logits.to_vector<double>(), t, 5, 0.0), 1e-12);
}

TEST(CrossEntropy, BadInputsAreNamed) {
  Tensor logits = zeros({3, 4});
  expect_error<DTypeError>(
      [&] {
        F::cross_entropy(logits, from_data(std::vector<int32_t>{0, 1, 2}, {3}));
      },
      {"i64", "i32[3]"});
  expect_error<DTypeError>([&] { F::cross_entropy(logits, zeros({3})); }, {"f32[3]"});
  expect_error<ShapeError>([&] { F::cross_entropy(logits, make_i64({0, 1}, {2})); }, {"[3]", "i64[2]", "f32[3, 4]"});
  expect_error<ShapeError>([&] { F::cross_entropy(zeros({4}), make_i64({0}, {1})); }, {"[N, C]", "f32[4]"});
  expect_error<ValueError>([&] { F::cross_entropy(logits, make_i64({0, 4, 1}, {3})); }, {"class 4", "[0, 4)"});
  expect_error<ValueError>([&] { F::nll_loss(logits, make_i64({0, -1, 1}, {3})); }, {"class -1", "nll_loss"});
  EXPECT_THROW(F::cross_entropy(logits, make_i64({0, 1, 2}, {3}), Reduction::mean, 1.5), ValueError);
}

}  // namespace
