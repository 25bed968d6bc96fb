// nn_test.cpp — softmax, log_softmax and the backward ops, against the
// formulas of docs/ops.md and against finite differences of the forward ops.
#include <cmath>

#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
using s::DType;
using Lanes = std::vector<std::vector<double>>;

class NN : public DeviceTest {
 protected:
  /// Shapes with a dim to work along (all dims of each, negative ones too).
  std::vector<Shape> shapes() {
    std::vector<Shape> out{{}, {1}, {5}, {3, 4}, {2, 3, 4}, {0, 3}, {2, 0}};
    for (int i = 0; i < 3; ++i) out.push_back(random_shape(rng_, 1, 4, 6));
    return out;
  }
  static std::vector<int64_t> dims_of(const Shape& shape) {
    auto rank = static_cast<int64_t>(shape.size());
    if (rank == 0) return {0, -1};
    std::vector<int64_t> dims;
    for (int64_t d = -rank; d < rank; ++d) dims.push_back(d);
    return dims;
  }
};
STRATA_INSTANTIATE_ON_DEVICES(NN);

TEST_P(NN, Softmax) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    for (const Shape& shape : shapes()) {
      for (int64_t dim : dims_of(shape)) {
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
          STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " " << layout_name(layout) << " dim " << dim);
          Operand x = operand(shape, dtype, layout, -5, 5);
          EXPECT_CLOSE(s::softmax(x.dev, dim), softmax(x.host, dim), dtype);
          // x - max - log(sum): absolute error ~ eps * |x| near zero results.
          EXPECT_CLOSE(s::log_softmax(x.dev, dim), log_softmax(x.host, dim), dtype, tolerance(dtype).scaled(4));
        }
      }
    }
  }
}

TEST_P(NN, SoftmaxIsStableForLargeInputs) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    HostTensor h = host_values({2, 3}, {1000, 1001, 1002, -1000, -1001, -1002});
    Tensor x = make(h, dtype);
    HostTensor y = softmax(h, 1);
    EXPECT_CLOSE(s::softmax(x, 1), y, dtype);
    EXPECT_CLOSE(s::log_softmax(x, -1), log_softmax(h, 1), dtype);
    // Rows sum to one.
    EXPECT_CLOSE(s::sum(s::softmax(x, 1), {1}), host_values({2}, {1, 1}), dtype);
  }
}

TEST_P(NN, ElementwiseBackwardOps) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    std::vector<Shape> all = shapes();
    for (size_t i = 0; i < all.size(); ++i) {
      const Shape& shape = all[i];
      Layout layout = kAllLayouts[i % 4];
      STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " " << layout_name(layout));
      Operand g = operand(shape, dtype, layout, -2, 2);
      Operand x = int_operand(shape, dtype, Layout::contiguous, -2, 2);  // exact zeros for relu
      EXPECT_CLOSE(s::relu_backward(g.dev, x.dev),
                   zip(g.host, x.host, [](double gv, double xv) { return xv > 0 ? gv : 0.0; }), dtype);
      Operand ys = operand(shape, dtype, Layout::transposed, 0.01, 0.99);
      EXPECT_CLOSE(s::sigmoid_backward(g.dev, ys.dev),
                   zip(g.host, ys.host, [](double gv, double yv) { return gv * yv * (1 - yv); }), dtype);
      Operand yt = operand(shape, dtype, Layout::strided, -0.99, 0.99);
      EXPECT_CLOSE(s::tanh_backward(g.dev, yt.dev),
                   zip(g.host, yt.host, [](double gv, double yv) { return gv * (1 - yv * yv); }), dtype);
      Operand xg = operand(shape, dtype, Layout::contiguous, -4, 4);
      EXPECT_CLOSE(
          s::gelu_backward(g.dev, xg.dev),
          zip(g.host, xg.host, [](double gv, double xv) { return gv * (normal_cdf(xv) + xv * normal_pdf(xv)); }),
          dtype);
    }
  }
}

