// implicit.hpp — implicit differentiation: solutions of fixed-point and
// root-finding problems whose derivatives with respect to their parameters
// come from the implicit function theorem, not from unrolling the solver.
//
//   // x* = f(x*, θ): the square root of a as the fixed point of Heron's map.
//   Tensor a = ...;
//   ImplicitSolution s = fixed_point(
//       [](const Tensor& x, const std::vector<Tensor>& p) { return (x + p[0] / x) * 0.5; },
//       ones_like(a), {a});
//   Tensor g = tape.gradient(sum(s.x), {a})[0];  // 1 / (2 sqrt a), to the solver's tolerance
//
// The solver iterates with recording off (memory does not grow with the
// iterations). Writing the problem as a residual R(x, θ) = 0 (R = x − f for
// fixed_point, R = g for root) with M = ∂R/∂x at the solution, the VJP with
// a cotangent v solves Mᵀ w = v by conjugate gradient or GMRES, using only
// VJPs of R (a tape over one evaluation of R at the solution), and returns
// θ̄ = −(∂R/∂θ)ᵀ w. The JVP solves M u = −(∂R/∂θ)·θ' with JVPs of R.
//
// The linear solves are custom functions themselves, whose derivatives are
// again linear solves (the transposed system), so solutions are
// differentiable to any order in every mode (reverse, forward, nested),
// through Strata's ordinary levels, provided f or g is written with Strata
// ops (docs/custom-derivatives.md).
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata {

/// How the linear systems of the derivatives are solved (matrix-free).
enum class LinearSolver {
  gmres,               // any non-singular system (the default)
  conjugate_gradient,  // symmetric positive definite systems only (e.g. root() of a convex objective's gradient)
};

/// What an unconverged solve does.
enum class OnNonconvergence {
  error,   // throw Error naming the solver, the iterations and the residual reached (the default)
  accept,  // return the last iterate; ImplicitSolution::converged is false (the derivatives' linear
           // solves, which have no result to flag, log a warning instead)
};

struct ImplicitOptions {
  /// Converged when ‖f(x) − x‖₂ ≤ tolerance · max(1, ‖x‖₂) (fixed_point) or
  /// ‖g(x)‖₂ ≤ tolerance · max(1, ‖g(x0)‖₂) (root). Default: 1e-10 for f64
  /// x0, 1e-5 for lower precisions.
  std::optional<double> tolerance{};
  int64_t max_iterations = 1000;
  LinearSolver linear_solver = LinearSolver::gmres;
  /// Relative residual ‖b − A x‖ / ‖b‖ at which a linear solve stops.
  /// Default: 1e-12 for f64 x0, 1e-6 for lower precisions.
  std::optional<double> linear_tolerance{};
  int64_t linear_max_iterations = 1000;
  int64_t gmres_restart = 50;
  OnNonconvergence on_nonconvergence = OnNonconvergence::error;
};

/// How one lane of a solve under vmap ended (ImplicitSolution::lanes).
struct ImplicitLane {
  int64_t iterations = 0;
  double residual = 0.0;
  bool converged = false;
};

/// A solution and how it was reached. Converts to its tensor.
struct ImplicitSolution {
  /// The solution: differentiable with respect to the parameters (not x0).
  Tensor x;
  /// Under vmap: the slowest lane's, the largest residual, and converged
  /// only when every lane converged.
  int64_t iterations = 0;  // applications of f (fixed_point) or Newton steps (root)
  double residual = 0.0;   // ‖f(x) − x‖₂ or ‖g(x)‖₂ at the end (absolute)
  bool converged = false;
  /// Under vmap, each lane's own (in lane order; nested vmaps flattened,
  /// outermost slowest); empty otherwise.
  std::vector<ImplicitLane> lanes;
  operator const Tensor&() const { return x; }
};

/// f(x, params) or g(x, params): x has the shape of x0, the result too.
/// Pass every tensor the solution is to be differentiated with respect to
/// in `params`: tensors the function captures are constants to it.
using ImplicitFn = std::function<Tensor(const Tensor& x, const std::vector<Tensor>& params)>;

/// x* = f(x*, params), by the iteration x ← f(x, params) from x0. Its
/// derivatives solve (I − ∂f/∂x)ᵀ w = v (reverse) or (I − ∂f/∂x) u = b
/// (forward). ValueError when f returns another shape than x0.
ImplicitSolution fixed_point(const ImplicitFn& f, const Tensor& x0, const std::vector<Tensor>& params,
                             const ImplicitOptions& options = {});

/// g(x*, params) = 0, by Newton's method from x0 with the Newton systems
/// solved matrix-free (JVPs of g) by the linear solver of `options`, and a
/// backtracking line search on ‖g‖. Derivatives solve with (∂g/∂x)ᵀ or ∂g/∂x.
ImplicitSolution root(const ImplicitFn& g, const Tensor& x0, const std::vector<Tensor>& params,
                      const ImplicitOptions& options = {});

}  // namespace strata
