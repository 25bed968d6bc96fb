// op_cases.hpp — the op list whose derivatives the gradient checks run:
// each op applied to x (and to fixed operands), linear ops composed with
// smooth ones so that second and third derivatives are not zero. Shared by
// higher_order_test.cpp (f64 on cpu:0, against finite differences) and
// device_gradients_test.cpp (f32 on every device, against cpu:0).
#pragma once

#include <functional>
#include <stdexcept>
#include <strata/strata.hpp>
#include <string>
#include <vector>

namespace op_cases {

using strata::DType;
using strata::Shape;
using strata::Tensor;

inline Tensor f64_uniform(const Shape& shape, double lo, double hi, uint64_t seed) {
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

inline Tensor transposed(const Tensor& t) { return t.transpose(0, 1); }

/// The op list, its fixed operands in `dtype` on `device` (drawn in f64 on
/// the CPU first, so every dtype and device sees the same values).
inline std::vector<OpCase> cases(DType dtype = DType::f64, strata::Device device = strata::Device("cpu:0")) {
  auto fixed = [&](const Shape& shape, double lo, double hi, uint64_t seed) {
    return f64_uniform(shape, lo, hi, seed).to(dtype).to(device);
  };
  Tensor b23 = fixed({2, 3}, -1.0, 1.0, 7);
  Tensor b13 = fixed({1, 3}, 0.5, 1.5, 8);
  Tensor b3 = fixed({3}, 0.5, 1.5, 9);
  Tensor pos23 = fixed({2, 3}, 0.5, 1.5, 10);
  Tensor m34 = fixed({3, 4}, -1.0, 1.0, 11);
  Tensor b2 = fixed({2}, -1.0, 1.0, 15);
  Tensor y_soft = strata::softmax(fixed({2, 3}, -1.0, 1.0, 12), 1);
  Tensor y_tanh = strata::tanh(fixed({2, 3}, -1.0, 1.0, 13));
  Tensor y_sig = strata::sigmoid(fixed({2, 3}, -1.0, 1.0, 14));
  Tensor idx = strata::from_data(std::vector<int64_t>{2, 0, 1, 1}, {4}).to(device);
  Tensor gidx = strata::from_data(std::vector<int64_t>{0, 1, 1, 0, 1, 0}, {2, 3}).to(device);
  using namespace strata;
  return {
      {"neg", [](const Tensor& x) { return exp(neg(x)); }, {2, 3}},
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
      // Flat ops (zero derivative) times a smooth one, on ranges without a
      // jump, so that every order is non-zero and the flat op's rule runs.
      {"sign", [](const Tensor& x) { return exp(x) * sign(x); }, {2, 3}, 0.2, 1.5},
      {"floor", [](const Tensor& x) { return exp(x) * (floor(x) + 2.0); }, {2, 3}, 0.2, 0.8},
      {"ceil", [](const Tensor& x) { return exp(x) * ceil(x); }, {2, 3}, 0.2, 0.8},
      {"round", [](const Tensor& x) { return exp(x) * (round(x) + 2.0); }, {2, 3}, 0.6, 1.4},
      {"copy", [](const Tensor& x) { return exp(x.clone()); }, {2, 3}},
      // binary, differentiated in each operand, with broadcasting
      {"add.a.broadcast", [b13](const Tensor& x) { return sin(x + b13); }, {2, 3}},
      {"sub.b.broadcast", [b23](const Tensor& x) { return tanh(b23 - x); }, {1, 3}},
      {"mul.a", [b23](const Tensor& x) { return x * b23 * x * x; }, {2, 3}},
      {"mul.b.broadcast", [b23](const Tensor& x) { return exp(b23 * x); }, {3}},
      {"div.a", [b13](const Tensor& x) { return sin(x / b13); }, {2, 3}},
      {"div.b.broadcast", [b23](const Tensor& x) { return b23 / x; }, {1, 3}, 0.5, 2.0},
      {"pow.base", [b3](const Tensor& x) { return pow(x, b3); }, {2, 3}, 0.5, 2.0},
      {"pow.exponent", [pos23](const Tensor& x) { return pow(pos23, x); }, {2, 3}},
      {"pow.scalar", [](const Tensor& x) { return pow(x, 3.0); }, {2, 3}},
      {"maximum", [b23](const Tensor& x) { return maximum(x, b23); }, {2, 3}, -1.5, 1.5, 1},
      // b23 + 0.5: with minimum(x, b23) x was above b23 everywhere, so its
      // gradient in x was zero and the check compared 0 with 0.
      {"minimum", [b23](const Tensor& x) { return minimum(x, b23 + 0.5); }, {2, 3}, -1.5, 1.5, 1},
      {"where", [b23](const Tensor& x) { return where(gt(b23, 0.0 * b23), x * x, exp(x)); }, {2, 3}},
      // non-contiguous operands
      {"mul.noncontiguous", [b23](const Tensor& x) { return transposed(x) * transposed(b23) * transposed(x * x); },
       {2, 3}},
      {"tanh.noncontiguous", [](const Tensor& x) { return tanh(transposed(x)); }, {2, 3}},
      // reductions
      {"sum", [](const Tensor& x) { return sum(x * x * x, {1}); }, {2, 3}},
      {"mean", [](const Tensor& x) { return mean(exp(x), {0}); }, {2, 3}},
      {"prod", [](const Tensor& x) { return prod(x, {1}); }, {2, 3}, 0.5, 1.5},
      {"amax", [](const Tensor& x) { return amax(x, {1}) * amax(x, {1}); }, {2, 3}, -1.5, 1.5, 1},
      {"amin", [](const Tensor& x) { return amin(x, {0}); }, {2, 3}, -1.5, 1.5, 1},
      // linear algebra
      {"matmul.a", [m34](const Tensor& x) { return tanh(matmul(x, m34)); }, {2, 3}},
      {"matmul.b", [m34](const Tensor& x) { return tanh(matmul(m34.transpose(0, 1), x)); }, {3, 2}},
      {"matmul.noncontiguous", [](const Tensor& x) { return tanh(matmul(transposed(x), x)); }, {3, 2}},
      {"linear.x", [m34, b3](const Tensor& x) { return tanh(linear(x, m34, b3)); }, {2, 4}},
      {"linear.weight", [m34, b2](const Tensor& w) { return tanh(linear(m34, w, b2)); }, {2, 4}},
      {"linear.bias", [m34](const Tensor& b) { return tanh(linear(m34, m34, b)); }, {3}},
      // Biases of ±5: every pre-activation is 2.6 or more away from relu's kink.
      {"linear.relu.x",
       [m34, b3](const Tensor& x) { return linear(x, m34, sign(b3 - 1.0) * 5.0, FusedActivation::relu); }, {2, 4},
       0.2, 0.6, 1},
      // softmax family and the backward ops as functions of each operand
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }, {2, 3}},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 0); }, {2, 3}},
      {"softmax_backward.grad", [y_soft](const Tensor& x) { return softmax_backward(x * x * x, y_soft, 1); }, {2, 3}},
      {"softmax_backward.y", [b23](const Tensor& x) { return softmax_backward(b23, softmax(x, 1), 1); }, {2, 3}},
      {"log_softmax_backward.y",
       [b23](const Tensor& x) { return log_softmax_backward(b23, log_softmax(x, 1), 1); }, {2, 3}},
      {"tanh_backward.y", [b23](const Tensor& x) { return tanh_backward(b23, tanh(x)); }, {2, 3}},
      {"tanh_backward.grad", [y_tanh](const Tensor& x) { return tanh_backward(x * x * x, y_tanh); }, {2, 3}},
      {"sigmoid_backward.y", [b23](const Tensor& x) { return sigmoid_backward(b23, sigmoid(x)); }, {2, 3}},
      {"sigmoid_backward.grad", [y_sig](const Tensor& x) { return sigmoid_backward(exp(x), y_sig); }, {2, 3}},
      {"gelu_backward.x", [b23](const Tensor& x) { return gelu_backward(b23, x); }, {2, 3}},
      {"relu_backward.grad", [b23](const Tensor& x) { return relu_backward(x * x * x, b23); }, {2, 3}},
      // indexing and joins (linear in x: composed with a smooth op)
      {"index_select", [idx](const Tensor& x) { return exp(index_select(x, 1, idx)); }, {2, 3}},
      {"gather", [gidx](const Tensor& x) { return sin(gather(x, 0, gidx)); }, {2, 3}},
      {"scatter_add", [gidx, b23](const Tensor& x) { return exp(scatter_add(b23, 0, gidx, x * x)); }, {2, 3}},
      {"cat", [b23](const Tensor& x) { return exp(cat({x, b23, x * x}, 1)); }, {2, 3}},
      {"cat.promotes", [](const Tensor& x) {
         return sin(cat({x, strata::ones({1, 3}, {.dtype = DType::f32, .device = x.device()})}, 0));
       }, {2, 3}},
      {"stack", [b23](const Tensor& x) { return tanh(stack({x, b23}, 0)); }, {2, 3}},
      {"pad", [](const Tensor& x) { return exp(pad(x, {1, 2, 0, 1}, 0.5)); }, {2, 3}},
      {"views", [](const Tensor& x) { return exp(x.reshape({3, 2}).slice(0, 0, 3, 2).expand({4, 2, 2})); }, {2, 3}},
      {"select", [](const Tensor& x) { return sin(x.select(1, 2)); }, {2, 3}},
  };
}

/// The cases by name: tests are registered by name only, so no tensor is
/// created (and kept for the whole run) while tests are being registered.
/// With `min_order`, only the cases that have derivatives to that order
/// (max_order >= min_order): a suite about second derivatives instantiates
/// no case for an op that has none, instead of skipping it at run time.
inline std::vector<std::string> case_names(int min_order = 1) {
  std::vector<std::string> names;
  for (const OpCase& c : cases()) {
    if (c.max_order >= min_order) names.push_back(c.name);
  }
  return names;
}

}  // namespace op_cases
