// kernels_elementwise.cpp — copy (strided in and out), cast, fill, the
// elementwise unary and binary ops, comparisons, logical ops and where
// (docs/ops.md, "Data movement", "Elementwise", "Comparisons", "Selection").
//
// Demonstrates: one generic strided loop serving every elementwise op (the
// host has already broadcast inputs to the output's shape with stride-0
// dims), exact SCALAR attributes (fill's `value`: an i64 fill is never
// rounded through a double), the DTYPE attribute of cast, and a data-dependent
// failure found on the worker (integer division by zero) reported as
// STRATA_ERROR_DEFERRED at the next synchronisation point.
#include "kernel_launch.hpp"

#include <cmath>
#include <limits>

namespace example {
namespace {

// ---- Functors: apply(fault, operands...) computes one element ----------------------

#define EX_UNARY(Type, op, ...)                  \
  struct Type {                                  \
    static constexpr const char* name = op;      \
    template <class C>                           \
    static C apply(bool& /*fault*/, C x) {       \
      return __VA_ARGS__;                        \
    }                                            \
  }

template <class C>
C negate(C x) {
  if constexpr (is_int_v<C>) {
    return wrap_sub(C(0), x);  // MIN wraps to MIN
  } else {
    return -x;  // keeps -0.0 and NaN
  }
}

EX_UNARY(Neg, STRATA_OP_NEG, negate(x));
EX_UNARY(Abs, STRATA_OP_ABS, is_int_v<C> ? (x < C(0) ? negate(x) : x) : C(std::fabs(x)));
EX_UNARY(Sign, STRATA_OP_SIGN, is_nan(x) ? x : C((x > C(0)) - (x < C(0))));
EX_UNARY(Relu, STRATA_OP_RELU, x < C(0) ? C(0) : x);  // NaN passes through
EX_UNARY(Exp, STRATA_OP_EXP, std::exp(x));
EX_UNARY(Log, STRATA_OP_LOG, std::log(x));
EX_UNARY(Log1p, STRATA_OP_LOG1P, std::log1p(x));
EX_UNARY(Expm1, STRATA_OP_EXPM1, std::expm1(x));
EX_UNARY(Sqrt, STRATA_OP_SQRT, std::sqrt(x));
EX_UNARY(Rsqrt, STRATA_OP_RSQRT, C(1) / std::sqrt(x));
EX_UNARY(Sin, STRATA_OP_SIN, std::sin(x));
EX_UNARY(Cos, STRATA_OP_COS, std::cos(x));
EX_UNARY(Tanh, STRATA_OP_TANH, std::tanh(x));
EX_UNARY(Sigmoid, STRATA_OP_SIGMOID, C(1) / (C(1) + std::exp(-x)));
EX_UNARY(Erf, STRATA_OP_ERF, std::erf(x));
EX_UNARY(Floor, STRATA_OP_FLOOR, std::floor(x));
EX_UNARY(Ceil, STRATA_OP_CEIL, std::ceil(x));
EX_UNARY(Round, STRATA_OP_ROUND, std::nearbyint(x));  // default rounding mode: half to even
EX_UNARY(Reciprocal, STRATA_OP_RECIPROCAL, C(1) / x);
EX_UNARY(LogicalNot, STRATA_OP_LOGICAL_NOT, !x);
#undef EX_UNARY

#define EX_BINARY(Type, op, Result, ...)         \
  struct Type {                                  \
    static constexpr const char* name = op;      \
    template <class C>                           \
    static Result apply(bool& /*fault*/, C a, C b) { \
      return __VA_ARGS__;                        \
    }                                            \
  }

EX_BINARY(Add, STRATA_OP_ADD, C, wrap_add(a, b));
EX_BINARY(Sub, STRATA_OP_SUB, C, wrap_sub(a, b));
EX_BINARY(Mul, STRATA_OP_MUL, C, wrap_mul(a, b));
EX_BINARY(Pow, STRATA_OP_POW, C, std::pow(a, b));
EX_BINARY(Maximum, STRATA_OP_MAXIMUM, C, is_nan(a) || a > b ? a : b);  // a NaN in b falls to b
EX_BINARY(Minimum, STRATA_OP_MINIMUM, C, is_nan(a) || a < b ? a : b);
EX_BINARY(Eq, STRATA_OP_EQ, bool, a == b);
EX_BINARY(Ne, STRATA_OP_NE, bool, a != b);
EX_BINARY(Lt, STRATA_OP_LT, bool, a < b);
EX_BINARY(Le, STRATA_OP_LE, bool, a <= b);
EX_BINARY(Gt, STRATA_OP_GT, bool, a > b);
EX_BINARY(Ge, STRATA_OP_GE, bool, a >= b);
EX_BINARY(LogicalAnd, STRATA_OP_LOGICAL_AND, bool, a && b);
EX_BINARY(LogicalOr, STRATA_OP_LOGICAL_OR, bool, a || b);
#undef EX_BINARY

/// Floats: IEEE. Integers: truncating; by zero is an error (the element gets
/// 0 and the failure is reported at the next synchronisation); MIN / -1 wraps.
struct Div {
  static constexpr const char* name = STRATA_OP_DIV;
  static constexpr const char* fault = "integer division by zero";
  template <class C>
  static C apply(bool& fault_seen, C a, C b) {
    if constexpr (is_int_v<C>) {
      if (b == C(0)) {
        fault_seen = true;
        return C(0);
      }
      return b == C(-1) ? negate(a) : C(a / b);
    } else {
      return a / b;
    }
  }
};

struct Where {
  static constexpr const char* name = STRATA_OP_WHERE;
  template <class C>
  static C apply(bool&, bool cond, C a, C b) {
    return cond ? a : b;
  }
};

/// Value conversion: float -> int truncates toward zero (NaN gives 0, out of
/// range saturates: never undefined behaviour), -> bool is x != 0, bool ->
/// number is 0/1, int -> narrower int wraps.
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_int_v<To> && std::is_floating_point_v<From>) {
    if (v != v) return To(0);
    if (v <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <class To>
struct CastTo {
  static constexpr const char* name = STRATA_OP_CAST;
  template <class From>
  static To apply(bool&, From x) {
    return convert<To>(x);
  }
};

/// Extra issue-time checks of an op, by default none.
template <class Op>
struct Check {
  static void run(const Launch&) {}
};
template <class To>
struct Check<CastTo<To>> {
  static void run(const Launch& l) {  // a DTYPE "dtype" attribute, when sent, must match the output
    const int64_t dt = strata::plugin::attr_int(*l.call, "dtype", dtype_v<To>);
    if (dt != dtype_v<To>) l.reject("attribute 'dtype' disagrees with the output dtype");
  }
};

template <class Op>
constexpr const char* fault_of() {
  if constexpr (requires { Op::fault; }) {
    return Op::fault;
  } else {
    return "failure";
  }
}

// ---- The generic kernel ------------------------------------------------------------

template <class Op, class Out, class... Ins, size_t... I>
void run_elementwise(const View& y, const std::array<View, sizeof...(Ins)>& x, const std::string& where,
                     std::index_sequence<I...>) {
  const std::array<const int64_t*, sizeof...(Ins) + 1> strides{y.strides, x[I].strides...};
  Out* const out = y.data<Out>();
  const std::tuple<Ins*...> in{x[I].template data<Ins>()...};
  bool fault = false;
  walk(y.rank, y.shape, strides, [&](const auto& off) {
    out[off[0]] = Op::apply(fault, std::get<I>(in)[off[I + 1]]...);
  });
  if (fault) throw DeferredFailure(where + ": " + fault_of<Op>());
}

template <class Op, class Out, class... Ins>
strata_status elementwise(const strata_kernel_call* call) noexcept {
  return run_kernel(call, Op::name, [&] {
    const Launch l = prepare(call, {dtype_v<Ins>...}, {dtype_v<Out>});
    for (const View& v : l.in) {
      if (!v.same_shape(l.out[0])) l.reject("inputs must have the output's shape (broadcast by the host)");
    }
    Check<Op>::run(l);
    std::array<View, sizeof...(Ins)> x{};
    for (size_t k = 0; k < x.size(); ++k) x[k] = l.in[k];
    l.submit([y = l.out[0], x, where = l.where()] {
      run_elementwise<Op, Out, Ins...>(y, x, where, std::index_sequence_for<Ins...>{});
    });
    return STRATA_OK;
  });
}

// ---- copy and fill: bits, not values ------------------------------------------------

template <size_t Bytes>
using word_t = std::conditional_t<Bytes == 1, uint8_t, std::conditional_t<Bytes == 4, uint32_t, uint64_t>>;

template <class T>
strata_status copy_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, STRATA_OP_COPY, [&] {
    const Launch l = prepare(call, {dtype_v<T>}, {dtype_v<T>});
    if (!l.in[0].same_shape(l.out[0])) l.reject("input and output shapes differ");
    l.submit([y = l.out[0], x = l.in[0]] {  // both sides may be strided
      using W = word_t<sizeof(T)>;
      W* const out = y.data<W>();
      const W* const in = x.data<W>();
      walk<2>(y.rank, y.shape, {y.strides, x.strides}, [&](const auto& off) { out[off[0]] = in[off[1]]; });
    });
    return STRATA_OK;
  });
}

/// fill's "value" as T: an exact SCALAR (I64/BOOL in `i`, F64 in `f`), or a
/// FLOAT, INT or BOOL attribute.
template <class T>
T fill_value(const Launch& l) {
  const strata_attr* a = strata::plugin::find_attr(*l.call, "value");
  if (a == nullptr) l.reject("missing attribute 'value'");
  const bool is_float = a->kind == STRATA_ATTR_FLOAT || (a->kind == STRATA_ATTR_SCALAR && a->scalar_dtype == STRATA_F64);
  const bool is_int = a->kind == STRATA_ATTR_INT || a->kind == STRATA_ATTR_BOOL ||
                      (a->kind == STRATA_ATTR_SCALAR && (a->scalar_dtype == STRATA_I64 || a->scalar_dtype == STRATA_BOOL));
  if (is_float) return convert<T>(a->f);
  if (is_int) return convert<T>(a->i);
  l.reject(std::string("attribute 'value' must be a SCALAR (i64, f64 or bool), got ") +
           strata::plugin::attr_kind_name(a->kind));
}

template <class T>
strata_status fill_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, STRATA_OP_FILL, [&] {
    const Launch l = prepare(call, {}, {dtype_v<T>});
    const T value = fill_value<T>(l);
    l.submit([y = l.out[0], value] {
      T* const out = y.data<T>();
      walk<1>(y.rank, y.shape, {y.strides}, [&](const auto& off) { out[off[0]] = value; });
    });
    return STRATA_OK;
  });
}

