// training_test.cpp — end to end: small models trained on synthetic
// problems reach high accuracy.
#include <gtest/gtest.h>

#include <strata/strata.hpp>

#include "nn_test_util.hpp"

namespace {

using namespace strata;
using namespace nn_test;

/// Two interleaved classes on a plane: label 1 inside the ring
/// 0.5 < |x| < 1, else 0 — separable, but not linearly.
std::pair<Tensor, Tensor> ring_data(int64_t n) {
  Tensor x = rand({n, 2}) * 3.0 - 1.5;
  Tensor r = sqrt(sum(square(x), {1}));
  Tensor y = cast(logical_and(gt(r, scalar_tensor(0.5)), lt(r, scalar_tensor(1.0))), DType::i64);
  return {x, y};
}

double accuracy(const Tensor& logits, const Tensor& y) {
  return mean(cast(eq(argmax(logits, 1), y), DType::f32)).item<double>();
}

TEST(Training, MlpLearnsASeparableProblem) {
  manual_seed(123);
  auto [x, y] = ring_data(512);
  nn::Sequential model{std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::GELU>(),
                       std::make_shared<nn::Linear>(32, 2)};
  nn::Adam opt(model.parameters(), {.lr = 0.01});
  nn::LinearWarmup sched(opt, 20, 0.1, std::make_unique<nn::CosineAnnealingLR>(opt, 380, 1e-4));
  // The loss is read at the first and the last step only: a read waits for
  // the device, and 400 of them were most of this test's time on vulkan:0.
  double first_loss = 0.0;
  Tensor loss;
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    loss = nn::functional::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    sched.step();
    if (step == 0) first_loss = loss.item<double>();
  }
  EXPECT_LT(loss.item<double>(), 0.25 * first_loss);
  model.eval();
  auto [xt, yt] = ring_data(512);
  EXPECT_GT(accuracy(model(x), y), 0.95);
  EXPECT_GT(accuracy(model(xt), yt), 0.9);
}

TEST(Training, SmallConvNetFitsABatch) {
  // Images with a bright horizontal or vertical bar; the class is the bar's
  // orientation.
  manual_seed(7);
  const int64_t n = 32;
  std::vector<float> images(static_cast<size_t>(n * 36), 0.0f);
  std::vector<int64_t> labels;
  std::vector<double> noise = random_values(images.size(), 3, 0.0, 0.3);
  for (int64_t k = 0; k < n; ++k) {
    int64_t cls = k % 2, at = (k / 2) % 6;
    labels.push_back(cls);
    for (int64_t i = 0; i < 6; ++i) {
      int64_t h = cls == 0 ? at : i, w = cls == 0 ? i : at;
      images[static_cast<size_t>(k * 36 + h * 6 + w)] = 1.0f;
    }
  }
  for (size_t i = 0; i < images.size(); ++i) images[i] += static_cast<float>(noise[i]);
  Tensor x = from_data(std::span<const float>(images), {n, 1, 6, 6});
  Tensor y = make_i64(labels, {n});
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::MaxPool2d>(2),          std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::LayerNorm>(Shape{36}),  std::make_shared<nn::Dropout>(0.1),
                       std::make_shared<nn::Linear>(36, 2)};
  nn::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    nn::functional::cross_entropy(model(x), y, nn::Reduction::mean, 0.05).backward();
    opt.step();
  }
  model.eval();
  EXPECT_EQ(accuracy(model(x), y), 1.0);
}

}  // namespace
