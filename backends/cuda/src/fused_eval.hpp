// fused_eval.hpp — strata::fused_elementwise on the GPU, one element at a
// time: the program (<strata/plugin/fused_program.hpp>) as statements in the
// kernel's parameters, run over registers with the ops' own functors
// (pointwise_ops.hpp), each statement's value rounded to the storage type as
// the op one by one stores it — so a program gives the bits of its ops run
// one by one. fused.cu launches fused_element over the elements; this file
// is host-device, so tests/gpu_math runs the same code on the CPU. It takes
// the vocabulary from <strata/plugin/fused_ops.hpp>, not the parser's header
// (Debian's hipcc, clang 15, crashes instantiating the program cache's
// std::map in device code).
#pragma once

#include <cstdint>
#include <strata/plugin/fused_ops.hpp>

#include "numeric.hpp"
#include "pointwise_ops.hpp"

namespace strata::gpu {

/// Statements a program may have in the kernel's parameters (4 KiB in all).
inline constexpr int kFusedMaxStatements = 60;
/// The operand index that stands for the statement's constant.
inline constexpr uint8_t kFusedConstant = 0xff;

struct FusedStatement {
  plugin::fused::Op op;
  uint8_t a, b;  // value indices, or kFusedConstant
  uint8_t pad;
  float c32;   // the constant as a float computes it (rounded through a 16-bit storage type first)
  double c64;  // and as a double does
};

/// Everything one launch needs, passed by value as the kernel's parameter.
struct FusedArgs {
  int64_t n = 0;  // elements of each output
  int32_t n_inputs = 0, n_outputs = 0, n_statements = 0;
  uint32_t broadcast = 0;  // bit k: input k is one value
  int32_t result[plugin::fused::kMaxOutputs] = {};  // the value each output is
  const void* in[plugin::fused::kMaxInputs] = {};
  void* out[plugin::fused::kMaxOutputs] = {};
  FusedStatement st[kFusedMaxStatements] = {};
};

/// One statement's op on compute-type values.
template <class C>
STRATA_HD C fused_apply(plugin::fused::Op op, C a, C b) {
  using plugin::fused::Op;
  switch (op) {
    case Op::neg: return ops::Neg{}(a);
    case Op::abs: return ops::Abs{}(a);
    case Op::sign: return ops::Sign{}(a);
    case Op::exp: return ops::Exp{}(a);
    case Op::log: return ops::Log{}(a);
    case Op::log1p: return ops::Log1p{}(a);
    case Op::expm1: return ops::Expm1{}(a);
    case Op::sqrt: return ops::Sqrt{}(a);
    case Op::reciprocal: return ops::Reciprocal{}(a);
    case Op::sin: return ops::Sin{}(a);
    case Op::cos: return ops::Cos{}(a);
    case Op::tanh: return ops::Tanh{}(a);
    case Op::sigmoid: return ops::Sigmoid{}(a);
    case Op::relu: return ops::Relu{}(a);
    case Op::add: return ops::Add{}(a, b);
    case Op::sub: return ops::Sub{}(a, b);
    case Op::mul: return ops::Mul{}(a, b);
    case Op::div: return ops::FloatDiv{}(a, b);
    case Op::tanh_backward: return ops::TanhBackward{}(a, b);
    case Op::sigmoid_backward: return ops::SigmoidBackward{}(a, b);
    case Op::relu_backward: return ops::ReluBackward{}(a, b);
  }
  return a;  // unreachable: fused_kernels.cpp passes parsed programs only
}

/// Element i of every output: the inputs loaded (a broadcast one at 0), the
/// statements run, each value rounded to T, the outputs stored. T is a
/// float storage type (float, double, half_t, bfloat16_t).
template <class T>
STRATA_HD void fused_element(const FusedArgs& p, int64_t i) {
  using C = acc_t<T>;
  C v[plugin::fused::kMaxInputs + kFusedMaxStatements];
  for (int k = 0; k < p.n_inputs; ++k) {
    const T* x = static_cast<const T*>(p.in[k]);
    v[k] = to_acc(x[(p.broadcast >> k) & 1u ? 0 : i]);
  }
  for (int j = 0; j < p.n_statements; ++j) {
    const FusedStatement& s = p.st[j];
    const C c = sizeof(C) == sizeof(double) ? static_cast<C>(s.c64) : static_cast<C>(s.c32);
    const C a = s.a == kFusedConstant ? c : v[s.a];
    const C b = s.b == kFusedConstant ? c : v[s.b];
    v[p.n_inputs + j] = to_acc(from_acc<T>(fused_apply<C>(s.op, a, b)));
  }
  for (int m = 0; m < p.n_outputs; ++m) static_cast<T*>(p.out[m])[i] = from_acc<T>(v[p.result[m]]);
}

}  // namespace strata::gpu
