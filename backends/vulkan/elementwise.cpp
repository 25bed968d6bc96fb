// elementwise.cpp — copy, cast, fill, the unary and binary primitives,
// comparisons, logical ops, where, and the elementwise composites and
// backward ops (gelu, silu, *_backward). All run eltwise.comp; the op is the
// pipeline's specialization constant, which each kernel entry carries in
// its user_data (OpSpec::code), so one kernel family serves many ops.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <strata/plugin/half.hpp>

#include "kernels.hpp"

namespace strata::vulkan {
namespace {

/// The variant name "<family>_<y>_<a>" of eltwise.comp.
std::string variant(const char* family, strata_dtype y, strata_dtype a) {
  std::string s = family;
  s += '_';
  s += tag(y);
  s += '_';
  s += tag(a);
  return s;
}

/// N inputs of one dtype through the "unary" or "binary" shader family,
/// the op chosen by the entry's opcode.
template <int N>
struct Eltwise {
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, N); s != STRATA_OK) return s;
    const std::string shader = variant(N == 1 ? "unary" : "binary", c.out.dtype, c.input(0).dtype);
    return launch_eltwise(c, shader.c_str(), c.spec.code, c.out, c.in, N);
  }
};

/// One input: unary ops (same dtype in and out), and with OP_COPY, copy
/// (any output strides).
using Unary = Eltwise<1>;

/// Two inputs of one dtype: arithmetic, comparisons (-> bool), logical ops,
/// and the elementwise backward ops (grad, saved tensor). Integer division
/// by zero is recorded by the shader and reported at the next
/// synchronisation point (STRATA_ERROR_DEFERRED).
using Binary = Eltwise<2>;

/// cast: OP_COPY between any two stored dtypes. The "dtype" attribute
/// (DTYPE), when present, must name the output's dtype.
struct Cast {
  static strata_status run(Call& c) {
    if (const strata_attr* a = plugin::attr_of_kind(c.abi, "dtype", STRATA_ATTR_DTYPE);
        a != nullptr && a->i != static_cast<int64_t>(c.out.dtype)) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: attribute 'dtype' is %s but the output is %s (%s)", c.op,
                  plugin::dtype_name(static_cast<strata_dtype>(a->i)), describe(c.out).c_str(), c.device.id().c_str());
    }
    return Unary::run(c);
  }
};


struct Where {
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, 3); s != STRATA_OK) return s;
    const std::string shader = std::string("where_") + tag(c.out.dtype);
    return launch_eltwise(c, shader.c_str(), c.spec.code, c.out, c.in, 3);
  }
};

/// A compute value converted to dtype's storage bits with the cast op's
/// rules (the CPU plugin's): float -> int truncates toward zero, saturates
/// and maps NaN to 0; int -> narrower int wraps; -> bool is `!= 0`.
template <class V>
uint64_t storage_bits(V value, strata_dtype dtype) {
  auto to_int = [](auto v, auto lo, auto hi) -> decltype(lo) {
    using I = decltype(lo);
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      if (std::isnan(v)) return 0;
      if (v >= -static_cast<double>(lo)) return hi;
      if (v <= static_cast<double>(lo)) return lo;
    }
    return static_cast<I>(v);
  };
  switch (dtype) {
    case STRATA_F32:
      return std::bit_cast<uint32_t>(static_cast<float>(value));
    case STRATA_F16:
      return float_to_f16(static_cast<float>(value));
    case STRATA_I32:
      if constexpr (std::is_floating_point_v<V>) {
        return static_cast<uint32_t>(
            to_int(value, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
      } else {
        return static_cast<uint32_t>(static_cast<uint64_t>(value));  // wraps, like the CPU's static_cast
      }
    case STRATA_I64:
      if constexpr (std::is_floating_point_v<V>) {
        return static_cast<uint64_t>(
            to_int(value, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
      } else {
        return static_cast<uint64_t>(value);
      }
    case STRATA_BOOL:
      return value != V(0) ? 1 : 0;
    default:
      return 0;
  }
}

/// fill: the "value" attribute is an exact SCALAR (I64/BOOL in `i`, F64 in `f`).
struct Fill {
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, 0); s != STRATA_OK) return s;
    const strata_attr* v = plugin::attr_of_kind(c.abi, "value", STRATA_ATTR_SCALAR);
    if (v == nullptr) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'value' (%s)", c.op,
                  c.device.id().c_str());
    }
    uint64_t bits = 0;
    switch (v->scalar_dtype) {
      case STRATA_F64:
        bits = storage_bits(v->f, c.out.dtype);
        break;
      case STRATA_I64:
      case STRATA_BOOL:
        bits = storage_bits(v->i, c.out.dtype);
        break;
      default:
        return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s: attribute 'value' is a SCALAR of dtype %s; expected i64, f64 or bool (%s)", c.op,
                    plugin::dtype_name(v->scalar_dtype), c.device.id().c_str());
    }
    const std::string shader = std::string("fill_") + tag(c.out.dtype);
    return launch_eltwise(c, shader.c_str(), c.spec.code, c.out, nullptr, 0, bits);
  }
};

