// nn.cpp — neural-network composites and backward ops.
//
// Each is decomposed into primitives here unless the device registers a
// fused kernel under the same name (docs/ops.md). Backward ops are ops like
// any other, so gradients of gradients differentiate them.
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <numbers>

namespace strata {

namespace {
using detail::Attr;
using detail::Attrs;
using detail::OpCall;
using detail::OpDef;
using detail::OpKind;

int64_t dim_of(const OpCall& call) { return call.attr_int("dim"); }

OpDef composite(std::string_view name, int n_inputs, std::vector<Tensor> (*decompose)(const OpCall&)) {
  return OpDef{.name = name,
               .kind = OpKind::composite,
               .n_inputs = n_inputs,
               .prepare = detail::rules::same_shape_float,
               .decompose = decompose};
}

// Standard normal density and distribution, as tensors.
Tensor normal_pdf(const Tensor& x) { return exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * std::numbers::pi)); }
Tensor normal_cdf(const Tensor& x) { return (erf(x * (1.0 / std::numbers::sqrt2)) + 1.0) * 0.5; }

const OpDef& kSoftmax = detail::define_op(composite("softmax", 1, [](const OpCall& c) {
  Tensor x = c.in(0);
  Tensor e = exp(x - amax(x, {dim_of(c)}, true));
  return std::vector<Tensor>{e / sum(e, {dim_of(c)}, true)};
}));

const OpDef& kLogSoftmax = detail::define_op(composite("log_softmax", 1, [](const OpCall& c) {
  Tensor x = c.in(0);
  Tensor shifted = x - amax(x, {dim_of(c)}, true);
  return std::vector<Tensor>{shifted - log(sum(exp(shifted), {dim_of(c)}, true))};
}));

const OpDef& kGelu = detail::define_op(composite("gelu", 1, [](const OpCall& c) {
  return std::vector<Tensor>{c.in(0) * normal_cdf(c.in(0))};
}));

const OpDef& kSilu = detail::define_op(composite("silu", 1, [](const OpCall& c) {
  return std::vector<Tensor>{c.in(0) * sigmoid(c.in(0))};
}));

// --- backward ops: inputs (grad, saved) -----------------------------------
const OpDef& kReluBackward = detail::define_op(composite("relu_backward", 2, [](const OpCall& c) {
  Tensor zero = zeros_like(c.in(0));
  return std::vector<Tensor>{where(gt(c.in(1), zero), c.in(0), zero)};
}));

const OpDef& kSigmoidBackward = detail::define_op(composite("sigmoid_backward", 2, [](const OpCall& c) {
  return std::vector<Tensor>{c.in(0) * c.in(1) * (1.0 - c.in(1))};
}));

const OpDef& kTanhBackward = detail::define_op(composite("tanh_backward", 2, [](const OpCall& c) {
  return std::vector<Tensor>{c.in(0) * (1.0 - c.in(1) * c.in(1))};
}));

const OpDef& kGeluBackward = detail::define_op(composite("gelu_backward", 2, [](const OpCall& c) {
  const Tensor& x = c.in(1);
  return std::vector<Tensor>{c.in(0) * (normal_cdf(x) + x * normal_pdf(x))};
}));

const OpDef& kSoftmaxBackward = detail::define_op(composite("softmax_backward", 2, [](const OpCall& c) {
  const Tensor& g = c.in(0);
  const Tensor& y = c.in(1);
  return std::vector<Tensor>{y * (g - sum(g * y, {dim_of(c)}, true))};
}));

const OpDef& kLogSoftmaxBackward = detail::define_op(composite("log_softmax_backward", 2, [](const OpCall& c) {
  const Tensor& g = c.in(0);
  return std::vector<Tensor>{g - exp(c.in(1)) * sum(g, {dim_of(c)}, true)};
}));

Tensor with_dim(const OpDef& op, std::initializer_list<Tensor> inputs, int64_t dim) {
  const Tensor& x = *inputs.begin();
  if (!x.defined()) throw Error(std::string(op.name) + ": undefined tensor");
  Attrs attrs{Attr::integer("dim", detail::normalize_dim(dim, x.dim(), op.name))};
  return detail::dispatch1(op, inputs, &attrs);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return with_dim(kSoftmax, {x}, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return with_dim(kLogSoftmax, {x}, dim); }
Tensor gelu(const Tensor& x) { return detail::dispatch1(kGelu, {x}); }
Tensor silu(const Tensor& x) { return detail::dispatch1(kSilu, {x}); }
Tensor relu_backward(const Tensor& grad, const Tensor& x) { return detail::dispatch1(kReluBackward, {grad, x}); }
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) { return detail::dispatch1(kSigmoidBackward, {grad, y}); }
Tensor tanh_backward(const Tensor& grad, const Tensor& y) { return detail::dispatch1(kTanhBackward, {grad, y}); }
Tensor gelu_backward(const Tensor& grad, const Tensor& x) { return detail::dispatch1(kGeluBackward, {grad, x}); }
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return with_dim(kSoftmaxBackward, {grad, y}, dim);
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return with_dim(kLogSoftmaxBackward, {grad, y}, dim);
}

}  // namespace strata
