// krylov.cpp — conjugate gradient and restarted GMRES on tensors. Vectors
// stay on their device; only inner products and the small Hessenberg
// least-squares problem of GMRES live on the host.
#include "autograd/implicit/krylov.hpp"

#include <strata/ops.hpp>

#include <cmath>
#include <vector>

namespace strata::detail {

namespace {

double dot(const Tensor& a, const Tensor& b) { return sum(a * b).item<double>(); }

/// x = 0, converged already when b = 0. A right-hand side whose norm
/// overflowed (or is NaN) cannot converge: relative residuals against it
/// would read 0 or NaN.
KrylovResult start(const Tensor& b, double b_norm) {
  KrylovResult out;
  out.x = zeros_like(b);
  out.converged = b_norm == 0.0;
  if (!std::isfinite(b_norm)) {
    out.residual = b_norm;
    out.note = "the right-hand side's norm is " + std::string(std::isnan(b_norm) ? "NaN" : "infinite");
  }
  return out;
}

}  // namespace

double norm2(const Tensor& t) { return std::sqrt(dot(t, t)); }

KrylovResult conjugate_gradient(const LinearOperator& A, const Tensor& b, double tolerance, int64_t max_iterations) {
  const double b_norm = norm2(b);
  KrylovResult out = start(b, b_norm);
  if (out.converged || !std::isfinite(b_norm)) return out;
  Tensor r = b;
  out.residual = 1.0;
  while (true) {
    Tensor p = r;
    double rr = dot(r, r);
    while (std::sqrt(rr) / b_norm > tolerance) {
      if (out.iterations >= max_iterations) return out;
      Tensor ap = A(p);
      ++out.iterations;
      const double curvature = dot(p, ap);
      if (!(curvature > 0.0)) {
        out.note = "the operator is not positive definite (p·Ap = " + std::to_string(curvature) +
                   "); conjugate gradient needs a symmetric positive definite system, use GMRES";
        return out;
      }
      const double alpha = rr / curvature;
      out.x = out.x + p * alpha;
      r = r - ap * alpha;
      const double rr_next = dot(r, r);
      p = r + p * (rr_next / rr);
      rr = rr_next;
    }
    // The recursive residual drifts from the true one (and means nothing
    // for a non-symmetric operator): check b − A x, restarting from it.
    r = b - A(out.x);
    ++out.iterations;
    out.residual = norm2(r) / b_norm;
    if (out.residual <= tolerance) {
      out.converged = true;
      return out;
    }
    if (out.iterations >= max_iterations) {
      out.note = "the true residual stays above the recursive one (is the operator symmetric?)";
      return out;
    }
  }
}

KrylovResult gmres(const LinearOperator& A, const Tensor& b, double tolerance, int64_t max_iterations,
                   int64_t restart) {
  const double b_norm = norm2(b);
  KrylovResult out = start(b, b_norm);
  if (out.converged || !std::isfinite(b_norm)) return out;
  const size_t m = static_cast<size_t>(std::max<int64_t>(restart, 1));
  Tensor r = b;  // b − A x for x = 0
  double beta = b_norm;
  while (true) {
    out.residual = beta / b_norm;
    if (out.residual <= tolerance) {
      out.converged = true;
      return out;
    }
    if (out.iterations >= max_iterations) return out;
    // One cycle: an orthonormal Krylov basis V, the Hessenberg matrix H
    // reduced to triangular form by Givens rotations as it grows, and g,
    // the rotated right-hand side β·e₁ whose last entry is the residual.
    std::vector<Tensor> basis{r / beta};
    std::vector<std::vector<double>> columns;  // column j of the triangular factor: j + 1 entries
    std::vector<double> cosines, sines, g{beta};
    while (columns.size() < m && out.iterations < max_iterations) {
      const size_t k = columns.size();
      Tensor w = A(basis[k]);
      ++out.iterations;
      std::vector<double> h(k + 2);
      for (size_t i = 0; i <= k; ++i) {
        h[i] = dot(w, basis[i]);
        w = w - basis[i] * h[i];
      }
      const double subdiagonal = norm2(w);
      h[k + 1] = subdiagonal;
      for (size_t i = 0; i < k; ++i) {
        const double rotated = cosines[i] * h[i] + sines[i] * h[i + 1];
        h[i + 1] = -sines[i] * h[i] + cosines[i] * h[i + 1];
        h[i] = rotated;
      }
      const double radius = std::hypot(h[k], h[k + 1]);
      const double c = radius == 0.0 ? 1.0 : h[k] / radius;
      const double s = radius == 0.0 ? 0.0 : h[k + 1] / radius;
      h[k] = radius;
      h.pop_back();
      cosines.push_back(c);
      sines.push_back(s);
      g.push_back(-s * g[k]);
      g[k] *= c;
      columns.push_back(std::move(h));
      // Converged within the cycle, or the basis cannot grow (the solution
      // lies in it: a "lucky" breakdown).
      if (std::fabs(g[k + 1]) / b_norm <= tolerance || subdiagonal <= 1e-300) break;
      basis.push_back(w / subdiagonal);
    }
    const size_t n = columns.size();
    std::vector<double> y(n);
    for (size_t i = n; i-- > 0;) {
      double acc = g[i];
      for (size_t j = i + 1; j < n; ++j) acc -= columns[j][i] * y[j];
      y[i] = columns[i][i] == 0.0 ? 0.0 : acc / columns[i][i];
    }
    for (size_t i = 0; i < n; ++i) out.x = out.x + basis[i] * y[i];
    r = b - A(out.x);  // the true residual, not the rotated estimate
    ++out.iterations;
    beta = norm2(r);
  }
}

}  // namespace strata::detail
