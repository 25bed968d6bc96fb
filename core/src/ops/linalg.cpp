// linalg.cpp — matmul with NumPy semantics.
#include "derivatives.hpp"
#include "rules.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {
using detail::OpCall;
using detail::OpDef;

/// Operands of rank >= 2: promote, check the inner dims, broadcast batches.
void matmul_rule(OpCall& call) {
  DType t = promote_types(call.in(0).dtype(), call.in(1).dtype());
  detail::rules::require_dtype(call, is_differentiable(t), "floating-point or complex operands");
  auto a = call.in(0).shape();
  auto b = call.in(1).shape();
  if (a.size() < 2 || b.size() < 2) {  // the public matmul promotes 1-D operands; a call by name must not
    throw ShapeError(call.describe() + ": the op takes operands of rank >= 2, found shapes " +
                     detail::shape_string(a) + " and " + detail::shape_string(b));
  }
  int64_t m = a[a.size() - 2];
  int64_t k = a[a.size() - 1];
  int64_t k2 = b[b.size() - 2];
  int64_t n = b[b.size() - 1];
  if (k != k2) {
    throw ShapeError(call.describe() + ": shapes " + detail::shape_string(a) + " and " + detail::shape_string(b) +
                     " are not aligned for matmul (" + std::to_string(k) + " != " + std::to_string(k2) + ")");
  }
  Shape batch = detail::broadcast_shapes(a.subspan(0, a.size() - 2), b.subspan(0, b.size() - 2), call);
  Shape sa = batch;
  sa.insert(sa.end(), {m, k});
  Shape sb = batch;
  sb.insert(sb.end(), {k, n});
  Shape out = batch;
  out.insert(out.end(), {m, n});
  for (int i = 0; i < 2; ++i) detail::cast_input(call, i, t);
  detail::expand_input(call, 0, sa);
  detail::expand_input(call, 1, sb);
  call.out().dtype = t;
  call.out().set_shape(out);
}

/// True when t's matrices are laid out column-major (t is the mT() of a
/// row-major tensor, as Linear's weight.mT()).
bool column_major(const Tensor& t) {
  const int64_t d = t.dim();
  if (d < 2) return false;
  const auto strides = t.strides();
  const int64_t rows = t.size(d - 2), cols = t.size(d - 1);
  return rows > 1 && cols > 1 && strides[d - 2] == 1 && strides[d - 1] == rows;
}

/// The gradient of A in A @ B (g: the output's), computed transposed when A
/// is column-major: (B g^T)^T, so that the gradient reaching the row-major
/// tensor behind the view (a Linear weight) is row-major too, and the work on
/// it (the optimizer's update, casts) runs over contiguous memory. As
/// PyTorch's mm backward does.
Tensor matmul_grad_a(const Tensor& g, const Tensor& a, const Tensor& b) {
  return column_major(a) ? matmul(b, g.mT()).mT() : matmul(g, b.mT());
}
/// The gradient of B in A @ B, the same way: (g^T A)^T when B is column-major.
Tensor matmul_grad_b(const Tensor& g, const Tensor& a, const Tensor& b) {
  return column_major(b) ? matmul(g.mT(), a).mT() : matmul(a.mT(), g);
}

// Inputs as prepared: rank >= 2 with equal (broadcast) batch dims. Complex
// operands: the VJP multiplies by the conjugate transposes, g·B^H and A^H·g
// (PyTorch's convention; conj is a no-op on real tensors).
const OpDef& kMatmul = detail::define_op({
    .name = "matmul",
    .autocast = detail::AutocastCategory::lower_precision,
    .n_inputs = 2,
    .takes_complex = true,
    .prepare = matmul_rule,
    .empty_fill = 0.0,
    .vjp = STRATA_VJP_EACH(STRATA_INPUT_GRAD(matmul_grad_a(g, c.in(0), conj(c.in(1)))),
                           STRATA_INPUT_GRAD(matmul_grad_b(g, conj(c.in(0)), c.in(1)))),
    .jvp = STRATA_JVP(STRATA_TANGENT(matmul(t, c.in(1))), STRATA_TANGENT(matmul(c.in(0), t))),
});

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) throw Error("matmul: undefined tensor");
  if (a.dim() == 0 || b.dim() == 0) {
    throw ShapeError("matmul: both operands need at least one dimension, found shapes " +
                     detail::shape_string(a.shape()) + " and " + detail::shape_string(b.shape()));
  }
  Tensor x = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor y = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor out = detail::dispatch1(kMatmul, {x, y});
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

}  // namespace strata
