// implicit.cpp — fixed_point and root with derivatives by the implicit
// function theorem, built on custom functions.
//
// Both problems are a residual R(x, θ) = 0 (R = x − f(x, θ), or g), with
// M = ∂R/∂x at the solution. Three custom functions carry the derivatives:
//   solution(x0, θ)        -> x*   rules: θ̄ = −(∂R/∂θ)ᵀ·Mᵀ⁻¹ v,  ẋ = M⁻¹·(−∂R/∂θ·θ')
//   solve_T(b, x*, θ)      -> w    solves Mᵀ w = b
//   solve(b, x*, θ)        -> u    solves M u = b
// The solves' own rules are the transposed solve plus second-order terms of
// R, written with Strata ops (pullback/pushforward of R), so every
// derivative is again a solve or an op: any order, any mode. Only the
// iterations of the solvers run outside the graph.
#include "autograd/engine/differentiate.hpp"
#include "autograd/engine/rule_scopes.hpp"
#include "autograd/implicit/krylov.hpp"
#include "ops/batching.hpp"

#include "runtime/dispatch/vmap_state.hpp"

#include "base/logging.hpp"

#include <strata/autograd.hpp>
#include <strata/custom_function.hpp>
#include <strata/error.hpp>
#include <strata/implicit.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

namespace strata {

namespace {

using detail::pullback;
using detail::pushforward;

enum class ProblemKind { fixed_point, root };

struct Problem {
  ProblemKind kind = ProblemKind::fixed_point;
  ImplicitFn fn;
  ImplicitOptions options;
  double tolerance = 0.0;         // resolved for x's dtype
  double linear_tolerance = 0.0;  // resolved for x's dtype
  Shape shape;  // x's

  const char* name() const { return kind == ProblemKind::fixed_point ? "fixed_point" : "root"; }

