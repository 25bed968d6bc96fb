// linalg.cpp — matmul with NumPy semantics.
#include "derivatives.hpp"
#include "rules.hpp"

#include "ops/batching.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {

using namespace detail::op_vocabulary;

constexpr detail::AttrDecl kLinearAttrs[] = {{"activation", STRATA_ATTR_STRING, false}};

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

/// vmap: the lanes of one operand against an unbatched matrix fold into
/// one GEMM — batched A's lanes into its rows ([lanes·m, k] @ [k, n]:
/// per-sample inputs through shared weights), batched B's into its columns
/// ([m, k] @ [k, lanes·n]: jacfwd's tangents). Otherwise the lanes are one
/// more batch dim, broadcast where an operand is unbatched (the per-sample
/// outer products of a linear layer's weight gradient: one batched GEMM;
/// as a broadcast mul they took 17x longer on the CPU plugin).
detail::OpResult matmul_batch(const detail::BatchCall& c) {
  const int64_t rank = c.call.in(0).dim();
  const int64_t m = c.call.in(0).size(-2), k = c.call.in(0).size(-1), n = c.call.in(1).size(-1);
  detail::OpResult out;
  if (c.batched[0] && !c.batched[1] && rank == 2) {
    const Tensor& a = c.input[0];
    out.push_back(matmul(a.reshape({c.lanes * m, k}), c.input[1]).reshape({c.lanes, m, n}));
  } else if (!c.batched[0] && c.batched[1] && rank == 2) {
    const Tensor columns = c.input[1].permute({1, 0, 2}).reshape({k, c.lanes * n});
    out.push_back(matmul(c.input[0], columns).reshape({m, c.lanes, n}).permute({1, 0, 2}));
  } else {
    const Tensor inputs[] = {c.aligned(0, rank), c.aligned(1, rank)};
    return c.run(c.op(), inputs, c.call.attrs);
  }
  return out;
}

// Inputs as prepared: rank >= 2 with equal (broadcast) batch dims. Complex
// operands: the VJP multiplies by the conjugate transposes, g·B^H and A^H·g
// (PyTorch's convention; conj is a no-op on real tensors).
const OpDef& kMatmul = detail::define_op({
    .name = "matmul",
    .tags = tag::linalg,
    .dtypes = detail::DTypeFamily::float_only,
    .autocast = detail::AutocastCategory::lower_precision,
    .n_inputs = 2,
    .takes_complex = true,
    .prepare = matmul_rule,
    .batch = matmul_batch,
    .empty_fill = 0.0,
    .derivative = {.vjp = STRATA_VJP_EACH(STRATA_INPUT_GRAD(matmul_grad_a(g, c.in(0), conj(c.in(1)))),
                           STRATA_INPUT_GRAD(matmul_grad_b(g, conj(c.in(0)), c.in(1)))),
    .jvp = STRATA_JVP(STRATA_TANGENT(matmul(t, c.in(1))), STRATA_TANGENT(matmul(c.in(0), t)))},
    .vjp_reads_outputs = 0,
});

// --- linear: y = act(x @ weightᵀ + bias) -------------------------------------
// The layer nn::Linear runs, as one op so that a backend can run it as one
// GEMM with the bias and activation applied on the way out (oneDNN's bias
// and post-ops on the CPU), and so that autocast lowers the whole layer:
// under bf16 autocast its inputs are cast, the result stays bf16, and the
// next layer needs no cast back (matmul alone left the bias add in f32).

using Activation = FusedActivation;

/// The fused activation, from the STRING attribute "activation" (absent: none).
Activation activation_of(const detail::Attrs* attrs, const std::string& where) {
  const detail::Attr* a = nullptr;
  if (attrs != nullptr) {
    for (const detail::Attr& x : *attrs) {
      if (std::string_view(x.name) == "activation") a = &x;
    }
  }
  if (a == nullptr) return Activation::none;
  if (a->kind != STRATA_ATTR_STRING) {
    throw ValueError(where + ": attribute 'activation' must be a string (\"none\" or \"relu\")");
  }
  if (a->text == "none") return Activation::none;
  if (a->text == "relu") return Activation::relu;
  throw ValueError(where + ": attribute 'activation' = \"" + a->text + "\" is not one of \"none\", \"relu\"");
}

