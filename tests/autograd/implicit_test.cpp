// implicit_test.cpp — fixed_point and root with implicit derivatives: closed
// forms (the square root as a fixed point, ridge regression's solution in
// its regulariser), unrolled differentiation, higher orders and forward mode,
// memory that does not grow with the iterations, and the errors.
#include "autograd_test_util.hpp"

#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using namespace autograd_test;

/// Heron's map: its fixed point is sqrt(a).
Tensor heron(const Tensor& x, const std::vector<Tensor>& p) { return (x + p[0] / x) * 0.5; }

Tensor implicit_sqrt(const Tensor& a, const ImplicitOptions& o = {}) { return fixed_point(heron, ones_like(a), {a}, o).x; }

TEST(FixedPoint, SquareRootAndItsDerivativesToThirdOrder) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const std::vector<double> as{0.5, 2.0, 9.0};
  Tensor a = vec(as);
  ImplicitSolution s = fixed_point(heron, ones_like(a), {a});
  EXPECT_TRUE(s.converged);
  EXPECT_LE(s.residual, 1e-10);
  EXPECT_LT(s.iterations, 20);
  std::vector<double> d0, d1, d2, d3;
  for (double v : as) {
    d0.push_back(std::sqrt(v));
    d1.push_back(0.5 / std::sqrt(v));
    d2.push_back(-0.25 * std::pow(v, -1.5));
    d3.push_back(0.375 * std::pow(v, -2.5));
  }
  expect_near(s.x, d0, 1e-12);
  Fn f = [](const Tensor& t) { return implicit_sqrt(t); };
  Fn total = [&](const Tensor& t) { return sum(f(t)); };
  expect_near(nth_grad(total, 1)(a), d1, 1e-8);
  expect_near(nth_grad(total, 2)(a), d2, 1e-8);
  expect_near(nth_grad(total, 3)(a), d3, 1e-8);
  // Forward mode and forward-over-reverse.
  Tensor v = vec({1.0, -2.0, 0.5});
  auto [y, t] = jvp(f, a, v);
  expect_near(t, {d1[0] * 1.0, d1[1] * -2.0, d1[2] * 0.5}, 1e-8);
  expect_near(hvp([&](const Tensor& x) { return sum(f(x)); }, a, v), {d2[0] * 1.0, d2[1] * -2.0, d2[2] * 0.5}, 1e-8);
  expect_near(hvp([&](const Tensor& x) { return sum(f(x)); }, a, v, HvpMode::reverse_over_reverse),
              {d2[0] * 1.0, d2[1] * -2.0, d2[2] * 0.5}, 1e-8);
}

TEST(FixedPoint, SinglePrecisionUsesLooserDefaultTolerances) {
  Tensor a = from_data(std::vector<float>{0.5f, 2.0f, 9.0f}, {3});
  GradientTape tape;
  tape.watch(a);
  ImplicitSolution s = fixed_point(heron, ones_like(a), {a});
  EXPECT_TRUE(s.converged);
  Tensor g = tape.gradient(sum(s.x), {a})[0];
  EXPECT_EQ(g.dtype(), DType::f32);
  std::vector<double> gv = g.to_vector<double>();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], 0.5 / std::sqrt(a.to_vector<double>()[i]), 1e-5);
}

TEST(FixedPoint, GradcheckOfTheSecondDerivative) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor a = vec({0.7, 1.6});
  Fn f = [](const Tensor& t) { return sum(implicit_sqrt(t, {.tolerance = 1e-14})); };
  GradcheckOptions o{.eps = 1e-4, .atol = 1e-7, .rtol = 1e-5, .four_point = true};
  GradcheckResult r = gradcheck([&](const Tensor& t) { return sum(nth_grad(f, 1)(t)); }, a, o);
  EXPECT_TRUE(r.ok) << r.message;
}

