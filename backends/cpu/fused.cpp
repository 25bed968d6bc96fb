// fused.cpp — strata::fused_elementwise (docs/ops.md, "Fused elementwise
// programs"): the program interpreted over tiles small enough to stay in
// the L1/L2 caches, so that a chain of elementwise ops reads its inputs and
// writes its output once. No code is generated: each statement runs the
// loop its unfused op runs (the functors of pointwise.hpp, SLEEF's array
// functions for f32), so the result has the unfused chain's bits.
//
// Operands: each input compact with the output's shape, or one value
// broadcast (all strides 0). Any other layout is declined, and the core
// runs the program's ops one by one.
#include <memory>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <vector>

#include "elementwise.hpp"
#include "pointwise.hpp"
#include "vector_math.hpp"

namespace strata::cpu {
namespace {

namespace fp = strata::plugin::fused;

/// Elements per tile: 1 KiB of f32 per value, so that the twenty-odd values
/// of a backward program stay in the L1 cache (1024 was 6% slower on a
/// 17-statement backward program at 4M elements).
constexpr int64_t kTile = 256;

/// The call's program (parsed once per text); nullptr with `error`.
std::shared_ptr<const fp::Program> program_of(const KernelCall& call, std::string& error) {
  const strata_attr* text = plugin::find_attr(call.abi, "program");
  if (text == nullptr || text->kind != STRATA_ATTR_STRING || text->string == nullptr) {
    error = "no STRING attribute 'program'";
    return nullptr;
  }
  return fp::cached_program(std::string_view(text->string, static_cast<size_t>(text->count)), error);
}

template <class T, class Op>
void unary(const T* x, T* y, int64_t n) {
  detail::contiguous<T, T>(y, std::tuple<const T*>(x), n, Op{});
}
template <class T, class Op>
void binary(const T* a, const T* b, T* y, int64_t n) {
  detail::contiguous<T, T, T>(y, std::tuple<const T*, const T*>(a, b), n, Op{});
}

/// One statement over n elements; f32 transcendental functions take
/// SLEEF's array loops (the bits of the scalar functors).
template <class T>
void statement(fp::Op op, const T* a, const T* b, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    switch (op) {
      case fp::Op::exp:
        return vmath::exp(a, y, n);
      case fp::Op::log:
        return vmath::log(a, y, n);
      case fp::Op::log1p:
        return vmath::log1p(a, y, n);
      case fp::Op::expm1:
        return vmath::expm1(a, y, n);
      case fp::Op::sin:
        return vmath::sin(a, y, n);
      case fp::Op::cos:
        return vmath::cos(a, y, n);
      case fp::Op::tanh:
        return vmath::tanh(a, y, n);
      case fp::Op::sigmoid:
        return vmath::sigmoid(a, y, n);
      default:
        break;
    }
  }
  switch (op) {
    case fp::Op::neg:
      return unary<T, Neg>(a, y, n);
    case fp::Op::abs:
      return unary<T, Abs>(a, y, n);
    case fp::Op::sign:
      return unary<T, Sign>(a, y, n);
    case fp::Op::exp:
      return unary<T, Exp>(a, y, n);
    case fp::Op::log:
      return unary<T, Log>(a, y, n);
    case fp::Op::log1p:
      return unary<T, Log1p>(a, y, n);
    case fp::Op::expm1:
      return unary<T, Expm1>(a, y, n);
    case fp::Op::sqrt:
      return unary<T, Sqrt>(a, y, n);
    case fp::Op::reciprocal:
      return unary<T, Reciprocal>(a, y, n);
    case fp::Op::sin:
      return unary<T, Sin>(a, y, n);
    case fp::Op::cos:
      return unary<T, Cos>(a, y, n);
    case fp::Op::tanh:
      return unary<T, Tanh>(a, y, n);
    case fp::Op::sigmoid:
      return unary<T, Sigmoid>(a, y, n);
    case fp::Op::relu:
      return unary<T, Relu>(a, y, n);
    case fp::Op::add:
      return binary<T, Add>(a, b, y, n);
    case fp::Op::sub:
      return binary<T, Sub>(a, b, y, n);
    case fp::Op::mul:
      return binary<T, Mul>(a, b, y, n);
    case fp::Op::div:
      return binary<T, DivValue>(a, b, y, n);
    case fp::Op::tanh_backward:
      return binary<T, TanhBackward>(a, b, y, n);
    case fp::Op::sigmoid_backward:
      return binary<T, SigmoidBackward>(a, b, y, n);
    case fp::Op::relu_backward:
      return binary<T, ReluBackward>(a, b, y, n);
  }
}

/// Whether operand `t` is compact with `n` elements in y's order, or one
/// value broadcast (every stride 0).
bool compact_like(const strata_tensor& t, const strata_tensor& y) {
  return same_shape(t, y) && (plugin::is_contiguous(t) || plugin::is_one_value(t));
}

/// The program on N inputs into M outputs, all T (every signature's kernel).
template <class T>
strata_status run_fused(const KernelCall& call, const char* name, int N, int M) {
  std::string error;
  const std::shared_ptr<const fp::Program> p = program_of(call, error);
  if (p == nullptr) return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s", name, error.c_str());
  const strata_tensor& y = call.out();
  if (p->n_inputs != N || p->outputs.size() != static_cast<size_t>(M)) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s: the program reads %d inputs into %zu outputs, "
                "the call has %d and %d",
                name, static_cast<int>(p->n_inputs), p->outputs.size(), N, M);
  }
  for (int m = 1; m < M; ++m) {
    if (!same_shape(call.out(m), y)) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output %d's shape differs from output 0's", name, m);
    }
  }
  for (int k = 0; k < N; ++k) {
    if (!compact_like(call.in(k), y)) {
      return fail(call.error, STRATA_ERROR_UNSUPPORTED,
                  "%s: input %d is neither compact like the output nor one broadcast value", name, k);
    }
  }
  for (int m = 0; m < M; ++m) {
    if (!plugin::is_contiguous(call.out(m))) {
      return fail(call.error, STRATA_ERROR_UNSUPPORTED, "%s: output %d is not compact", name, m);
    }
  }
  const int64_t total = plugin::numel(y);
  const T* in[fp::kMaxInputs];
  bool broadcast[fp::kMaxInputs];
  for (int k = 0; k < N; ++k) {
    in[k] = data<const T>(call.in(k));
    broadcast[k] = !plugin::is_contiguous(call.in(k)) || (plugin::numel(call.in(k)) == 1 && total != 1);
  }
  T* out[fp::kMaxOutputs];
  for (int m = 0; m < M; ++m) out[m] = data<T>(call.out(m));
  const fp::Program& prog = *p;
  // Which output (if any) each value is: a statement that is one writes
  // there directly (the first output naming it, when several do).
  std::vector<int> output_of(static_cast<size_t>(prog.n_values()), -1);
  for (int m = M; m-- > 0;) output_of[static_cast<size_t>(prog.outputs[static_cast<size_t>(m)])] = m;
  parallel_for((total + kTile - 1) / kTile, call.threads,
               [&](int64_t first, int64_t last) {
                 // Registers: a tile per value, as long as the call needs and not
                 // initialised (each statement writes its tile before anything
                 // reads it); one more per constant operand, and the broadcast
                 // inputs' own, filled once. (Zeroing every tile of every slot
                 // was a third of a 1K-element call's instructions.)
                 const int64_t len = std::min(kTile, total);
                 const size_t values = static_cast<size_t>(prog.n_values());
                 auto is_constant = [&prog](size_t j, size_t s) {
                   const fp::Statement& st = prog.body[j];
                   return (s == 0 ? st.a : st.b).is_constant() && (s == 0 || fp::arity(st.op) == 2);
                 };
                 size_t slots = values;
                 for (size_t j = 0; j < prog.body.size(); ++j) slots += is_constant(j, 0) + is_constant(j, 1);
                 const std::unique_ptr<T[]> tiles(new T[slots * static_cast<size_t>(len)]);
                 auto tile = [&](size_t slot) { return tiles.get() + slot * static_cast<size_t>(len); };
                 std::vector<const T*> at(values);
                 std::vector<const T*> constant(2 * prog.body.size(), nullptr);
                 for (size_t j = 0, next = values; j < prog.body.size(); ++j) {
                   for (size_t s = 0; s < 2; ++s) {
                     if (!is_constant(j, s)) continue;
                     T* c = tile(next++);
                     std::fill(c, c + len, static_cast<T>((s == 0 ? prog.body[j].a : prog.body[j].b).constant));
                     constant[2 * j + s] = c;
                   }
                 }
                 for (int k = 0; k < N; ++k) {
                   if (!broadcast[k]) continue;
                   std::fill(tile(static_cast<size_t>(k)), tile(static_cast<size_t>(k)) + len, in[k][0]);
                 }
                 for (int64_t t = first; t < last; ++t) {
                   const int64_t begin = t * kTile, n = std::min(kTile, total - begin);
                   for (int k = 0; k < N; ++k) {
                     at[static_cast<size_t>(k)] = broadcast[k] ? tile(static_cast<size_t>(k)) : in[k] + begin;
                   }
                   for (size_t j = 0; j < prog.body.size(); ++j) {
                     const fp::Statement& st = prog.body[j];
                     const size_t v = static_cast<size_t>(prog.n_inputs) + j;
                     const int m = output_of[v];
                     T* dst = m >= 0 ? out[m] + begin : tile(v);  // an output's statement writes it in place
                     const T* a = st.a.is_constant() ? constant[2 * j] : at[static_cast<size_t>(st.a.value)];
                     const T* b = fp::arity(st.op) == 1 ? nullptr
                                  : st.b.is_constant()  ? constant[2 * j + 1]
                                                        : at[static_cast<size_t>(st.b.value)];
                     statement<T>(st.op, a, b, dst, n);
                     at[v] = dst;
                   }
                   for (int m = 0; m < M; ++m) {
                     const size_t result = static_cast<size_t>(prog.outputs[static_cast<size_t>(m)]);
                     if (at[result] != out[m] + begin) std::copy(at[result], at[result] + n, out[m] + begin);
                   }
                 }
               },
               kTile * static_cast<int64_t>(prog.body.size()));
  return STRATA_OK;
}

