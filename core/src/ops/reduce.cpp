// reduce.cpp — reductions over dimensions.
//
// Kernels see the keepdim-shaped output (reduced dims of size 1) and the
// sorted `dims` attribute; the public functions drop the dims afterwards
// unless keepdim is set. Derivative rules see those keepdim-shaped outputs,
// so a gradient broadcasts back over the input.
#include "derivatives.hpp"
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {

using namespace detail::op_vocabulary;

void keepdim_shape(OpCall& call) {
  Shape shape(call.in(0).shape().begin(), call.in(0).shape().end());
  for (int64_t d : call.attr_dims("dims", call.in(0).dim())) shape[static_cast<size_t>(d)] = 1;
  call.out().set_shape(shape);
}

/// sum, prod: integers and bool accumulate in i64; floating and complex
/// dtypes keep theirs.
void accumulate_rule(OpCall& call) {
  if (!is_differentiable(call.in(0).dtype())) detail::cast_input(call, 0, DType::i64);
  call.out().dtype = call.in(0).dtype();
  keepdim_shape(call);
}

void extremum_rule(OpCall& call) {
  detail::rules::require_dtype(call, call.in(0).dtype() != DType::boolean, "a numeric tensor, found bool");
  call.out().dtype = call.in(0).dtype();
  keepdim_shape(call);
}

void arg_rule(OpCall& call) {
  extremum_rule(call);
  call.out().dtype = DType::i64;
}

void mean_rule(OpCall& call) {
  if (!is_differentiable(call.in(0).dtype())) detail::cast_input(call, 0, DType::f32);
  call.out().dtype = call.in(0).dtype();
  keepdim_shape(call);
}

std::vector<Tensor> mean_decomposition(const OpCall& call) {
  const auto& dims = call.attr_ints("dims");
  int64_t count = 1;
  for (int64_t d : dims) count *= call.in(0).size(d);
  return {sum(call.in(0), dims, true) / static_cast<double>(count)};
}

// --- derivatives: a VJP broadcasts the keepdim-shaped gradient over the
// input, weighted by d out / dx; a JVP is the weighted sum of the tangent.
const std::vector<int64_t>& reduced_dims(const GradContext& c) { return c.attr_ints("dims"); }
Tensor weighted_sum(const Tensor& t, const Tensor& weights, const GradContext& c) {
  return sum(t * weights, reduced_dims(c), true);
}

/// d prod / dx, right with zeros: prod/x when the reduced slice has no zero;
/// with one zero, the product of the others at the zero and 0 elsewhere; with
/// more, 0. (Differentiating this again is exact unless a slice holds two or
/// more zeros, where the second derivative between zeros comes out 0.)
Tensor prod_partials(const GradContext& c) {
  const Tensor& x = c.in(0);
  Tensor is_zero = eq(x, scalar(x, 0.0));
  Tensor x_or_one = where(is_zero, scalar(x, 1.0), x);
  Tensor p = prod(x_or_one, reduced_dims(c), true);  // product of the non-zero elements
  Tensor n_zero = sum(is_zero, reduced_dims(c), true);
  return where(eq(n_zero, scalar(n_zero, 0.0)), p / x_or_one,
               where(logical_and(eq(n_zero, scalar(n_zero, 1.0)), is_zero), p, scalar(x, 0.0)));
}

/// max, min: 1 / (number of ties) where x equals the result, else 0; the
/// gradient is shared evenly among ties (PyTorch's amax/amin).
Tensor extremum_partials(const GradContext& c) {
  const Tensor& x = c.in(0);
  Tensor hit = where(eq(x, c.out()), scalar(x, 1.0), scalar(x, 0.0));
  return hit / sum(hit, reduced_dims(c), true);
}

double mean_scale(const GradContext& c) {
  int64_t count = 1;
  for (int64_t d : reduced_dims(c)) count *= c.in(0).size(d);
  return 1.0 / static_cast<double>(count);
}

// sum, prod and mean take complex tensors (docs/complex.md); prod is
// holomorphic, so its VJP conjugates the partials.
const OpDef& kSum = define_op({.name = "sum",
                               .tags = tag::reduction,
                               .attrs = kDimsAttrs,
                               .dtypes = detail::DTypeFamily::accumulate,
                               .autocast = detail::AutocastCategory::fp32,
                               .takes_complex = true,
                               .prepare = accumulate_rule,
                               .empty_fill = 0.0,
                               .derivative = {.vjp = STRATA_VJP(g.expand(c.in(0).sizes())),
                               .jvp = STRATA_JVP(STRATA_TANGENT(sum(t, reduced_dims(c), true)))},
                               .vjp_reads_inputs = 0,  // its shape only
                               .vjp_reads_outputs = 0});
const OpDef& kProd = define_op({.name = "prod",
                                .tags = tag::reduction,
                                .attrs = kDimsAttrs,
                                .dtypes = detail::DTypeFamily::accumulate,
                                .autocast = detail::AutocastCategory::fp32,
                                .takes_complex = true,
                                .prepare = accumulate_rule,
                                .empty_fill = 1.0,
                                .derivative = {.vjp = STRATA_VJP(g * conj(prod_partials(c))),
                                               .jvp = STRATA_JVP(STRATA_TANGENT(weighted_sum(t, prod_partials(c), c)))},
                                .domain = {.lo = 0.5, .hi = 1.5}});  // products of many terms stay in range
const OpDef& kMax = define_op({.name = "max",
                               .tags = tag::reduction,
                               .attrs = kDimsAttrs,
                               .dtypes = detail::DTypeFamily::numeric,
                               .prepare = extremum_rule,
                               .derivative = {.vjp = STRATA_VJP(g * extremum_partials(c)),
                                              .jvp = STRATA_JVP(
                                                  STRATA_TANGENT(weighted_sum(t, extremum_partials(c), c)))},
                               .domain = {.orders = 1}});  // kinks where elements tie
const OpDef& kMin = define_op({.name = "min",
                               .tags = tag::reduction,
                               .attrs = kDimsAttrs,
                               .dtypes = detail::DTypeFamily::numeric,
                               .prepare = extremum_rule,
                               .derivative = {.vjp = STRATA_VJP(g * extremum_partials(c)),
                                              .jvp = STRATA_JVP(
                                                  STRATA_TANGENT(weighted_sum(t, extremum_partials(c), c)))},
                               .domain = {.orders = 1}});  // kinks where elements tie
// Not differentiable; drawn from integers, so that ties pick the first.
constexpr detail::TestDomain kTies{.lo = -3.0, .hi = 3.0, .grid = 1.0, .orders = 0};
const OpDef& kArgmax = define_op({.name = "argmax", .tags = tag::reduction, .attrs = kDimsAttrs,
                                  .dtypes = detail::DTypeFamily::index, .prepare = arg_rule, .domain = kTies});
const OpDef& kArgmin = define_op({.name = "argmin", .tags = tag::reduction, .attrs = kDimsAttrs,
                                  .dtypes = detail::DTypeFamily::index, .prepare = arg_rule, .domain = kTies});
const OpDef& kMean = define_op({.name = "mean",
                                .kind = OpKind::composite,
                                .tags = tag::reduction,
                                .attrs = kDimsAttrs,
                                .dtypes = detail::DTypeFamily::floating,
                                .autocast = detail::AutocastCategory::fp32,
                                .takes_complex = true,
                                .prepare = mean_rule,
                                .decompose = mean_decomposition,
                                .empty_fill = std::numeric_limits<double>::quiet_NaN(),
                                // The VJP's result is a view (expand), not a new tensor.
                                .derivative = {.vjp = STRATA_VJP((g * mean_scale(c)).expand(c.in(0).sizes())),
                                               .jvp = STRATA_JVP(STRATA_TANGENT(mean(t, reduced_dims(c), true)))},
                                .vjp_reads_inputs = 0,
                                .vjp_reads_outputs = 0});

/// Runs a reduction over normalised dims and drops them unless keepdim.
Tensor reduce(const OpDef& op, const Tensor& x, const Shape& dims, bool keepdim) {
  if (!x.defined()) throw Error(std::string(op.name) + ": undefined tensor");
  std::vector<int64_t> norm = detail::normalize_dims(dims, x.dim(), op.name);
  if (x.dim() == 0) {  // a scalar reduces as a one-element vector
    Attrs attrs{Attr::list("dims", {0})};
    return detail::dispatch1(op, {x.reshape({1})}, &attrs).reshape({});
  }
  Attrs attrs{Attr::list("dims", norm)};
  Tensor out = detail::dispatch1(op, {x}, &attrs);
  if (keepdim) return out;
  for (auto it = norm.rbegin(); it != norm.rend(); ++it) out = out.squeeze(*it);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(kSum, x, dims, keepdim); }
Tensor prod(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(kProd, x, dims, keepdim); }
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(kMax, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(kMin, x, dims, keepdim); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) { return reduce(kMean, x, dims, keepdim); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return reduce(kArgmax, x, {dim}, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return reduce(kArgmin, x, {dim}, keepdim); }

}  // namespace strata
