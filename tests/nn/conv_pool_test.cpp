// conv_pool_test.cpp — conv2d and max_pool2d (built from slices, stack, pad
// and matmul) against naive loops: values, gradients by a naive backward
// loop, and finite differences.
#include <gtest/gtest.h>

#include <limits>
#include <strata/strata.hpp>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using namespace nn_test;

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  nn::functional::Conv2dOptions opt;
};
void PrintTo(const ConvCase& k, std::ostream* os) {
  *os << "x[" << k.n << "," << k.c << "," << k.h << "," << k.w << "] w[" << k.o << "," << k.c << "," << k.kh << ","
      << k.kw << "] stride " << k.opt.stride[0] << "," << k.opt.stride[1] << " pad " << k.opt.padding[0] << ","
      << k.opt.padding[1] << " dilation " << k.opt.dilation[0] << "," << k.opt.dilation[1];
}

int64_t out_len(int64_t size, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (size + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

/// Naive forward and backward of a convolution; `gy` is the output gradient.
struct NaiveConv {
  std::vector<double> y, gx, gw, gb;
  NaiveConv(const ConvCase& k, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
            const std::vector<double>& gy) {
    const int64_t ho = out_len(k.h, k.kh, k.opt.stride[0], k.opt.padding[0], k.opt.dilation[0]);
    const int64_t wo = out_len(k.w, k.kw, k.opt.stride[1], k.opt.padding[1], k.opt.dilation[1]);
    y.assign(static_cast<size_t>(k.n * k.o * ho * wo), 0.0);
    gx.assign(x.size(), 0.0);
    gw.assign(w.size(), 0.0);
    gb.assign(static_cast<size_t>(k.o), 0.0);
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t o = 0; o < k.o; ++o)
        for (int64_t p = 0; p < ho; ++p)
          for (int64_t q = 0; q < wo; ++q) {
            auto yi = static_cast<size_t>(((n * k.o + o) * ho + p) * wo + q);
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
            gb[static_cast<size_t>(o)] += gy[yi];
            for (int64_t c = 0; c < k.c; ++c)
              for (int64_t i = 0; i < k.kh; ++i)
                for (int64_t j = 0; j < k.kw; ++j) {
                  int64_t hh = p * k.opt.stride[0] - k.opt.padding[0] + i * k.opt.dilation[0];
                  int64_t ww = q * k.opt.stride[1] - k.opt.padding[1] + j * k.opt.dilation[1];
                  if (hh < 0 || hh >= k.h || ww < 0 || ww >= k.w) continue;
                  auto xi = static_cast<size_t>(((n * k.c + c) * k.h + hh) * k.w + ww);
                  auto wi = static_cast<size_t>(((o * k.c + c) * k.kh + i) * k.kw + j);
                  s += x[xi] * w[wi];
                  gx[xi] += gy[yi] * w[wi];
                  gw[wi] += gy[yi] * x[xi];
                }
            y[yi] = s;
          }
  }
};

class Conv2dCases : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dCases, MatchesNaiveLoops) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const ConvCase k = GetParam();
  Tensor x = random_real({k.n, k.c, k.h, k.w}, 1).set_requires_grad();
  Tensor w = random_real({k.o, k.c, k.kh, k.kw}, 2).set_requires_grad();
  Tensor b = random_real({k.o}, 3).set_requires_grad();
  Tensor y = nn::functional::conv2d(x, w, b, k.opt);
  const int64_t ho = out_len(k.h, k.kh, k.opt.stride[0], k.opt.padding[0], k.opt.dilation[0]);
  const int64_t wo = out_len(k.w, k.kw, k.opt.stride[1], k.opt.padding[1], k.opt.dilation[1]);
  ASSERT_EQ(y.sizes(), (Shape{k.n, k.o, ho, wo}));
  Tensor gy = random_real(y.sizes(), 4);
  NaiveConv ref(k, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), gy.to_vector<double>());
  expect_values(y, ref.y, 1e-12, "y");
  y.backward(gy);
  expect_values(x.grad(), ref.gx, 1e-12, "dx");
  expect_values(w.grad(), ref.gw, 1e-12, "dw");
  expect_values(b.grad(), ref.gb, 1e-12, "db");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dCases,
    ::testing::Values(ConvCase{2, 3, 5, 6, 4, 3, 3, {}},                   // plain
                      ConvCase{1, 2, 7, 7, 3, 3, 2, {.stride = {2, 3}}},   // strides
                      ConvCase{2, 2, 4, 5, 2, 3, 3, {.padding = {1, 2}}},  // padding
                      ConvCase{1, 1, 6, 6, 2, 2, 2, {.stride = {2, 1}, .padding = {1, 1}, .dilation = {2, 3}}},
                      ConvCase{3, 4, 3, 3, 5, 1, 1, {}},    // 1x1
                      ConvCase{1, 2, 3, 4, 1, 3, 4, {}}));  // kernel = input

