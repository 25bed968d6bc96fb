// fused_program_args.hpp — a parsed fused_elementwise program
// (<strata/plugin/fused_program.hpp>) as the GPU kernel's statements
// (fused_eval.hpp). Host code only: fused_kernels.cpp fills the launch's
// arguments with it, tests/gpu_math runs programs through fused_element on
// the CPU with it.
#pragma once

#include <strata/plugin/fused_program.hpp>
#include <type_traits>

#include "fused_eval.hpp"

namespace strata::gpu {

/// A program constant as the compute type of T sees it: a float rounded
/// through T's 16-bit storage first (a constant is a scalar of the inputs'
/// dtype), or the double itself.
template <class T>
inline float constant_f32(double c) {
  const auto f = static_cast<float>(c);
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>) return to_acc(from_float<T>(f));
  return f;
}

/// The statements, counts and output values of `p` in `args` (the caller
/// checked that it has at most kFusedMaxStatements statements); its
/// constants as T's compute type reads them.
template <class T>
void encode_program(const plugin::fused::Program& p, FusedArgs& args) {
  args.n_inputs = p.n_inputs;
  args.n_outputs = static_cast<int32_t>(p.outputs.size());
  for (size_t m = 0; m < p.outputs.size(); ++m) args.result[m] = p.outputs[m];
  args.n_statements = static_cast<int32_t>(p.body.size());
  for (size_t j = 0; j < p.body.size(); ++j) {
    const plugin::fused::Statement& s = p.body[j];
    FusedStatement& d = args.st[j];
    d.op = s.op;
    d.a = s.a.is_constant() ? kFusedConstant : static_cast<uint8_t>(s.a.value);
    d.b = plugin::fused::arity(s.op) == 1 || s.b.is_constant() ? kFusedConstant : static_cast<uint8_t>(s.b.value);
    const plugin::fused::Operand* c =
        s.a.is_constant() ? &s.a : (plugin::fused::arity(s.op) == 2 && s.b.is_constant() ? &s.b : nullptr);
    d.c64 = c != nullptr ? c->constant : 0.0;
    d.c32 = constant_f32<T>(d.c64);
  }
}

}  // namespace strata::gpu
