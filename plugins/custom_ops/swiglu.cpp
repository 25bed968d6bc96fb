// swiglu.cpp — custom_ops::swiglu, a fused SwiGLU, and its backward op,
// defined through the host services of the Strata plugin ABI 2.0
// (strata_plugin.h, "Plugin-defined ops").
//
// The ops
// -------
//   custom_ops::swiglu(a, b) -> y                 y  = silu(a)·b = a·σ(a)·b
//   custom_ops::swiglu_backward(g, a, b) -> (da, db)
//                                                 da = g·b·silu'(a)
//                                                 db = g·silu(a)
// a, b (and g) are f32 or f64 tensors of one shape and one dtype: no
// broadcasting, no type promotion. Neither op takes attributes.
//
// The math (σ = sigmoid, σ' = σ(1−σ), σ'' = σ'(1−2σ), all elementwise)
//   silu(a)   = a·σ(a)
//   silu'(a)  = σ + a·σ'                     =: h(a)
//   silu''(a) = 2σ' + a·σ'' = σ'·(2 + a(1−2σ))  =: h₂(a)
// so, with y = a·σ(a)·b,
//   ∂y/∂a = b·h(a)      ∂y/∂b = silu(a)
//   ∂²y/∂a² = b·h₂(a)   ∂²y/∂a∂b = h(a)   ∂²y/∂b² = 0
// and swiglu_backward's outputs da = g·b·h(a), db = g·silu(a) have
//   ∂da/∂g = b·h(a)    ∂da/∂a = g·b·h₂(a)   ∂da/∂b = g·h(a)
//   ∂db/∂g = silu(a)   ∂db/∂a = g·h(a)      ∂db/∂b = 0
//
// The derivative rules (host->call_op calls; SB = swiglu_backward, [0] and
// [1] its outputs da and db; a NULL seed is a zero and drops its terms)
//   swiglu VJP, seed ȳ:         (ā, b̄) = SB(ȳ, a, b)
//   swiglu JVP, tangents ȧ, ḃ:  ẏ = SB(ȧ, a, b)[0] + swiglu(a, ḃ)
//                                  = ȧ·b·h(a) + ḃ·silu(a)
//   swiglu_backward VJP, seeds ū (of da), v̄ (of db):
//       ḡ = SB(ū, a, b)[0] + swiglu(a, v̄)   = ū·b·h + v̄·silu
//       ā = ū·g·b·h₂(a) + SB(v̄, a, g)[0]    = ū·g·b·h₂ + v̄·g·h
//       b̄ = SB(ū, a, g)[0]                  = ū·g·h
//   swiglu_backward JVP, tangents ġ, ȧ, ḃ:
//       ḋa = SB(ġ, a, b)[0] + SB(g, a, ḃ)[0] + ȧ·g·b·h₂(a)
//          = ġ·b·h + g·ḃ·h + ȧ·g·b·h₂
//       ḋb = SB(ġ, a, b)[1] + SB(ȧ, a, g)[0] = ġ·silu + ȧ·g·h
// Each SB(x, a, y)[0] = x·y·h(a) is the fused kernel reused for a product of
// the form "something · something · h(a)". h₂(a) has no kernel of its own;
// it is built from core ops, without constants (call_op hands a rule no
// scalars):
//   s = sigmoid(a), r = sigmoid(neg(a)) (= 1−s), σ' = s·r,
//   h₂ = (σ' + σ') + σ'·(a·(r − s))
// Every rule is a chain of recorded op calls — these two ops (whose rules
// are the ones above) and core ops (which have their own) — so the engine
// differentiates the rules again: swiglu is differentiable to any order.
// The demo (example.cpp) checks orders 1 to 3 against silu(a)·b.
//
// The kernels run on custom_ops:0 (this plugin's host-memory device) and,
// through host->register_kernels, on the CPU plugin's devices, whose buffer
// addresses they get from the CPU plugin's strata.native_handles extension
// (common.hpp, operand_address).
#include "swiglu.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace custom_ops {
namespace {

using strata::plugin::dtype_name;
using strata::plugin::fail;

// ---- shape rules ------------------------------------------------------------------

/// "f32[2, 3]" for a metadata record.
std::string describe_meta(const strata_tensor_meta& m) {
  std::string s = dtype_name(m.dtype);
  s += "[";
  for (int32_t d = 0; d < m.rank; ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(m.shape[d]);
  }
  return s + "]";
}

bool same_meta(const strata_tensor_meta& x, const strata_tensor_meta& y) {
  if (x.dtype != y.dtype || x.rank != y.rank) return false;
  for (int32_t d = 0; d < x.rank; ++d) {
    if (x.shape[d] != y.shape[d]) return false;
  }
  return true;
}

/// The shape rule of both ops: every input of one dtype (f32 or f64) and
/// one shape; every output like them. `names` names the inputs in messages.
strata_status infer_elementwise(strata_infer_args* args, int32_t n_inputs, int32_t n_outputs,
                                std::initializer_list<const char*> names) {
  if (args == nullptr || args->struct_size < STRATA_INFER_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  const char* op = args->op != nullptr ? args->op : "custom_ops op";
  if (args->n_inputs != n_inputs || args->n_outputs != n_outputs || args->inputs == nullptr ||
      args->outputs == nullptr) {
    return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: shape rule called with %d inputs and %d outputs, expected %d and %d",
                op, static_cast<int>(args->n_inputs), static_cast<int>(args->n_outputs), static_cast<int>(n_inputs),
                static_cast<int>(n_outputs));
  }
  const char* const* name = names.begin();
  for (int32_t k = 0; k < n_inputs; ++k) {
    const strata_tensor_meta* m = args->inputs[k];
    if (m == nullptr || m->struct_size < STRATA_TENSOR_META_MIN_SIZE || m->rank < 0 || m->rank > STRATA_MAX_RANK) {
      return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: malformed metadata of input %d (%s)", op,
                  static_cast<int>(k), name[k]);
    }
  }
  const strata_tensor_meta& first = *args->inputs[0];
  if (first.dtype != STRATA_F32 && first.dtype != STRATA_F64) {
    return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s is defined for f32 and f64 tensors only, but %s is %s", op, name[0], describe_meta(first).c_str());
  }
  for (int32_t k = 1; k < n_inputs; ++k) {
    if (!same_meta(first, *args->inputs[k])) {
      std::string all;
      for (int32_t j = 0; j < n_inputs; ++j) {
        all += std::string(j > 0 ? ", " : "") + name[j] + " " + describe_meta(*args->inputs[j]);
      }
      return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s needs inputs of one shape and one dtype (no broadcasting, no promotion), got %s", op,
                  all.c_str());
    }
  }
  for (int32_t k = 0; k < n_outputs; ++k) {
    strata_tensor_meta* out = args->outputs[k];
    if (out == nullptr || out->struct_size < STRATA_TENSOR_META_MIN_SIZE) {
      return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: the host's output metadata %d is malformed", op,
                  static_cast<int>(k));
    }
    out->dtype = first.dtype;
    out->rank = first.rank;
    for (int32_t d = 0; d < first.rank; ++d) out->shape[d] = first.shape[d];
  }
  return STRATA_OK;
}

