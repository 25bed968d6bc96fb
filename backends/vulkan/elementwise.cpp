// elementwise.cpp — copy, cast, fill, the unary and binary primitives,
// comparisons, logical ops, where, and the elementwise composites and
// backward ops (gelu, silu, *_backward). All run eltwise.comp; the op is the
// pipeline's specialization constant.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <strata/plugin/half.hpp>

#include "kernels.hpp"

namespace strata::vulkan {
namespace {

constexpr const char* op_name(int op) {
  switch (op) {
    case OP_NEG:
      return "neg";
    case OP_ABS:
      return "abs";
    case OP_SIGN:
      return "sign";
    case OP_EXP:
      return "exp";
    case OP_LOG:
      return "log";
    case OP_LOG1P:
      return "log1p";
    case OP_EXPM1:
      return "expm1";
    case OP_SQRT:
      return "sqrt";
    case OP_RSQRT:
      return "rsqrt";
    case OP_SIN:
      return "sin";
    case OP_COS:
      return "cos";
    case OP_TANH:
      return "tanh";
    case OP_SIGMOID:
      return "sigmoid";
    case OP_RELU:
      return "relu";
    case OP_ERF:
      return "erf";
    case OP_FLOOR:
      return "floor";
    case OP_CEIL:
      return "ceil";
    case OP_ROUND:
      return "round";
    case OP_RECIPROCAL:
      return "reciprocal";
    case OP_GELU:
      return "gelu";
    case OP_SILU:
      return "silu";
    case OP_LOGICAL_NOT:
      return "logical_not";
    case OP_ADD:
      return "add";
    case OP_SUB:
      return "sub";
    case OP_MUL:
      return "mul";
    case OP_DIV:
      return "div";
    case OP_POW:
      return "pow";
    case OP_MAXIMUM:
      return "maximum";
    case OP_MINIMUM:
      return "minimum";
    case OP_LOGICAL_AND:
      return "logical_and";
    case OP_LOGICAL_OR:
      return "logical_or";
    case OP_EQ:
      return "eq";
    case OP_NE:
      return "ne";
    case OP_LT:
      return "lt";
    case OP_LE:
      return "le";
    case OP_GT:
      return "gt";
    case OP_GE:
      return "ge";
    case OP_RELU_BACKWARD:
      return "relu_backward";
    case OP_SIGMOID_BACKWARD:
      return "sigmoid_backward";
    case OP_TANH_BACKWARD:
      return "tanh_backward";
    case OP_GELU_BACKWARD:
      return "gelu_backward";
    default:
      return "?";
  }
}

strata_status expect_inputs(const Call& c, int n) {
  if (c.n_in == n) return STRATA_OK;
  return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: expected %d inputs, got %d (%s)", c.op, n, c.n_in,
              c.device.id().c_str());
}

/// A one-input eltwise.comp kernel: unary ops (same dtype in and out), and
/// with OP_COPY, copy (any output strides) and cast.
template <int Op, const char* const* Name = nullptr>
struct Unary {
  static constexpr const char* name = Name != nullptr ? *Name : op_name(Op);
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, 1); s != STRATA_OK) return s;
    const std::string shader = std::string("unary_") + tag(c.out.dtype) + "_" + tag(c.in[0].dtype);
    return launch_eltwise(c, shader.c_str(), Op, c.out, c.in, 1);
  }
};

constexpr const char* kCopy = "copy";
constexpr const char* kCast = "cast";
using Copy = Unary<OP_COPY, &kCopy>;
using Cast = Unary<OP_COPY, &kCast>;

/// Two inputs of one dtype: arithmetic, comparisons (-> bool), logical ops,
/// and the elementwise backward ops (grad, saved tensor).
template <int Op>
struct Binary {
  static constexpr const char* name = op_name(Op);
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, 2); s != STRATA_OK) return s;
    const strata_tensor& b = c.in[1];
    if (Op == OP_DIV && (b.dtype == STRATA_I32 || b.dtype == STRATA_I64)) {
      // Integer division by zero is an error (docs/ops.md); the divisor is
      // checked on the host, which waits for the stream.
      std::vector<int64_t> divisors;
      if (strata_status s = read_elements(c, b, divisors); s != STRATA_OK) return s;
      for (size_t i = 0; i < divisors.size(); ++i) {
        if (divisors[i] == 0) {
          return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
                      "div: integer division by zero (divisor element %zu of %s) on %s", i, describe(b).c_str(),
                      c.device.id().c_str());
        }
      }
    }
    const std::string shader = std::string("binary_") + tag(c.out.dtype) + "_" + tag(c.in[0].dtype);
    return launch_eltwise(c, shader.c_str(), Op, c.out, c.in, 2);
  }
};

struct Where {
  static constexpr const char* name = "where";
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, 3); s != STRATA_OK) return s;
    const std::string shader = std::string("where_") + tag(c.out.dtype);
    return launch_eltwise(c, shader.c_str(), OP_WHERE, c.out, c.in, 3);
  }
};