/// x [..., in], weight [out, in], bias [out] -> [..., out], one floating dtype.
void linear_rule(OpCall& call) {
  activation_of(call.attrs, call.describe());
  const Tensor &x = call.in(0), &w = call.in(1), &b = call.in(2);
  DType t = promote_types(promote_types(x.dtype(), w.dtype()), b.dtype());
  detail::rules::require_dtype(call, is_floating(t), "floating-point operands");
  if (x.dim() < 1 || w.dim() != 2 || b.dim() != 1 || x.size(-1) != w.size(1) || b.size(0) != w.size(0)) {
    throw ShapeError(call.describe() + ": expected input [..., in], weight [out, in] and bias [out], found " +
                     detail::shape_string(x.shape()) + ", " + detail::shape_string(w.shape()) + " and " +
                     detail::shape_string(b.shape()));
  }
  Shape out(x.shape().begin(), x.shape().end());
  out.back() = w.size(0);
  for (int i = 0; i < 3; ++i) detail::cast_input(call, i, t);
  call.out().dtype = t;
  call.out().set_shape(out);
}

/// The gradient at the GEMM's output: g through the activation (relu's mask
/// reads the output: y > 0 exactly where x @ wᵀ + b > 0).
Tensor linear_pre_activation(const detail::GradContext& c, const Tensor& g) {
  return activation_of(c.attrs, "linear") == Activation::relu ? relu_backward(g, c.out()) : g;
}
/// Leading dims folded into rows: [rows, features].
Tensor rows_of(const Tensor& t) { return t.reshape({-1, t.size(-1)}); }

/// vmap: batched inputs through shared weights are more leading dims of x
/// (one GEMM); batched weights or bias (ensembles) take the decomposition,
/// whose matmul batches (an empty result asks the driver for it).
detail::OpResult linear_batch(const detail::BatchCall& c) {
  if (c.batched[1] || c.batched[2]) return {};
  const Tensor inputs[] = {c.input[0], c.input[1], c.input[2]};
  return c.run(c.op(), inputs, c.call.attrs);
}

const OpDef& kLinear = detail::define_op({
    .name = "linear",
    .kind = detail::OpKind::composite,
    .tags = tag::linalg,
    .attrs = kLinearAttrs,
    .dtypes = detail::DTypeFamily::float_only,
    .autocast = detail::AutocastCategory::lower_precision,
    .n_inputs = 3,
    .prepare = linear_rule,
    .decompose = [](const OpCall& c) {
      Tensor y = matmul(c.in(0), c.in(1).mT()) + c.in(2);
      return std::vector<Tensor>{activation_of(c.attrs, c.describe()) == Activation::relu ? relu(y) : y};
    },
    .batch = linear_batch,
    .empty_fill = 0.0,
    .derivative = {.vjp = STRATA_VJP_EACH(
        STRATA_INPUT_GRAD(matmul(linear_pre_activation(c, g), c.in(1))),
        STRATA_INPUT_GRAD(matmul(rows_of(linear_pre_activation(c, g)).mT(), rows_of(c.in(0)))),
        STRATA_INPUT_GRAD(sum(rows_of(linear_pre_activation(c, g)), {0}))),
    .jvp = [](const detail::GradContext& c) -> detail::derivatives::Grads {
      using detail::derivatives::plus;
      const Tensor &tx = c.grad(0), &tw = c.grad(1), &tb = c.grad(2);
      Tensor t = plus(plus(tx.defined() ? matmul(tx, c.in(1).mT()) : Tensor(),
                           tw.defined() ? matmul(c.in(0), tw.mT()) : Tensor()),
                      tb);
      if (!t.defined()) return {Tensor()};
      if (!tx.defined() && !tw.defined()) t = t.expand(c.out().sizes());
      return {activation_of(c.attrs, "linear") == Activation::relu ? relu_backward(t, c.out()) : t};
    }},
    .vjp_reads_inputs = 0b011,  // x and the weight; the bias's shape only (relu's mask reads the output)
});

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, FusedActivation activation) {
  if (!x.defined() || !weight.defined() || !bias.defined()) throw Error("linear: undefined tensor");
  detail::Attrs attrs{detail::Attr::string("activation", activation == FusedActivation::relu ? "relu" : "none")};
  return detail::dispatch1(kLinear, {x, weight, bias}, &attrs);
}

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
