// views.cpp — ops that only change shape, strides and offset.
#include <algorithm>
#include <optional>
#include <strata/error.hpp>
#include <strata/ops.hpp>

#include "ops/batching.hpp"
#include "runtime/dispatch/dispatch_hooks.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/tensor/tensor_impl.hpp"

namespace strata {

using detail::Attr;
using detail::Attrs;
using detail::GradContext;
using detail::make_view;
using detail::normalize_dim;
using detail::OpDef;
using detail::OpKind;
using detail::shape_string;

namespace {

namespace tag = detail::op_tag;
constexpr detail::AttrDecl kPermuteAttrs[] = {{"dims", STRATA_ATTR_INTS}};
constexpr detail::AttrDecl kSliceAttrs[] = {
    {"dim", STRATA_ATTR_INT}, {"start", STRATA_ATTR_INT}, {"step", STRATA_ATTR_INT}};
constexpr detail::AttrDecl kSelectAttrs[] = {{"dim", STRATA_ATTR_INT}, {"index", STRATA_ATTR_INT}};

// --- views as differentiable ops (no kernel: kind view) ---------------------

/// The same view applied to a tangent (every view is linear).
template <Tensor (*Apply)(const Tensor&, const GradContext&)>
std::vector<Tensor> view_jvp(const GradContext& c) {
  return {c.grad(0).defined() ? Apply(c.grad(0), c) : Tensor()};
}

Tensor reshape_like_output(const Tensor& t, const GradContext& c) { return t.reshape(c.out(0).sizes()); }
Tensor permute_as_forward(const Tensor& t, const GradContext& c) { return t.permute(c.attr_ints("dims")); }
Tensor slice_as_forward(const Tensor& t, const GradContext& c) {
  int64_t dim = c.attr_int("dim");
  int64_t start = c.attr_int("start");
  int64_t step = c.attr_int("step");
  return t.slice(dim, start, start + (c.out(0).size(dim) - 1) * step + 1, step);
}
Tensor select_as_forward(const Tensor& t, const GradContext& c) {
  return t.select(c.attr_int("dim"), c.attr_int("index"));
}
Tensor expand_as_forward(const Tensor& t, const GradContext& c) { return t.expand(c.out(0).sizes()); }

/// Gradient of a strided pick along `dim` (slice, select): the gradient
/// placed back in zeros of the base's shape. A contiguous range (step 1) is
/// a pad — one pass that writes the zeros and copies the range, whose own
/// derivative is the slice again; a strided one scatters into zeros. Built
/// from ops, so it is differentiable again.
Tensor scatter_back(const Tensor& base, const Tensor& grad, int64_t dim, int64_t start, int64_t step) {
  int64_t n = grad.size(dim);
  if (step == 1) {
    // pad's pairs run from the last dim backwards: (before, after) per dim.
    std::vector<int64_t> pads(static_cast<size_t>(2 * (grad.dim() - dim)), 0);
    pads[pads.size() - 2] = start;
    pads[pads.size() - 1] = base.size(dim) - start - n;
    return pad(grad, pads, 0.0);
  }
  Tensor index = arange(static_cast<double>(start), static_cast<double>(start + n * step), static_cast<double>(step),
                        {.dtype = DType::i64, .device = grad.device()});
  Shape view(static_cast<size_t>(grad.dim()), 1);
  view[static_cast<size_t>(dim)] = n;
  return scatter_add(zeros_like(base), dim, index.reshape(view).expand(grad.sizes()), grad);
}

const OpDef& kReshapeView = detail::define_op(
    {.name = "reshape",
     .kind = OpKind::view,
     .tags = tag::view,
     .dtypes = detail::DTypeFamily::any,
     .derivative = {.vjp = [](const GradContext& c) { return std::vector<Tensor>{c.grad(0).reshape(c.in(0).sizes())}; },
     .jvp = view_jvp<reshape_like_output>}});

const OpDef& kPermuteView = detail::define_op({.name = "permute",
                                               .kind = OpKind::view,
                                               .tags = tag::view,
                                               .attrs = kPermuteAttrs,
                                               .dtypes = detail::DTypeFamily::any,
                                               .derivative = {.vjp = [](const GradContext& c) {
                                                     const auto& dims = c.attr_ints("dims");
                                                     Shape inverse(dims.size());
                                                     for (size_t k = 0; k < dims.size(); ++k)
                                                       inverse[static_cast<size_t>(dims[k])] = static_cast<int64_t>(k);
                                                     return std::vector<Tensor>{c.grad(0).permute(inverse)};
                                                   },
                                               .jvp = view_jvp<permute_as_forward>}});

const OpDef& kSliceView =
    detail::define_op({.name = "slice",
                       .kind = OpKind::view,
                       .tags = tag::view,
                       .attrs = kSliceAttrs,
                       .dtypes = detail::DTypeFamily::any,
                       .derivative = {.vjp = [](const GradContext& c) {
                             return std::vector<Tensor>{scatter_back(c.in(0), c.grad(0), c.attr_int("dim"),
                                                                     c.attr_int("start"), c.attr_int("step"))};
                           },
                       .jvp = view_jvp<slice_as_forward>}});

const OpDef& kSelectView = detail::define_op(
    {.name = "select",
     .kind = OpKind::view,
     .tags = tag::view,
     .attrs = kSelectAttrs,
     .dtypes = detail::DTypeFamily::any,
     .derivative = {.vjp = [](const GradContext& c) {
           int64_t dim = c.attr_int("dim");
           return std::vector<Tensor>{scatter_back(c.in(0), c.grad(0).unsqueeze(dim), dim, c.attr_int("index"), 1)};
         },
     .jvp = view_jvp<select_as_forward>}});

const OpDef& kExpandView = detail::define_op({.name = "expand",
                                              .kind = OpKind::view,
                                              .tags = tag::view,
                                              .dtypes = detail::DTypeFamily::any,
                                              .derivative = {.vjp = [](const GradContext& c) {
                                                    // Sum over the new leading dims and the dims that were broadcast
                                                    // from 1.
                                                    Tensor g = c.grad(0);
                                                    int64_t lead = g.dim() - c.in(0).dim();
                                                    Shape dims;
                                                    for (int64_t d = 0; d < g.dim(); ++d) {
                                                      if (d < lead || (c.in(0).size(d - lead) == 1 && g.size(d) != 1))
                                                        dims.push_back(d);
                                                    }
                                                    if (!dims.empty()) g = sum(g, dims, true);
                                                    return std::vector<Tensor>{g.reshape(c.in(0).sizes())};
                                                  },
                                              .jvp = view_jvp<expand_as_forward>}});

/// Records the view on the graph when its base is tracked; `attrs` builds
/// the attributes only then, keeping untracked views allocation-free.
template <typename MakeAttrs>
Tensor tracked(const OpDef& op, const Tensor& base, Tensor view, MakeAttrs attrs) {
  std::span<const Tensor> inputs(&base, 1);
  if (detail::wants_external(inputs)) {
    Attrs a = attrs();
    detail::record_external(op, inputs, std::span<Tensor>(&view, 1), &a);
  }
  return view;
}

Attrs no_attrs() { return {}; }  // for views whose derivative needs no attributes

/// tracked() for a view function: a batched base (vmap) gets the same view
/// of its lanes (`on_lanes`, past the lanes' dim) instead of `view`, which
/// checked the arguments against one lane.
template <typename MakeAttrs, typename OnLanes>
Tensor tracked_view(const OpDef& op, const Tensor& base, Tensor view, MakeAttrs attrs, OnLanes on_lanes) {
  if (const uint64_t level = detail::batch_level(base); level != 0) [[unlikely]] {
    view = detail::batched_view(base, level, on_lanes);
  }
  return tracked(op, base, std::move(view), attrs);
}

/// `shape` with the lanes' count in front.
Shape with_lanes(const Tensor& lanes, std::span<const int64_t> shape) {
  Shape out(shape.begin(), shape.end());
  out.insert(out.begin(), lanes.size(0));
  return out;
}

const TensorImpl& impl_of(const Tensor& t, const char* op) {
  if (!t.defined()) throw Error(std::string(op) + ": undefined tensor");
  return *t.impl();
}

/// The shape and strides of `impl` without dimension `d` (select, squeeze).
std::pair<Shape, Shape> without_dim(const TensorImpl& impl, size_t d) {
  Shape shape;
  Shape strides;
  for (size_t k = 0; k < static_cast<size_t>(impl.rank); ++k) {
    if (k == d) continue;
    shape.push_back(impl.shape[k]);
    strides.push_back(impl.strides[k]);
  }
  return {std::move(shape), std::move(strides)};
}

/// Resolves a single -1 and checks the element count.
Shape infer_shape(const Shape& requested, const TensorImpl& impl, const char* op) {
  // A rank the descriptor cannot hold is refused as requested (checked_numel
  // reports the rank before anything else).
  if (requested.size() > STRATA_MAX_RANK) detail::checked_numel(op, requested, impl.dtype);
  const int64_t numel = impl.numel;
  Shape shape = requested;
  int64_t known = 1;  // product of the given dims, zero-size ones counted as 1
  bool has_zero = false;
  std::optional<size_t> infer;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      if (infer) throw ShapeError(std::string(op) + ": only one dimension can be -1, got " + shape_string(requested));
      infer = d;
    } else if (shape[d] < 0) {
      throw ShapeError(std::string(op) + ": invalid dimension " + std::to_string(shape[d]) + " in " +
                       shape_string(requested));
    } else if (shape[d] == 0) {
      has_zero = true;
    } else if (__builtin_mul_overflow(known, shape[d], &known)) {
      throw ShapeError(std::string(op) + ": cannot reshape tensor of shape " + shape_string(impl.sizes()) + " into " +
                       shape_string(requested) + ": the element count of " + shape_string(requested) +
                       " overflows int64");
    }
  }
  if (has_zero) known = 0;
  if (infer) {
    if (known == 0 || numel % known != 0) {
      throw ShapeError(std::string(op) + ": cannot reshape tensor of shape " + shape_string(impl.sizes()) + " (" +
                       std::to_string(numel) + " elements) into " + shape_string(requested));
    }
    shape[*infer] = numel / known;
    known *= shape[*infer];
  }
  if (known != numel) {
    throw ShapeError(std::string(op) + ": cannot reshape tensor of shape " + shape_string(impl.sizes()) + " (" +
                     std::to_string(numel) + " elements) into " + shape_string(requested) + " (" +
                     std::to_string(known) + " elements)");
  }
  return shape;
}

