// data.cpp — copy, cast, fill and the joins built on copy.
#include "derivatives.hpp"
#include "rules.hpp"

#include "ops/batching.hpp"

#include "runtime/device/device_record.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/dispatch_hooks.hpp"
#include "runtime/tensor/host_data.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata {

namespace {

using namespace detail::op_vocabulary;

constexpr AttrDecl kCastAttrs[] = {{"dtype", STRATA_ATTR_DTYPE}};
constexpr AttrDecl kFillAttrs[] = {{"value", STRATA_ATTR_SCALAR}};
constexpr AttrDecl kCatAttrs[] = {{"dim", STRATA_ATTR_INT}, {"sizes", STRATA_ATTR_INTS}};
constexpr AttrDecl kPadAttrs[] = {{"pads", STRATA_ATTR_INTS}, {"value", STRATA_ATTR_FLOAT}};

void same_meta(OpCall& call) {
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(0).shape());
}

/// Casts between any two real dtypes, from real to complex (imaginary part
/// 0) and between complex dtypes. Complex to real is refused, as NumPy warns
/// and PyTorch warns: it would silently drop the imaginary part.
void cast_rule(OpCall& call) {
  const DType to = call.attr_dtype("dtype");
  const DType from = call.in(0).dtype();
  if (is_complex(from) && !is_complex(to)) {
    throw DTypeError(call.describe() + ": casting complex " + std::string(dtype_name(from)) + " to " +
                     std::string(dtype_name(to)) + " would drop the imaginary part; take real(), imag() or abs()");
  }
  call.out().dtype = to;
  call.out().set_shape(call.in(0).shape());
}

/// A cast's VJP casts the gradient back: a real input of a complex result
/// gets the real part of it (PyTorch's convention: the imaginary part is the
/// gradient of a direction the real input cannot move in). Integer and bool
/// inputs carry no gradient.
Tensor cast_back(const Tensor& g, DType input) {
  if (!is_differentiable(input)) return Tensor();
  return cast(is_complex(input) ? g : real(g), input);
}
/// Its JVP casts the tangent along; integer and bool results carry none.
Tensor cast_along(const Tensor& t, DType output) { return is_differentiable(output) ? cast(t, output) : Tensor(); }

const OpDef& kCopy = detail::define_op({.name = "copy",
                                        .tags = tag::data_movement | tag::pointwise,
                                        .dtypes = detail::DTypeFamily::any,
                                        .takes_complex = true,
                                        .prepare = same_meta,
                                        .derivative = {.vjp = STRATA_VJP(g),
                                        .jvp = STRATA_JVP(STRATA_TANGENT(t))},
                                        .vjp_reads_inputs = 0,
                                        .vjp_reads_outputs = 0});
const OpDef& kCast = detail::define_op({.name = "cast",
                                        .tags = tag::data_movement | tag::pointwise,
                                        .attrs = kCastAttrs,
                                        .dtypes = detail::DTypeFamily::any,
                                        .takes_complex = true,
                                        .prepare = cast_rule,
                                        .derivative = {.vjp = STRATA_VJP(cast_back(g, c.in(0).dtype())),
                                        .jvp = STRATA_JVP(STRATA_TANGENT(cast_along(t, c.out().dtype())))},
                                        .vjp_reads_inputs = 0,  // its dtype only
                                        .vjp_reads_outputs = 0});
// No inputs to differentiate; a complex fill holds (value, 0).
const OpDef& kFill = detail::define_op(
    {.name = "fill", .tags = tag::creation, .attrs = kFillAttrs, .dtypes = detail::DTypeFamily::any, .n_inputs = 0,
    .takes_complex = true});

}  // namespace