strata_status infer_swiglu(strata_infer_args* args) { return infer_elementwise(args, 2, 1, {"a", "b"}); }

strata_status infer_swiglu_backward(strata_infer_args* args) {
  return infer_elementwise(args, 3, 2, {"g", "a", "b"});
}

// ---- derivative rules ---------------------------------------------------------------

/// Thrown inside a rule when host->call_op failed; the host has already
/// written the reason (naming the call) into the rule's error.
struct CallFailed {
  strata_status status;
};

/// One run of a derivative rule: its values, and op calls through
/// host->call_op. Values are host tensors; nullptr stands for a zero.
class Rule {
 public:
  explicit Rule(strata_derivative_args* d) : d_(d) {}

  strata_value input(int32_t k) const { return d_->inputs[k]; }
  /// Seed k, or nullptr (zero) when the host passed fewer seeds.
  strata_value seed(int32_t k) const { return k < d_->n_seeds ? d_->seeds[k] : nullptr; }
  /// VJP: whether the gradient of input k is wanted (JVP: always).
  bool needed(int32_t k) const { return d_->needed == nullptr || d_->needed[k] != 0; }
  void set_result(int32_t k, strata_value v) { d_->results[k] = v; }

  /// A one-output op.
  strata_value call(const char* op, std::initializer_list<strata_value> inputs) {
    std::array<strata_value, 1> out{};
    run(op, inputs, out.data(), 1);
    return out[0];
  }
  /// A two-output op.
  std::array<strata_value, 2> call2(const char* op, std::initializer_list<strata_value> inputs) {
    std::array<strata_value, 2> out{};
    run(op, inputs, out.data(), 2);
    return out;
  }

