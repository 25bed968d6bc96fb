// nn.cpp — neural-network composites and backward ops.
//
// Each is decomposed into primitives here unless the device registers a
// fused kernel under the same name (docs/ops.md). Backward ops are ops like
// any other, so gradients of gradients differentiate them: each has its own
// VJP and JVP below (all are linear in their grad input).
#include "derivatives.hpp"
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <numbers>

namespace strata {

namespace {

using namespace detail::op_vocabulary;

int64_t dim_of(const OpCall& call) { return call.attr_int("dim"); }
int64_t dim_of(const GradContext& c) { return c.attr_int("dim"); }

/// softmax and its kin: every input float with the first one's shape, and
/// their "dim" in range.
void along_dim_rule(OpCall& call) {
  detail::rules::same_shape_float(call);
  call.attr_dim("dim", call.in(0).dim());
}

// Standard normal density and distribution, as tensors.
Tensor normal_pdf(const Tensor& x) { return exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * std::numbers::pi)); }
Tensor normal_cdf(const Tensor& x) { return (erf(x * (1.0 / std::numbers::sqrt2)) + 1.0) * 0.5; }

// --- derivative helpers ----------------------------------------------------
/// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
Tensor silu_partial(const Tensor& g, const Tensor& x) {
  Tensor s = sigmoid(x);
  return g * s * (x * (1.0 - s) + 1.0);
}
/// gelu''(x) = φ(x) (2 - x²): gelu_backward's derivative in x.
Tensor gelu_second(const Tensor& x) { return normal_pdf(x) * (2.0 - x * x); }
/// log_softmax's JVP at y = log_softmax(x): t - sum(t · softmax(x)); it is
/// also log_softmax_backward transposed in its grad input.
Tensor log_softmax_jvp(const Tensor& t, const Tensor& y, int64_t dim) { return t - sum(t * exp(y), {dim}, true); }
/// softmax_backward(grad, y) = y (grad - sum(grad y)) differentiated in y:
/// forward, u ↦ u (grad - sum(grad y)) - y sum(grad u); reverse, its transpose.
Tensor softmax_backward_dy(const Tensor& grad, const Tensor& y, const Tensor& u, int64_t dim) {
  return u * (grad - sum(grad * y, {dim}, true)) - y * sum(grad * u, {dim}, true);
}
Tensor softmax_backward_dy_transposed(const Tensor& grad, const Tensor& y, const Tensor& g, int64_t dim) {
  return g * (grad - sum(grad * y, {dim}, true)) - grad * sum(g * y, {dim}, true);
}

const OpDef& kSoftmax = detail::define_op({
    .name = "softmax", .kind = OpKind::composite, .tags = tag::along_dim, .attrs = kDimAttrs,
    .dtypes = Family::float_only, .autocast = kFp32, .prepare = along_dim_rule,
    .decompose = [](const OpCall& c) {
      Tensor x = c.in(0);
      Tensor e = exp(x - amax(x, {dim_of(c)}, true));
      return std::vector<Tensor>{e / sum(e, {dim_of(c)}, true)};
    },
    .derivative = {.vjp = STRATA_VJP(softmax_backward(g, c.out(), dim_of(c))),  // symmetric Jacobian
                   .jvp = STRATA_JVP(STRATA_TANGENT(softmax_backward(t, c.out(), dim_of(c))))},
    .vjp_reads_inputs = 0});

const OpDef& kLogSoftmax = detail::define_op({
    .name = "log_softmax", .kind = OpKind::composite, .tags = tag::along_dim, .attrs = kDimAttrs,
    .dtypes = Family::float_only, .autocast = kFp32, .prepare = along_dim_rule,
    .decompose = [](const OpCall& c) {
      Tensor x = c.in(0);
      Tensor shifted = x - amax(x, {dim_of(c)}, true);
      return std::vector<Tensor>{shifted - log(sum(exp(shifted), {dim_of(c)}, true))};
    },
    .derivative = {.vjp = STRATA_VJP(log_softmax_backward(g, c.out(), dim_of(c))),
                   .jvp = STRATA_JVP(STRATA_TANGENT(log_softmax_jvp(t, c.out(), dim_of(c))))},
    .vjp_reads_inputs = 0});

const OpDef& kGelu = detail::define_op({
    .name = "gelu", .kind = OpKind::composite, .tags = tag::pointwise, .dtypes = Family::float_only,
    .autocast = kFp32, .prepare = detail::rules::same_shape_float,
    .decompose = [](const OpCall& c) { return std::vector<Tensor>{c.in(0) * normal_cdf(c.in(0))}; },
    .derivative = STRATA_DERIVATIVE(gelu_backward(g, x)), .vjp_reads_outputs = 0});

const OpDef& kSilu = detail::define_op({
    .name = "silu", .kind = OpKind::composite, .tags = tag::pointwise, .dtypes = Family::float_only,
    .prepare = detail::rules::same_shape_float,
    .decompose = [](const OpCall& c) { return std::vector<Tensor>{c.in(0) * sigmoid(c.in(0))}; },
    .derivative = STRATA_DERIVATIVE(silu_partial(g, x)), .vjp_reads_outputs = 0});