void add_unary(Registry& r, const char* op, int32_t code, std::initializer_list<strata_dtype> types) {
  for (strata_dtype d : types) r.add<Unary>(op, code, {d}, d);
}

void add_binary(Registry& r, const char* op, int32_t code, std::initializer_list<strata_dtype> types,
                bool to_bool = false) {
  for (strata_dtype d : types) r.add<Binary>(op, code, {d, d}, to_bool ? STRATA_BOOL : d);
}

}  // namespace

void register_elementwise_kernels(Registry& r) {
  const auto f = {STRATA_F32, STRATA_F16};
  const auto num = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64};
  const auto all = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64, STRATA_BOOL};
  for (strata_dtype y : kAllTypes) {
    r.add<Fill>(STRATA_OP_FILL, OP_FILL, {}, y);
    r.add<Unary>(STRATA_OP_COPY, OP_COPY, {y}, y);
    for (strata_dtype x : kAllTypes) r.add<Cast>(STRATA_OP_CAST, OP_COPY, {x}, y);
  }
  add_unary(r, STRATA_OP_NEG, OP_NEG, num);
  add_unary(r, STRATA_OP_ABS, OP_ABS, num);
  add_unary(r, STRATA_OP_SIGN, OP_SIGN, num);
  add_unary(r, STRATA_OP_RELU, OP_RELU, num);
  add_unary(r, STRATA_OP_EXP, OP_EXP, f);
  add_unary(r, STRATA_OP_LOG, OP_LOG, f);
  add_unary(r, STRATA_OP_LOG1P, OP_LOG1P, f);
  add_unary(r, STRATA_OP_EXPM1, OP_EXPM1, f);
  add_unary(r, STRATA_OP_SQRT, OP_SQRT, f);
  add_unary(r, STRATA_OP_RSQRT, OP_RSQRT, f);
  add_unary(r, STRATA_OP_SIN, OP_SIN, f);
  add_unary(r, STRATA_OP_COS, OP_COS, f);
  add_unary(r, STRATA_OP_ATAN, OP_ATAN, f);
  add_unary(r, STRATA_OP_TANH, OP_TANH, f);
  add_unary(r, STRATA_OP_SIGMOID, OP_SIGMOID, f);
  add_unary(r, STRATA_OP_ERF, OP_ERF, f);
  add_unary(r, STRATA_OP_FLOOR, OP_FLOOR, f);
  add_unary(r, STRATA_OP_CEIL, OP_CEIL, f);
  add_unary(r, STRATA_OP_ROUND, OP_ROUND, f);
  add_unary(r, STRATA_OP_RECIPROCAL, OP_RECIPROCAL, f);
  add_unary(r, STRATA_OP_GELU, OP_GELU, f);
  add_unary(r, STRATA_OP_SILU, OP_SILU, f);
  add_unary(r, STRATA_OP_LOGICAL_NOT, OP_LOGICAL_NOT, {STRATA_BOOL});

  add_binary(r, STRATA_OP_ADD, OP_ADD, num);
  add_binary(r, STRATA_OP_SUB, OP_SUB, num);
  add_binary(r, STRATA_OP_MUL, OP_MUL, num);
  add_binary(r, STRATA_OP_DIV, OP_DIV, num);
  add_binary(r, STRATA_OP_POW, OP_POW, f);
  add_binary(r, STRATA_OP_MAXIMUM, OP_MAXIMUM, num);
  add_binary(r, STRATA_OP_MINIMUM, OP_MINIMUM, num);
  add_binary(r, STRATA_OP_LOGICAL_AND, OP_LOGICAL_AND, {STRATA_BOOL});
  add_binary(r, STRATA_OP_LOGICAL_OR, OP_LOGICAL_OR, {STRATA_BOOL});
  add_binary(r, STRATA_OP_EQ, OP_EQ, all, true);
  add_binary(r, STRATA_OP_NE, OP_NE, all, true);
  add_binary(r, STRATA_OP_LT, OP_LT, num, true);
  add_binary(r, STRATA_OP_LE, OP_LE, num, true);
  add_binary(r, STRATA_OP_GT, OP_GT, num, true);
  add_binary(r, STRATA_OP_GE, OP_GE, num, true);
  add_binary(r, STRATA_OP_RELU_BACKWARD, OP_RELU_BACKWARD, f);
  add_binary(r, STRATA_OP_SIGMOID_BACKWARD, OP_SIGMOID_BACKWARD, f);
  add_binary(r, STRATA_OP_TANH_BACKWARD, OP_TANH_BACKWARD, f);
  add_binary(r, STRATA_OP_GELU_BACKWARD, OP_GELU_BACKWARD, f);
  for (strata_dtype d : kAllTypes) r.add<Where>(STRATA_OP_WHERE, OP_WHERE, {STRATA_BOOL, d, d}, d);
}

}  // namespace strata::vulkan
