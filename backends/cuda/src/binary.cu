// binary.cu — elementwise binary ops, comparisons, logical_and/or and where
// (docs/ops.md). Inputs arrive broadcast to the output's shape (stride 0 on
// broadcast dims); 16-bit floats compute in f32. Integer division by zero is
// a deferred failure reported at the next synchronisation point, and the
// element is 0.
#include <cmath>

#include "eltwise.cuh"
#include "kernels.hpp"
#include "pointwise_ops.hpp"

namespace strata::gpu {
namespace {

using ops::Add;  // fused_elementwise's vocabulary: shared with its interpreter
using ops::FloatDiv;
using ops::Mul;
using ops::Sub;
struct Pow { template <class C> __device__ C operator()(C a, C b) const { return ::pow(a, b); } };
/// NaN propagates (either operand).
struct Maximum {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return (a != a || a > b) ? a : b;
  }
};
struct Minimum {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return (a != a || a < b) ? a : b;
  }
};

struct Eq { template <class C> __device__ bool operator()(C a, C b) const { return a == b; } };
struct Ne { template <class C> __device__ bool operator()(C a, C b) const { return a != b; } };
struct Lt { template <class C> __device__ bool operator()(C a, C b) const { return a < b; } };
struct Le { template <class C> __device__ bool operator()(C a, C b) const { return a <= b; } };
struct Gt { template <class C> __device__ bool operator()(C a, C b) const { return a > b; } };
struct Ge { template <class C> __device__ bool operator()(C a, C b) const { return a >= b; } };

/// Truncating integer division; a zero divisor is reported, never executed.
template <class T>
struct IntegerDiv {
  DeviceFailure* failure;
  __device__ T operator()(T a, T b) const {
    if (b == 0) {
      report_failure(failure, kIntegerDivisionByZero, kTagDiv, static_cast<long long>(a), 0);
      return 0;
    }
    if (b == -1) return static_cast<T>(0) - a;  // INT_MIN / -1 wraps instead of trapping
    return a / b;
  }
};

template <class T>
struct DivKernel {
  static constexpr const char* op = STRATA_OP_DIV;
  using inputs = Types<T, T>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    if constexpr (is_float_storage<T>) {
      return map2<T, T, T>(l, Binary<T, FloatDiv>{}, op);
    } else {
      return map2<T, T, T>(l, IntegerDiv<T>{l.device.failure_device}, op);
    }
  }
};


template <const char* const& Op, bool And>
struct LogicalKernel {
  static constexpr const char* op = Op;
  using inputs = Types<bool8, bool8>;
  using outputs = Types<bool8>;
  struct F {
    __device__ bool8 operator()(bool8 a, bool8 b) const {
      const bool v = And ? (a.v != 0 && b.v != 0) : (a.v != 0 || b.v != 0);
      return bool8{static_cast<uint8_t>(v ? 1 : 0)};
    }
  };
  static strata_status run(Launch& l) { return map2<bool8, bool8, bool8>(l, F{}, Op); }
};

template <class T>
struct WhereKernel {
  static constexpr const char* op = STRATA_OP_WHERE;
  using inputs = Types<bool8, T, T>;
  using outputs = Types<T>;
  struct F {
    __device__ T operator()(bool8 c, T a, T b) const { return c.v != 0 ? a : b; }
  };
  static strata_status run(Launch& l) { return map3<T, bool8, T, T>(l, F{}, op); }
};

constexpr const char* kAdd = STRATA_OP_ADD;
constexpr const char* kSub = STRATA_OP_SUB;
constexpr const char* kMul = STRATA_OP_MUL;
constexpr const char* kPow = STRATA_OP_POW;
constexpr const char* kMaximum = STRATA_OP_MAXIMUM;
constexpr const char* kMinimum = STRATA_OP_MINIMUM;
constexpr const char* kEq = STRATA_OP_EQ;
constexpr const char* kNe = STRATA_OP_NE;
constexpr const char* kLt = STRATA_OP_LT;
constexpr const char* kLe = STRATA_OP_LE;
constexpr const char* kGt = STRATA_OP_GT;
constexpr const char* kGe = STRATA_OP_GE;
constexpr const char* kAnd = STRATA_OP_LOGICAL_AND;
constexpr const char* kOr = STRATA_OP_LOGICAL_OR;

template <class T>
void add_numeric(plugin::KernelTable& t) {
  add<BinaryKernel<kAdd, T, Add>>(t);
  add<BinaryKernel<kSub, T, Sub>>(t);
  add<BinaryKernel<kMul, T, Mul>>(t);
  add<DivKernel<T>>(t);
  add<BinaryKernel<kMaximum, T, Maximum>>(t);
  add<BinaryKernel<kMinimum, T, Minimum>>(t);
  if constexpr (is_float_storage<T>) add<BinaryKernel<kPow, T, Pow>>(t);
  add<CompareKernel<kEq, T, Eq>>(t);
  add<CompareKernel<kNe, T, Ne>>(t);
  add<CompareKernel<kLt, T, Lt>>(t);
  add<CompareKernel<kLe, T, Le>>(t);
  add<CompareKernel<kGt, T, Gt>>(t);
  add<CompareKernel<kGe, T, Ge>>(t);
  add<WhereKernel<T>>(t);
}

}  // namespace

void register_binary_kernels(plugin::KernelTable& t) {
  for_each_type(NumericTypes{}, [&]<class T>() { add_numeric<T>(t); });
  add<CompareKernel<kEq, bool8, Eq>>(t);
  add<CompareKernel<kNe, bool8, Ne>>(t);
  add<WhereKernel<bool8>>(t);
  add<LogicalKernel<kAnd, true>>(t);
  add<LogicalKernel<kOr, false>>(t);
}

}  // namespace strata::gpu
