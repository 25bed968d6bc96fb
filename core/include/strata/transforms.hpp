// transforms.hpp — derivative transforms of functions (JAX/functorch style).
//
// All are built on GradientTape (reverse mode) and forward-mode tangents, so
// they nest: grad(grad(f)), jvp of a gradient (forward-over-reverse), and so
// on; every nesting gets a fresh derivative level, so perturbations of
// different levels never mix. Operator forms (hvp, jvp, vjp, vhv) never
// build a full Jacobian or Hessian.
#pragma once

#include <strata/tensor.hpp>

#include <functional>
#include <vector>
#include <utility>

namespace strata {

using Fn = std::function<Tensor(const Tensor&)>;

/// x ↦ ∇f(x) for a scalar-valued f.
Fn grad(Fn f);
/// x ↦ (f(x), ∇f(x)).
std::function<std::pair<Tensor, Tensor>(const Tensor&)> value_and_grad(Fn f);
/// n-th derivative: grad applied n times, each to the sum of the previous
/// result — for f applied elementwise, the elementwise n-th derivative.
Fn nth_grad(Fn f, int n);

/// (f(x), vᵀ·J_f(x)): reverse mode.
std::pair<Tensor, Tensor> vjp(const Fn& f, const Tensor& x, const Tensor& v);
/// (f(x), J_f(x)·v): forward mode.
std::pair<Tensor, Tensor> jvp(const Fn& f, const Tensor& x, const Tensor& v);

/// Jacobian, shape f(x).shape + x.shape, by rows (reverse) or columns (forward).
Tensor jacrev(const Fn& f, const Tensor& x);
Tensor jacfwd(const Fn& f, const Tensor& x);

enum class HvpMode { forward_over_reverse, reverse_over_reverse };
/// H_f(x)·v without forming H.
Tensor hvp(const Fn& f, const Tensor& x, const Tensor& v, HvpMode mode = HvpMode::forward_over_reverse);
/// vᵀ·H_f(x)·v, the directional second derivative.
Tensor vhv(const Fn& f, const Tensor& x, const Tensor& v);
/// The full Hessian, shape x.shape + x.shape (one hvp per element of x).
Tensor hessian(const Fn& f, const Tensor& x);
/// diag(H_f(x)), shaped like x (one hvp per element; H is never stored).
Tensor hessian_diagonal(const Fn& f, const Tensor& x);
/// trace(H_f(x)).
Tensor laplacian(const Fn& f, const Tensor& x);

// --- over lists of tensors (a model's parameters, unflattened) ----------------
//
// The same transforms for functions of several tensors: no need to flatten
// parameters into one vector (whose slices cost a full-size gradient each).
// They cost what the equivalent tape program costs (bench_autograd's
// "Transforms" benchmarks hold them to it).

/// A scalar function of several tensors (a loss of a model's parameters).
using ScalarFn = std::function<Tensor(const std::vector<Tensor>&)>;
/// A function of several tensors to several.
using ListFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// ∇f at xs: one gradient per input, shaped like it (zeros where f does not
/// depend on it).
std::vector<Tensor> grad(const ScalarFn& f, const std::vector<Tensor>& xs);
/// (f(xs), J_f(xs)·vs): forward mode; vs[k] shaped like xs[k] (undefined: zero).
std::pair<std::vector<Tensor>, std::vector<Tensor>> jvp(const ListFn& f, const std::vector<Tensor>& xs,
                                                        const std::vector<Tensor>& vs);
/// (f(xs), vsᵀ·J_f(xs)): reverse mode; one cotangent per output of f.
std::pair<std::vector<Tensor>, std::vector<Tensor>> vjp(const ListFn& f, const std::vector<Tensor>& xs,
                                                        const std::vector<Tensor>& vs);
/// H_f(xs)·vs, the Hessian of a scalar f of several tensors applied to the
/// direction vs (one tensor per input), without forming H.
std::vector<Tensor> hvp(const ScalarFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs,
                        HvpMode mode = HvpMode::forward_over_reverse);

/// Numerical gradient check of a scalar function against finite differences.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool four_point = false;  // 4-point (O(eps^4)) instead of central differences
};
struct GradcheckResult {
  bool ok = true;
  int64_t worst_index = -1;  // flat index into x of the largest error
  /// Complex x: whether the largest error is in the imaginary part of the
  /// gradient (the derivative along the imaginary axis) rather than the real.
  bool worst_imaginary = false;
  double analytic = 0.0;
  double numeric = 0.0;
  double max_error = 0.0;
  std::string message;  // describes the worst element
};
/// Compares ∇f(x) with finite differences of f, a real scalar function (use
/// f64 or c128 inputs). For a complex x, each element's real and imaginary
/// parts are perturbed separately and the gradient compared with PyTorch's
/// convention, ∂f/∂Re(x) + i·∂f/∂Im(x) (docs/complex.md).
GradcheckResult gradcheck(const Fn& f, const Tensor& x, const GradcheckOptions& options = {});

}  // namespace strata
