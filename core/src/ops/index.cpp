// index.cpp — index_select, gather, scatter_add.
#include "derivatives.hpp"
#include "rules.hpp"

#include "ops/batching.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {

using namespace detail::op_vocabulary;

void require_index(OpCall& call, int k) {
  DType t = call.in(k).dtype();
  detail::rules::require_dtype(call, t == DType::i64 || t == DType::i32, "an integer index tensor (i64 or i32)");
  detail::cast_input(call, k, DType::i64);
}

void index_select_rule(OpCall& call) {
  require_index(call, 1);
  if (call.in(1).dim() != 1) {
    throw ShapeError(call.describe() + ": index must be 1-D, found shape " + shape_string(call.in(1).shape()));
  }
  if (call.in(0).dim() == 0) {  // attr_dim accepts dim 0 of a scalar, which has no size to replace
    throw ShapeError(call.describe() + ": input must have at least one dimension");
  }
  Shape shape(call.in(0).shape().begin(), call.in(0).shape().end());
  shape[static_cast<size_t>(call.attr_dim("dim", call.in(0).dim()))] = call.in(1).size(0);
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(shape);
}

/// gather / scatter_add: index has the rank of x and fits inside it off `dim`.
void check_index_shape(const OpCall& call, const Tensor& x, const Tensor& index) {
  int64_t dim = call.attr_dim("dim", x.dim());
  if (index.dim() != x.dim()) {
    throw ShapeError(call.describe() + ": index rank " + std::to_string(index.dim()) + " differs from input rank " +
                     std::to_string(x.dim()));
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim && index.size(d) > x.size(d)) {
      throw ShapeError(call.describe() + ": index shape " + shape_string(index.shape()) +
                       " exceeds input shape " + shape_string(x.shape()) + " at dimension " + std::to_string(d));
    }
  }
}

void gather_rule(OpCall& call) {
  require_index(call, 1);
  check_index_shape(call, call.in(0), call.in(1));
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(1).shape());
}

void scatter_add_rule(OpCall& call) {
  require_index(call, 1);
  check_index_shape(call, call.in(0), call.in(1));
  auto is = call.in(1).shape();
  auto ss = call.in(2).shape();
  if (!std::equal(is.begin(), is.end(), ss.begin(), ss.end())) {
    throw ShapeError(call.describe() + ": index shape " + shape_string(is) + " and source shape " + shape_string(ss) +
                     " differ");
  }
  detail::cast_input(call, 2, call.in(0).dtype());
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(0).shape());
}

int64_t dim_of(const GradContext& c) { return c.attr_int("dim"); }

/// index_select's 1-D index as a scatter_add index for g (of the output's
/// shape): along `dim` it runs through the index, elsewhere it is broadcast.
Tensor spread_index(const GradContext& c, const Tensor& g) {
  Shape shape(static_cast<size_t>(g.dim()), 1);
  shape[static_cast<size_t>(dim_of(c))] = c.in(1).size(0);
  return c.in(1).reshape(shape).expand(g.sizes());
}

/// vmap: an unbatched index selects along the shifted dim of the lanes; a
/// batched one (each lane its own positions) becomes a gather whose index
/// runs through the lanes' positions along the dim and repeats elsewhere.
detail::OpResult index_select_batch(const detail::BatchCall& c) {
  const int64_t dim = c.call.attr_int("dim") + 1;
  const Tensor x = c.lanes_first(0);
  detail::OpResult out;
  if (!c.batched[1]) {
    out.push_back(index_select(x, dim, c.input[1]));
    return out;
  }
  const Tensor& index = c.input[1];  // [lanes, k]
  Shape shape(static_cast<size_t>(x.dim()), 1);
  shape[0] = index.size(0);
  shape[static_cast<size_t>(dim)] = index.size(1);
  Shape full = x.sizes();
  full[static_cast<size_t>(dim)] = index.size(1);
  out.push_back(gather(x, dim, index.reshape(shape).expand(full)));
  return out;
}

// Index tensors (input 1) are not differentiable: an undefined gradient, no tangent.
using detail::derivatives::no_tangent;

// Data movement: complex values move like any other (docs/complex.md), and
// the rules are linear with real coefficients, so they need no conj.
const OpDef& kIndexSelect = detail::define_op({
    .name = "index_select",
    .tags = tag::indexing | tag::along_dim,
    .attrs = kDimAttrs,
    .dtypes = detail::DTypeFamily::any,
    .n_inputs = 2,
    .takes_complex = true,
    .prepare = index_select_rule,
    .batch = index_select_batch,
    .derivative = {.vjp = STRATA_VJP(scatter_add(zeros_like(c.in(0)), dim_of(c), spread_index(c, g), g), Tensor()),
    .jvp = STRATA_JVP(STRATA_TANGENT(index_select(t, dim_of(c), c.in(1))), no_tangent)},
});
const OpDef& kGather = detail::define_op({
    .name = "gather",
    .tags = tag::indexing | tag::along_dim,
    .attrs = kDimAttrs,
    .dtypes = detail::DTypeFamily::any,
    .n_inputs = 2,
    .takes_complex = true,
    .prepare = gather_rule,
    .derivative = {.vjp = STRATA_VJP(scatter_add(zeros_like(c.in(0)), dim_of(c), c.in(1), g), Tensor()),
    .jvp = STRATA_JVP(STRATA_TANGENT(gather(t, dim_of(c), c.in(1))), no_tangent)},
});
const OpDef& kScatterAdd = detail::define_op({
    .name = "scatter_add",
    .tags = tag::indexing | tag::along_dim,
    .attrs = kDimAttrs,
    .dtypes = detail::DTypeFamily::any,
    .n_inputs = 3,
    .takes_complex = true,
    .prepare = scatter_add_rule,
    .empty_passthrough = 0,
    .derivative = {.vjp = STRATA_VJP(g, Tensor(), gather(g, dim_of(c), c.in(1))),
    .jvp = STRATA_JVP(STRATA_TANGENT(t), no_tangent,
                      STRATA_TANGENT(scatter_add(zeros_like(c.in(0)), dim_of(c), c.in(1), t)))},
});

Attrs dim_attr(const Tensor& x, int64_t dim, std::string_view op) {
  if (!x.defined()) throw Error(std::string(op) + ": undefined tensor");
  return {Attr::integer("dim", detail::normalize_dim(dim, x.dim(), op))};
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs attrs = dim_attr(x, dim, "index_select");
  return detail::dispatch1(kIndexSelect, {x, index}, &attrs);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs attrs = dim_attr(x, dim, "gather");
  return detail::dispatch1(kGather, {x, index}, &attrs);
}

Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  Attrs attrs = dim_attr(base, dim, "scatter_add");
  return detail::dispatch1(kScatterAdd, {base, index, src}, &attrs);
}

}  // namespace strata
