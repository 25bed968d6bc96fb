// fused.cpp — strata::fused_elementwise on Vulkan: fused.comp interprets the
// op's program (<strata/plugin/fused_program.hpp>) per element, one pass
// over memory, with the ops' own arithmetic (shaders/float_ops.glsl), so a
// program gives the bits of its ops run one by one on this device. f32 and
// f16, every signature of the op (1 to 8 inputs, 1 to 6 outputs; a kernel
// per signature). Declined (UNSUPPORTED:
// the core decomposes the call) are inputs neither compact like the output
// nor one broadcast value, outputs that are not compact, and programs of
// more than FUSED_MAX_STATEMENTS statements.
#include <array>
#include <bit>
#include <cstddef>
#include <span>
#include <strata/plugin/fused_program.hpp>
#include <strata/plugin/half.hpp>
#include <string>
#include <utility>

#include "kernels.hpp"

namespace strata::vulkan {
namespace {

namespace fp = strata::plugin::fused;

/// fused.comp's parameters.
struct FusedParams {
  uint32_t n = 0, n_inputs = 0, n_statements = 0, n_outputs = 0, broadcast = 0, pad[3] = {};
  uint32_t result[FUSED_MAX_OUTPUTS] = {}, pad2[2] = {};
  uint32_t st[FUSED_MAX_STATEMENTS][4] = {};
};
static_assert(offsetof(FusedParams, st) == 64, "fused.comp's layout: st is 16-byte aligned after 16 uints");
struct FusedPush {
  VkDeviceAddress y[FUSED_MAX_OUTPUTS], x[FUSED_MAX_INPUTS], p;
};
static_assert(sizeof(FusedPush) <= kPushConstantBytes);
static_assert(FUSED_MAX_INPUTS == fp::kMaxInputs && FUSED_MAX_OUTPUTS == fp::kMaxOutputs);

/// The shader's opcode of a statement, bit 16 set for a binary op.
uint32_t opcode(fp::Op op) {
  constexpr uint32_t kBinary = 0x10000u;
  switch (op) {
    case fp::Op::neg:
      return OP_NEG;
    case fp::Op::abs:
      return OP_ABS;
    case fp::Op::sign:
      return OP_SIGN;
    case fp::Op::exp:
      return OP_EXP;
    case fp::Op::log:
      return OP_LOG;
    case fp::Op::log1p:
      return OP_LOG1P;
    case fp::Op::expm1:
      return OP_EXPM1;
    case fp::Op::sqrt:
      return OP_SQRT;
    case fp::Op::reciprocal:
      return OP_RECIPROCAL;
    case fp::Op::sin:
      return OP_SIN;
    case fp::Op::cos:
      return OP_COS;
    case fp::Op::tanh:
      return OP_TANH;
    case fp::Op::sigmoid:
      return OP_SIGMOID;
    case fp::Op::relu:
      return OP_RELU;
    case fp::Op::add:
      return kBinary | OP_ADD;
    case fp::Op::sub:
      return kBinary | OP_SUB;
    case fp::Op::mul:
      return kBinary | OP_MUL;
    case fp::Op::div:
      return kBinary | OP_DIV;
    case fp::Op::tanh_backward:
      return kBinary | OP_TANH_BACKWARD;
    case fp::Op::sigmoid_backward:
      return kBinary | OP_SIGMOID_BACKWARD;
    case fp::Op::relu_backward:
      return kBinary | OP_RELU_BACKWARD;
  }
  return OP_NEG;
}

/// A program constant as the shader reads it: the value rounded to the
/// dtype (a constant is a scalar of the inputs' dtype), as float bits.
uint32_t constant_bits(double c, strata_dtype dtype) {
  const auto f = static_cast<float>(c);
  return std::bit_cast<uint32_t>(dtype == STRATA_F16 ? f16_to_float(float_to_f16(f)) : f);
}

using plugin::is_one_value;
using plugin::same_shape;
bool compact(const strata_tensor& t) { return plugin::is_contiguous(t); }

template <int N, int M>
struct Fused {
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, N); s != STRATA_OK) return s;
    const strata_attr* text = plugin::find_attr(c.abi, "program");
    if (text == nullptr || text->kind != STRATA_ATTR_STRING || text->string == nullptr) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: no STRING attribute 'program' (%s)", c.op,
                  c.device.id().c_str());
    }
    std::string error;
    const auto program = fp::cached_program(std::string_view(text->string, static_cast<size_t>(text->count)), error);
    if (program == nullptr) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s (%s)", c.op, error.c_str(), c.device.id().c_str());
    }
    const fp::Program& p = *program;
    if (p.n_inputs != N || p.outputs.size() != static_cast<size_t>(M)) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: the program reads %d inputs into %zu outputs, the call "
                  "has %d and %d (%s)",
                  c.op, static_cast<int>(p.n_inputs), p.outputs.size(), N, M, c.device.id().c_str());
    }
    if (p.body.size() > FUSED_MAX_STATEMENTS) {
      return fail(c.error, STRATA_ERROR_UNSUPPORTED, "%s: %zu statements; the shader runs at most %d (%s)", c.op,
                  p.body.size(), FUSED_MAX_STATEMENTS, c.device.id().c_str());
    }
    FusedParams params;
    FusedPush push{};
    for (int m = 0; m < M; ++m) {
      const strata_tensor& y = c.output(m);
      if (!compact(y) || !same_shape(y, c.out)) {
        return fail(c.error, STRATA_ERROR_UNSUPPORTED, "%s: output %d %s is not compact like output 0 %s (%s)", c.op, m,
                    describe(y).c_str(), describe(c.out).c_str(), c.device.id().c_str());
      }
      params.result[m] = static_cast<uint32_t>(p.outputs[static_cast<size_t>(m)]);
      push.y[m] = address_of(y);
    }
    params.n = static_cast<uint32_t>(plugin::numel(c.out));
    params.n_inputs = static_cast<uint32_t>(N);
    params.n_statements = static_cast<uint32_t>(p.body.size());
    params.n_outputs = static_cast<uint32_t>(M);
    // Unused slots: a valid address never read or written.
    for (int m = M; m < FUSED_MAX_OUTPUTS; ++m) push.y[m] = push.y[0];
    for (int k = 0; k < FUSED_MAX_INPUTS; ++k) push.x[k] = push.y[0];
    for (int k = 0; k < N; ++k) {
      const strata_tensor& x = c.input(k);
      const bool one = is_one_value(x);
      if (!one && !(same_shape(x, c.out) && compact(x))) {
        return fail(c.error, STRATA_ERROR_UNSUPPORTED,
                    "%s: input %d %s is neither compact like the output %s nor one broadcast value (%s)", c.op, k,
                    describe(x).c_str(), describe(c.out).c_str(), c.device.id().c_str());
      }
      params.broadcast |= (one && params.n != 1 ? 1u : 0u) << k;
      push.x[k] = address_of(x);
    }
    for (size_t j = 0; j < p.body.size(); ++j) {
      const fp::Statement& st = p.body[j];
      uint32_t* s = params.st[j];
      s[0] = opcode(st.op);
      s[1] = st.a.is_constant() ? FUSED_CONSTANT : static_cast<uint32_t>(st.a.value);
      s[2] = fp::arity(st.op) == 1 || st.b.is_constant() ? FUSED_CONSTANT : static_cast<uint32_t>(st.b.value);
      const fp::Operand* constant =
          st.a.is_constant() ? &st.a : (fp::arity(st.op) == 2 && st.b.is_constant() ? &st.b : nullptr);
      s[3] = constant != nullptr ? constant_bits(constant->constant, c.out.dtype) : 0u;
    }
    if (params.n == 0) return STRATA_OK;
    if (strata_status s = vulkan::params(c, &params, sizeof(params), &push.p); s != STRATA_OK) return s;
    const std::string shader = std::string("fused_") + tag(c.out.dtype);
    return launch(c, shader.c_str(), &push, sizeof(push), groups_for(params.n, ELTWISE_GROUP));
  }
};

/// The kernel of N inputs and M outputs, all of dtype d.
template <int N, int M>
void add_fused(Registry& r, strata_dtype d) {
  std::array<strata_dtype, N> ins;
  std::array<strata_dtype, M> outs;
  ins.fill(d);
  outs.fill(d);
  r.add<Fused<N, M>>(STRATA_OP_FUSED_ELEMENTWISE, 0, std::span<const strata_dtype>(ins),
                     std::span<const strata_dtype>(outs));
}
template <int N>
void add_fused_outputs(Registry& r, strata_dtype d) {
  [&]<int... M>(std::integer_sequence<int, M...>) {
    (add_fused<N, M + 1>(r, d), ...);
  }
  (std::make_integer_sequence<int, fp::kMaxOutputs>{});
}

}  // namespace

void register_fused_kernels(Registry& r) {
  for (strata_dtype d : kFloatTypes) {
    [&]<int... N>(std::integer_sequence<int, N...>) { (add_fused_outputs<N + 1>(r, d), ...); }
    (std::make_integer_sequence<int, fp::kMaxInputs>{});
  }
}

}  // namespace strata::vulkan