/// A contraction x = 0.5·tanh(W x + θ) + 0.1·x, and its unrolled iteration.
struct Contraction {
  Tensor w;
  explicit Contraction(int64_t n) {
    manual_seed(7);
    w = randn({n, n}, {.dtype = f64}) * (0.8 / std::sqrt(static_cast<double>(n)));
  }
  Tensor step(const Tensor& x, const Tensor& theta) const {
    return tanh(matmul(w, x.unsqueeze(1)).squeeze(1) + theta) * 0.5 + x * 0.1;
  }
  ImplicitFn fn() const {
    return [this](const Tensor& x, const std::vector<Tensor>& p) { return step(x, p[0]); };
  }
};

TEST(FixedPoint, MatchesUnrolledDifferentiation) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Contraction c(6);
  manual_seed(8);
  Tensor theta = randn({6}, {.dtype = f64});
  Tensor weights = randn({6}, {.dtype = f64});
  GradientTape implicit_tape;
  implicit_tape.watch(theta);
  ImplicitSolution s = fixed_point(c.fn(), zeros({6}, {.dtype = f64}), {theta});
  ASSERT_TRUE(s.converged);
  Tensor implicit = implicit_tape.gradient(sum(s.x * weights), {theta})[0];
  GradientTape unrolled_tape;
  unrolled_tape.watch(theta);
  Tensor x = zeros({6}, {.dtype = f64});
  for (int k = 0; k < 200; ++k) x = c.step(x, theta);
  Tensor unrolled = unrolled_tape.gradient(sum(x * weights), {theta})[0];
  expect_near(implicit, unrolled.to_vector<double>(), 1e-10);
  // And with conjugate gradient? No: I − ∂f/∂x is not symmetric here; GMRES it is.
  // Forward mode against the unrolled Jacobian column.
  Tensor dir = randn({6}, {.dtype = f64});
  auto [y, t] = jvp([&](const Tensor& th) { return fixed_point(c.fn(), zeros({6}, {.dtype = f64}), {th}).x; }, theta, dir);
  auto [yu, tu] = jvp(
      [&](const Tensor& th) {
        Tensor xu = zeros({6}, {.dtype = f64});
        for (int k = 0; k < 200; ++k) xu = c.step(xu, th);
        return xu;
      },
      theta, dir);
  expect_near(t, tu.to_vector<double>(), 1e-10);
  // Second order (the derivatives of the linear solves) against the unrolled Hessian.
  Fn implicit_loss = [&](const Tensor& th) {
    return sum(fixed_point(c.fn(), zeros({6}, {.dtype = f64}), {th}).x * weights);
  };
  Fn unrolled_loss = [&](const Tensor& th) {
    Tensor xu = zeros({6}, {.dtype = f64});
    for (int k = 0; k < 200; ++k) xu = c.step(xu, th);
    return sum(xu * weights);
  };
  std::vector<double> h_unrolled = hvp(unrolled_loss, theta, dir).to_vector<double>();
  expect_near(hvp(implicit_loss, theta, dir), h_unrolled, 1e-9);
  expect_near(hvp(implicit_loss, theta, dir, HvpMode::reverse_over_reverse), h_unrolled, 1e-9);
}

/// Solves the dense system A x = b (row-major n×n) by Gaussian elimination.
std::vector<double> dense_solve(std::vector<double> A, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(A[r * n + c]) > std::fabs(A[pivot * n + c])) pivot = r;
    for (size_t k = 0; k < n; ++k) std::swap(A[c * n + k], A[pivot * n + k]);
    std::swap(b[c], b[pivot]);
    for (size_t r = c + 1; r < n; ++r) {
      double m = A[r * n + c] / A[c * n + c];
      for (size_t k = c; k < n; ++k) A[r * n + k] -= m * A[c * n + k];
      b[r] -= m * b[c];
    }
  }
  std::vector<double> x(n);
  for (size_t i = n; i-- > 0;) {
    double acc = b[i];
    for (size_t k = i + 1; k < n; ++k) acc -= A[i * n + k] * x[k];
    x[i] = acc / A[i * n + i];
  }
  return x;
}

