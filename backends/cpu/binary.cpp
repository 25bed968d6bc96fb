// binary.cpp — elementwise binary primitives, comparisons, logical ops and
// `where` (docs/ops.md, "Elementwise binary", "Comparisons", "Selection").
#include "elementwise.hpp"
#include "pointwise.hpp"

#include <cmath>
#include <type_traits>

namespace strata::cpu {
namespace {

// One functor per op: BINARY(Type, op name, result type, expression of a and b).
#define STRATA_CPU_BINARY(Type, op, Result, ...)                    \
  struct Type {                                                      \
    static constexpr const char* name = op;                          \
    template <class C>                                               \
    Result operator()(C a, C b) const {                              \
      return __VA_ARGS__;                                            \
    }                                                                \
  }

STRATA_CPU_BINARY(Pow, STRATA_OP_POW, C, std::pow(a, b));
STRATA_CPU_BINARY(Maximum, STRATA_OP_MAXIMUM, C, is_nan(a) || a > b ? a : b);  // NaN in b falls to b
STRATA_CPU_BINARY(Minimum, STRATA_OP_MINIMUM, C, is_nan(a) || a < b ? a : b);
STRATA_CPU_BINARY(Eq, STRATA_OP_EQ, bool, a == b);
STRATA_CPU_BINARY(Ne, STRATA_OP_NE, bool, a != b);
STRATA_CPU_BINARY(Lt, STRATA_OP_LT, bool, a < b);
STRATA_CPU_BINARY(Le, STRATA_OP_LE, bool, a <= b);
STRATA_CPU_BINARY(Gt, STRATA_OP_GT, bool, a > b);
STRATA_CPU_BINARY(Ge, STRATA_OP_GE, bool, a >= b);
STRATA_CPU_BINARY(LogicalAnd, STRATA_OP_LOGICAL_AND, bool, a && b);
STRATA_CPU_BINARY(LogicalOr, STRATA_OP_LOGICAL_OR, bool, a || b);

#undef STRATA_CPU_BINARY

/// Linear position (in the broadcast output shape) of the first zero of a
/// divisor descriptor, or -1.
template <class T>
int64_t first_zero(const strata_tensor& t) {
  const T* p = data<const T>(t);
  const Layout<1> l = make_layout<1>(t.rank, t.shape, {t.strides});
  int64_t pos = 0;
  int64_t found = -1;
  for_each_run(l, 0, l.numel(), [&](const int64_t* off, int64_t count) {
    const int64_t s = l.inner_stride(0);
    for (int64_t i = 0; found < 0 && i < count; ++i) {
      if (p[off[0] + i * s] == 0) found = pos + i;
    }
    pos += count;
  });
  return found;
}

/// DivValue (pointwise.hpp), with a zero integer divisor an error.
struct Div : DivValue {
  static constexpr const char* name = STRATA_OP_DIV;

  template <class T, class>
  static strata_status validate(const KernelCall& call) {
    if constexpr (std::is_integral_v<T>) {
      if (const int64_t at = first_zero<T>(call.in(1)); at >= 0) {
        return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s: integer division by zero (divisor is 0 at flat output index %lld)", name,
                    static_cast<long long>(at));
      }
    }
    return STRATA_OK;
  }
};

struct Where {
  static constexpr const char* name = STRATA_OP_WHERE;
  template <class C>
  C operator()(bool cond, C a, C b) const {
    return cond ? a : b;
  }
};

template <class Op, class... Ts>
void add_compare(plugin::KernelTable& table, TypeList<Ts...>) {
  (add<Elementwise<Op, bool8, Ts, Ts>>(table), ...);
}

}  // namespace

void register_binary_kernels(plugin::KernelTable& table) {
  constexpr NumericTypes num;
  add_binary<Add>(table, num);
  add_binary<Sub>(table, num);
  add_binary<Mul>(table, num);
  add_binary<Div>(table, num);
  add_binary<Pow>(table, FloatTypes{});
  add_binary<Maximum>(table, num);
  add_binary<Minimum>(table, num);

  add_compare<Eq>(table, AllTypes{});
  add_compare<Ne>(table, AllTypes{});
  add_compare<Lt>(table, num);
  add_compare<Le>(table, num);
  add_compare<Gt>(table, num);
  add_compare<Ge>(table, num);

  add_binary<LogicalAnd>(table, TypeList<bool8>{});
  add_binary<LogicalOr>(table, TypeList<bool8>{});

  for_each_type(AllTypes{}, [&]<class T>() { add<Elementwise<Where, T, bool8, T, T>>(table); });
}

}  // namespace strata::cpu