// ---- Registration -------------------------------------------------------------------

template <class Op, class TypeList>
void add_unary(strata::plugin::KernelTable& t, TypeList types) {
  for_each_type(types, [&]<class T>() { add_kernel(t, Op::name, signature<T, T>(), &elementwise<Op, T, T>); });
}
template <class Op, class TypeList>
void add_binary(strata::plugin::KernelTable& t, TypeList types) {
  for_each_type(types, [&]<class T>() { add_kernel(t, Op::name, signature<T, T, T>(), &elementwise<Op, T, T, T>); });
}
template <class Op, class TypeList>
void add_compare(strata::plugin::KernelTable& t, TypeList types) {
  for_each_type(types, [&]<class T>() {
    add_kernel(t, Op::name, signature<bool, T, T>(), &elementwise<Op, bool, T, T>);
  });
}

}  // namespace

void register_elementwise_kernels(strata::plugin::KernelTable& t) {
  for_each_type(AllTypes{}, [&]<class T>() {
    add_kernel(t, STRATA_OP_COPY, signature<T, T>(), &copy_kernel<T>);
    add_kernel(t, STRATA_OP_FILL, signature<T>(), &fill_kernel<T>);
    for_each_type(AllTypes{}, [&]<class From>() {
      add_kernel(t, STRATA_OP_CAST, signature<T, From>(), &elementwise<CastTo<T>, T, From>);
    });
    add_kernel(t, STRATA_OP_WHERE, signature<T, bool, T, T>(), &elementwise<Where, T, bool, T, T>);
  });
  add_unary<Neg>(t, NumericTypes{});
  add_unary<Abs>(t, NumericTypes{});
  add_unary<Sign>(t, NumericTypes{});
  add_unary<Relu>(t, NumericTypes{});
  add_unary<Exp>(t, FloatTypes{});
  add_unary<Log>(t, FloatTypes{});
  add_unary<Log1p>(t, FloatTypes{});
  add_unary<Expm1>(t, FloatTypes{});
  add_unary<Sqrt>(t, FloatTypes{});
  add_unary<Rsqrt>(t, FloatTypes{});
  add_unary<Sin>(t, FloatTypes{});
  add_unary<Cos>(t, FloatTypes{});
  add_unary<Tanh>(t, FloatTypes{});
  add_unary<Sigmoid>(t, FloatTypes{});
  add_unary<Erf>(t, FloatTypes{});
  add_unary<Floor>(t, FloatTypes{});
  add_unary<Ceil>(t, FloatTypes{});
  add_unary<Round>(t, FloatTypes{});
  add_unary<Reciprocal>(t, FloatTypes{});
  add_unary<LogicalNot>(t, Types<bool>{});

  add_binary<Add>(t, NumericTypes{});
  add_binary<Sub>(t, NumericTypes{});
  add_binary<Mul>(t, NumericTypes{});
  add_binary<Div>(t, NumericTypes{});
  add_binary<Pow>(t, FloatTypes{});
  add_binary<Maximum>(t, NumericTypes{});
  add_binary<Minimum>(t, NumericTypes{});
  add_binary<LogicalAnd>(t, Types<bool>{});
  add_binary<LogicalOr>(t, Types<bool>{});

  add_compare<Eq>(t, AllTypes{});
  add_compare<Ne>(t, AllTypes{});
  add_compare<Lt>(t, NumericTypes{});
  add_compare<Le>(t, NumericTypes{});
  add_compare<Gt>(t, NumericTypes{});
  add_compare<Ge>(t, NumericTypes{});
}

}  // namespace example