  /// x + y, either of which may be a zero (nullptr).
  strata_value add(strata_value x, strata_value y) {
    if (x == nullptr) return y;
    if (y == nullptr) return x;
    return call(STRATA_OP_ADD, {x, y});
  }
  strata_value mul(strata_value x, strata_value y) { return call(STRATA_OP_MUL, {x, y}); }

  /// SB(x, a, y)[0] = x·y·h(a): the fused kernel as a product "x·y·silu'(a)".
  strata_value times_silu_grad(strata_value x, strata_value a, strata_value y) {
    return call2(kSwigluBackward, {x, a, y})[0];
  }

  /// h₂(a) = silu''(a) = σ'·(2 + a(1−2σ)) from core ops:
  /// s = σ(a), r = σ(−a) = 1−s, σ' = s·r, h₂ = (σ' + σ') + σ'·(a·(r − s)).
  strata_value silu_second_derivative(strata_value a) {
    strata_value s = call(STRATA_OP_SIGMOID, {a});
    strata_value r = call(STRATA_OP_SIGMOID, {call(STRATA_OP_NEG, {a})});
    strata_value ds = mul(s, r);
    strata_value a_r_minus_s = mul(a, call(STRATA_OP_SUB, {r, s}));
    return add(add(ds, ds), mul(ds, a_r_minus_s));
  }

 private:
  void run(const char* op, std::initializer_list<strata_value> inputs, strata_value* outputs, int32_t n_outputs) {
    strata_call_op_args args{};
    args.struct_size = sizeof(args);
    args.op = op;
    args.inputs = inputs.begin();
    args.n_inputs = static_cast<int32_t>(inputs.size());
    args.attrs = nullptr;
    args.n_attrs = 0;
    args.outputs = outputs;
    args.n_outputs = n_outputs;
    args.error = d_->error;
    if (strata_status st = d_->host->call_op(&args); st != STRATA_OK) throw CallFailed{st};
  }

  strata_derivative_args* d_;
};

