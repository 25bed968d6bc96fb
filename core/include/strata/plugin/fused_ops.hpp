// fused_ops.hpp — the vocabulary and limits of strata::fused_elementwise's
// programs (docs/ops.md, "Fused elementwise programs"): the ops a statement
// may name, their arity, and how many inputs and outputs a program has.
// <strata/plugin/fused_program.hpp> (the program, its parser and cache)
// includes it; a GPU kernel that interprets programs includes only this
// one, which has nothing but constants and a name lookup (no containers, so
// device compilers see no host-only templates). Header-only, C++17.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::plugin::fused {

/// The vocabulary: every op a program may name, and its arity.
enum class Op : uint8_t {
  // unary
  neg,
  abs,
  sign,
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  reciprocal,
  sin,
  cos,
  tanh,
  sigmoid,
  relu,
  // binary
  add,
  sub,
  mul,
  div,
  // (grad, saved) backward helpers, as the op set defines them
  tanh_backward,
  sigmoid_backward,
  relu_backward,
};
inline constexpr int kOpCount = static_cast<int>(Op::relu_backward) + 1;
inline constexpr const char* kOpNames[kOpCount] = {
    "neg",          "abs",  "sign",    "exp",  "log", "log1p", "expm1", "sqrt", "reciprocal",    "sin",
    "cos",          "tanh", "sigmoid", "relu", "add", "sub",   "mul",   "div",  "tanh_backward", "sigmoid_backward",
    "relu_backward"};
inline constexpr int arity(Op op) { return op < Op::add ? 1 : 2; }
inline const char* name(Op op) { return kOpNames[static_cast<int>(op)]; }
/// The op of that name, or false.
inline bool op_named(std::string_view s, Op& out) {
  for (int k = 0; k < kOpCount; ++k) {
    if (s == kOpNames[k]) {
      out = static_cast<Op>(k);
      return true;
    }
  }
  return false;
}

inline constexpr int kMaxInputs = 8;   // the op's inputs (the op set's limit)
inline constexpr int kMaxOutputs = 6;  // and outputs

}  // namespace strata::plugin::fused
