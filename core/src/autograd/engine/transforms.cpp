// transforms.cpp — grad, jvp, vjp, jacobians, Hessian products, gradcheck.
#include "autograd/engine/differentiate.hpp"
#include "autograd/engine/nodes.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/transforms.hpp>
#include <strata/vmap.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <complex>
#include <cstdio>
#include <vector>

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

std::vector<double> real_parts(const std::vector<std::complex<double>>& values) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i].real();
  return out;
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

namespace detail {
Tensor unit_basis(std::span<const int64_t> shape, DType dtype, Device device) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const TensorOptions options{.dtype = DType::i64, .device = device};
  Tensor eye = cast(eq(arange(n, options).unsqueeze(1), arange(n, options).unsqueeze(0)), dtype);
  Shape rows(shape.begin(), shape.end());
  rows.insert(rows.begin(), n);
  return eye.reshape(rows);
}
}  // namespace detail

namespace {
/// What vmap gives the batched jacobians: a tangent or gradient that does
/// not depend on the basis (f constant in x) is repeated over the lanes.
constexpr VmapOptions kJacobianLanes{.expand_unbatched_outputs = true};
}  // namespace

Tensor jacfwd(const Fn& f, const Tensor& x) {
  // One batched forward pass: the jvp along every unit tangent at once.
  Shape out_shape;
  Tensor columns = vmap([&](const Tensor& e) {
    auto [y, t] = jvp(f, x, e);
    out_shape = y.sizes();
    return t;
  }, 0, -1, kJacobianLanes)(detail::unit_basis(x.shape(), x.dtype(), x.device()));  // y.shape + [numel(x)]
  for (int64_t s : x.shape()) out_shape.push_back(s);
  return columns.reshape(out_shape);
}

Tensor hvp(const Fn& f, const Tensor& x, const Tensor& v, HvpMode mode) {
  if (mode == HvpMode::forward_over_reverse) return jvp(grad(f), x, v).second;
  return grad([&](const Tensor& xx) { return sum(grad(f)(xx) * v); })(x);
}

// --- over lists of tensors -------------------------------------------------------

namespace {
void require_defined(const std::vector<Tensor>& xs, const char* what) {
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].defined()) throw ValueError(std::string(what) + ": input " + std::to_string(k) + " is undefined");
  }
}
void require_pairs(const std::vector<Tensor>& xs, const std::vector<Tensor>& vs, const char* what) {
  if (vs.size() != xs.size()) {
    throw ValueError(std::string(what) + ": " + std::to_string(vs.size()) + " directions for " +
                     std::to_string(xs.size()) + " inputs");
  }
  for (size_t k = 0; k < xs.size(); ++k) {
    if (vs[k].defined() && vs[k].sizes() != xs[k].sizes()) {
      throw ShapeError(std::string(what) + ": direction " + std::to_string(k) + " has shape " +
                       detail::shape_string(vs[k].shape()) + ", input " + std::to_string(k) + " " +
                       detail::shape_string(xs[k].shape()));
    }
  }
}

/// f at aliases of xs watched by a fresh higher-order tape (so transforms
/// nest), and the gradient of `target(outputs)` with respect to them.
template <typename Target>
std::pair<std::vector<Tensor>, std::vector<Tensor>> taped(const ListFn& f, const std::vector<Tensor>& xs,
                                                          Target&& target) {
  GradientTape tape({.persistent = false, .higher_order = true, .unconnected = Unconnected::zero});
  std::vector<Tensor> watched;
  watched.reserve(xs.size());
  for (const Tensor& x : xs) {
    watched.push_back(detail::tracked_alias(x));
    tape.watch(watched.back());
  }
  std::vector<Tensor> outputs = f(watched);
  Tensor y = target(outputs);
  if (!y.defined()) return {std::move(outputs), std::vector<Tensor>(xs.size())};
  std::vector<Tensor> grads = tape.gradient(y, watched);
  return {std::move(outputs), std::move(grads)};
}
}  // namespace

std::vector<Tensor> grad(const ScalarFn& f, const std::vector<Tensor>& xs) {
  require_defined(xs, "grad");
  return taped([&](const std::vector<Tensor>& w) { return std::vector<Tensor>{f(w)}; }, xs,
               [](const std::vector<Tensor>& out) { return out[0]; })
      .second;
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> jvp(const ListFn& f, const std::vector<Tensor>& xs,
                                                        const std::vector<Tensor>& vs) {
  require_defined(xs, "jvp");
  require_pairs(xs, vs, "jvp");
  std::vector<Tensor> outputs;
  std::vector<Tensor> tangents = detail::pushforward(f, xs, vs, &outputs);
  return {std::move(outputs), std::move(tangents)};
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> vjp(const ListFn& f, const std::vector<Tensor>& xs,
                                                        const std::vector<Tensor>& vs) {
  require_defined(xs, "vjp");
  auto result = taped(f, xs, [&](const std::vector<Tensor>& out) {
    if (out.size() != vs.size()) {
      throw ValueError("vjp: " + std::to_string(vs.size()) + " cotangents for " + std::to_string(out.size()) +
                       " outputs");
    }
    return detail::inner_product(out, vs);
  });
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!result.second[k].defined()) result.second[k] = zeros_like(xs[k]);
  }
  return result;
}