TEST(Root, RidgeRegressionGradientInTheRegulariser) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // w*(λ) solves Aᵀ(A w − b) + λ w = 0, i.e. (AᵀA + λI) w = Aᵀb; with the
  // loss L = c·w*, dL/dλ = −cᵀ (AᵀA + λI)⁻¹ w* and dL/db = A (AᵀA + λI)⁻¹ c.
  const int64_t m = 8, n = 5;
  manual_seed(11);
  Tensor A = randn({m, n}, {.dtype = f64});
  Tensor b = randn({m}, {.dtype = f64});
  Tensor c = randn({n}, {.dtype = f64});
  const double lambda_v = 0.3;
  auto residual = [](const Tensor& w, const std::vector<Tensor>& p) {
    const Tensor& a = p[1];
    Tensor fit = matmul(a, w.unsqueeze(1)).squeeze(1) - p[2];
    return matmul(a.mT(), fit.unsqueeze(1)).squeeze(1) + w * p[0];
  };
  // Closed forms on the host.
  std::vector<double> av = A.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  std::vector<double> gram(static_cast<size_t>(n * n), 0.0), atb(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t r = 0; r < m; ++r) gram[static_cast<size_t>(i * n + j)] += av[static_cast<size_t>(r * n + i)] * av[static_cast<size_t>(r * n + j)];
    }
    gram[static_cast<size_t>(i * n + i)] += lambda_v;
    for (int64_t r = 0; r < m; ++r) atb[static_cast<size_t>(i)] += av[static_cast<size_t>(r * n + i)] * bv[static_cast<size_t>(r)];
  }
  std::vector<double> w_star = dense_solve(gram, atb);
  std::vector<double> k = dense_solve(gram, cv);  // (AᵀA + λI)⁻¹ c (symmetric)
  double dl_dlambda = 0.0;
  for (int64_t i = 0; i < n; ++i) dl_dlambda -= k[static_cast<size_t>(i)] * w_star[static_cast<size_t>(i)];
  std::vector<double> dl_db(static_cast<size_t>(m), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < n; ++i) dl_db[static_cast<size_t>(r)] += av[static_cast<size_t>(r * n + i)] * k[static_cast<size_t>(i)];
  }
  for (LinearSolver solver : {LinearSolver::gmres, LinearSolver::conjugate_gradient}) {
    Tensor lambda = full({}, lambda_v, {.dtype = f64});
    GradientTape tape;
    tape.watch(lambda);
    tape.watch(b);
    ImplicitSolution s = root(residual, zeros({n}, {.dtype = f64}), {lambda, A, b}, {.linear_solver = solver});
    ASSERT_TRUE(s.converged) << s.residual;
    expect_near(s.x, w_star, 1e-10);
    std::vector<Tensor> g = tape.gradient(sum(s.x * c), {lambda, b});
    EXPECT_NEAR(value(g[0]), dl_dlambda, 1e-8);
    expect_near(g[1], dl_db, 1e-8);
  }
}

TEST(Root, NonlinearRootToSecondOrderAndForwardMode) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // x³ + x = θ: x' = 1/(3x² + 1), x'' = −6x·x'³.
  auto g = [](const Tensor& x, const std::vector<Tensor>& p) { return x * x * x + x - p[0]; };
  Fn solution = [&](const Tensor& th) { return root(g, zeros_like(th), {th}).x; };
  Tensor theta = vec({0.5, 2.0, 10.0});
  std::vector<double> xs = solution(theta).to_vector<double>(), d1, d2;
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(xs[i] * xs[i] * xs[i] + xs[i], theta.to_vector<double>()[i], 1e-10);
    double p = 1 / (3 * xs[i] * xs[i] + 1);
    d1.push_back(p);
    d2.push_back(-6 * xs[i] * p * p * p);
  }
  Fn total = [&](const Tensor& th) { return sum(solution(th)); };
  expect_near(nth_grad(total, 1)(theta), d1, 1e-9);
  expect_near(nth_grad(total, 2)(theta), d2, 1e-9);
  auto [y, t] = jvp(solution, theta, ones_like(theta));
  expect_near(t, d1, 1e-9);
}

