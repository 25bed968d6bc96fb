// amp.cpp — amp_unscale, the op of mixed-precision training: one pass over
// a gradient that multiplies it by the inverse loss scale and reports
// whether it held an Inf or NaN (GradScaler, core/src/autograd/autocast.cpp).
#include "runtime/dispatch/op.hpp"

#include <strata/amp.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace detail {
namespace {

namespace tag = detail::op_tag;

void unscale_rule(OpCall& call) {
  const Tensor& g = call.in(0);
  if (!is_floating(g.dtype())) {
    throw DTypeError(call.describe() + ": gradients must be floating, found " + std::string(dtype_name(g.dtype())));
  }
  if (call.in(1).numel() != 1) throw ShapeError(call.describe() + ": inv_scale must have one element");
  cast_input(call, 1, DType::f32);  // through cast_input: Graph::load runs this rule shape-only
  call.inputs[1] = call.in(1).reshape({});
  call.n_outputs = 2;
  call.out(0).dtype = g.dtype();
  call.out(0).set_shape(g.shape());
  call.out(1).dtype = DType::f32;
  call.out(1).rank = 0;
}

std::vector<Tensor> unscale_decompose(const OpCall& call) {
  const Tensor& g = call.in(0);
  Tensor y = g * cast(call.in(1), g.dtype());
  // NaN and Inf both turn g * 0 into NaN, and a NaN sum is unequal to itself.
  Tensor probe = sum(cast(g, DType::f32) * 0.0);
  return {y, cast(ne(probe, probe), DType::f32)};
}

const OpDef& kAmpUnscale = define_op({.name = "amp_unscale",
                                      .kind = OpKind::composite,
                                      .tags = tag::optimizer,
                                      .dtypes = detail::DTypeFamily::float_only,
                                      .autocast = AutocastCategory::fp32,
                                      .n_inputs = 2,
                                      .n_outputs = 2,
                                      .prepare = unscale_rule,
                                      .decompose = unscale_decompose});

}  // namespace
}  // namespace detail

std::pair<Tensor, Tensor> amp_unscale(const Tensor& grad, const Tensor& inv_scale) {
  std::vector<Tensor> r = detail::dispatch(detail::kAmpUnscale, {grad, inv_scale});
  return {r[0], r[1]};
}

}  // namespace strata