std::vector<Tensor> hvp(const ScalarFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs,
                        HvpMode mode) {
  require_defined(xs, "hvp");
  require_pairs(xs, vs, "hvp");
  auto gradient = [&](const std::vector<Tensor>& w) { return grad(f, w); };
  if (mode == HvpMode::forward_over_reverse) return jvp(gradient, xs, vs).second;
  return grad([&](const std::vector<Tensor>& w) { return detail::inner_product(gradient(w), vs); }, xs);
}

Tensor vhv(const Fn& f, const Tensor& x, const Tensor& v) { return sum(v * hvp(f, x, v)); }

Tensor hessian(const Fn& f, const Tensor& x) { return jacfwd(grad(f), x); }

Tensor hessian_diagonal(const Fn& f, const Tensor& x) {
  // One batched pass of e_iᵀ H e_i over the unit vectors (H is never stored).
  Tensor diag = vmap([&](const Tensor& e) { return sum(hvp(f, x, e) * e); }, 0, 0, kJacobianLanes)(
      detail::unit_basis(x.shape(), x.dtype(), x.device()));
  return diag.reshape(x.sizes());
}

Tensor laplacian(const Fn& f, const Tensor& x) { return sum(hessian_diagonal(f, x)); }

GradcheckResult gradcheck(const Fn& f, const Tensor& x, const GradcheckOptions& o) {
  GradcheckResult r;
  const bool complex_x = is_complex(x.dtype());
  // Complex values throughout: a real x is the case of imaginary parts 0,
  // perturbed along the real axis only.
  std::vector<std::complex<double>> a = grad(f)(x).detach().to_vector<std::complex<double>>();
  std::vector<std::complex<double>> base = x.to_vector<std::complex<double>>();
  auto eval = [&](size_t i, std::complex<double> delta) {
    std::vector<std::complex<double>> moved = base;
    moved[i] += delta;
    // No NoGradGuard: f may take gradients itself (checking a gradient's
    // gradient); xm is not watched, so nothing outside f records it.
    const TensorOptions options{.dtype = x.dtype(), .device = x.device()};
    Tensor xm = complex_x ? from_data(std::span<const std::complex<double>>(moved), x.sizes(), options)
                          : from_data(std::span<const double>(real_parts(moved)), x.sizes(), options);
    Tensor y = f(xm);
    if (is_complex(y.dtype())) {
      throw DTypeError("gradcheck: f must return a real scalar, got " + type_string(y) +
                       " (differentiate real(), abs() or another real function of it)");
    }
    return y.item<double>();
  };
  // The derivative along `direction` (1, or i for the imaginary part).
  auto derivative = [&](size_t i, std::complex<double> direction) {
    const std::complex<double> h = o.eps * direction;
    return o.four_point ? (-eval(i, 2.0 * h) + 8 * eval(i, h) - 8 * eval(i, -h) + eval(i, -2.0 * h)) / (12 * o.eps)
                        : (eval(i, h) - eval(i, -h)) / (2 * o.eps);
  };
  auto compare = [&](size_t i, bool imaginary, double analytic, double numeric) {
    double error = std::fabs(numeric - analytic);
    if (!(error <= o.atol + o.rtol * std::fabs(numeric))) r.ok = false;
    if (error > r.max_error || r.worst_index < 0) {
      r.max_error = error;
      r.worst_index = static_cast<int64_t>(i);
      r.worst_imaginary = imaginary;
      r.analytic = analytic;
      r.numeric = numeric;
    }
  };
  for (size_t i = 0; i < base.size(); ++i) {
    compare(i, false, a[i].real(), derivative(i, 1.0));
    if (complex_x) compare(i, true, a[i].imag(), derivative(i, std::complex<double>(0.0, 1.0)));
  }
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s: worst element %lld%s: analytic %.10g, numeric %.10g, |error| %.3g",
                r.ok ? "gradcheck passed" : "gradcheck FAILED", static_cast<long long>(r.worst_index),
                !complex_x ? "" : r.worst_imaginary ? " (imaginary part)" : " (real part)", r.analytic, r.numeric,
                r.max_error);
  r.message = buf;
  return r;
}

}  // namespace strata