/// Checks a derivative call of an op with `n_inputs` inputs and `n_outputs`
/// outputs, then runs `body` on it. VJP: seeds are output cotangents and
/// results input gradients; JVP the other way round.
template <class Body>
strata_status run_rule(strata_derivative_args* d, bool reverse, int32_t n_inputs, int32_t n_outputs, Body&& body) {
  if (d == nullptr || d->struct_size < STRATA_DERIVATIVE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  const char* op = d->op != nullptr ? d->op : "custom_ops op";
  const char* which = reverse ? "VJP" : "JVP";
  if (d->host == nullptr || d->host->struct_size < STRATA_HOST_API_MIN_SIZE || d->host->call_op == nullptr) {
    return fail(d->error, STRATA_ERROR_INVALID_ARGUMENT, "%s %s: the host services carry no call_op", op, which);
  }
  const int32_t n_seeds_max = reverse ? n_outputs : n_inputs;
  const int32_t n_results = reverse ? n_inputs : n_outputs;
  if (d->n_inputs != n_inputs || d->inputs == nullptr || d->results == nullptr || d->n_results != n_results ||
      d->n_seeds < 0 || d->n_seeds > n_seeds_max || (d->n_seeds > 0 && d->seeds == nullptr)) {
    return fail(d->error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s %s: called with %d inputs, %d seeds and room for %d results; expected %d inputs, at most %d "
                "seeds and %d results",
                op, which, static_cast<int>(d->n_inputs), static_cast<int>(d->n_seeds),
                static_cast<int>(d->n_results), static_cast<int>(n_inputs), static_cast<int>(n_seeds_max),
                static_cast<int>(n_results));
  }
  for (int32_t k = 0; k < n_results; ++k) d->results[k] = nullptr;
  try {
    Rule rule(d);
    body(rule);
    return STRATA_OK;
  } catch (const CallFailed& f) {
    for (int32_t k = 0; k < n_results; ++k) d->results[k] = nullptr;
    return f.status;  // the host wrote which call failed and why
  } catch (const std::bad_alloc&) {
    return fail(d->error, STRATA_ERROR_OUT_OF_MEMORY, "%s %s: out of host memory", op, which);
  } catch (const std::exception& e) {
    return fail(d->error, STRATA_ERROR_INTERNAL, "%s %s: %s", op, which, e.what());
  }
}

// swiglu: inputs a, b; output y.

/// (ā, b̄) = swiglu_backward(ȳ, a, b).
strata_status swiglu_vjp(strata_derivative_args* d) {
  return run_rule(d, true, 2, 1, [](Rule& r) {
    strata_value ybar = r.seed(0);
    if (ybar == nullptr || !(r.needed(0) || r.needed(1))) return;
    auto [abar, bbar] = r.call2(kSwigluBackward, {ybar, r.input(0), r.input(1)});
    if (r.needed(0)) r.set_result(0, abar);
    if (r.needed(1)) r.set_result(1, bbar);
  });
}

/// ẏ = swiglu_backward(ȧ, a, b)[0] + swiglu(a, ḃ) = ȧ·b·h(a) + ḃ·silu(a).
strata_status swiglu_jvp(strata_derivative_args* d) {
  return run_rule(d, false, 2, 1, [](Rule& r) {
    strata_value a = r.input(0), b = r.input(1), adot = r.seed(0), bdot = r.seed(1);
    strata_value from_a = adot != nullptr ? r.times_silu_grad(adot, a, b) : nullptr;
    strata_value from_b = bdot != nullptr ? r.call(kSwiglu, {a, bdot}) : nullptr;
    r.set_result(0, r.add(from_a, from_b));
  });
}

// swiglu_backward: inputs g, a, b; outputs da = g·b·h(a), db = g·silu(a).

/// ḡ = ū·b·h + v̄·silu,  ā = ū·g·b·h₂ + v̄·g·h,  b̄ = ū·g·h.
strata_status swiglu_backward_vjp(strata_derivative_args* d) {
  return run_rule(d, true, 3, 2, [](Rule& r) {
    strata_value g = r.input(0), a = r.input(1), b = r.input(2);
    strata_value ubar = r.seed(0), vbar = r.seed(1);
    if (r.needed(0)) {
      strata_value from_u = ubar != nullptr ? r.times_silu_grad(ubar, a, b) : nullptr;
      strata_value from_v = vbar != nullptr ? r.call(kSwiglu, {a, vbar}) : nullptr;
      r.set_result(0, r.add(from_u, from_v));
    }
    if (r.needed(1)) {
      strata_value from_u =
          ubar != nullptr ? r.mul(r.mul(r.mul(ubar, g), b), r.silu_second_derivative(a)) : nullptr;
      strata_value from_v = vbar != nullptr ? r.times_silu_grad(vbar, a, g) : nullptr;
      r.set_result(1, r.add(from_u, from_v));
    }
    if (r.needed(2) && ubar != nullptr) r.set_result(2, r.times_silu_grad(ubar, a, g));
  });
}

/// ḋa = ġ·b·h + g·ḃ·h + ȧ·g·b·h₂,  ḋb = ġ·silu + ȧ·g·h.
strata_status swiglu_backward_jvp(strata_derivative_args* d) {
  return run_rule(d, false, 3, 2, [](Rule& r) {
    strata_value g = r.input(0), a = r.input(1), b = r.input(2);
    strata_value gdot = r.seed(0), adot = r.seed(1), bdot = r.seed(2);
    std::array<strata_value, 2> from_g{nullptr, nullptr};
    if (gdot != nullptr) from_g = r.call2(kSwigluBackward, {gdot, a, b});  // (ġ·b·h, ġ·silu)
    strata_value da_from_b = bdot != nullptr ? r.times_silu_grad(g, a, bdot) : nullptr;
    strata_value da_from_a =
        adot != nullptr ? r.mul(r.mul(r.mul(adot, g), b), r.silu_second_derivative(a)) : nullptr;
    strata_value db_from_a = adot != nullptr ? r.times_silu_grad(adot, a, g) : nullptr;
    r.set_result(0, r.add(r.add(from_g[0], da_from_b), da_from_a));
    r.set_result(1, r.add(from_g[1], db_from_a));
  });
}

// ---- kernels ------------------------------------------------------------------------

enum class Kind { swiglu, swiglu_backward };

/// What each kernel entry's user_data points at.
struct KernelInfo {
  Kind kind;
  Memory memory;
  const char* op;
  int32_t n_inputs;
  int32_t n_outputs;
};

KernelInfo g_kernel_infos[] = {
    {Kind::swiglu, Memory::own, kSwiglu, 2, 1},
    {Kind::swiglu_backward, Memory::own, kSwigluBackward, 3, 2},
    {Kind::swiglu, Memory::cpu, kSwiglu, 2, 1},
    {Kind::swiglu_backward, Memory::cpu, kSwigluBackward, 3, 2},
};

KernelInfo* kernel_info(Kind kind, Memory memory) {
  for (KernelInfo& k : g_kernel_infos) {
    if (k.kind == kind && k.memory == memory) return &k;
  }
  throw std::logic_error("custom_ops: no kernel info for this kind and memory");
}

/// Numerically stable σ(a): exp of a non-positive number only.
template <class T>
T sigmoid(T a) {
  if (a >= T(0)) return T(1) / (T(1) + std::exp(-a));
  const T e = std::exp(a);
  return e / (T(1) + e);
}

/// y = a·σ(a)·b.
template <class T>
void swiglu_loop(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sigmoid(a[i]) * b[i];
}

/// da = g·b·(σ + a·σ(1−σ)), db = g·a·σ.
template <class T>
void swiglu_backward_loop(const T* g, const T* a, const T* b, T* da, T* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T s = sigmoid(a[i]);
    const T h = s * (T(1) + a[i] * (T(1) - s));
    da[i] = g[i] * b[i] * h;
    db[i] = g[i] * a[i] * s;
  }
}

