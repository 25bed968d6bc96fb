// rules.cpp — shared shape and dtype rules.
#include "rules.hpp"

#include <strata/error.hpp>

namespace strata::detail::rules {

void require_dtype(const OpCall& call, bool ok, const char* expected) {
  if (!ok) throw DTypeError(call.describe() + ": expected " + expected);
}

void unary_float(OpCall& call) {
  const DType t = call.in(0).dtype();
  if (!is_floating(t) && !is_complex(t)) cast_input(call, 0, DType::f32);
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(0).shape());
}

void unary_numeric(OpCall& call) {
  require_dtype(call, call.in(0).dtype() != DType::boolean, "a numeric tensor, found bool");
  call.out().dtype = call.in(0).dtype();
  call.out().set_shape(call.in(0).shape());
}

namespace {
void promote_and_broadcast(OpCall& call, DType dtype) {
  auto a = call.in(0).shape();
  auto b = call.in(1).shape();
  if (std::equal(a.begin(), a.end(), b.begin(), b.end())) {  // the common case: no broadcast, no allocation
    call.out().set_shape(a);
    cast_input(call, 0, dtype);
    cast_input(call, 1, dtype);
    return;
  }
  Shape shape = broadcast_shapes(call.in(0).shape(), call.in(1).shape(), call);
  for (int k = 0; k < 2; ++k) {
    cast_input(call, k, dtype);
    expand_input(call, k, shape);
  }
  call.out().set_shape(shape);
}
}  // namespace

void binary_arith(OpCall& call) {
  DType t = promote_types(call.in(0).dtype(), call.in(1).dtype());
  require_dtype(call, t != DType::boolean, "numeric tensors, found bool and bool (cast first)");
  promote_and_broadcast(call, t);
  call.out().dtype = t;
}

void binary_float(OpCall& call) {
  DType t = promote_types(call.in(0).dtype(), call.in(1).dtype());
  if (!is_floating(t) && !is_complex(t)) t = DType::f32;
  promote_and_broadcast(call, t);
  call.out().dtype = t;
}

void compare(OpCall& call) {
  promote_and_broadcast(call, promote_types(call.in(0).dtype(), call.in(1).dtype()));
  call.out().dtype = DType::boolean;
}

void compare_ordered(OpCall& call) {
  require_dtype(call, call.in(0).dtype() != DType::boolean || call.in(1).dtype() != DType::boolean,
                "ordered operands, found bool and bool");
  compare(call);
}

void logical(OpCall& call) {
  Shape shape = call.n_inputs == 2 ? broadcast_shapes(call.in(0).shape(), call.in(1).shape(), call)
                                   : Shape(call.in(0).shape().begin(), call.in(0).shape().end());
  for (int k = 0; k < call.n_inputs; ++k) {
    cast_input(call, k, DType::boolean);
    expand_input(call, k, shape);
  }
  call.out().dtype = DType::boolean;
  call.out().set_shape(shape);
}

void same_shape_float(OpCall& call) {
  DType t = call.in(0).dtype();
  require_dtype(call, is_floating(t), "floating-point tensors");
  auto shape = call.in(0).shape();
  for (int k = 1; k < call.n_inputs; ++k) {
    auto other = call.in(k).shape();
    if (!std::equal(shape.begin(), shape.end(), other.begin(), other.end())) {
      throw ShapeError(call.describe() + ": expected inputs of equal shape, found " + shape_string(shape) + " and " +
                       shape_string(other));
    }
    require_dtype(call, call.in(k).dtype() == t, "inputs of one dtype");
  }
  call.out().dtype = t;
  call.out().set_shape(shape);
}

}  // namespace strata::detail::rules
