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
#include "fused.hpp"

#include <algorithm>
#include <bit>
#include <memory>
#include <mutex>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
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

/// The text of a call's "program" attribute; ValueError naming `who`
/// when it has none.
std::string_view program_text(const detail::Attrs* attrs, const std::string& who) {
  if (attrs != nullptr) {
    for (const detail::Attr& a : *attrs)
      if (std::string_view(a.name) == "program") return a.text;
  }
  throw ValueError(who + ": no 'program' attribute");
}

/// The program of a call's "program" attribute (parsed once per text).
std::shared_ptr<const fp::Program> program_of(const detail::Attrs* attrs, const std::string& who) {
  std::string error;
  std::shared_ptr<const fp::Program> p = fp::cached_program(program_text(attrs, who), error);
  if (p == nullptr) throw ValueError(who + ": " + error);
  return p;
}

/// Inputs promoted to one float dtype and broadcast to one shape, as a
/// binary op's are; every output of the program (1 to 3) has them.
void fused_rule(OpCall& call) {
  const auto program = program_of(call.attrs, call.describe());
  const fp::Program& p = *program;
  if (call.n_inputs != p.n_inputs) {
    throw ValueError(call.describe() + ": its program reads " + std::to_string(p.n_inputs) +
                     " input(s), the call has " + std::to_string(call.n_inputs));
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
  call.n_outputs = static_cast<int>(p.outputs.size());  // 1 to kMaxOutputs: the parser checked
  for (int k = 0; k < call.n_outputs; ++k) {
    call.out(k).dtype = t;
    call.out(k).set_shape(shape);
  }
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
/// to a tangent, the VJP to a cotangent). Undefined: zero. V is Tensor (the
/// walks below) or Sym (the backward program: the same ops as statements).
template <typename V>
V partial(fp::Op op, int k, const V& s, const V& a, const V& b, const V& y) {
  switch (op) {
    case fp::Op::neg:
      return neg(s);
    case fp::Op::abs:
      return s * sign(a);
    case fp::Op::sign:
      return V();
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
      return k == 0 ? relu_backward(s, b) : V();
  }
  throw Error("internal: fused op without a derivative");
}

/// The backward program under construction: a Sym is an operand of it (a
/// value, a constant, or undefined: zero), and the op functions on Syms
/// append statements, so partial<Sym> writes the VJP as a program.
struct Builder {
  fp::Program program;
  bool failed = false;  // a statement of two constants (no value to compute on)
};
struct Sym {
  Builder* b = nullptr;
  fp::Operand o;
  bool defined() const { return b != nullptr; }
};
/// Whether two operands are the same value or the same constant (bits).
bool same_operand(const fp::Operand& x, const fp::Operand& y) {
  return x.value == y.value &&
         (!x.is_constant() || std::bit_cast<uint64_t>(x.constant) == std::bit_cast<uint64_t>(y.constant));
}
/// Appends `op(a, b)`, or finds the statement that computes it already (a
/// walk computes the same partial twice: y = x·x gives s·x + s·x).
Sym emit(fp::Op op, const Sym& a, const Sym& b = Sym()) {
  Builder* owner = a.b != nullptr ? a.b : b.b;
  if (a.o.is_constant() && (fp::arity(op) == 1 || b.o.is_constant())) {
    owner->failed = true;
    return {owner, {}};
  }
  fp::Program& p = owner->program;
  for (size_t j = 0; j < p.body.size(); ++j) {
    const fp::Statement& st = p.body[j];
    if (st.op == op && same_operand(st.a, a.o) && (fp::arity(op) == 1 || same_operand(st.b, b.o)))
      return {owner, {p.n_inputs + static_cast<int32_t>(j), 0.0}};
  }
  return {owner, {p.add(op, a.o, b.o), 0.0}};
}
Sym constant(const Sym& like, double c) { return {like.b, {-1, c}}; }
Sym neg(const Sym& a) { return emit(fp::Op::neg, a); }
Sym sign(const Sym& a) { return emit(fp::Op::sign, a); }
Sym sin(const Sym& a) { return emit(fp::Op::sin, a); }
Sym cos(const Sym& a) { return emit(fp::Op::cos, a); }
Sym tanh_backward(const Sym& g, const Sym& y) { return emit(fp::Op::tanh_backward, g, y); }
Sym sigmoid_backward(const Sym& g, const Sym& y) { return emit(fp::Op::sigmoid_backward, g, y); }
Sym relu_backward(const Sym& g, const Sym& x) { return emit(fp::Op::relu_backward, g, x); }
Sym operator+(const Sym& a, const Sym& b) { return emit(fp::Op::add, a, b); }
Sym operator*(const Sym& a, const Sym& b) { return emit(fp::Op::mul, a, b); }
Sym operator/(const Sym& a, const Sym& b) { return emit(fp::Op::div, a, b); }
Sym operator+(const Sym& a, double c) { return a + constant(a, c); }
Sym operator*(const Sym& a, double c) { return a * constant(a, c); }
Sym operator-(double c, const Sym& a) { return emit(fp::Op::sub, constant(a, c), a); }
Sym plus(const Sym& a, const Sym& b) { return !a.defined() ? b : !b.defined() ? a : a + b; }

/// `p` without the statements its outputs do not need and without the
/// inputs nothing reads (values renumbered); `kept` gets the old index of
/// each input left.
fp::Program without_dead_code(const fp::Program& p, std::vector<int32_t>& kept) {
  std::vector<bool> live(static_cast<size_t>(p.n_values()), false);
  for (int32_t v : p.outputs) live[static_cast<size_t>(v)] = true;
  for (size_t j = p.body.size(); j-- > 0;) {
    if (!live[static_cast<size_t>(p.n_inputs) + j]) continue;
    for (int k = 0; k < fp::arity(p.body[j].op); ++k) {
      const fp::Operand& o = k == 0 ? p.body[j].a : p.body[j].b;
      if (!o.is_constant()) live[static_cast<size_t>(o.value)] = true;
    }
  }
  fp::Program out;
  std::vector<int32_t> to(static_cast<size_t>(p.n_values()), -1);
  kept.clear();
  for (int32_t k = 0; k < p.n_inputs; ++k) {
    if (!live[static_cast<size_t>(k)]) continue;
    to[static_cast<size_t>(k)] = static_cast<int32_t>(kept.size());
    kept.push_back(k);
  }
  out.n_inputs = static_cast<int32_t>(kept.size());
  auto map = [&to](fp::Operand o) {
    if (!o.is_constant()) o.value = to[static_cast<size_t>(o.value)];
    return o;
  };
  for (size_t j = 0; j < p.body.size(); ++j) {
    if (!live[static_cast<size_t>(p.n_inputs) + j]) continue;
    const fp::Statement& st = p.body[j];
    to[static_cast<size_t>(p.n_inputs) + j] = out.add(st.op, map(st.a), map(st.b));
  }
  for (int32_t v : p.outputs) out.outputs.push_back(to[static_cast<size_t>(v)]);
  return out;
}

/// What a derivative program reads or passes through: forward input k
/// (kInput + k), forward output m (kOutput + m), the rule's grads[k] (kSeed
/// + k: output k's cotangent in reverse mode, input k's tangent in forward
/// mode), or (fused_saved_values' trial plans) the value v of the forward
/// program were it saved (kSaved + v).
enum Source : int { kInput = 0, kOutput = 1 << 10, kSeed = 2 << 10, kSaved = 3 << 10 };

/// The costlier a statement is to recompute, the more a saved value saves:
/// 0 for those not worth a pass over memory (arithmetic, relu, sign).
int recompute_cost(fp::Op op) {
  switch (op) {
    case fp::Op::tanh:
      return 4;
    case fp::Op::sin:
    case fp::Op::cos:
    case fp::Op::log:
    case fp::Op::log1p:
    case fp::Op::expm1:
    case fp::Op::sigmoid:
      return 3;
    case fp::Op::exp:
      return 2;
    case fp::Op::sqrt:
    case fp::Op::div:
    case fp::Op::reciprocal:
      return 1;
    default:
      return 0;
  }
}

/// Reverse mode over values `v` (V: Tensor for the walk, Sym for a
/// program): `bar`, seeded at the outputs, walked back to the inputs with
/// the derivative table's partials. `operand_of` gives an operand's value.
template <class V, class OperandOf>
void walk_back(const fp::Program& p, const std::vector<V>& v, const OperandOf& operand_of, std::vector<V>& bar) {
  for (size_t j = p.body.size(); j-- > 0;) {
    const size_t index = static_cast<size_t>(p.n_inputs) + j;
    if (!bar[index].defined()) continue;
    const fp::Statement& st = p.body[j];
    const V a = operand_of(st.a), b = fp::arity(st.op) == 2 ? operand_of(st.b) : V();
    for (int k = 0; k < fp::arity(st.op); ++k) {
      if (operand(st, k).is_constant()) continue;
      const size_t to = static_cast<size_t>(operand(st, k).value);
      bar[to] = plus(bar[to], partial(st.op, k, bar[index], a, b, v[index]));
    }
  }
}

/// Forward mode: `dot`, set at the inputs, pushed through the statements.
template <class V, class OperandOf>
void walk_forward(const fp::Program& p, const std::vector<V>& v, const OperandOf& operand_of, std::vector<V>& dot) {
  for (size_t j = 0; j < p.body.size(); ++j) {
    const size_t index = static_cast<size_t>(p.n_inputs) + j;
    const fp::Statement& st = p.body[j];
    auto tangent = [&](int k) -> const V* {
      const fp::Operand& o = operand(st, k);
      return o.is_constant() || !dot[static_cast<size_t>(o.value)].defined() ? nullptr
                                                                             : &dot[static_cast<size_t>(o.value)];
    };
    if (tangent(0) == nullptr && (fp::arity(st.op) == 1 || tangent(1) == nullptr)) continue;
    const V a = operand_of(st.a), b = fp::arity(st.op) == 2 ? operand_of(st.b) : V();
    for (int k = 0; k < fp::arity(st.op); ++k) {
      if (const V* t = tangent(k)) dot[index] = plus(dot[index], partial(st.op, k, *t, a, b, v[index]));
    }
  }
}

enum class Mode { reverse, forward };

/// The derivative program of a forward program, for one pattern of
/// defined seeds, wanted results and readable values (Plans caches it).
struct Plan {
  bool fits = false;  // false: the caller walks with tensors
  std::string text;   // the program (empty: no statement computes a result)
  /// The program's inputs, in order (Source codes).
  std::vector<int> reads;
  /// Per result (reverse: each forward input's gradient; forward: each
  /// output's tangent): -1 none (zero); kComputed + j the program's output
  /// j; else the tensor (a Source code: a seed) that is it.
  std::vector<int> source;
  static constexpr int kComputed = 1 << 16;
};

/// A derivative as one fused op: a program over the forward's inputs, the
/// defined seeds (`seeded[k]`: the rule's grads[k] is defined) and the
/// forward values it may read (`readable[v]`: a Source code, or -1 where
/// value v is recomputed) that walks the forward with partial<Sym> — back
/// from the outputs' cotangents, or forward from the inputs' tangents: the
/// same ops, in the same order, as the tensor walk in fused_vjp/fused_jvp,
/// on the same values, so the same bits — writing every wanted result
/// (`wanted`: per forward input in reverse mode, per output in forward
/// mode) in one pass over memory. Does not fit (the caller walks with
/// tensors) where it would read more than kMaxInputs tensors or write more
/// than kMaxOutputs, or a statement would have two constants.
Plan plan_derivative(const fp::Program& p, Mode mode, const std::vector<bool>& seeded, const std::vector<bool>& wanted,
                     const std::vector<int>& readable) {
  Plan plan;
  Builder b;
  std::vector<int> reads;  // the program's inputs before dead code goes
  auto read = [&](int source) {
    reads.push_back(source);
    return Sym{&b, {static_cast<int32_t>(reads.size()) - 1, 0.0}};
  };
  // Values of the forward program → operands of the derivative one. Inputs
  // are numbered as they are met; the program's n_inputs is set last.
  std::vector<Sym> v;
  for (int32_t k = 0; k < p.n_inputs; ++k) v.push_back(read(kInput + k));
  std::vector<Sym> seed(seeded.size());
  for (size_t k = 0; k < seeded.size(); ++k) {
    if (seeded[k]) seed[k] = read(kSeed + static_cast<int>(k));
  }
  std::vector<Sym> loaded(p.body.size());  // values read instead of recomputed
  for (size_t j = 0; j < p.body.size(); ++j) {
    const int r = readable[static_cast<size_t>(p.n_inputs) + j];
    if (r >= 0) loaded[j] = read(r);
  }
  b.program.n_inputs = static_cast<int32_t>(reads.size());
  auto operand_sym = [&](const fp::Operand& o) {
    return o.is_constant() ? Sym{&b, o} : v[static_cast<size_t>(o.value)];
  };
  for (size_t j = 0; j < p.body.size(); ++j) {
    const fp::Statement& st = p.body[j];
    v.push_back(loaded[j].defined()
                    ? loaded[j]
                    : emit(st.op, operand_sym(st.a), fp::arity(st.op) == 2 ? operand_sym(st.b) : Sym()));
  }
  std::vector<Sym> d(v.size()), results;
  if (mode == Mode::reverse) {
    for (size_t m = 0; m < p.outputs.size(); ++m) {
      const size_t at = static_cast<size_t>(p.outputs[m]);
      if (seed[m].defined()) d[at] = plus(d[at], seed[m]);
    }
    walk_back(p, v, operand_sym, d);
    results.assign(d.begin(), d.begin() + p.n_inputs);
  } else {
    std::copy(seed.begin(), seed.end(), d.begin());
    walk_forward(p, v, operand_sym, d);
    for (int32_t out : p.outputs) results.push_back(d[static_cast<size_t>(out)]);
  }
  if (b.failed) return plan;
  // The results computed by statements are the program's outputs; one that
  // is a tensor passed through (an add's seed) is that tensor.
  plan.source.assign(results.size(), -1);
  for (size_t k = 0; k < results.size(); ++k) {
    const Sym& s = results[k];
    if (!wanted[k] || !s.defined()) continue;
    if (s.o.value < b.program.n_inputs) {
      plan.source[k] = reads[static_cast<size_t>(s.o.value)];
    } else {
      plan.source[k] = Plan::kComputed + static_cast<int>(b.program.outputs.size());
      b.program.outputs.push_back(s.o.value);
    }
  }
  if (!b.program.outputs.empty()) {
    std::vector<int32_t> kept;
    const fp::Program live = without_dead_code(b.program, kept);
    for (int32_t k : kept) plan.reads.push_back(reads[static_cast<size_t>(k)]);
    plan.text = live.text();
  }
  plan.fits = plan.reads.size() <= static_cast<size_t>(fp::kMaxInputs) &&
              b.program.outputs.size() <= static_cast<size_t>(fp::kMaxOutputs);
  return plan;
}

/// The forward's outputs a derivative program may read instead of
/// recomputing their statements: the costly ones (`available[m]`: output
/// m's tensor is at hand). Per value: a Source code, or -1.
std::vector<int> readable_outputs(const fp::Program& p, const std::vector<bool>& available) {
  std::vector<int> readable(static_cast<size_t>(p.n_values()), -1);
  for (size_t m = p.outputs.size(); m-- > 0;) {
    const int32_t v = p.outputs[m];
    if (available[m] && v >= p.n_inputs && recompute_cost(p.body[static_cast<size_t>(v - p.n_inputs)].op) > 0)
      readable[static_cast<size_t>(v)] = kOutput + static_cast<int>(m);
  }
  return readable;
}

/// The recompute cost of the statement defining `value`, -1 for an input.
int statement_cost(const fp::Program& p, size_t value) {
  return value < static_cast<size_t>(p.n_inputs) ? -1
                                                 : recompute_cost(p.body[value - static_cast<size_t>(p.n_inputs)].op);
}

/// The plan reading the costly outputs at hand; where that would read too
/// many tensors, the cheapest of them recomputed instead, one by one, until
/// it fits (forward mode writes a tangent per output, saved values too, so
/// it has fewer operands to spare than reverse mode).
Plan best_plan(const fp::Program& p, Mode mode, const std::vector<bool>& seeded, const std::vector<bool>& wanted,
               const std::vector<bool>& available) {
  std::vector<int> readable = readable_outputs(p, available);
  Plan plan = plan_derivative(p, mode, seeded, wanted, readable);
  while (!plan.fits) {
    size_t cheapest = readable.size();
    for (size_t v = 0; v < readable.size(); ++v) {
      if (readable[v] >= 0 && (cheapest == readable.size() || statement_cost(p, v) < statement_cost(p, cheapest)))
        cheapest = v;
    }
    if (cheapest == readable.size()) break;  // nothing read: the walk runs
    readable[cheapest] = -1;
    plan = plan_derivative(p, mode, seeded, wanted, readable);
  }
  return plan;
}

/// The plans a derivative runs as: one where it fits (best_plan); else, as
/// a derivative is linear in its seeds and its results are independent,
/// several — the wanted results in chunks of at most kMaxOutputs, the seeds
/// of each chunk in groups as large as fit — whose results add up per
/// result. Empty where even one seed alone does not fit (the walk runs).
std::vector<Plan> plans_for(const fp::Program& p, Mode mode, const std::vector<bool>& seeded,
                            const std::vector<bool>& wanted, const std::vector<bool>& available) {
  Plan whole = best_plan(p, mode, seeded, wanted, available);
  if (whole.fits) return {std::move(whole)};
  std::vector<std::vector<bool>> chunks;
  std::vector<bool> chunk(wanted.size(), false);
  int in_chunk = 0;
  for (size_t k = 0; k < wanted.size(); ++k) {
    if (!wanted[k]) continue;
    chunk[k] = true;
    if (++in_chunk == fp::kMaxOutputs) {
      chunks.push_back(chunk);
      chunk.assign(wanted.size(), false);
      in_chunk = 0;
    }
  }
  if (in_chunk > 0) chunks.push_back(chunk);
  std::vector<Plan> parts;
  const std::vector<bool> none(seeded.size(), false);
  for (const std::vector<bool>& results : chunks) {
    std::vector<bool> group = none;
    for (size_t s = 0; s < seeded.size(); ++s) {
      if (!seeded[s]) continue;
      std::vector<bool> with = group;
      with[s] = true;
      if (best_plan(p, mode, with, results, available).fits) {
        group = std::move(with);
        continue;
      }
      if (group == none) return {};  // seed s alone does not fit
      parts.push_back(best_plan(p, mode, group, results, available));
      group = none;
      group[s] = true;
      if (!best_plan(p, mode, group, results, available).fits) return {};
    }
    if (group != none) parts.push_back(best_plan(p, mode, group, results, available));
  }
  return parts;
}

/// Plans by forward program text, mode and pattern, built once each (a
/// training loop differentiates the same few programs over and over).
/// Bounded like the ProgramCache: starts over when full.
class Plans {
 public:
  std::shared_ptr<const std::vector<Plan>> get(std::string_view text, const fp::Program& p, Mode mode,
                                               const std::vector<bool>& seeded, const std::vector<bool>& wanted,
                                               const std::vector<bool>& available) {
    std::string key(text);
    key += mode == Mode::reverse ? "\nvjp " : "\njvp ";
    for (const std::vector<bool>* pattern : {&seeded, &wanted, &available}) {
      for (bool x : *pattern) key += x ? '1' : '0';
      key += '/';
    }
    {
      std::lock_guard lock(mutex_);
      if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    }
    auto shared = std::make_shared<const std::vector<Plan>>(plans_for(p, mode, seeded, wanted, available));
    std::lock_guard lock(mutex_);
    if (plans_.size() >= 1024) plans_.clear();
    plans_.emplace(std::move(key), shared);
    return shared;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<Plan>>> plans_;
};

/// fused_vjp's and fused_jvp's fused path (plans_for: one op, or a few
/// whose results add up); false where no plan fits.
bool fused_derivative(std::string_view text, const fp::Program& p, Mode mode, const GradContext& c, Grads& out) {
  static auto* plans = new Plans();  // outlives static teardown
  const size_t n_seeds = mode == Mode::reverse ? p.outputs.size() : static_cast<size_t>(p.n_inputs);
  const size_t n_results = mode == Mode::reverse ? static_cast<size_t>(p.n_inputs) : p.outputs.size();
  std::vector<bool> seeded(n_seeds), wanted(n_results, true), available(p.outputs.size());
  for (size_t k = 0; k < n_seeds; ++k) seeded[k] = c.grad(static_cast<int>(k)).defined();
  if (mode == Mode::reverse) {
    for (size_t k = 0; k < n_results; ++k) wanted[k] = c.needs(static_cast<int>(k));
  }
  for (size_t m = 0; m < p.outputs.size(); ++m)
    available[m] = m < c.outputs.size() && c.out(static_cast<int>(m)).defined();
  const std::shared_ptr<const std::vector<Plan>> parts = plans->get(text, p, mode, seeded, wanted, available);
  if (parts->empty()) return false;
  auto tensor = [&c](int source) -> const Tensor& {
    if (source >= kSeed) return c.grad(source - kSeed);
    if (source >= kOutput) return c.out(source - kOutput);
    return c.in(source - kInput);
  };
  out.assign(n_results, Tensor());
  for (const Plan& plan : *parts) {
    std::vector<Tensor> computed;
    if (!plan.text.empty()) {
      std::vector<Tensor> inputs;
      for (int source : plan.reads) inputs.push_back(tensor(source));
      computed = fused_elementwise_outputs(inputs, plan.text);
    }
    for (size_t k = 0; k < plan.source.size(); ++k) {
      const int from = plan.source[k];
      if (from < 0) continue;
      const Tensor& r = from >= Plan::kComputed ? computed[static_cast<size_t>(from - Plan::kComputed)] : tensor(from);
      out[k] = out[k].defined() ? plus(out[k], r) : r;
    }
  }
  return true;
}

/// Reverse mode: the outputs' cotangents walked back through the program.
Grads fused_vjp(const GradContext& c) {
  const auto program = program_of(c.attrs, "fused_elementwise VJP");
  const fp::Program& p = *program;
  bool any = false;
  for (size_t m = 0; m < p.outputs.size(); ++m) any = any || c.grad(static_cast<int>(m)).defined();
  if (!any) return Grads(c.inputs.size());
  if (Grads out; fused_derivative(program_text(c.attrs, "fused_elementwise VJP"), p, Mode::reverse, c, out)) return out;
  const std::vector<Tensor> v = evaluate(p, c.inputs);
  std::vector<Tensor> bar(v.size());
  for (size_t m = 0; m < p.outputs.size(); ++m) {
    const size_t at = static_cast<size_t>(p.outputs[m]);
    bar[at] = plus(bar[at], c.grad(static_cast<int>(m)));
  }
  walk_back(
      p, v, [&v](const fp::Operand& o) { return operand_value(o, v); }, bar);
  Grads out(bar.begin(), bar.begin() + p.n_inputs);
  for (size_t k = 0; k < out.size(); ++k)
    if (!c.needs(static_cast<int>(k))) out[k] = Tensor();
  return out;
}

/// Forward mode: the inputs' tangents pushed through the program.
Grads fused_jvp(const GradContext& c) {
  const auto program = program_of(c.attrs, "fused_elementwise JVP");
  const fp::Program& p = *program;
  if (Grads out; fused_derivative(program_text(c.attrs, "fused_elementwise JVP"), p, Mode::forward, c, out)) return out;
  const std::vector<Tensor> v = evaluate(p, c.inputs);
  std::vector<Tensor> dot(v.size());
  for (int k = 0; k < p.n_inputs; ++k) dot[static_cast<size_t>(k)] = c.grad(k);
  walk_forward(
      p, v, [&v](const fp::Operand& o) { return operand_value(o, v); }, dot);
  Grads out;
  for (int32_t v_out : p.outputs) out.push_back(dot[static_cast<size_t>(v_out)]);
  return out;
}

const detail::OpDef& kFusedElementwise =
    detail::define_op({.name = "fused_elementwise",
                       .kind = detail::OpKind::composite,
                       .tags = detail::op_tag::pointwise | detail::op_tag::broadcasting,
                       .attrs = kProgramAttrs,
                       .dtypes = detail::DTypeFamily::floating,
                       .n_inputs = -1,
                       .n_outputs = -1,
                       .prepare = fused_rule,
                       .decompose =
                           [](const OpCall& c) {
                             const auto program = program_of(c.attrs, c.describe());
                             const fp::Program& p = *program;
                             std::vector<Tensor> in;
                             for (int k = 0; k < c.n_inputs; ++k) in.push_back(c.in(k));
                             const std::vector<Tensor> v = evaluate(p, in);
                             std::vector<Tensor> out;
                             for (int32_t v_out : p.outputs) out.push_back(v[static_cast<size_t>(v_out)]);
                             return out;
                           },
                       .derivative = {.vjp = fused_vjp, .jvp = fused_jvp}});

}  // namespace

namespace detail {

std::vector<int32_t> fused_saved_values(const fp::Program& p, int max_saved) {
  const std::vector<bool> defined(p.outputs.size(), true), needs(static_cast<size_t>(p.n_inputs), true);
  // The outputs the VJP reads anyway, and the candidates: every other
  // costly statement, were it saved.
  const std::vector<int> outputs = readable_outputs(p, defined);
  std::vector<int> readable = outputs;
  for (size_t j = 0; j < p.body.size(); ++j) {
    const size_t v = static_cast<size_t>(p.n_inputs) + j;
    if (readable[v] < 0 && recompute_cost(p.body[j].op) > 0) readable[v] = kSaved + static_cast<int>(v);
  }
  std::vector<int32_t> saved;
  for (int source : plan_derivative(p, Mode::reverse, defined, needs, readable).reads)
    if (source >= kSaved) saved.push_back(source - kSaved);
  auto cost = [&p](int32_t v) { return recompute_cost(p.body[static_cast<size_t>(v - p.n_inputs)].op); };
  std::stable_sort(saved.begin(), saved.end(), [&cost](int32_t x, int32_t y) { return cost(x) > cost(y); });
  const int outputs_now = static_cast<int>(p.outputs.size());
  const int room = std::min(max_saved, fp::kMaxOutputs - outputs_now);
  saved.resize(static_cast<size_t>(std::clamp(room, 0, static_cast<int>(saved.size()))));
  // Fewer, the cheapest first, until the backward program's reads fit.
  for (; !saved.empty(); saved.pop_back()) {
    readable = outputs;
    for (int32_t v : saved) readable[static_cast<size_t>(v)] = kSaved + v;
    if (plan_derivative(p, Mode::reverse, defined, needs, readable).fits) break;
  }
  return saved;
}

}  // namespace detail

std::vector<Tensor> fused_elementwise_outputs(const std::vector<Tensor>& inputs, const std::string& program) {
  if (inputs.empty() || inputs.size() > static_cast<size_t>(fp::kMaxInputs)) {
    throw ValueError("fused_elementwise: 1 to " + std::to_string(fp::kMaxInputs) + " inputs, got " +
                     std::to_string(inputs.size()));
  }
  detail::Attrs attrs{detail::Attr::string("program", program)};
  detail::OpResult r = detail::dispatch_span(kFusedElementwise, inputs, &attrs);
  return r.to_vector();
}

Tensor fused_elementwise(const std::vector<Tensor>& inputs, const std::string& program) {
  std::vector<Tensor> out = fused_elementwise_outputs(inputs, program);
  if (out.size() != 1) {
    throw ValueError("fused_elementwise: the program has " + std::to_string(out.size()) +
                     " outputs; call fused_elementwise_outputs for all of them");
  }
  return out.front();
}

}  // namespace strata