namespace {

/// When x is a dense, non-contiguous permutation of a contiguous layout (a
/// transpose, as Linear's weight.mT()), the permutation p ordering its dims
/// by decreasing stride, so that x.permute(p) is contiguous; else empty.
Shape dense_permutation(const Tensor& x) {
  const int64_t rank = x.dim();
  if (rank < 2 || x.is_contiguous()) return {};
  const auto sizes = x.sizes();
  const auto strides = x.strides();
  Shape p(static_cast<size_t>(rank));
  std::iota(p.begin(), p.end(), int64_t{0});
  std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (int64_t k = rank - 1; k >= 0; --k) {
    const int64_t d = p[static_cast<size_t>(k)];
    if (sizes[d] != 1 && strides[d] != expected) return {};
    expected *= sizes[d];
  }
  return p;
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  if (!x.defined()) throw Error("cast: undefined tensor");
  if (x.dtype() == dtype) return x;
  Attrs attrs{Attr::dtype("dtype", dtype)};
  // A transposed tensor keeps its memory layout (PyTorch's preserve_format):
  // the kernel then walks both sides in memory order instead of transposing
  // element by element, and a cast weight is as fast to read as its source.
  if (Shape p = dense_permutation(x); !p.empty()) {
    Shape inverse(p.size());
    for (size_t k = 0; k < p.size(); ++k) inverse[static_cast<size_t>(p[k])] = static_cast<int64_t>(k);
    return detail::dispatch1(kCast, {x.permute(p)}, &attrs).permute(inverse);
  }
  return detail::dispatch1(kCast, {x}, &attrs);
}

void Tensor::copy_(const Tensor& src) {
  if (!defined() || !src.defined()) throw Error("copy_: undefined tensor");
  OpCall call;
  call.op = &kCopy;
  call.device = device();
  call.n_inputs = 2;  // input 1 is only for the device check and messages
  call.inputs[0] = src;
  call.inputs[1] = *this;
  detail::check_same_device(call);
  call.n_inputs = 1;
  Tensor value = src.to(dtype());
  auto from = value.shape();
  auto to = shape();
  if (!std::equal(from.begin(), from.end(), to.begin(), to.end())) value = value.expand(sizes());
  // A source that overlaps the destination in one buffer (x[1:].copy_(x[:-1]))
  // is read whole before anything is written, as if copied first, whatever
  // order a backend's copy kernel walks in: it is snapshotted.
  if (impl()->numel > 0 && value.impl()->storage == impl()->storage && !(value.impl()->offset == impl()->offset &&
                                                     std::ranges::equal(value.strides(), strides()))) {
    auto extent = [](const TensorImpl& t) {
      int64_t last = t.offset;
      for (int32_t d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
      return std::pair<int64_t, int64_t>{t.offset, last};
    };
    const auto [src_first, src_last] = extent(*value.impl());
    const auto [dst_first, dst_last] = extent(*impl());
    if (src_first <= dst_last && dst_first <= src_last) value = value.clone();
  }
  call.inputs[0] = value;
  call.inputs[1] = Tensor();
  call.preset[0] = *this;
  detail::dispatch_call(call);  // bumps this tensor's version once the copy ran
}

// --- to_device: a move between devices through the host (no kernel) ---------

namespace {
/// Differentiable: the gradient moves back, the tangent moves along.
const OpDef& kToDevice = detail::define_op(
    {.name = "to_device",
     .kind = detail::OpKind::transfer,
     .tags = tag::data_movement,
     .dtypes = detail::DTypeFamily::any,
     .derivative = {.vjp = [](const detail::GradContext& c) {
                      return std::vector<Tensor>{c.grad(0).to(c.in(0).device())};
                    },
                    .jvp = [](const detail::GradContext& c) {
                      return std::vector<Tensor>{c.grad(0).defined() ? c.grad(0).to(c.out(0).device()) : Tensor()};
                    }}});
}  // namespace

Tensor Tensor::to(Device target) const {
  if (!defined()) throw Error("to: undefined tensor");
  if (!target.valid() || target == device()) return *this;
  if (detail::dispatch_hooks().unsupported_in_trace != nullptr) {
    detail::dispatch_hooks().unsupported_in_trace("moving a tensor to another device (to)");
  }
  detail::DeviceRecord& dst = detail::device_record(target);
  detail::check_stores(dst, dtype(), "to_device");  // before reading a byte
  Tensor moved;
  if (const uint64_t level = detail::batch_level(*this); level != 0) [[unlikely]] {
    moved = detail::batched_view(*this, level, [&](const Tensor& lanes) { return lanes.to(target); });
  } else {
    std::vector<uint8_t> bytes = detail::read_bytes(*this);
    moved = detail::upload_bytes(bytes.data(), dtype(), shape(), dst, "to_device");
  }
  if (impl()->autograd != nullptr) {
    detail::record_external(kToDevice, std::span<const Tensor>(this, 1), std::span<Tensor>(&moved, 1), nullptr);
  }
  return moved;
}

namespace detail {
/// Creates a tensor on `device` filled with `value` (the fill kernel).
Tensor fill_tensor(DeviceRecord& device, DType dtype, std::span<const int64_t> shape, double value) {
  // The value travels exactly: integral and bool fills as an int64 scalar.
  Attr fill_value = Attr::scalar_real("value", value);  // a complex fill: imaginary part 0
  if (!is_floating(dtype) && !is_complex(dtype)) {
    if (dtype == DType::boolean) {
      fill_value = Attr::scalar_int("value", value != 0.0 ? 1 : 0);
    } else if (std::isfinite(value) && value >= -9223372036854775808.0 && value < 9223372036854775808.0) {
      fill_value = Attr::scalar_int("value", static_cast<int64_t>(value));
    } else {
      throw ValueError("fill: " + std::to_string(value) + " cannot be stored in " + std::string(dtype_name(dtype)));
    }
  }
  Attrs attrs{std::move(fill_value)};
  return dispatch_creation(kFill, device.device(), dtype, shape, attrs);
}
}  // namespace detail

namespace {

/// cat's derivatives: the gradient of input k is its slice of the output
/// gradient; the tangent of the output is the cat of the input tangents.
std::vector<Tensor> cat_vjp(const GradContext& c) {
  int64_t d = c.attr_int("dim");
  const auto& sizes = c.attr_ints("sizes");
  std::vector<Tensor> out(c.inputs.size());
  if (!c.grad(0).defined()) return out;
  int64_t at = 0;
  for (size_t k = 0; k < out.size(); ++k) {
    if (c.needs(static_cast<int>(k))) out[k] = c.grad(0).slice(d, at, at + sizes[k]);
    at += sizes[k];
  }
  return out;
}

std::vector<Tensor> cat_jvp(const GradContext& c) {
  std::vector<Tensor> parts;
  parts.reserve(c.inputs.size());
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& t = c.grads[k];
    parts.push_back(t.defined() ? t : zeros_like(c.inputs[k]));
  }
  return {cat(parts, c.attr_int("dim"))};
}

const OpDef& kCat = detail::define_op(
    {.name = "cat",
     .kind = detail::OpKind::join,
     .tags = tag::data_movement | tag::along_dim,
     .attrs = kCatAttrs,
     .dtypes = detail::DTypeFamily::any,
     .autocast = detail::AutocastCategory::promote,
     .n_inputs = -1, .derivative = {.vjp = cat_vjp, .jvp = cat_jvp}});

/// pad's derivatives: the gradient is the interior slice of the output
/// gradient; the tangent is the padded input tangent (padded with zeros).
Tensor crop(const Tensor& g, const std::vector<int64_t>& pads) {
  Tensor out = g;
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    int64_t d = g.dim() - 1 - static_cast<int64_t>(p);
    out = out.slice(d, pads[2 * p], g.size(d) - pads[2 * p + 1]);
  }
  return out;
}

const OpDef& kPad = detail::define_op(
    {.name = "pad",
     .kind = detail::OpKind::join,
     .tags = tag::data_movement,
     .attrs = kPadAttrs,
     .dtypes = detail::DTypeFamily::any,
     .derivative = {.vjp = [](const GradContext& c) {
                      return std::vector<Tensor>{crop(c.grad(0), c.attr_ints("pads"))};
                    },
                    .jvp = [](const GradContext& c) {
                      return std::vector<Tensor>{pad(c.grad(0), c.attr_ints("pads"), 0.0)};
                    }}});

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw ShapeError("cat: expected at least one tensor");
  const Tensor& first = tensors.front();
  if (!first.defined()) throw Error("cat: undefined tensor");
  int64_t d = detail::normalize_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  Shape shape = first.sizes();
  int64_t total = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    if (!t.defined()) throw Error("cat: tensor " + std::to_string(k) + " is undefined");
    if (t.device() != first.device()) {
      throw DeviceError("cat: tensors on " + first.device().str() + " and " + t.device().str() + " (tensor " +
                        std::to_string(k) + "); move one explicitly with to()");
    }
    bool fits = t.dim() == first.dim();
    for (int64_t j = 0; fits && j < t.dim(); ++j) fits = j == d || t.size(j) == first.size(j);
    if (!fits) {
      throw ShapeError("cat: tensor " + std::to_string(k) + " has shape " + detail::shape_string(t.shape()) +
                       ", incompatible with " + detail::shape_string(first.shape()) + " along dim " +
                       std::to_string(d));
    }
    dtype = promote_types(dtype, t.dtype());
    if (__builtin_add_overflow(total, t.size(d), &total)) {
      throw ShapeError("cat: the joined size along dim " + std::to_string(d) + " of " + std::to_string(tensors.size()) +
                       " tensors of shape " + detail::shape_string(first.shape()) + " (first) overflows int64");
    }
  }
  shape[static_cast<size_t>(d)] = total;
  detail::checked_numel("cat", shape, dtype);
  // Promote first (differentiably), so the node's inputs have the output's dtype.
  std::vector<Tensor> inputs;
  inputs.reserve(tensors.size());
  std::vector<int64_t> sizes;
  sizes.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    inputs.push_back(cast(t, dtype));
    sizes.push_back(t.size(d));
  }
  Tensor out;
  if (const uint64_t level = detail::top_batch_level(inputs); level != 0) [[unlikely]] {
    // vmap: the lanes joined past the lanes' dim (unbatched parts expanded).
    detail::in_lanes_scope(level, [&] {
      std::vector<Tensor> lanes;
      for (const Tensor& t : inputs) lanes.push_back(detail::lanes_first(t, level));
      out = detail::make_batched(cat(lanes, d + 1), level);
    });
  } else {
    out = empty(shape, {.dtype = dtype, .device = first.device()});
    detail::InternalWork internal;
    int64_t at = 0;
    for (const Tensor& t : inputs) {
      int64_t n = t.size(d);
      if (n > 0) out.slice(d, at, at + n).copy_(t);
      at += n;
    }
  }
  Attrs attrs{Attr::integer("dim", d), Attr::list("sizes", std::move(sizes))};
  detail::record_external(kCat, inputs, std::span<Tensor>(&out, 1), &attrs);
  return out;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  if (!x.defined()) throw Error("pad: undefined tensor");
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size()) > 2 * x.dim()) {
    throw ValueError("pad: expected an even number of paddings, at most 2 per dim (" + std::to_string(2 * x.dim()) +
                     " for shape " + detail::shape_string(x.shape()) + "), got " + std::to_string(pads.size()));
  }
  Shape shape = x.sizes();
  for (size_t p = 0; p < pads.size(); ++p) {
    if (pads[p] < 0) {
      throw ValueError("pad: padding " + std::to_string(p) + " is " + std::to_string(pads[p]) +
                       "; paddings must be >= 0 (use slice to crop)");
    }
    if (__builtin_add_overflow(shape[shape.size() - 1 - p / 2], pads[p], &shape[shape.size() - 1 - p / 2])) {
      throw ShapeError("pad: padding shape " + detail::shape_string(x.shape()) + " by " + detail::shape_string(pads) +
                       " overflows int64");
    }
  }
  detail::checked_numel("pad", shape, x.dtype());
  Tensor out;
  if (const uint64_t level = detail::batch_level(x); level != 0) [[unlikely]] {
    out = detail::batched_view(x, level, [&](const Tensor& lanes) { return pad(lanes, pads, value); });
  } else {
    detail::InternalWork internal;
    out = full(shape, value, {.dtype = x.dtype(), .device = x.device()});
    if (x.numel() > 0) crop(out, pads).copy_(x);
  }
  Attrs attrs{Attr::list("pads", pads), Attr::real("value", value)};
  detail::record_external(kPad, std::span<const Tensor>(&x, 1), std::span<Tensor>(&out, 1), &attrs);
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw ShapeError("stack: expected at least one tensor");
  int64_t d = detail::normalize_dim(dim, tensors.front().dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    if (!t.defined()) throw Error("stack: undefined tensor");
    if (t.sizes() != tensors.front().sizes()) {
      throw ShapeError("stack: expected tensors of equal shape, found " + detail::shape_string(tensors.front().shape()) +
                       " and " + detail::shape_string(t.shape()));
    }
  }
  Shape shape = tensors.front().sizes();
  shape.insert(shape.begin() + d, static_cast<int64_t>(tensors.size()));
  detail::checked_numel("stack", shape, tensors.front().dtype());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

}  // namespace strata
