// krylov.hpp — matrix-free linear solvers (conjugate gradient, restarted
// GMRES) over tensors of any shape, for implicit differentiation: the
// operator is only ever applied (a VJP or a JVP), never formed.
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace strata::detail {

using LinearOperator = std::function<Tensor(const Tensor&)>;

struct KrylovResult {
  Tensor x;
  int64_t iterations = 0;  // operator applications
  double residual = 0.0;   // ‖b − A x‖ / ‖b‖ reached
  bool converged = false;
  std::string note;  // why it stopped early, when not for the tolerance or the iteration limit
};

/// Solves A x = b for symmetric positive definite A, from x = 0, until the
/// relative residual is at most `tolerance` or after `max_iterations`.
KrylovResult conjugate_gradient(const LinearOperator& A, const Tensor& b, double tolerance, int64_t max_iterations);

/// Solves A x = b for any non-singular A by GMRES restarted every `restart`
/// iterations (modified Gram–Schmidt, Givens rotations), from x = 0.
KrylovResult gmres(const LinearOperator& A, const Tensor& b, double tolerance, int64_t max_iterations,
                   int64_t restart);

/// The Euclidean norm of all elements, on the host.
double norm2(const Tensor& t);

}  // namespace strata::detail