// --- backward ops: inputs (grad, saved) -----------------------------------
// All are linear in grad. The elementwise ones take STRATA_PARTIALS with
// a = grad and b = saved.
constexpr detail::OpTags kPointwiseBackward = tag::pointwise | tag::backward;

const OpDef& kReluBackward = detail::define_op({
    .name = "relu_backward", .kind = OpKind::composite, .tags = kPointwiseBackward, .dtypes = Family::float_only,
    .n_inputs = 2, .prepare = detail::rules::same_shape_float,
    .decompose = [](const OpCall& c) {
      Tensor zero = zeros_like(c.in(0));
      return std::vector<Tensor>{where(gt(c.in(1), zero), c.in(0), zero)};
    },
    .derivative = STRATA_PARTIALS(relu_backward(g, b), zeros_like(g)),  // the mask (x > 0) is flat in x
    .domain = {.orders = 1, .flat_inputs = 0b10}});

const OpDef& kSigmoidBackward = detail::define_op({
    .name = "sigmoid_backward", .kind = OpKind::composite, .tags = kPointwiseBackward, .dtypes = Family::float_only,
    .n_inputs = 2, .prepare = detail::rules::same_shape_float,
    .decompose = [](const OpCall& c) { return std::vector<Tensor>{c.in(0) * c.in(1) * (1.0 - c.in(1))}; },
    .derivative = STRATA_PARTIALS(sigmoid_backward(g, b), g * a * (1.0 - b * 2.0)),
    .domain = {.lo = 0.05, .hi = 0.95}});  // y = sigmoid(x)

const OpDef& kTanhBackward = detail::define_op({
    .name = "tanh_backward", .kind = OpKind::composite, .tags = kPointwiseBackward, .dtypes = Family::float_only,
    .n_inputs = 2, .prepare = detail::rules::same_shape_float,
    .decompose = [](const OpCall& c) { return std::vector<Tensor>{c.in(0) * (1.0 - c.in(1) * c.in(1))}; },
    .derivative = STRATA_PARTIALS(tanh_backward(g, b), g * a * b * -2.0),
    .domain = {.lo = -0.95, .hi = 0.95}});  // y = tanh(x)

const OpDef& kGeluBackward = detail::define_op({
    .name = "gelu_backward", .kind = OpKind::composite, .tags = kPointwiseBackward, .dtypes = Family::float_only,
    .autocast = kFp32, .n_inputs = 2, .prepare = detail::rules::same_shape_float,
    .decompose = [](const OpCall& c) {
      const Tensor& x = c.in(1);
      return std::vector<Tensor>{c.in(0) * (normal_cdf(x) + x * normal_pdf(x))};
    },
    .derivative = STRATA_PARTIALS(gelu_backward(g, b), g * a * gelu_second(b))});

// Below, c.in(0) is the op's grad input and g the gradient of its output.
const OpDef& kSoftmaxBackward = detail::define_op({
    .name = "softmax_backward", .kind = OpKind::composite, .tags = tag::along_dim | tag::backward,
    .attrs = kDimAttrs, .dtypes = Family::float_only, .autocast = kFp32, .n_inputs = 2, .prepare = along_dim_rule,
    .decompose = [](const OpCall& c) {
      const Tensor& g = c.in(0);
      const Tensor& y = c.in(1);
      return std::vector<Tensor>{y * (g - sum(g * y, {dim_of(c)}, true))};
    },
    .derivative = {.vjp = STRATA_VJP_EACH(
                       STRATA_INPUT_GRAD(softmax_backward(g, c.in(1), dim_of(c))),  // symmetric in grad
                       STRATA_INPUT_GRAD(softmax_backward_dy_transposed(c.in(0), c.in(1), g, dim_of(c)))),
                   .jvp = STRATA_JVP(STRATA_TANGENT(softmax_backward(t, c.in(1), dim_of(c))),
                                     STRATA_TANGENT(softmax_backward_dy(c.in(0), c.in(1), t, dim_of(c))))},
    .domain = {.lo = 0.01, .hi = 1.0}});  // y = softmax(x)

const OpDef& kLogSoftmaxBackward = detail::define_op({
    .name = "log_softmax_backward", .kind = OpKind::composite, .tags = tag::along_dim | tag::backward,
    .attrs = kDimAttrs, .dtypes = Family::float_only, .autocast = kFp32, .n_inputs = 2, .prepare = along_dim_rule,
    .decompose = [](const OpCall& c) {
      const Tensor& g = c.in(0);
      return std::vector<Tensor>{g - exp(c.in(1)) * sum(g, {dim_of(c)}, true)};
    },
    .derivative = {.vjp = STRATA_VJP_EACH(STRATA_INPUT_GRAD(log_softmax_jvp(g, c.in(1), dim_of(c))),  // transposed
                                          STRATA_INPUT_GRAD(-g * exp(c.in(1)) * sum(c.in(0), {dim_of(c)}, true))),
                   .jvp = STRATA_JVP(STRATA_TANGENT(log_softmax_backward(t, c.in(1), dim_of(c))),
                                     STRATA_TANGENT(-t * exp(c.in(1)) * sum(c.in(0), {dim_of(c)}, true)))},
    .domain = {.lo = -4.0, .hi = -0.05}});  // y = log_softmax(x)

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