/// Peak bytes allocated on cpu:0 while `f` runs, above what was live before.
template <typename F>
uint64_t peak_during(F&& f) {
  MemoryScope memory(Device("cpu:0"));
  f();
  return memory.peak_bytes();
}

TEST(FixedPoint, MemoryDoesNotGrowWithTheIterations) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // A slowly contracting map on 8000 doubles (64 kB a tensor), run for a
  // fixed number of iterations (tolerance 0, unconverged results accepted).
  const int64_t n = 8000;
  Tensor theta = full({n}, 0.3, {.dtype = f64});
  ImplicitFn f = [](const Tensor& x, const std::vector<Tensor>& p) { return tanh(x) * 0.999 + p[0] * 0.001; };
  auto implicit_gradient = [&](int64_t iterations) {
    return peak_during([&] {
      GradientTape tape;
      tape.watch(theta);
      ImplicitOptions o{.tolerance = 0.0, .max_iterations = iterations, .on_nonconvergence = OnNonconvergence::accept};
      ImplicitSolution s = fixed_point(f, zeros_like(theta), {theta}, o);
      EXPECT_EQ(s.iterations, iterations);
      EXPECT_FALSE(s.converged);
      (void)tape.gradient(sum(s.x), {theta});
    });
  };
  auto unrolled_gradient = [&](int64_t iterations) {
    return peak_during([&] {
      GradientTape tape;
      tape.watch(theta);
      Tensor x = zeros_like(theta);
      for (int64_t k = 0; k < iterations; ++k) x = f(x, {theta});
      (void)tape.gradient(sum(x), {theta});
    });
  };
  const uint64_t tensor_bytes = static_cast<uint64_t>(n) * 8;
  uint64_t implicit_20 = implicit_gradient(20), implicit_500 = implicit_gradient(500);
  uint64_t unrolled_20 = unrolled_gradient(20), unrolled_500 = unrolled_gradient(500);
  EXPECT_LE(implicit_500, implicit_20 + 2 * tensor_bytes) << implicit_20 << " bytes at 20 iterations";
  EXPECT_GT(unrolled_500, unrolled_20 + 400 * tensor_bytes) << "the measure sees a tape's growth";
}

TEST(FixedPoint, NonConvergenceIsAnErrorOrAFlag) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  ImplicitFn diverging = [](const Tensor& x, const std::vector<Tensor>& p) { return x * 2.0 + p[0]; };
  Tensor theta = vec({1.0});
  expect_error([&] { fixed_point(diverging, zeros_like(theta), {theta}, {.max_iterations = 50}); },
               {"fixed_point", "did not converge in 50 iterations", "‖f(x) − x‖ = ", "tolerance 1e-10"});
  ImplicitSolution s = fixed_point(diverging, zeros_like(theta), {theta},
                                   {.max_iterations = 50, .on_nonconvergence = OnNonconvergence::accept});
  EXPECT_FALSE(s.converged);
  EXPECT_EQ(s.iterations, 50);
  EXPECT_GT(s.residual, 1e10);
  auto g = [](const Tensor& x, const std::vector<Tensor>& p) { return x * x + p[0]; };  // no real root
  expect_error([&] { root(g, vec({1.0}), {vec({1.0})}); }, {"root", "did not converge", "‖g(x)‖ = "});
}