TEST_P(NN, SoftmaxBackwardOps) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    for (const Shape& shape : shapes()) {
      for (int64_t dim : dims_of(shape)) {
        STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " dim " << dim);
        // Both formulas subtract a sum over the lane: error grows with its length.
        Tolerance tol = tolerance(dtype);
        tol.atol *= static_cast<double>(
            shape.empty() ? 1 : shape[static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(shape.size()) : dim)]);
        Operand g = operand(shape, dtype, Layout::transposed, -2, 2);
        Operand x = operand(shape, dtype, Layout::contiguous, -3, 3);
        // y = softmax(x) as the op would produce it, rounded to dtype.
        HostTensor y{shape, round_to(softmax(x.host, dim).data, dtype, dev())};
        HostTensor ly{shape, round_to(log_softmax(x.host, dim).data, dtype, dev())};
        HostTensor expected = along({g.host, y}, dim, [](const Lanes& l) {
          double dot = 0.0;
          for (size_t j = 0; j < l[0].size(); ++j) dot += l[0][j] * l[1][j];
          std::vector<double> r;
          for (size_t j = 0; j < l[0].size(); ++j) r.push_back(l[1][j] * (l[0][j] - dot));
          return r;
        });
        EXPECT_CLOSE(s::softmax_backward(g.dev, make(y, dtype), dim), expected, dtype, tol);
        HostTensor expected_log = along({g.host, ly}, dim, [](const Lanes& l) {
          double sum = 0.0;
          for (double v : l[0]) sum += v;
          std::vector<double> r;
          for (size_t j = 0; j < l[0].size(); ++j) r.push_back(l[0][j] - std::exp(l[1][j]) * sum);
          return r;
        });
        EXPECT_CLOSE(s::log_softmax_backward(g.dev, make(ly, dtype), dim), expected_log, dtype, tol);
      }
    }
  }
}

/// Vector-Jacobian product of `forward` at x with cotangent g, by central
/// differences of the device op in f64 (one perturbed element at a time).
HostTensor numeric_vjp(const std::function<Tensor(const Tensor&)>& forward, const HostTensor& x, const HostTensor& g,
                       strata::Device device) {
  const double h = 1e-6;
  HostTensor out{x.shape, std::vector<double>(x.data.size())};
  for (size_t i = 0; i < x.data.size(); ++i) {
    HostTensor plus = x;
    HostTensor minus = x;
    plus.data[i] += h;
    minus.data[i] -= h;
    std::vector<double> fp = forward(upload(plus, s::f64, device)).to_vector<double>();
    std::vector<double> fm = forward(upload(minus, s::f64, device)).to_vector<double>();
    double acc = 0.0;
    for (size_t j = 0; j < fp.size(); ++j) acc += g.data[j] * (fp[j] - fm[j]) / (2 * h);
    out.data[i] = acc;
  }
  return out;
}

TEST_P(NN, BackwardOpsMatchFiniteDifferences) {
  if (!runs(s::f64)) GTEST_SKIP() << GetParam() << " does not store f64, which the finite differences need";
  const Tolerance tol{1e-6, 1e-7};
  for (const Shape& shape : {Shape{7}, Shape{2, 3}}) {
    STRATA_TRACE(shape_str(shape));
    Operand x = operand(shape, s::f64, Layout::contiguous, -2, 2);
    Operand g = operand(shape, s::f64, Layout::contiguous, -1, 1);
    auto vjp = [&](const std::function<Tensor(const Tensor&)>& f) { return numeric_vjp(f, x.host, g.host, dev()); };
    Tensor sig = s::sigmoid(x.dev), th = s::tanh(x.dev);
    EXPECT_CLOSE(s::sigmoid_backward(g.dev, sig), vjp([](const Tensor& t) { return s::sigmoid(t); }), s::f64, tol);
    EXPECT_CLOSE(s::tanh_backward(g.dev, th), vjp([](const Tensor& t) { return s::tanh(t); }), s::f64, tol);
    EXPECT_CLOSE(s::gelu_backward(g.dev, x.dev), vjp([](const Tensor& t) { return s::gelu(t); }), s::f64, tol);
    EXPECT_CLOSE(s::relu_backward(g.dev, x.dev), vjp([](const Tensor& t) { return s::relu(t); }), s::f64, tol);
    int64_t dim = -1;
    EXPECT_CLOSE(s::softmax_backward(g.dev, s::softmax(x.dev, dim), dim),
                 vjp([dim](const Tensor& t) { return s::softmax(t, dim); }), s::f64, tol);
    EXPECT_CLOSE(s::log_softmax_backward(g.dev, s::log_softmax(x.dev, dim), dim),
                 vjp([dim](const Tensor& t) { return s::log_softmax(t, dim); }), s::f64, tol);
  }
}

TEST_P(NN, CompositesRejectIntegersAndMismatchedShapes) {
  Tensor i = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::i64);
  EXPECT_THROW(s::softmax(i, 1), s::DTypeError);
  Tensor a = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f32);
  Tensor b = make({3}, {1, 2, 3}, s::f32);
  try {
    s::relu_backward(a, b);
    ADD_FAILURE() << "relu_backward of [2, 3] and [3] did not throw";
  } catch (const s::ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("relu_backward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  }
  if (runs(s::f64)) {
    EXPECT_THROW(s::tanh_backward(a, make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f64)), s::DTypeError);
  }
}

}  // namespace
}  // namespace strata_test
