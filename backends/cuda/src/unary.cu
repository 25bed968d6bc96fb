// unary.cu — elementwise unary ops (docs/ops.md "Elementwise unary"), the
// fused gelu and silu composites, and logical_not. Float ops run for f32,
// f64, f16 and bf16 (the 16-bit ones compute in f32); neg, abs, sign and
// relu also for i32 and i64.
#include <cmath>

#include "eltwise.cuh"
#include "kernels.hpp"
#include "pointwise_ops.hpp"

namespace strata::gpu {
namespace {

// Compute-type operations. C is float, double, int32_t or int64_t. Those of
// fused_elementwise's vocabulary are shared with its interpreter.
using ops::Abs;
using ops::Cos;
using ops::Exp;
using ops::Expm1;
using ops::Log;
using ops::Log1p;
using ops::Neg;
using ops::Reciprocal;
using ops::Relu;
using ops::Sigmoid;
using ops::Sign;
using ops::Sin;
using ops::Sqrt;
using ops::Tanh;
struct Rsqrt { template <class C> __device__ C operator()(C x) const { return C(1) / ::sqrt(x); } };
struct Atan { template <class C> __device__ C operator()(C x) const { return ::atan(x); } };
struct Erf { template <class C> __device__ C operator()(C x) const { return ::erf(x); } };
struct Floor { template <class C> __device__ C operator()(C x) const { return ::floor(x); } };
struct Ceil { template <class C> __device__ C operator()(C x) const { return ::ceil(x); } };
struct Round { template <class C> __device__ C operator()(C x) const { return ::rint(x); } };  // half to even
/// Exact gelu: 0.5 x (1 + erf(x / sqrt 2)).
struct Gelu {
  template <class C>
  __device__ C operator()(C x) const {
    return C(0.5) * x * (C(1) + ::erf(x * C(0.70710678118654752440)));
  }
};
struct Silu { template <class C> __device__ C operator()(C x) const { return x / (C(1) + ::exp(-x)); } };

template <const char* const& Op, class T, class F>
struct UnaryKernel {
  static constexpr const char* op = Op;
  using inputs = Types<T>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) { return map1<T, T>(l, Unary<T, F>{}, Op); }
};

struct LogicalNot {
  static constexpr const char* op = STRATA_OP_LOGICAL_NOT;
  using inputs = Types<bool8>;
  using outputs = Types<bool8>;
  struct F {
    __device__ bool8 operator()(bool8 x) const { return bool8{static_cast<uint8_t>(x.v == 0 ? 1 : 0)}; }
  };
  static strata_status run(Launch& l) { return map1<bool8, bool8>(l, F{}, op); }
};

// Op names as objects with linkage, usable as template arguments.
constexpr const char* kNeg = STRATA_OP_NEG;
constexpr const char* kAbs = STRATA_OP_ABS;
constexpr const char* kSign = STRATA_OP_SIGN;
constexpr const char* kRelu = STRATA_OP_RELU;
constexpr const char* kExp = STRATA_OP_EXP;
constexpr const char* kLog = STRATA_OP_LOG;
constexpr const char* kLog1p = STRATA_OP_LOG1P;
constexpr const char* kExpm1 = STRATA_OP_EXPM1;
constexpr const char* kSqrt = STRATA_OP_SQRT;
constexpr const char* kRsqrt = STRATA_OP_RSQRT;
constexpr const char* kSin = STRATA_OP_SIN;
constexpr const char* kCos = STRATA_OP_COS;
constexpr const char* kAtan = STRATA_OP_ATAN;
constexpr const char* kTanh = STRATA_OP_TANH;
constexpr const char* kSigmoid = STRATA_OP_SIGMOID;
constexpr const char* kErf = STRATA_OP_ERF;
constexpr const char* kFloor = STRATA_OP_FLOOR;
constexpr const char* kCeil = STRATA_OP_CEIL;
constexpr const char* kRound = STRATA_OP_ROUND;
constexpr const char* kReciprocal = STRATA_OP_RECIPROCAL;
constexpr const char* kGelu = STRATA_OP_GELU;
constexpr const char* kSilu = STRATA_OP_SILU;

template <class T>
void add_float_unary(plugin::KernelTable& t) {
  add<UnaryKernel<kNeg, T, Neg>>(t);
  add<UnaryKernel<kAbs, T, Abs>>(t);
  add<UnaryKernel<kSign, T, Sign>>(t);
  add<UnaryKernel<kRelu, T, Relu>>(t);
  add<UnaryKernel<kExp, T, Exp>>(t);
  add<UnaryKernel<kLog, T, Log>>(t);
  add<UnaryKernel<kLog1p, T, Log1p>>(t);
  add<UnaryKernel<kExpm1, T, Expm1>>(t);
  add<UnaryKernel<kSqrt, T, Sqrt>>(t);
  add<UnaryKernel<kRsqrt, T, Rsqrt>>(t);
  add<UnaryKernel<kSin, T, Sin>>(t);
  add<UnaryKernel<kCos, T, Cos>>(t);
  add<UnaryKernel<kAtan, T, Atan>>(t);
  add<UnaryKernel<kTanh, T, Tanh>>(t);
  add<UnaryKernel<kSigmoid, T, Sigmoid>>(t);
  add<UnaryKernel<kErf, T, Erf>>(t);
  add<UnaryKernel<kFloor, T, Floor>>(t);
  add<UnaryKernel<kCeil, T, Ceil>>(t);
  add<UnaryKernel<kRound, T, Round>>(t);
  add<UnaryKernel<kReciprocal, T, Reciprocal>>(t);
  add<UnaryKernel<kGelu, T, Gelu>>(t);
  add<UnaryKernel<kSilu, T, Silu>>(t);
}

template <class T>
void add_integer_unary(plugin::KernelTable& t) {
  add<UnaryKernel<kNeg, T, Neg>>(t);
  add<UnaryKernel<kAbs, T, Abs>>(t);
  add<UnaryKernel<kSign, T, Sign>>(t);
  add<UnaryKernel<kRelu, T, Relu>>(t);
}

}  // namespace

void register_unary_kernels(plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() { add_float_unary<T>(t); });
  for_each_type(Types<int32_t, int64_t>{}, [&]<class T>() { add_integer_unary<T>(t); });
  add<LogicalNot>(t);
}

}  // namespace strata::gpu