/// The kernel of one signature: N inputs and M outputs, all T.
template <class T, int N, int M>
struct Fused {
  static constexpr const char* name = STRATA_OP_FUSED_ELEMENTWISE;
  using operands = plugin::Signature<plugin::RepeatedTypes<T, N>, plugin::RepeatedTypes<T, M>>;
  static constexpr uint32_t flags = kStrided;

  static strata_status run(const KernelCall& call) { return run_fused<T>(call, name, N, M); }
};

template <class T, int N, int M>
void add_fused(plugin::KernelTable& table) {
  using F = Fused<T, N, M>;
  table.add(F::name, F::operands::text(), &entry<F, typename F::operands>, F::flags, nullptr, STRATA_OP_VERSION);
}

/// Every signature: 1 to kMaxInputs inputs, 1 to kMaxOutputs outputs.
template <class T, int N>
void add_fused_outputs(plugin::KernelTable& table) {
  [&]<int... M>(std::integer_sequence<int, M...>) {
    (add_fused<T, N, M + 1>(table), ...);
  }
  (std::make_integer_sequence<int, fp::kMaxOutputs>{});
}
template <class T>
void add_fused(plugin::KernelTable& table) {
  [&]<int... N>(std::integer_sequence<int, N...>) { (add_fused_outputs<T, N + 1>(table), ...); }
  (std::make_integer_sequence<int, fp::kMaxInputs>{});
}

}  // namespace

void register_fused_kernels(plugin::KernelTable& table) {
  add_fused<float>(table);
  add_fused<double>(table);
}

}  // namespace strata::cpu