TEST(Conv2d, GradcheckThroughPadding) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  nn::functional::Conv2dOptions opt{.stride = {2, 1}, .padding = {1, 1}};
  Tensor x = random_real({1, 2, 4, 4}, 5);
  Tensor w = random_real({2, 2, 3, 3}, 6);
  Tensor probe = random_real({1, 2, 2, 4}, 7);
  auto fx = [&](const Tensor& in) { return sum(nn::functional::conv2d(in, w, Tensor(), opt) * probe); };
  auto fw = [&](const Tensor& in) { return sum(nn::functional::conv2d(x, in, Tensor(), opt) * probe); };
  GradcheckResult rx = gradcheck(fx, x);
  EXPECT_TRUE(rx.ok) << rx.message;
  GradcheckResult rw = gradcheck(fw, w);
  EXPECT_TRUE(rw.ok) << rw.message;
  // Second order: the gradient with respect to x is linear in w, so
  // differentiate the squared-output loss twice.
  auto g2 = [&](const Tensor& in) {
    return sum(square(
        grad([&](const Tensor& xx) { return sum(square(nn::functional::conv2d(xx, in, Tensor(), opt)) * probe); })(x)));
  };
  GradcheckResult r2 = gradcheck(g2, w);
  EXPECT_TRUE(r2.ok) << r2.message;
}

TEST(Conv2d, ModuleUsesItsOptionsAndErrors) {
  manual_seed(3);
  nn::Conv2d conv(3, 8, 3, 2, 1);
  EXPECT_EQ(conv.weight.sizes(), (Shape{8, 3, 3, 3}));
  const double bound = 1.0 / std::sqrt(27.0);
  EXPECT_LE(amax(abs(conv.weight)).item<double>(), bound);
  EXPECT_LE(amax(abs(conv.bias)).item<double>(), bound);
  Tensor y = conv(randn({2, 3, 9, 10}));
  EXPECT_EQ(y.sizes(), (Shape{2, 8, 5, 5}));
  EXPECT_EQ(conv(randn({3, 9, 10})).sizes(), (Shape{8, 5, 5}));  // unbatched
  nn::Conv2d rect(2, 1, {1, 3}, {.padding = {0, 1}, .bias = false});
  EXPECT_FALSE(rect.bias.defined());
  EXPECT_EQ(rect.parameters().size(), 1u);
  EXPECT_EQ(rect(randn({1, 2, 4, 4})).sizes(), (Shape{1, 1, 4, 4}));
  expect_error<ShapeError>([&] { conv(randn({2, 4, 9, 9})); }, {"4 channels", "expects 3"});
  expect_error<ShapeError>(
      [&] {
        nn::functional::conv2d(randn({1, 1, 2, 2}), randn({1, 1, 3, 3}));
      },
      {"does not fit", "[1, 1, 2, 2]"});
  EXPECT_THROW(nn::Conv2d(3, 8, 3, 0), ValueError);
}

/// Naive max pooling forward and backward (no ties in random data).
struct NaivePool {
  std::vector<double> y, gx;
  NaivePool(const Shape& s, const std::vector<double>& x, int64_t k, int64_t stride, int64_t pad,
            const std::vector<double>& gy) {
    const int64_t ho = (s[2] + 2 * pad - k) / stride + 1, wo = (s[3] + 2 * pad - k) / stride + 1;
    gx.assign(x.size(), 0.0);
    size_t yi = 0;
    for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
      for (int64_t p = 0; p < ho; ++p)
        for (int64_t q = 0; q < wo; ++q, ++yi) {
          double best = -std::numeric_limits<double>::infinity();
          size_t arg = 0;
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              int64_t h = p * stride - pad + i, w = q * stride - pad + j;
              if (h < 0 || h >= s[2] || w < 0 || w >= s[3]) continue;
              auto xi = static_cast<size_t>((nc * s[2] + h) * s[3] + w);
              if (x[xi] > best) {
                best = x[xi];
                arg = xi;
              }
            }
          y.push_back(best);
          gx[arg] += gy.empty() ? 0.0 : gy[yi];
        }
  }
};

TEST(MaxPool2d, MatchesNaiveLoops) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  struct Case {
    Shape shape;
    int64_t k, stride, pad;
  };
  for (const Case& c : {Case{{2, 3, 6, 6}, 2, 2, 0}, Case{{1, 2, 7, 5}, 3, 2, 1}, Case{{1, 1, 5, 5}, 3, 1, 0}}) {
    Tensor x = random_real(c.shape, 11).set_requires_grad();
    Tensor y = nn::MaxPool2d(c.k, c.stride, c.pad)(x);
    Tensor gy = random_real(y.sizes(), 12);
    NaivePool ref(c.shape, x.to_vector<double>(), c.k, c.stride, c.pad, gy.to_vector<double>());
    expect_values(y, ref.y, 0.0, "y");
    y.backward(gy);
    expect_values(x.grad(), ref.gx, 1e-15, "dx");
    GradcheckResult r = gradcheck(
        [&](const Tensor& in) {
          return sum(
              nn::functional::max_pool2d(in, {c.k, c.k}, {.stride = {c.stride, c.stride}, .padding = {c.pad, c.pad}}) *
              gy);
        },
        x.detach());
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(MaxPool2d, DefaultStrideIsKernelAndErrors) {
  Tensor x = arange(0.0, 16.0, 1.0, {.dtype = DType::f32}).reshape({1, 1, 4, 4});
  Tensor y = nn::MaxPool2d(2)(x);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_THROW(nn::MaxPool2d(2, 1, 2)(x), ShapeError);  // padding > kernel/2
  EXPECT_THROW(nn::MaxPool2d(5)(x), ShapeError);        // window larger than the input
  EXPECT_THROW(nn::MaxPool2d(0), ValueError);
}

}  // namespace
