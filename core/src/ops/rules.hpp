// rules.hpp — the shape and dtype rules op definitions are built from.
#pragma once

#include "runtime/dispatch/op.hpp"

namespace strata::detail::rules {

// Complex inputs reach only ops whose OpDef sets takes_complex (dispatch
// refuses the others first); for those, the rules below keep complex dtypes
// as they are.

/// Float math (exp, sin, ...): integer and bool inputs become f32.
void unary_float(OpCall& call);
/// Sign-preserving ops (neg, abs, relu, ...): floats and integers; bool is an error.
void unary_numeric(OpCall& call);
/// Promote both inputs, broadcast; bool with bool is an error.
void binary_arith(OpCall& call);
/// Like binary_arith, but integer results become f32 (true division, pow).
void binary_float(OpCall& call);
/// Promote, broadcast, result bool; `ordered` refuses bool operands.
void compare(OpCall& call);
void compare_ordered(OpCall& call);
/// Inputs cast to bool and broadcast; result bool.
void logical(OpCall& call);
/// Every input float with the same shape as input 0 (composites, backward ops).
void same_shape_float(OpCall& call);

/// Throws DTypeError naming the op unless `ok`.
void require_dtype(const OpCall& call, bool ok, const char* expected);

}  // namespace strata::detail::rules
