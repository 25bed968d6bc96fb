// transforms.cpp — grad, jvp, vjp, jacobians, Hessian products, gradcheck.
#include "differentiate.hpp"
#include "nodes.hpp"

#include "../tensor_impl.hpp"

#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/transforms.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <cstdio>

namespace strata {

namespace detail {
Tensor tracked_alias(const Tensor& x);  // views.cpp
}  // namespace detail

namespace {

/// Runs f under a fresh tape watching (an alias of) x; the gradient is
/// recorded on enclosing tapes so that transforms nest.
std::pair<Tensor, Tensor> value_and_gradient(const Fn& f, const Tensor& x, const Tensor& cotangent) {
  GradientTape tape({.persistent = false, .higher_order = true, .unconnected = Unconnected::zero});
  Tensor xw = detail::tracked_alias(x);
  tape.watch(xw);
  Tensor y = f(xw);
  Tensor g = tape.gradient(y, {xw}, cotangent)[0];
  return {y, g};
}

/// The i-th basis tensor shaped like x.
Tensor basis(const Tensor& x, int64_t i) {
  Tensor e = zeros({x.numel()}, {.dtype = x.dtype(), .device = x.device()});
  e.slice(0, i, i + 1).copy_(ones({1}, {.dtype = x.dtype(), .device = x.device()}));
  return e.reshape(x.sizes());
}

}  // namespace

Fn grad(Fn f) {
  return [f = std::move(f)](const Tensor& x) { return value_and_gradient(f, x, Tensor()).second; };
}

std::function<std::pair<Tensor, Tensor>(const Tensor&)> value_and_grad(Fn f) {
  return [f = std::move(f)](const Tensor& x) { return value_and_gradient(f, x, Tensor()); };
}

Fn nth_grad(Fn f, int n) {
  if (n < 0) throw Error("nth_grad: order must be non-negative, got " + std::to_string(n));
  Fn g = std::move(f);
  for (int k = 0; k < n; ++k) {
    Fn previous = g;
    g = [previous, first = k == 0](const Tensor& x) {
      return value_and_gradient([&](const Tensor& xx) { return first ? previous(xx) : sum(previous(xx)); }, x,
                                Tensor())
          .second;
    };
  }
  return g;
}

std::pair<Tensor, Tensor> vjp(const Fn& f, const Tensor& x, const Tensor& v) { return value_and_gradient(f, x, v); }

std::pair<Tensor, Tensor> jvp(const Fn& f, const Tensor& x, const Tensor& v) {
  if (v.sizes() != x.sizes()) {
    throw ShapeError("jvp: tangent shape " + detail::shape_string(v.shape()) + " differs from input shape " +
                     detail::shape_string(x.shape()));
  }
  std::vector<Tensor> y;
  std::vector<Tensor> t = detail::pushforward([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; },
                                              {x}, {v}, &y);
  return {y[0], t[0]};
}

Tensor jacrev(const Fn& f, const Tensor& x) {
  GradientTape tape({.persistent = true, .higher_order = true, .unconnected = Unconnected::zero});
  Tensor xw = detail::tracked_alias(x);
  tape.watch(xw);
  Tensor y = f(xw);
  return tape.jacobian(y, xw);
}

Tensor jacfwd(const Fn& f, const Tensor& x) {
  std::vector<Tensor> columns;
  Shape out_shape;
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto [y, t] = jvp(f, x, basis(x, i));
    out_shape = y.sizes();
    columns.push_back(t.reshape({-1}));
  }
  Tensor j = stack(columns, 1);  // [numel(y), numel(x)]
  Shape shape = out_shape;
  for (int64_t s : x.shape()) shape.push_back(s);
  return j.reshape(shape);
}

Tensor hvp(const Fn& f, const Tensor& x, const Tensor& v, HvpMode mode) {
  if (mode == HvpMode::forward_over_reverse) return jvp(grad(f), x, v).second;
  return grad([&](const Tensor& xx) { return sum(grad(f)(xx) * v); })(x);
}

Tensor vhv(const Fn& f, const Tensor& x, const Tensor& v) { return sum(v * hvp(f, x, v)); }

Tensor hessian(const Fn& f, const Tensor& x) { return jacfwd(grad(f), x); }

Tensor hessian_diagonal(const Fn& f, const Tensor& x) {
  std::vector<Tensor> diag;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Tensor e = basis(x, i);
    diag.push_back(sum(hvp(f, x, e) * e).reshape({1}));
  }
  return cat(diag, 0).reshape(x.sizes());
}

Tensor laplacian(const Fn& f, const Tensor& x) { return sum(hessian_diagonal(f, x)); }

GradcheckResult gradcheck(const Fn& f, const Tensor& x, const GradcheckOptions& o) {
  GradcheckResult r;
  Tensor analytic = grad(f)(x).detach();
  std::vector<double> a = analytic.to_vector<double>();
  std::vector<double> base = x.to_vector<double>();
  auto eval = [&](size_t i, double delta) {
    std::vector<double> moved = base;
    moved[i] += delta;
    // No NoGradGuard: f may take gradients itself (checking a gradient's
    // gradient); xm is not watched, so nothing outside f records it.
    Tensor xm = from_data(std::span<const double>(moved), x.sizes(), {.dtype = x.dtype(), .device = x.device()});
    return f(xm).item<double>();
  };
  for (size_t i = 0; i < base.size(); ++i) {
    double h = o.eps;
    double numeric = o.four_point
                         ? (-eval(i, 2 * h) + 8 * eval(i, h) - 8 * eval(i, -h) + eval(i, -2 * h)) / (12 * h)
                         : (eval(i, h) - eval(i, -h)) / (2 * h);
    double error = std::fabs(numeric - a[i]);
    bool bad = !(error <= o.atol + o.rtol * std::fabs(numeric));
    if (bad && (r.ok || error > r.max_error)) {
      r.ok = false;
    }
    if (error > r.max_error || r.worst_index < 0) {
      r.max_error = error;
      r.worst_index = static_cast<int64_t>(i);
      r.analytic = a[i];
      r.numeric = numeric;
    }
  }
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s: worst element %lld: analytic %.10g, numeric %.10g, |error| %.3g",
                r.ok ? "gradcheck passed" : "gradcheck FAILED", static_cast<long long>(r.worst_index), r.analytic,
                r.numeric, r.max_error);
  r.message = buf;
  return r;
}

}  // namespace strata
