// fused.cpp — strata::fused_elementwise: a program of elementwise ops (SSA,
// <strata/plugin/fused_program.hpp>) run as one op, so that a backend can
// compute the whole chain in one pass over memory (docs/ops.md, "Fused
// elementwise programs"; docs/compile.md).
//
// One op, one place: the shape rule broadcasts the inputs as a binary op
// does; the decomposition evaluates the program with the op functions
// (statement by statement: the reference a fused kernel must match); the
// derivatives walk the program with each statement's partials, forwards
// for the JVP and backwards for the VJP, with public ops only, so every
// order of derivative follows.
#include <memory>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <vector>

#include "derivatives.hpp"
#include "rules.hpp"

namespace strata {

namespace {

namespace fp = strata::plugin::fused;
using detail::GradContext;
using detail::OpCall;
using detail::derivatives::Grads;
using detail::derivatives::plus;
using detail::derivatives::scalar;

constexpr detail::AttrDecl kProgramAttrs[] = {{"program", STRATA_ATTR_STRING, true}};

/// The program of a call's "program" attribute (parsed once per text).
std::shared_ptr<const fp::Program> program_of(const detail::Attrs* attrs, const std::string& who) {
  const detail::Attr* text = nullptr;
  if (attrs != nullptr) {
    for (const detail::Attr& a : *attrs)
      if (std::string_view(a.name) == "program") text = &a;
  }
  if (text == nullptr) throw ValueError(who + ": no 'program' attribute");
  static auto* cache = new fp::ProgramCache();  // outlives static teardown
  std::string error;
  std::shared_ptr<const fp::Program> p = cache->get(text->text, error);
  if (p == nullptr) throw ValueError(who + ": " + error);
  return p;
}

/// Inputs promoted to one float dtype and broadcast to one shape, as a
/// binary op's are; the program's one output has them.
void fused_rule(OpCall& call) {
  const auto program = program_of(call.attrs, call.describe());
  const fp::Program& p = *program;
  if (call.n_inputs != p.n_inputs) {
    throw ValueError(call.describe() + ": its program reads " + std::to_string(p.n_inputs) +
                     " input(s), the call has " + std::to_string(call.n_inputs));
  }
  if (p.outputs.size() != 1) {
    throw ValueError(call.describe() + ": its program has " + std::to_string(p.outputs.size()) +
                     " outputs; the op (version 1) has one");
  }
  DType t = call.in(0).dtype();
  for (int k = 1; k < call.n_inputs; ++k) t = promote_types(t, call.in(k).dtype());
  if (is_complex(t))
    throw DTypeError(call.describe() + ": fused programs are real (found " + std::string(dtype_name(t)) + ")");
  if (!is_floating(t)) t = DType::f32;
  Shape shape(call.in(0).shape().begin(), call.in(0).shape().end());
  for (int k = 1; k < call.n_inputs; ++k) shape = detail::broadcast_shapes(shape, call.in(k).shape(), call);
  for (int k = 0; k < call.n_inputs; ++k) {
    detail::cast_input(call, k, t);
    detail::expand_input(call, k, shape);
  }
  call.out().dtype = t;
  call.out().set_shape(shape);
}

/// One statement on tensors: what its op means.
Tensor apply(fp::Op op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case fp::Op::neg:
      return neg(a);
    case fp::Op::abs:
      return abs(a);
    case fp::Op::sign:
      return sign(a);
    case fp::Op::exp:
      return exp(a);
    case fp::Op::log:
      return log(a);
    case fp::Op::log1p:
      return log1p(a);
    case fp::Op::expm1:
      return expm1(a);
    case fp::Op::sqrt:
      return sqrt(a);
    case fp::Op::reciprocal:
      return reciprocal(a);
    case fp::Op::sin:
      return sin(a);
    case fp::Op::cos:
      return cos(a);
    case fp::Op::tanh:
      return tanh(a);
    case fp::Op::sigmoid:
      return sigmoid(a);
    case fp::Op::relu:
      return relu(a);
    case fp::Op::add:
      return add(a, b);
    case fp::Op::sub:
      return sub(a, b);
    case fp::Op::mul:
      return mul(a, b);
    case fp::Op::div:
      return div(a, b);
    case fp::Op::tanh_backward:
      return tanh_backward(a, b);
    case fp::Op::sigmoid_backward:
      return sigmoid_backward(a, b);
    case fp::Op::relu_backward:
      return relu_backward(a, b);
  }
  throw Error("internal: fused op without a meaning");
}

/// Every value of the program on `inputs` (inputs first).
/// An operand among the values `v` computed so far (v[0] is the first
/// input): the value, or the constant as a 0-d tensor of the inputs' dtype.
Tensor operand_value(const fp::Operand& o, const std::vector<Tensor>& v) {
  return o.is_constant() ? scalar(v.front(), o.constant) : v[static_cast<size_t>(o.value)];
}
/// Operand k (0: a, 1: b) of a statement.
const fp::Operand& operand(const fp::Statement& st, int k) { return k == 0 ? st.a : st.b; }

std::vector<Tensor> evaluate(const fp::Program& p, std::span<const Tensor> inputs) {
  std::vector<Tensor> v(inputs.begin(), inputs.end());
  for (const fp::Statement& st : p.body) {
    Tensor a = operand_value(st.a, v), b = fp::arity(st.op) == 2 ? operand_value(st.b, v) : Tensor();
    v.push_back(apply(st.op, a, b));
  }
  return v;
}

/// s · ∂y/∂(operand k) of statement y = op(a, b): the derivative table. The
/// partials are diagonal, so one map serves both modes (the JVP applies it
/// to a tangent, the VJP to a cotangent). Undefined: zero.
Tensor partial(fp::Op op, int k, const Tensor& s, const Tensor& a, const Tensor& b, const Tensor& y) {
  switch (op) {
    case fp::Op::neg:
      return neg(s);
    case fp::Op::abs:
      return s * sign(a);
    case fp::Op::sign:
      return Tensor();
    case fp::Op::exp:
      return s * y;
    case fp::Op::log:
      return s / a;
    case fp::Op::log1p:
      return s / (a + 1.0);
    case fp::Op::expm1:
      return s * (y + 1.0);
    case fp::Op::sqrt:
      return s / (y * 2.0);
    case fp::Op::reciprocal:
      return neg(s * y * y);
    case fp::Op::sin:
      return s * cos(a);
    case fp::Op::cos:
      return neg(s * sin(a));
    case fp::Op::tanh:
      return tanh_backward(s, y);
    case fp::Op::sigmoid:
      return sigmoid_backward(s, y);
    case fp::Op::relu:
      return relu_backward(s, a);
    case fp::Op::add:
      return s;
    case fp::Op::sub:
      return k == 0 ? s : neg(s);
    case fp::Op::mul:
      return k == 0 ? s * b : s * a;
    case fp::Op::div:
      return k == 0 ? s / b : neg(s * y / b);
    // (g, y) ↦ g(1 − y²): in g the same map; in y, −2 g y.
    case fp::Op::tanh_backward:
      return k == 0 ? tanh_backward(s, b) : s * a * b * -2.0;
    // (g, y) ↦ g y (1 − y): in g the same map; in y, g (1 − 2y).
    case fp::Op::sigmoid_backward:
      return k == 0 ? sigmoid_backward(s, b) : s * a * (1.0 - b * 2.0);
    // (g, x) ↦ g [x > 0]: in g the same map; flat in x.
    case fp::Op::relu_backward:
      return k == 0 ? relu_backward(s, b) : Tensor();
  }
  throw Error("internal: fused op without a derivative");
}

/// Reverse mode: the output's cotangent walked back through the program.
Grads fused_vjp(const GradContext& c) {
  const auto program = program_of(c.attrs, "fused_elementwise VJP");
  const fp::Program& p = *program;
  const Tensor& g = c.grad(0);
  if (!g.defined()) return Grads(c.inputs.size());
  const std::vector<Tensor> v = evaluate(p, c.inputs);
  std::vector<Tensor> bar(v.size());
  bar[static_cast<size_t>(p.outputs[0])] = g;
  for (size_t j = p.body.size(); j-- > 0;) {
    const size_t index = static_cast<size_t>(p.n_inputs) + j;
    if (!bar[index].defined()) continue;
    const fp::Statement& st = p.body[j];
    const Tensor a = operand_value(st.a, v), b = fp::arity(st.op) == 2 ? operand_value(st.b, v) : Tensor();
    for (int k = 0; k < fp::arity(st.op); ++k) {
      if (operand(st, k).is_constant()) continue;
      const size_t to = static_cast<size_t>(operand(st, k).value);
      bar[to] = plus(bar[to], partial(st.op, k, bar[index], a, b, v[index]));
    }
  }
  Grads out(bar.begin(), bar.begin() + p.n_inputs);
  for (size_t k = 0; k < out.size(); ++k)
    if (!c.needs(static_cast<int>(k))) out[k] = Tensor();
  return out;
}

/// Forward mode: the inputs' tangents pushed through the program.
Grads fused_jvp(const GradContext& c) {
  const auto program = program_of(c.attrs, "fused_elementwise JVP");
  const fp::Program& p = *program;
  const std::vector<Tensor> v = evaluate(p, c.inputs);
  std::vector<Tensor> dot(v.size());
  for (int k = 0; k < p.n_inputs; ++k) dot[static_cast<size_t>(k)] = c.grad(k);
  for (size_t j = 0; j < p.body.size(); ++j) {
    const size_t index = static_cast<size_t>(p.n_inputs) + j;
    const fp::Statement& st = p.body[j];
    auto tangent = [&](int k) -> const Tensor* {
      const fp::Operand& o = operand(st, k);
      return o.is_constant() || !dot[static_cast<size_t>(o.value)].defined() ? nullptr
                                                                             : &dot[static_cast<size_t>(o.value)];
    };
    if (tangent(0) == nullptr && (fp::arity(st.op) == 1 || tangent(1) == nullptr)) continue;
    const Tensor a = operand_value(st.a, v), b = fp::arity(st.op) == 2 ? operand_value(st.b, v) : Tensor();
    for (int k = 0; k < fp::arity(st.op); ++k) {
      if (const Tensor* t = tangent(k)) dot[index] = plus(dot[index], partial(st.op, k, *t, a, b, v[index]));
    }
  }
  return {dot[static_cast<size_t>(p.outputs[0])]};
}

const detail::OpDef& kFusedElementwise =
    detail::define_op({.name = "fused_elementwise",
                       .kind = detail::OpKind::composite,
                       .tags = detail::op_tag::pointwise | detail::op_tag::broadcasting,
                       .attrs = kProgramAttrs,
                       .dtypes = detail::DTypeFamily::floating,
                       .n_inputs = -1,
                       .prepare = fused_rule,
                       .decompose =
                           [](const OpCall& c) {
                             const auto program = program_of(c.attrs, c.describe());
                             const fp::Program& p = *program;
                             std::vector<Tensor> in;
                             for (int k = 0; k < c.n_inputs; ++k) in.push_back(c.in(k));
                             const std::vector<Tensor> v = evaluate(p, in);
                             return std::vector<Tensor>{v[static_cast<size_t>(p.outputs[0])]};
                           },
                       .derivative = {.vjp = fused_vjp, .jvp = fused_jvp}});

}  // namespace

Tensor fused_elementwise(const std::vector<Tensor>& inputs, const std::string& program) {
  if (inputs.empty() || inputs.size() > static_cast<size_t>(fp::kMaxInputs)) {
    throw ValueError("fused_elementwise: 1 to " + std::to_string(fp::kMaxInputs) + " inputs, got " +
                     std::to_string(inputs.size()));
  }
  detail::Attrs attrs{detail::Attr::string("program", program)};
  return detail::dispatch_span(kFusedElementwise, inputs, &attrs)[0];
}

}  // namespace strata