/// "custom_ops:0" or "cpu:<index>", for messages.
std::string device_id(const strata_kernel_call* c, Memory memory) {
  return std::string(memory == Memory::own ? kPluginName : "cpu") + ":" + std::to_string(c->device);
}

/// Both ops' kernel, on either memory: checks the call, finds the operands'
/// addresses, computes.
strata_status run_kernel(const strata_kernel_call* c) {
  const auto* info = static_cast<const KernelInfo*>(c->user_data);
  bool ours = false;
  for (const KernelInfo& k : g_kernel_infos) ours = ours || info == &k;
  const char* op = c->op != nullptr ? c->op : "(no op)";
  if (!ours) {
    return fail(c->error, STRATA_ERROR_INTERNAL, "custom_ops: %s: the kernel's user_data %p is none of this plugin's entries",
                op, c->user_data);
  }
  if (std::strcmp(op, info->op) != 0 || c->op_version != kOpVersion) {
    return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: the kernel of %s v%u was called as %s v%u",
                info->op, static_cast<unsigned>(kOpVersion), op, static_cast<unsigned>(c->op_version));
  }
  const std::string where = std::string(op) + " on " + device_id(c, info->memory);
  if (info->memory == Memory::own && (!is_own_state(c->state) || c->device != 0)) {
    return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: not this plugin's state or device", where.c_str());
  }
  if (c->n_inputs != info->n_inputs || c->n_outputs != info->n_outputs || c->inputs == nullptr ||
      c->outputs == nullptr) {
    return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %d inputs and %d outputs, expected %d and %d",
                where.c_str(), static_cast<int>(c->n_inputs), static_cast<int>(c->n_outputs),
                static_cast<int>(info->n_inputs), static_cast<int>(info->n_outputs));
  }
  const int32_t count = info->n_inputs + info->n_outputs;
  std::array<const strata_tensor*, 5> t{};
  for (int32_t k = 0; k < count; ++k) {
    t[k] = k < info->n_inputs ? c->inputs[k] : c->outputs[k - info->n_inputs];
    if (t[k] == nullptr || t[k]->struct_size < STRATA_TENSOR_MIN_SIZE || t[k]->rank < 0 ||
        t[k]->rank > STRATA_MAX_RANK || t[k]->offset < 0) {
      return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: malformed descriptor of operand %d", where.c_str(),
                  static_cast<int>(k));
    }
  }
  // The shape rule made every operand one dtype and shape; check it held.
  const strata_tensor& y0 = *t[info->n_inputs];
  for (int32_t k = 0; k < count; ++k) {
    bool same = t[k]->dtype == y0.dtype && t[k]->rank == y0.rank;
    for (int32_t d = 0; same && d < y0.rank; ++d) same = t[k]->shape[d] == y0.shape[d];
    if (!same) {
      return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: operand %d is %s, output 0 is %s", where.c_str(),
                  static_cast<int>(k), strata::plugin::describe(*t[k]).c_str(),
                  strata::plugin::describe(y0).c_str());
    }
  }
  if (y0.dtype != STRATA_F32 && y0.dtype != STRATA_F64) {
    return fail(c->error, STRATA_ERROR_UNSUPPORTED, "%s: dtype %s (kernels exist for f32 and f64)", where.c_str(),
                dtype_name(y0.dtype));
  }
  // Registered without STRATA_KERNEL_STRIDED_INPUTS: the host hands compact
  // row-major inputs and allocates compact outputs.
  std::array<unsigned char*, 5> base{};
  for (int32_t k = 0; k < count; ++k) {
    if (!strata::plugin::is_contiguous(*t[k])) {
      return fail(c->error, STRATA_ERROR_UNSUPPORTED, "%s: operand %d is not compact row-major (this kernel takes "
                  "compact operands only)", where.c_str(), static_cast<int>(k));
    }
    const std::string role = k < info->n_inputs ? "input " + std::to_string(k) : "output " + std::to_string(k - info->n_inputs);
    if (strata_status st = operand_address(c, *t[k], info->memory, role.c_str(), &base[k]); st != STRATA_OK) return st;
    base[k] += static_cast<size_t>(t[k]->offset) * strata::plugin::dtype_size(t[k]->dtype);
  }
  const int64_t n = strata::plugin::numel(y0);
  auto compute = [&]<class T>(T) {
    auto p = [&](int32_t k) { return reinterpret_cast<T*>(base[k]); };
    if (info->kind == Kind::swiglu) {
      swiglu_loop<T>(p(0), p(1), p(2), n);
    } else {
      swiglu_backward_loop<T>(p(0), p(1), p(2), p(3), p(4), n);
    }
  };
  if (y0.dtype == STRATA_F32) {
    compute(float{});
  } else {
    compute(double{});
  }
  return STRATA_OK;
}

