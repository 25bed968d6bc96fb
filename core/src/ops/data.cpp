// data.cpp — copy, cast, fill and the joins built on copy.
#include "derivatives.hpp"
#include "rules.hpp"

#include "../autograd/graph.hpp"
#include "../device_record.hpp"
#include "../runtime_internal.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

namespace strata {

namespace {
using detail::Attr;
using detail::Attrs;
using detail::OpCall;
using detail::OpDef;

void same_meta(OpCall& call) {
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(0).shape());
}

void cast_rule(OpCall& call) {
  call.out().dtype = static_cast<DType>(call.attr_int("dtype"));
  call.out().set_shape(call.in(0).shape());
}

/// A cast's derivative casts back (VJP) or along (JVP); integer and bool
/// sides carry no gradient.
Tensor cast_if_floating(const Tensor& t, DType dtype) { return is_floating(dtype) ? cast(t, dtype) : Tensor(); }

const OpDef& kCopy = detail::define_op({.name = "copy",
                                        .prepare = same_meta,
                                        .vjp = STRATA_VJP(g),
                                        .jvp = STRATA_JVP(STRATA_TANGENT(t))});
const OpDef& kCast = detail::define_op({.name = "cast",
                                        .prepare = cast_rule,
                                        .vjp = STRATA_VJP(cast_if_floating(g, c.in(0).dtype())),
                                        .jvp = STRATA_JVP(STRATA_TANGENT(cast_if_floating(t, c.out().dtype())))});
const OpDef& kFill = detail::define_op({.name = "fill", .n_inputs = 0});  // no inputs to differentiate

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  if (!x.defined()) throw Error("cast: undefined tensor");
  if (x.dtype() == dtype) return x;
  Attrs attrs{Attr::integer("dtype", static_cast<int64_t>(dtype))};
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
  call.inputs[0] = value;
  call.inputs[1] = Tensor();
  call.preset[0] = *this;
  detail::bump_version(*this);  // before recording, which saves the new version
  detail::dispatch_call(call);
}

namespace detail {
/// Creates a tensor on `device` filled with `value` (the fill kernel).
Tensor fill_tensor(DeviceRecord& device, DType dtype, std::span<const int64_t> shape, double value) {
  OpCall call;
  call.op = &kFill;
  call.device = device.device();
  call.n_inputs = 0;
  call.out().dtype = dtype;
  call.out().set_shape(shape);
  Attrs attrs{Attr::real("value", value)};
  call.attrs = &attrs;
  return dispatch_call(call)[0];
}
}  // namespace detail

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
    total += t.size(d);
  }
  shape[static_cast<size_t>(d)] = total;
  Tensor out = empty(shape, {.dtype = dtype, .device = first.device()});
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    int64_t n = t.size(d);
    if (n > 0) out.slice(d, at, at + n).copy_(t);
    at += n;
  }
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
    parts.push_back(t.unsqueeze(d));
  }
  return cat(parts, d);
}

}  // namespace strata