/// Strides that view `impl` with `shape` without copying, if any (the
/// algorithm of PyTorch's computeStride: split or merge runs of dims that
/// are contiguous with respect to each other).
std::optional<Shape> view_strides(const TensorImpl& impl, const Shape& shape) {
  Shape strides(shape.size());
  if (impl.numel == 0 || impl.rank == 0) {  // nothing to preserve: any layout views it
    detail::contiguous_strides(shape, strides.data());
    return strides;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = impl.rank > 0 ? impl.strides[static_cast<size_t>(impl.rank - 1)] : 1;
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = impl.rank - 1; d >= 0; --d) {
    tensor_numel *= impl.shape[static_cast<size_t>(d)];
    if (d == 0 || (impl.shape[static_cast<size_t>(d - 1)] != 1 &&
                   impl.strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[static_cast<size_t>(view_d)] == 1)) {
        strides[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = impl.strides[static_cast<size_t>(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

namespace detail {
/// An alias of x (same storage and geometry) that keeps x's gradient history
/// through an identity view: transforms attach tangents or watch it without
/// touching the caller's tensor.
Tensor tracked_alias(const Tensor& x) {
  if (!x.defined()) throw Error("undefined tensor");
  return tracked(kReshapeView, x, make_view(x, x.shape(), x.strides(), x.offset()), no_attrs);
}
}  // namespace detail

Tensor Tensor::view(const Shape& requested) const {
  const TensorImpl& impl = impl_of(*this, "view");
  Shape shape = infer_shape(requested, impl, "view");
  std::optional<Shape> strides = view_strides(impl, shape);
  if (!strides) {
    throw ShapeError("view: shape " + shape_string(shape) + " is incompatible with the strides of a tensor of shape " +
                     shape_string(impl.sizes()) + "; use reshape(), which copies");
  }
  return tracked_view(kReshapeView, *this, make_view(*this, shape, *strides, impl.offset, "view"), no_attrs,
                      [&](const Tensor& lanes) { return lanes.view(with_lanes(lanes, shape)); });
}

Tensor Tensor::reshape(const Shape& requested) const {
  const TensorImpl& impl = impl_of(*this, "reshape");
  Shape shape = infer_shape(requested, impl, "reshape");
  if (std::optional<Shape> strides = view_strides(impl, shape))
    return tracked_view(kReshapeView, *this, make_view(*this, shape, *strides, impl.offset, "reshape"), no_attrs,
                        [&](const Tensor& lanes) { return lanes.reshape(with_lanes(lanes, shape)); });
  return contiguous().view(shape);
}

Tensor Tensor::flatten() const { return reshape({-1}); }

Tensor Tensor::permute(const Shape& dims) const {
  const TensorImpl& impl = impl_of(*this, "permute");
  if (static_cast<int64_t>(dims.size()) != impl.rank) {
    throw ShapeError("permute: expected " + std::to_string(impl.rank) + " dims for a tensor of shape " +
                     shape_string(impl.sizes()) + ", got " + shape_string(dims));
  }
  Shape shape(dims.size());
  Shape strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape normalized(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    auto src = static_cast<size_t>(normalize_dim(dims[d], impl.rank, "permute"));
    if (seen[src]) throw ShapeError("permute: dims " + shape_string(dims) + " repeat dimension " + std::to_string(src));
    seen[src] = true;
    normalized[d] = static_cast<int64_t>(src);
    shape[d] = impl.shape[src];
    strides[d] = impl.strides[src];
  }
  return tracked_view(
      kPermuteView, *this, make_view(*this, shape, strides, impl.offset, "permute"),
      [&] { return Attrs{Attr::list("dims", normalized)}; },
      [&](const Tensor& lanes) {
        Shape order{0};
        for (int64_t d : normalized) order.push_back(d + 1);
        return lanes.permute(order);
      });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  const TensorImpl& impl = impl_of(*this, "transpose");
  Shape dims(static_cast<size_t>(impl.rank));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
  std::swap(dims[static_cast<size_t>(normalize_dim(dim0, impl.rank, "transpose"))],
            dims[static_cast<size_t>(normalize_dim(dim1, impl.rank, "transpose"))]);
  return permute(dims);
}

Tensor Tensor::mT() const {
  if (dim() < 2) throw ShapeError("mT: expected a tensor with at least 2 dims, found shape " + shape_string(shape()));
  return transpose(-2, -1);
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  const TensorImpl& impl = impl_of(*this, "slice");
  auto d = static_cast<size_t>(normalize_dim(dim, impl.rank, "slice"));
  int64_t n = impl.shape[d];
  auto where = [&] {
    return " for dimension " + std::to_string(d) + " of size " + std::to_string(n) + " (tensor of shape " +
           shape_string(impl.sizes()) + ")";
  };
  if (step <= 0) throw IndexError("slice: step must be positive, got " + std::to_string(step));
  if (start < -n || start > n) throw IndexError("slice: start " + std::to_string(start) + " out of range" + where());
  if (end < -n || end > n) throw IndexError("slice: end " + std::to_string(end) + " out of range" + where());
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (end < start) {
    throw IndexError("slice: end " + std::to_string(end) + " precedes start " + std::to_string(start) + where());
  }
  Shape shape(impl.shape.begin(), impl.shape.begin() + impl.rank);
  Shape strides(impl.strides.begin(), impl.strides.begin() + impl.rank);
  shape[d] = (end - start + step - 1) / step;
  strides[d] = impl.strides[d] * step;
  Tensor view = make_view(*this, shape, strides, impl.offset + start * impl.strides[d], "slice");
  return tracked_view(
      kSliceView, *this, std::move(view),
      [&] {
        return Attrs{Attr::integer("dim", static_cast<int64_t>(d)), Attr::integer("start", start),
                     Attr::integer("step", step)};
      },
      [&](const Tensor& lanes) { return lanes.slice(static_cast<int64_t>(d) + 1, start, end, step); });
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  const TensorImpl& impl = impl_of(*this, "select");
  auto d = static_cast<size_t>(normalize_dim(dim, impl.rank, "select"));
  int64_t n = impl.shape[d];
  if (index < -n || index >= n) {
    throw IndexError("select: index " + std::to_string(index) + " out of range for dimension " + std::to_string(d) +
                     " of size " + std::to_string(n) + " (tensor of shape " + shape_string(impl.sizes()) + ")");
  }
  if (index < 0) index += n;
  auto [shape, strides] = without_dim(impl, d);
  Tensor view = make_view(*this, shape, strides, impl.offset + index * impl.strides[d], "select");
  return tracked_view(
      kSelectView, *this, std::move(view),
      [&] { return Attrs{Attr::integer("dim", static_cast<int64_t>(d)), Attr::integer("index", index)}; },
      [&](const Tensor& lanes) { return lanes.select(static_cast<int64_t>(d) + 1, index); });
}

Tensor Tensor::expand(const Shape& requested) const {
  const TensorImpl& impl = impl_of(*this, "expand");
  if (static_cast<int64_t>(requested.size()) < impl.rank) {
    throw ShapeError("expand: cannot expand shape " + shape_string(impl.sizes()) + " to fewer dims " +
                     shape_string(requested));
  }
  size_t lead = requested.size() - static_cast<size_t>(impl.rank);
  Shape shape(requested.size());
  Shape strides(requested.size(), 0);
  for (size_t d = 0; d < requested.size(); ++d) {
    if (d < lead) {
      if (requested[d] < 0)
        throw ShapeError("expand: -1 not allowed for new leading dim in " + shape_string(requested));
      shape[d] = requested[d];
      continue;
    }
    int64_t have = impl.shape[d - lead];
    int64_t want = requested[d] == -1 ? have : requested[d];
    if (have == want) {
      shape[d] = have;
      strides[d] = impl.strides[d - lead];
    } else if (have == 1 && want >= 0) {
      shape[d] = want;
    } else {
      throw ShapeError("expand: cannot expand shape " + shape_string(impl.sizes()) + " to " + shape_string(requested) +
                       " (dimension " + std::to_string(d) + ": " + std::to_string(have) + " vs " +
                       std::to_string(want) + ")");
    }
  }
  return tracked_view(kExpandView, *this, make_view(*this, shape, strides, impl.offset, "expand"), no_attrs,
                      [&](const Tensor& lanes) {
                        // New leading dims go after the lanes' dim.
                        Shape ones = with_lanes(lanes, impl.sizes());
                        ones.insert(ones.begin() + 1, lead, 1);
                        return lanes.reshape(ones).expand(with_lanes(lanes, shape));
                      });
}

Tensor Tensor::squeeze() const {
  const TensorImpl& impl = impl_of(*this, "squeeze");
  Shape shape;
  Shape strides;
  for (size_t d = 0; d < static_cast<size_t>(impl.rank); ++d) {
    if (impl.shape[d] == 1) continue;
    shape.push_back(impl.shape[d]);
    strides.push_back(impl.strides[d]);
  }
  return tracked_view(kReshapeView, *this, make_view(*this, shape, strides, impl.offset, "squeeze"), no_attrs,
                      [&](const Tensor& lanes) { return lanes.reshape(with_lanes(lanes, shape)); });
}

Tensor Tensor::squeeze(int64_t dim) const {
  const TensorImpl& impl = impl_of(*this, "squeeze");
  auto d = static_cast<size_t>(normalize_dim(dim, impl.rank, "squeeze"));
  if (impl.shape[d] != 1) return *this;
  auto [shape, strides] = without_dim(impl, d);
  return tracked_view(kReshapeView, *this, make_view(*this, shape, strides, impl.offset, "squeeze"), no_attrs,
                      [&](const Tensor& lanes) { return lanes.squeeze(static_cast<int64_t>(d) + 1); });
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  const TensorImpl& impl = impl_of(*this, "unsqueeze");
  auto d = static_cast<size_t>(normalize_dim(dim, impl.rank + 1, "unsqueeze"));
  Shape shape(impl.shape.begin(), impl.shape.begin() + impl.rank);
  Shape strides(impl.strides.begin(), impl.strides.begin() + impl.rank);
  int64_t stride = d < static_cast<size_t>(impl.rank) ? impl.shape[d] * impl.strides[d] : 1;
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(d), 1);
  strides.insert(strides.begin() + static_cast<std::ptrdiff_t>(d), stride);
  return tracked_view(kReshapeView, *this, make_view(*this, shape, strides, impl.offset, "unsqueeze"), no_attrs,
                      [&](const Tensor& lanes) { return lanes.unsqueeze(static_cast<int64_t>(d) + 1); });
}

}  // namespace strata
