// Indexing kernels and the fused nn kernels through the C ABI.
#include "plugin_fixture.hpp"

#include <cmath>

namespace strata::cpu_abi {
namespace {

TEST_F(CpuAbiTest, IndexSelectAlongDimOne) {
  DeviceTensor& x = tensor<float>(STRATA_F32, {2, 3}, {0, 1, 2, 10, 11, 12});
  DeviceTensor& index = tensor<int64_t>(STRATA_I64, {4}, {2, 0, 2, 1});
  DeviceTensor& y = output(STRATA_F32, {2, 4});
  ASSERT_EQ(run(STRATA_OP_INDEX_SELECT, "f32,i64->f32", {&x, &index}, y, Attrs().integer("dim", 1)), STRATA_OK)
      << last_error.message;
  EXPECT_EQ(y.download<float>(), (std::vector<float>{2, 0, 2, 1, 12, 10, 12, 11}));
}

TEST_F(CpuAbiTest, IndexSelectOutOfRangeIsAnError) {
  DeviceTensor& x = tensor<float>(STRATA_F32, {2, 3}, {0, 1, 2, 10, 11, 12});
  DeviceTensor& index = tensor<int64_t>(STRATA_I64, {2}, {1, 7});
  DeviceTensor& y = output(STRATA_F32, {2, 2});
  EXPECT_EQ(run(STRATA_OP_INDEX_SELECT, "f32,i64->f32", {&x, &index}, y, Attrs().integer("dim", 1)),
            STRATA_ERROR_INVALID_ARGUMENT);
  const std::string message = last_error.message;
  EXPECT_NE(message.find("index_select"), std::string::npos) << message;
  EXPECT_NE(message.find("7"), std::string::npos) << message;
  EXPECT_EQ(run(STRATA_OP_INDEX_SELECT, "f32,i64->f32", {&x, &index}, y), STRATA_ERROR_INVALID_ARGUMENT);  // no dim
}

TEST_F(CpuAbiTest, GatherAndScatterAdd) {
  DeviceTensor& x = tensor<float>(STRATA_F32, {2, 3}, {0, 1, 2, 10, 11, 12});
  DeviceTensor& index = tensor<int64_t>(STRATA_I64, {2, 2}, {2, 2, 0, 1});
  DeviceTensor& g = output(STRATA_F32, {2, 2});
  ASSERT_EQ(run(STRATA_OP_GATHER, "f32,i64->f32", {&x, &index}, g, Attrs().integer("dim", 1)), STRATA_OK);
  EXPECT_EQ(g.download<float>(), (std::vector<float>{2, 2, 10, 11}));

  DeviceTensor& src = tensor<float>(STRATA_F32, {2, 2}, {1, 2, 3, 4});
  DeviceTensor& s = output(STRATA_F32, {2, 3});
  ASSERT_EQ(run(STRATA_OP_SCATTER_ADD, "f32,i64,f32->f32", {&x, &index, &src}, s, Attrs().integer("dim", 1)),
            STRATA_OK);
  EXPECT_EQ(s.download<float>(), (std::vector<float>{0, 1, 5, 13, 15, 12}));
}

void softmax_reference(const std::vector<float>& x, int64_t rows, int64_t n, std::vector<double>& soft,
                       std::vector<double>& log_soft) {
  soft.assign(x.size(), 0);
  log_soft.assign(x.size(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[r * n + i]));
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[r * n + i] - m);
    for (int64_t i = 0; i < n; ++i) {
      soft[r * n + i] = std::exp(x[r * n + i] - m) / s;
      log_soft[r * n + i] = x[r * n + i] - m - std::log(s);
    }
  }
}

TEST_F(CpuAbiTest, SoftmaxAndLogSoftmax) {
  const std::vector<float> xs = {1, 2, 3, 4, -1, 0, 100, 100.5f, 1000, 1001, 1002, 1000};
  std::vector<double> soft, log_soft;
  softmax_reference(xs, 3, 4, soft, log_soft);
  DeviceTensor& x = tensor<float>(STRATA_F32, {3, 4}, xs);
  DeviceTensor& y = output(STRATA_F32, {3, 4});
  ASSERT_EQ(run(STRATA_OP_SOFTMAX, "f32->f32", {&x}, y, Attrs().integer("dim", -1)), STRATA_OK) << last_error.message;
  std::vector<float> out = y.download<float>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(out[i], soft[i], 1e-6) << i;
  DeviceTensor& ly = output(STRATA_F32, {3, 4});
  ASSERT_EQ(run(STRATA_OP_LOG_SOFTMAX, "f32->f32", {&x}, ly, Attrs().integer("dim", 1)), STRATA_OK);
  out = ly.download<float>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(out[i], log_soft[i], 1e-5) << i;

  // Along dim 0 (strided rows): the transposed problem.
  std::vector<float> xt(12);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) xt[c * 3 + r] = xs[r * 4 + c];
  }
  DeviceTensor& x0 = tensor<float>(STRATA_F32, {4, 3}, xt);
  DeviceTensor& y0 = output(STRATA_F32, {4, 3});
  ASSERT_EQ(run(STRATA_OP_SOFTMAX, "f32->f32", {&x0}, y0, Attrs().integer("dim", 0)), STRATA_OK);
  out = y0.download<float>();
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(out[c * 3 + r], soft[r * 4 + c], 1e-6);
  }
}

TEST_F(CpuAbiTest, SoftmaxBackwardMatchesFormula) {
  const std::vector<float> ys = {0.1f, 0.2f, 0.7f}, gs = {1, -2, 0.5f};
  DeviceTensor& g = tensor<float>(STRATA_F32, {1, 3}, gs);
  DeviceTensor& y = tensor<float>(STRATA_F32, {1, 3}, ys);
  DeviceTensor& dx = output(STRATA_F32, {1, 3});
  ASSERT_EQ(run(STRATA_OP_SOFTMAX_BACKWARD, "f32,f32->f32", {&g, &y}, dx, Attrs().integer("dim", 1)), STRATA_OK);
  const double dot = 0.1 * 1 + 0.2 * -2 + 0.7 * 0.5;
  const std::vector<float> out = dx.download<float>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], ys[i] * (gs[i] - dot), 1e-6);
}

TEST_F(CpuAbiTest, GeluAndBackwardOps) {
  const std::vector<float> xs = {-2, -0.5f, 0, 0.5f, 3};
  DeviceTensor& x = tensor<float>(STRATA_F32, {5}, xs);
  DeviceTensor& g = tensor<float>(STRATA_F32, {5}, {1, 1, 1, 1, 2});
  DeviceTensor& y = output(STRATA_F32, {5});
  ASSERT_EQ(run(STRATA_OP_GELU, "f32->f32", {&x}, y), STRATA_OK);
  std::vector<float> out = y.download<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(out[i], 0.5 * xs[i] * (1 + std::erf(xs[i] / std::sqrt(2.0))), 1e-6);
  }
  ASSERT_EQ(run(STRATA_OP_GELU_BACKWARD, "f32,f32->f32", {&g, &x}, y), STRATA_OK);
  out = y.download<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double cdf = 0.5 * (1 + std::erf(xs[i] / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * xs[i] * xs[i]) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(out[i], (i == 4 ? 2 : 1) * (cdf + xs[i] * pdf), 1e-6);
  }
  ASSERT_EQ(run(STRATA_OP_RELU_BACKWARD, "f32,f32->f32", {&g, &x}, y), STRATA_OK);
  EXPECT_EQ(y.download<float>(), (std::vector<float>{0, 0, 0, 1, 2}));
}

}  // namespace
}  // namespace strata::cpu_abi