  Tensor evaluate(const Tensor& x, const std::vector<Tensor>& params) const {
    Tensor y = fn(x, params);
    if (!y.defined() || y.sizes() != shape) {
      throw ValueError(std::string(name()) + ": the function returned " + (y.defined() ? type_string(y) : "undefined") +
                       " for x of shape " + shape_string(shape) + " (it must return x's shape)");
    }
    return y;
  }
  /// R(x, θ).
  Tensor residual(const Tensor& x, const std::vector<Tensor>& params) const {
    Tensor y = evaluate(x, params);
    return kind == ProblemKind::fixed_point ? x - y : y;
  }
  /// R as a function of [x, θ...].
  std::vector<Tensor> residual_of(const std::vector<Tensor>& args) const {
    return {residual(args[0], std::vector<Tensor>(args.begin() + 1, args.end()))};
  }
};
using ProblemPtr = std::shared_ptr<const Problem>;

std::vector<Tensor> joined(const Tensor& x, const std::vector<Tensor>& params) {
  std::vector<Tensor> all{x};
  all.insert(all.end(), params.begin(), params.end());
  return all;
}

std::vector<Tensor> tail(const std::vector<Tensor>& v, size_t from) { return {v.begin() + from, v.end()}; }

std::string format(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

/// Mᵀ a at (x, θ), differentiable in x, θ and a in the current recording state.
Tensor transposed_product(const Problem& p, const Tensor& x, const std::vector<Tensor>& params, const Tensor& a) {
  std::vector<bool> wrt(params.size() + 1, false);
  wrt[0] = true;
  return pullback([&](const std::vector<Tensor>& args) { return p.residual_of(args); }, joined(x, params), wrt,
                  {a})[0];
}

/// M a at (x, θ), by forward mode.
Tensor product(const Problem& p, const Tensor& x, const std::vector<Tensor>& params, const Tensor& a) {
  return pushforward([&](const std::vector<Tensor>& args) { return p.residual_of(args); }, joined(x, params), {a})[0];
}

std::vector<Tensor> detached(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(t.detach());
  return out;
}

/// `solve` on every lane of the vmaps its batched inputs belong to, the
/// results batched again (docs/vmap.md): the solvers stop on norms, one per
/// lane, which a batched tensor cannot give, so each lane iterates until it
/// converges on its own. Runs inside a custom function's forward, on values
/// without history. Unbatched inputs are shared by the lanes.
Tensor per_lane(const std::vector<Tensor>& in, const std::function<Tensor(const std::vector<Tensor>&)>& solve) {
  const uint64_t level = detail::top_batch_level(in);
  if (level == 0) return solve(in);
  int64_t lanes = 0;
  for (const Tensor& t : in) {
    if (Tensor l = detail::lanes_of(t, level); l.defined()) lanes = l.size(0);
  }
  std::vector<Tensor> results;
  for (int64_t b = 0; b < lanes; ++b) {
    std::vector<Tensor> lane;
    for (const Tensor& t : in) {
      Tensor l = detail::lanes_of(t, level);
      lane.push_back(l.defined() ? l.select(0, b) : t);
    }
    results.push_back(per_lane(lane, solve));  // lanes of an outer vmap, if any
  }
  return detail::make_batched(stack(results, 0), level);
}

detail::KrylovResult run_linear_solver(const Problem& p, const detail::LinearOperator& A, const Tensor& b) {
  const ImplicitOptions& o = p.options;
  if (o.linear_solver == LinearSolver::conjugate_gradient) {
    return detail::conjugate_gradient(A, b, p.linear_tolerance, o.linear_max_iterations);
  }
  return detail::gmres(A, b, p.linear_tolerance, o.linear_max_iterations, o.gmres_restart);
}

const char* solver_name(LinearSolver s) { return s == LinearSolver::gmres ? "GMRES" : "conjugate gradient"; }

/// Solves M u = b (or Mᵀ u = b) at (x, θ) with the configured solver; the
/// forward of the solve functions, run with recording off.
Tensor solve_system(const Problem& p, bool transposed, const Tensor& b, const Tensor& x,
                    const std::vector<Tensor>& params) {
  const Tensor xd = x.detach();
  const std::vector<Tensor> pd = detached(params);
  detail::KrylovResult r;
  if (transposed) {
    // One evaluation of R on a tape of its own; each product is one VJP.
    EnableGradGuard grad_on;
    detail::RecordingScope only_this_tape(false);
    GradientTape tape({.persistent = true});
    Tensor xw = xd.detach();
    tape.watch(xw);
    Tensor rv = p.residual(xw, pd);
    r = run_linear_solver(p, [&](const Tensor& v) { return tape.gradient(rv, {xw}, v)[0]; }, b);
  } else {
    r = run_linear_solver(p, [&](const Tensor& v) { return product(p, xd, pd, v); }, b);
  }
  if (!r.converged) {
    std::string what = std::string(p.name()) + ": the linear solve of its derivative (" +
                       solver_name(p.options.linear_solver) + (transposed ? ", transposed system" : "") +
                       ") did not converge: relative residual " + format(r.residual) + " after " +
                       std::to_string(r.iterations) + " iterations (linear_tolerance " +
                       format(p.linear_tolerance) + ")" + (r.note.empty() ? "" : "; " + r.note);
    if (p.options.on_nonconvergence == OnNonconvergence::error) throw Error(what);
    detail::logger("autograd")->warn("{}; using the last iterate", what);
  }
  return r.x;
}

CustomFunction solve_function(const ProblemPtr& p, bool transposed);

/// solve_function(p, transposed)(b, x, θ).
Tensor solve(const ProblemPtr& p, bool transposed, const Tensor& b, const Tensor& x, const std::vector<Tensor>& params) {
  return solve_function(p, transposed)(joined(b, joined(x, params)))[0];
}

/// The linear solves as custom functions: inputs [b, x, θ...], output u with
/// M u = b (Mᵀ u = b when transposed).
CustomFunction solve_function(const ProblemPtr& p, bool transposed) {
  CustomFunctionRules rules;
  rules.name = std::string(p->name()) + (transposed ? " adjoint solve" : " tangent solve");
  rules.forward = [p, transposed](FunctionContext&, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{per_lane(in, [&](const std::vector<Tensor>& lane) {
      return solve_system(*p, transposed, lane[0], lane[1], tail(lane, 2));
    })};
  };
  // u = M⁻¹b: b̄ = M⁻ᵀū; (x, θ)̄ = −∇ <M⁻ᵀū, M u> = −∇ <u, Mᵀ M⁻ᵀū>; the
  // transposed case swaps the roles. Both are pullbacks of Mᵀ·a.
  rules.backward = [p, transposed](FunctionContext& ctx, const std::vector<Tensor>& g) {
    const std::vector<Tensor>& in = ctx.inputs();
    const Tensor& out = ctx.outputs()[0];
    const Tensor& x = in[1];
    const std::vector<Tensor> params = tail(in, 2);
    Tensor other = solve(p, !transposed, g[0], x, params);
    const Tensor& applied = transposed ? out : other;   // Mᵀ is applied to this
    const Tensor& weighting = transposed ? other : out;  // and paired with this
    std::vector<Tensor> grads = pullback(
        [&](const std::vector<Tensor>& args) {
          return std::vector<Tensor>{transposed_product(*p, args[0], tail(args, 1), applied)};
        },
        joined(x, params), std::vector<bool>(params.size() + 1, true), {weighting});
    std::vector<Tensor> result{other};
    for (Tensor& t : grads) result.push_back(t.defined() ? -t : t);
    return result;
  };
  // u̇ = M⁻¹(ḃ − Ṁ u), with Ṁ u the tangent of (x, θ) ↦ M·u (Mᵀ·u when transposed).
  rules.jvp = [p, transposed](FunctionContext& ctx, const std::vector<Tensor>& t) {
    const std::vector<Tensor>& in = ctx.inputs();
    const Tensor& out = ctx.outputs()[0];
    const std::vector<Tensor> params = tail(in, 2);
    Tensor operator_tangent = pushforward(
        [&](const std::vector<Tensor>& args) {
          const std::vector<Tensor> ps = tail(args, 1);
          return std::vector<Tensor>{transposed ? transposed_product(*p, args[0], ps, out) : product(*p, args[0], ps, out)};
        },
        joined(in[1], params), tail(t, 1))[0];
    return std::vector<Tensor>{solve(p, transposed, t[0] - operator_tangent, in[1], params)};
  };
  return CustomFunction(std::move(rules));
}

// --- the forward solvers -----------------------------------------------------

/// fixed_point's test after an iteration that moved x by `residual` to an
/// iterate of norm `size`: whether to stop, and (in `s`) whether that is
/// convergence. A norm that overflowed (or a NaN) is divergence, never
/// convergence: inf <= tol * inf holds, and would report a runaway map as
/// converged.
bool fixed_point_stops(const Problem& p, double residual, double size, ImplicitSolution& s) {
  s.residual = residual;
  const double scale = std::max(1.0, size);
  if (!std::isfinite(residual) || !std::isfinite(scale)) return true;
  s.converged = residual <= p.tolerance * scale;
  return s.converged;
}

ImplicitSolution iterate_fixed_point(const Problem& p, const Tensor& x0, const std::vector<Tensor>& params) {
  ImplicitSolution s;
  Tensor x = x0;
  s.residual = INFINITY;
  while (s.iterations < p.options.max_iterations) {
    Tensor next = p.evaluate(x, params);
    ++s.iterations;
    const double residual = detail::norm2(next - x);
    x = next;
    if (fixed_point_stops(p, residual, detail::norm2(x), s)) break;
  }
  s.x = x;
  return s;
}

/// Whether the lanes of vmap `level` among `in` are plain tensors (no outer
/// vmap's lanes inside them), so that their norms can be read.
bool one_vmap_deep(const std::vector<Tensor>& in, uint64_t level) {
  return std::ranges::none_of(in, [&](const Tensor& t) {
    Tensor lanes = detail::lanes_of(t, level);
    return lanes.defined() ? detail::batch_level(lanes) != 0 : detail::batch_level(t) != 0;
  });
}

/// ‖lanes[b]‖₂ for every b (dim 0), summed in the lanes' dtype like
/// detail::norm2 (a device may not store f64).
std::vector<double> lane_norms(const Tensor& lanes) {
  Tensor sq = lanes * lanes;
  if (sq.dim() > 1) {
    Shape dims;
    for (int64_t k = 1; k < sq.dim(); ++k) dims.push_back(k);
    sq = sum(sq, dims);
  }
  std::vector<double> out = sq.to_vector<double>();
  for (double& v : out) v = std::sqrt(v);
  return out;
}

/// fixed_point under vmap `level`: x ← f(x, θ) on all the lanes at once,
/// each lane stopping on its own test (fixed_point_stops, as alone); a lane that
/// has stopped keeps its iterate (masked) while the others go on, until
/// none is left or max_iterations. `lanes` gets each lane's outcome.
Tensor iterate_masked(const Problem& p, const std::vector<Tensor>& in, uint64_t level,
                      std::vector<ImplicitSolution>& lanes) {
  const std::vector<Tensor> params = tail(in, 1);
  Tensor x = detail::lanes_first(in[0], level).contiguous();
  const int64_t n = x.size(0);
  lanes.assign(static_cast<size_t>(n), ImplicitSolution{});
  for (ImplicitSolution& s : lanes) s.residual = INFINITY;
  std::vector<uint8_t> running(static_cast<size_t>(n), 1);
  Shape mask_shape(static_cast<size_t>(x.dim()), 1);
  mask_shape[0] = n;
  for (int64_t it = 1; it <= p.options.max_iterations && std::ranges::count(running, 1) > 0; ++it) {
    Tensor next = detail::lanes_first(p.evaluate(detail::make_batched(x, level), params), level);
    const std::vector<double> residual = lane_norms(next - x), size = lane_norms(next);
    std::vector<double> took(static_cast<size_t>(n), 0.0);
    for (size_t b = 0; b < lanes.size(); ++b) {
      if (running[b] == 0) continue;
      took[b] = 1.0;
      lanes[b].iterations = it;
      if (fixed_point_stops(p, residual[b], size[b], lanes[b])) running[b] = 0;
    }
    // The lanes that ran this iteration take its iterate, as the loop would.
    Tensor mask = cast(from_data(std::span<const double>(took), mask_shape, {.device = x.device()}), DType::boolean);
    x = where(mask, next, x);
  }
  return detail::make_batched(x, level);
}

/// Adds a lane's outcome to the solution (lane -1: not under vmap) and
/// refuses a failed one unless on_nonconvergence is accept.
void report_lane(const Problem& p, ImplicitSolution& info, const ImplicitSolution& s, int64_t lane) {
  if (!s.converged && p.options.on_nonconvergence == OnNonconvergence::error) {
    const bool diverged = !std::isfinite(s.residual);
    throw Error(std::string(p.name()) + (lane >= 0 ? " (vmap lane " + std::to_string(lane) + ")" : "") +
                (diverged ? ": diverged after " : ": did not converge in ") + std::to_string(s.iterations) +
                (p.kind == ProblemKind::fixed_point ? " iterations: ‖f(x) − x‖ = " : " Newton steps: ‖g(x)‖ = ") +
                format(s.residual) + " (tolerance " + format(p.tolerance) +
                "); raise max_iterations, loosen tolerance, or pass OnNonconvergence::accept");
  }
  info.iterations = std::max(info.iterations, s.iterations);
  if (!(s.residual <= info.residual)) info.residual = s.residual;  // NaN and inf kept
  info.converged = info.converged && s.converged;
  if (lane >= 0) info.lanes.push_back({s.iterations, s.residual, s.converged});
}

ImplicitSolution newton_root(const Problem& p, const Tensor& x0, const std::vector<Tensor>& params) {
  ImplicitSolution s;
  Tensor x = x0;
  Tensor r = p.evaluate(x, params);
  s.residual = detail::norm2(r);
  const double target = p.tolerance * std::max(1.0, s.residual);
  // A non-finite starting residual has no Newton step to take, and its
  // target (tol * inf) would call it converged.
  if (!std::isfinite(s.residual)) {
    s.x = x;
    return s;
  }
  while (s.residual > target && s.iterations < p.options.max_iterations) {
    // Newton step M d = −g, matrix-free; an inexact step is fine here.
    detail::KrylovResult step =
        run_linear_solver(p, [&](const Tensor& v) { return product(p, x, params, v); }, -r);
    ++s.iterations;
    double t = 1.0;
    Tensor candidate;
    Tensor candidate_r;
    double candidate_norm = INFINITY;
    for (int halvings = 0; halvings < 30; ++halvings, t *= 0.5) {  // backtracking on ‖g‖
      candidate = x + step.x * t;
      candidate_r = p.evaluate(candidate, params);
      candidate_norm = detail::norm2(candidate_r);
      if (candidate_norm <= (1.0 - 1e-4 * t) * s.residual) break;
    }
    if (!(candidate_norm < s.residual)) break;  // no progress along the Newton direction
    x = candidate;
    r = candidate_r;
    s.residual = candidate_norm;
  }
  s.converged = s.residual <= target;
  s.x = x;
  return s;
}

ImplicitSolution solve_problem(ProblemKind kind, const ImplicitFn& fn, const Tensor& x0,
                               const std::vector<Tensor>& params, const ImplicitOptions& options) {
  auto problem = std::make_shared<Problem>();
  problem->kind = kind;
  problem->fn = fn;
  problem->options = options;
  const char* name = problem->name();
  if (!fn) throw ValueError(std::string(name) + ": empty function");
  if (!x0.defined()) throw ValueError(std::string(name) + ": x0 is undefined");
  if (!is_floating(x0.dtype())) throw DTypeError(std::string(name) + ": x0 must be floating, found " + type_string(x0));
  for (size_t k = 0; k < params.size(); ++k) {
    if (!params[k].defined()) throw ValueError(std::string(name) + ": parameter " + std::to_string(k) + " is undefined");
  }
  const bool f64 = x0.dtype() == DType::f64;
  problem->tolerance = options.tolerance.value_or(f64 ? 1e-10 : 1e-5);
  problem->linear_tolerance = options.linear_tolerance.value_or(f64 ? 1e-12 : 1e-6);
  // !(t >= 0) also refuses NaN, which every comparison would take as "not converged yet" (or, for
  // inf, as converged at once).
  auto usable = [](double t) { return std::isfinite(t) && t >= 0; };
  if (!usable(problem->tolerance) || !usable(problem->linear_tolerance)) {
    throw ValueError(std::string(name) + ": tolerance " + format(problem->tolerance) + " and linear_tolerance " +
                     format(problem->linear_tolerance) + " must be finite and >= 0");
  }
  if (options.max_iterations < 0 || options.linear_max_iterations < 1 || options.gmres_restart < 1) {
    throw ValueError(std::string(name) +
                     ": max_iterations must be >= 0, linear_max_iterations and gmres_restart >= 1 (found " +
                     std::to_string(options.max_iterations) + ", " + std::to_string(options.linear_max_iterations) +
                     ", " + std::to_string(options.gmres_restart) + ")");
  }
  problem->shape = x0.sizes();
  ProblemPtr p = problem;
  auto info = std::make_shared<ImplicitSolution>();
  CustomFunctionRules rules;
  rules.name = name;
  rules.forward = [p, info](FunctionContext&, const std::vector<Tensor>& in) {
    // Under vmap: fixed_point iterates every lane at once, a lane that has
    // converged (or diverged) keeping its iterate (iterate_masked); root
    // and nested vmaps go lane by lane (per_lane). Either way the solution
    // reports each lane, the slowest lane's iterations, the largest
    // residual, and converged only when every lane did; a lane that fails
    // is named.
    *info = ImplicitSolution{};
    info->converged = true;
    const std::vector<Tensor> d = detached(in);
    const uint64_t level = detail::top_batch_level(d);
    Tensor x;
    if (level != 0 && p->kind == ProblemKind::fixed_point && one_vmap_deep(d, level)) {
      std::vector<ImplicitSolution> lanes;
      x = iterate_masked(*p, d, level, lanes);
      for (size_t b = 0; b < lanes.size(); ++b) report_lane(*p, *info, lanes[b], static_cast<int64_t>(b));
    } else {
      int64_t lane_index = 0;
      x = per_lane(d, [&](const std::vector<Tensor>& lane) {
        const Tensor& x0d = lane[0];
        const std::vector<Tensor> params_d = tail(lane, 1);
        ImplicitSolution s = p->kind == ProblemKind::fixed_point ? iterate_fixed_point(*p, x0d, params_d)
                                                                  : newton_root(*p, x0d, params_d);
        report_lane(*p, *info, s, level != 0 ? lane_index++ : -1);
        return s.x;
      });
    }
    info->x = x;
    return std::vector<Tensor>{x};
  };
  // v ↦ θ̄ = −(∂R/∂θ)ᵀ w with Mᵀ w = v; no gradient for x0.
  rules.backward = [p](FunctionContext& ctx, const std::vector<Tensor>& g) {
    const std::vector<Tensor> theta = tail(ctx.inputs(), 1);
    const Tensor& x = ctx.outputs()[0];
    Tensor w = solve(p, true, g[0], x, theta);
    std::vector<bool> wrt(theta.size() + 1, true);
    wrt[0] = false;
    std::vector<Tensor> grads =
        pullback([&](const std::vector<Tensor>& args) { return p->residual_of(args); }, joined(x, theta), wrt, {w});
    grads[0] = Tensor();
    for (size_t k = 1; k < grads.size(); ++k) {
      if (grads[k].defined()) grads[k] = -grads[k];
    }
    return grads;
  };
  // θ' ↦ ẋ = M⁻¹·(−∂R/∂θ·θ'); x0's tangent does not matter.
  rules.jvp = [p](FunctionContext& ctx, const std::vector<Tensor>& t) {
    const std::vector<Tensor> theta = tail(ctx.inputs(), 1);
    const Tensor& x = ctx.outputs()[0];
    std::vector<Tensor> tangents = t;
    tangents[0] = Tensor();
    Tensor b = pushforward([&](const std::vector<Tensor>& args) { return p->residual_of(args); }, joined(x, theta),
                           tangents)[0];
    return std::vector<Tensor>{solve(p, false, -b, x, theta)};
  };
  Tensor x = CustomFunction(std::move(rules))(joined(x0, params))[0];
  ImplicitSolution result = *info;  // what the forward reported
  result.x = x;
  return result;
}

}  // namespace

ImplicitSolution fixed_point(const ImplicitFn& f, const Tensor& x0, const std::vector<Tensor>& params,
                             const ImplicitOptions& options) {
  return solve_problem(ProblemKind::fixed_point, f, x0, params, options);
}

ImplicitSolution root(const ImplicitFn& g, const Tensor& x0, const std::vector<Tensor>& params,
                      const ImplicitOptions& options) {
  return solve_problem(ProblemKind::root, g, x0, params, options);
}

}  // namespace strata