strata_status swiglu_kernel(const strata_kernel_call* c) noexcept {
  if (c == nullptr || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  return strata::plugin::guarded(c->error, c->op != nullptr ? c->op : kPluginName, [&] { return run_kernel(c); });
}

// ---- schemas ----------------------------------------------------------------------

const strata_op_schema kSwigluSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = kSwiglu,
    .version = kOpVersion,
    .n_inputs = 2,
    .n_outputs = 1,
    .attrs = nullptr,
    .n_attrs = 0,
    .infer = infer_swiglu,
    .vjp = swiglu_vjp,
    .jvp = swiglu_jvp,
    .user_data = nullptr,
    .doc = "y = silu(a) * b = a * sigmoid(a) * b, fused SwiGLU (a, b: f32/f64 of one shape)",
    // ABI 2.3: where `strata plugin check` draws the inputs (smooth everywhere;
    // the range where silu bends).
    .domain_low = -3.0,
    .domain_high = 3.0,
    // ABI 2.5: elementwise, so its leading dims are independent and vmap
    // runs it once on all the lanes (docs/vmap.md).
    .batching = STRATA_OP_BATCH_LEADING_DIMS,
    // ABI 2.6: no batching rule of its own (the property above suffices).
    .batch = nullptr};

const strata_op_schema kSwigluBackwardSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = kSwigluBackward,
    .version = kOpVersion,
    .n_inputs = 3,
    .n_outputs = 2,
    .attrs = nullptr,
    .n_attrs = 0,
    .infer = infer_swiglu_backward,
    .vjp = swiglu_backward_vjp,
    .jvp = swiglu_backward_jvp,
    .user_data = nullptr,
    .doc = "(da, db) = (g * b * silu'(a), g * silu(a)), the gradient of custom_ops::swiglu (inputs g, a, b)",
    .domain_low = -3.0,
    .domain_high = 3.0,
    .batching = STRATA_OP_BATCH_LEADING_DIMS,
    .batch = nullptr};

}  // namespace

strata_status register_swiglu_ops(const strata_host_api* host, strata_error* error) {
  for (const strata_op_schema* schema : {&kSwigluSchema, &kSwigluBackwardSchema}) {
    if (strata_status st = host->register_op(schema, error); st != STRATA_OK) return st;  // the host wrote why
  }
  return STRATA_OK;
}

void add_swiglu_kernels(strata::plugin::KernelTable& table, Memory memory) {
  void* fwd = kernel_info(Kind::swiglu, memory);
  void* bwd = kernel_info(Kind::swiglu_backward, memory);
  table.add(kSwiglu, "f32,f32->f32", swiglu_kernel, 0, fwd, kOpVersion);
  table.add(kSwiglu, "f64,f64->f64", swiglu_kernel, 0, fwd, kOpVersion);
  table.add(kSwigluBackward, "f32,f32,f32->f32,f32", swiglu_kernel, 0, bwd, kOpVersion);
  table.add(kSwigluBackward, "f64,f64,f64->f64,f64", swiglu_kernel, 0, bwd, kOpVersion);
}

}  // namespace custom_ops