TEST(FixedPoint, UnconvergedDerivativeSolveIsAnError) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Contraction c(6);
  Tensor theta = vec({0.1, 0.2, 0.3, 0.4, 0.5, 0.6});
  GradientTape tape;
  tape.watch(theta);
  ImplicitSolution s = fixed_point(c.fn(), zeros_like(theta), {theta}, {.linear_max_iterations = 1});
  expect_error([&] { tape.gradient(sum(s.x), {theta}); },
               {"fixed_point", "linear solve", "GMRES", "did not converge", "relative residual"});
  // Conjugate gradient on a negative definite system says so (x0 is the
  // root already: the forward needs no Newton step).
  auto g = [](const Tensor& x, const std::vector<Tensor>& p) { return p[0] - x; };
  GradientTape t2;
  t2.watch(theta);
  ImplicitSolution r = root(g, theta.clone(), {theta}, {.linear_solver = LinearSolver::conjugate_gradient});
  EXPECT_EQ(r.iterations, 0);
  expect_error([&] { t2.gradient(sum(r.x), {theta}); },
               {"root", "conjugate gradient", "not positive definite", "use GMRES"});
  // A non-symmetric system given to conjugate gradient is caught by the final true residual.
  Tensor rot = from_data(std::vector<double>{0.0, 0.9, -0.9, 0.0}, {2, 2});
  ImplicitFn rotation = [&](const Tensor& x, const std::vector<Tensor>& p) {
    return matmul(rot, x.unsqueeze(1)).squeeze(1) + p[0];
  };
  Tensor th2 = vec({1.0, -0.5});
  GradientTape t3;
  t3.watch(th2);
  ImplicitSolution q = fixed_point(rotation, zeros_like(th2), {th2}, {.linear_solver = LinearSolver::conjugate_gradient});
  ASSERT_TRUE(q.converged);
  expect_error([&] { t3.gradient(sum(q.x * vec({1.0, 3.0})), {th2}); }, {"fixed_point", "conjugate gradient", "did not converge"});
}

TEST(FixedPoint, BadInput) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor theta = vec({1.0, 2.0});
  expect_error([&] { fixed_point([](const Tensor& x, const std::vector<Tensor>&) { return sum(x); }, zeros_like(theta), {theta}); },
               {"fixed_point", "returned f64[]", "shape [2]"});
  EXPECT_THROW(fixed_point(heron, Tensor(), {theta}), ValueError);
  EXPECT_THROW(fixed_point(heron, ones_like(theta), {theta}, {.gmres_restart = 0}), ValueError);
  EXPECT_THROW(root(ImplicitFn(), ones_like(theta), {theta}), ValueError);
  // NaN and infinite tolerances would make every comparison "not yet" or
  // "converged at once".
  const double nan = std::nan("");
  for (double bad : {nan, std::numeric_limits<double>::infinity(), -1.0}) {
    expect_error([&] { fixed_point(heron, ones_like(theta), {theta}, {.tolerance = bad}); },
                 {"fixed_point: tolerance", "must be finite and >= 0"});
    expect_error([&] { root(heron, ones_like(theta), {theta}, {.linear_tolerance = bad}); },
                 {"root: tolerance", "linear_tolerance", "must be finite and >= 0"});
  }
}

// A map whose norms overflow diverges: inf <= tol * inf must not read as
// convergence (x -> x * 1e10 overflows f64 within 31 steps).
TEST(FixedPoint, OverflowingNormsAreDivergenceNotConvergence) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor theta = vec({1.0});
  ImplicitFn runaway = [](const Tensor& x, const std::vector<Tensor>& p) { return x * 1e10 + p[0]; };
  ImplicitSolution s = fixed_point(runaway, zeros_like(theta), {theta},
                                   {.max_iterations = 100, .on_nonconvergence = OnNonconvergence::accept});
  EXPECT_FALSE(s.converged);
  EXPECT_LT(s.iterations, 100) << "the iteration stops once a norm overflowed";
  expect_error([&] { fixed_point(runaway, zeros_like(theta), {theta}, {.max_iterations = 100}); },
               {"fixed_point: diverged after", "‖f(x) − x‖ = inf"});
  // root: a residual that is infinite from the start has no Newton step.
  ImplicitFn infinite = [](const Tensor& x, const std::vector<Tensor>& p) { return x * 0.0 + p[0]; };
  ImplicitSolution r = root(infinite, vec({1.0}), {vec({INFINITY})}, {.on_nonconvergence = OnNonconvergence::accept});
  EXPECT_FALSE(r.converged);
  expect_error([&] { root(infinite, vec({1.0}), {vec({INFINITY})}); }, {"root: diverged after 0 Newton steps"});
}

}  // namespace
