// op_cases.hpp — the op list whose derivatives the gradient checks run:
// each op applied to x (and to fixed operands), linear ops composed with
// smooth ones so that second and third derivatives are not zero. The
// pointwise ops' cases are derived from the op registry (derived_cases);
// the others are written here. Shared by
// higher_order_test.cpp (f64 on cpu:0, against finite differences) and
// device_gradients_test.cpp (f32 on every device, against cpu:0).
#pragma once

#include <algorithm>
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

inline bool tagged(const strata::OpInfo& op, const char* tag) {
  return std::find(op.tags.begin(), op.tags.end(), tag) != op.tags.end();
}

/// The cases every differentiable pointwise op of the registry gets from its
/// manifest entry (docs/ops.md, "The op manifest"), with no line here:
/// sin(op(x)) for a unary op; sin(op(x, b)) and sin(op(a, x)) for a binary
/// one ("add.a.broadcast", "add.b.broadcast": the differentiated operand is
/// the larger, then the smaller one when the op broadcasts). x and the fixed
/// operands are drawn from the op's test domain; the orders are its
/// domain's. sin keeps every order non-zero for ops that are linear.
inline std::vector<OpCase> derived_cases(DType dtype, strata::Device device) {
  std::vector<OpCase> out;
  uint64_t seed = 100;
  for (const strata::OpInfo& op : strata::runtime().ops()) {
    if (!op.plugin.empty() || (op.kind != "primitive" && op.kind != "composite")) continue;
    if (!tagged(op, "pointwise") || tagged(op, "complex") || !op.attrs.empty() || !op.differentiable) continue;
    if (op.domain.orders < 1 || (op.n_inputs != 1 && op.n_inputs != 2)) continue;
    const std::string name = op.name, bare = name.substr(name.find("::") + 2);
    auto range = [&](int k) {
      return op.domain.nonzero_input == k ? std::pair{0.5, 2.0} : std::pair{op.domain.lo, op.domain.hi};
    };
    if (op.n_inputs == 1) {
      out.push_back({bare, [name](const Tensor& x) { return strata::sin(strata::call_op(name, {x})[0]); }, {2, 3},
                     range(0).first, range(0).second, op.domain.orders});
      continue;
    }
    const bool broadcasting = tagged(op, "broadcasting");
    for (int k = 0; k < 2; ++k) {
      if ((op.domain.flat_inputs >> k) & 1) continue;  // a zero derivative: nothing to compare
      const Shape x_shape = broadcasting && k == 1 ? Shape{1, 3} : Shape{2, 3};
      const Shape fixed_shape = broadcasting && k == 0 ? Shape{1, 3} : Shape{2, 3};
      const auto [lo, hi] = range(1 - k);
      Tensor other = f64_uniform(fixed_shape, lo, hi, seed++).to(dtype).to(device);
      std::function<Tensor(const Tensor&)> fn = [name, other, k](const Tensor& x) {
        return strata::sin(strata::call_op(name, k == 0 ? std::vector{x, other} : std::vector{other, x})[0]);
      };
      out.push_back({bare + (k == 0 ? ".a" : ".b") + (broadcasting ? ".broadcast" : ""), fn, x_shape,
                     range(k).first, range(k).second, op.domain.orders});
    }
  }
  return out;
}

/// The op list, its fixed operands in `dtype` on `device` (drawn in f64 on
/// the CPU first, so every dtype and device sees the same values).
inline std::vector<OpCase> cases(DType dtype = DType::f64, strata::Device device = strata::Device("cpu:0")) {
  auto fixed = [&](const Shape& shape, double lo, double hi, uint64_t seed) {
    return f64_uniform(shape, lo, hi, seed).to(dtype).to(device);
  };
  Tensor b23 = fixed({2, 3}, -1.0, 1.0, 7);
  Tensor b3 = fixed({3}, 0.5, 1.5, 9);
  Tensor m34 = fixed({3, 4}, -1.0, 1.0, 11);
  Tensor b2 = fixed({2}, -1.0, 1.0, 15);
  Tensor y_soft = strata::softmax(fixed({2, 3}, -1.0, 1.0, 12), 1);
  Tensor idx = strata::from_data(std::vector<int64_t>{2, 0, 1, 1}, {4}).to(device);
  Tensor gidx = strata::from_data(std::vector<int64_t>{0, 1, 1, 0, 1, 0}, {2, 3}).to(device);
  using namespace strata;
  std::vector<OpCase> out = derived_cases(dtype, device);
  std::vector<OpCase> by_hand{
      // Flat ops (zero derivative) times a smooth one, on ranges without a
      // jump, so that every order is non-zero and the flat op's rule runs.
      {"sign", [](const Tensor& x) { return exp(x) * sign(x); }, {2, 3}, 0.2, 1.5},
      {"floor", [](const Tensor& x) { return exp(x) * (floor(x) + 2.0); }, {2, 3}, 0.2, 0.8},
      {"ceil", [](const Tensor& x) { return exp(x) * ceil(x); }, {2, 3}, 0.2, 0.8},
      {"round", [](const Tensor& x) { return exp(x) * (round(x) + 2.0); }, {2, 3}, 0.6, 1.4},
      // a C++ scalar exponent
      {"pow.scalar", [](const Tensor& x) { return pow(x, 3.0); }, {2, 3}},
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
  out.insert(out.end(), by_hand.begin(), by_hand.end());
  return out;
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