/// `value` converted to dtype's storage bits, as the CPU converts it.
uint64_t fill_bits(double value, strata_dtype dtype) {
  auto to_int = [](double v, double lo, double hi) -> int64_t {
    if (std::isnan(v)) return 0;
    return static_cast<int64_t>(std::clamp(std::trunc(v), lo, hi));
  };
  switch (dtype) {
    case STRATA_F32:
      return std::bit_cast<uint32_t>(static_cast<float>(value));
    case STRATA_F16:
      return float_to_f16(static_cast<float>(value));
    case STRATA_I32:
      return static_cast<uint32_t>(static_cast<int32_t>(to_int(value, -2147483648.0, 2147483647.0)));
    case STRATA_I64:
      return static_cast<uint64_t>(to_int(value, -9223372036854775808.0, 9223372036854774784.0));
    case STRATA_BOOL:
      return value != 0.0 ? 1 : 0;
    default:
      return 0;
  }
}

struct Fill {
  static constexpr const char* name = "fill";
  static strata_status run(Call& c) {
    const strata_attr* v = plugin::find_attr(c.attrs, "value");
    if (v == nullptr) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "fill: missing attribute \"value\" (%s)",
                  c.device.id().c_str());
    }
    const double value = v->kind == STRATA_ATTR_FLOAT ? v->f : static_cast<double>(v->i);
    const std::string shader = std::string("fill_") + tag(c.out.dtype);
    return launch_eltwise(c, shader.c_str(), OP_FILL, c.out, nullptr, 0, fill_bits(value, c.out.dtype));
  }
};

template <int Op>
void add_unary(KernelTable& t, std::initializer_list<strata_dtype> types) {
  for (strata_dtype d : types) t.add<Unary<Op>>({d}, d, kStrided);
}

template <int Op>
void add_binary(KernelTable& t, std::initializer_list<strata_dtype> types, bool to_bool = false) {
  for (strata_dtype d : types) t.add<Binary<Op>>({d, d}, to_bool ? STRATA_BOOL : d, kStrided);
}

}  // namespace

void register_elementwise_kernels(KernelTable& t) {
  const auto f = {STRATA_F32, STRATA_F16};
  const auto num = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64};
  for (strata_dtype y : kAllTypes) {
    t.add<Fill>({}, y, kStrided);
    t.add<Copy>({y}, y, kStrided);
    for (strata_dtype x : kAllTypes) t.add<Cast>({x}, y, kStrided);
  }
  add_unary<OP_NEG>(t, num);
  add_unary<OP_ABS>(t, num);
  add_unary<OP_SIGN>(t, num);
  add_unary<OP_RELU>(t, num);
  add_unary<OP_EXP>(t, f);
  add_unary<OP_LOG>(t, f);
  add_unary<OP_LOG1P>(t, f);
  add_unary<OP_EXPM1>(t, f);
  add_unary<OP_SQRT>(t, f);
  add_unary<OP_RSQRT>(t, f);
  add_unary<OP_SIN>(t, f);
  add_unary<OP_COS>(t, f);
  add_unary<OP_TANH>(t, f);
  add_unary<OP_SIGMOID>(t, f);
  add_unary<OP_ERF>(t, f);
  add_unary<OP_FLOOR>(t, f);
  add_unary<OP_CEIL>(t, f);
  add_unary<OP_ROUND>(t, f);
  add_unary<OP_RECIPROCAL>(t, f);
  add_unary<OP_GELU>(t, f);
  add_unary<OP_SILU>(t, f);
  add_unary<OP_LOGICAL_NOT>(t, {STRATA_BOOL});

  add_binary<OP_ADD>(t, num);
  add_binary<OP_SUB>(t, num);
  add_binary<OP_MUL>(t, num);
  add_binary<OP_DIV>(t, num);
  add_binary<OP_POW>(t, f);
  add_binary<OP_MAXIMUM>(t, num);
  add_binary<OP_MINIMUM>(t, num);
  add_binary<OP_LOGICAL_AND>(t, {STRATA_BOOL});
  add_binary<OP_LOGICAL_OR>(t, {STRATA_BOOL});
  add_binary<OP_EQ>(t, {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64, STRATA_BOOL}, true);
  add_binary<OP_NE>(t, {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64, STRATA_BOOL}, true);
  add_binary<OP_LT>(t, num, true);
  add_binary<OP_LE>(t, num, true);
  add_binary<OP_GT>(t, num, true);
  add_binary<OP_GE>(t, num, true);
  add_binary<OP_RELU_BACKWARD>(t, f);
  add_binary<OP_SIGMOID_BACKWARD>(t, f);
  add_binary<OP_TANH_BACKWARD>(t, f);
  add_binary<OP_GELU_BACKWARD>(t, f);
  for (strata_dtype d : kAllTypes) t.add<Where>({STRATA_BOOL, d, d}, d, kStrided);
}

}  // namespace strata::vulkan
