// kernel.hpp — a kernel's dtype signature as C++ types, and everything that
// derives from it: the signature text the kernel table carries
// ("f32,f32->f32"), the check of a call's operands against it, the refusal
// naming the operand at fault, and the registration. Header only, over the
// unchanged C ABI (strata_plugin.h, section 5): a plugin may write its kernel
// entries by hand instead; nothing in the ABI depends on this file.
//
//   strata_status add_f32(const strata_kernel_call& c);   // operands checked before it runs
//
//   using Binary = strata::plugin::SignatureOf<float(float, float)>;
//   strata::plugin::add_kernel<Binary, add_f32>(table, STRATA_OP_ADD);
//
// Signatures are written over *storage* types: float, double, int32_t,
// int64_t, bool (one byte), std::complex<float> and std::complex<double> are
// known; a backend names its own 16-bit float or one-byte bool types:
//
//   STRATA_PLUGIN_DTYPE(my_half, STRATA_F16);
//
// A kernel with several outputs uses Signature<TypeList<Ins...>,
// TypeList<Outs...>>. A kernel family registered for many signatures at run
// time (one function, the signature in its user_data) checks with
// operands_match() and refuses with refuse_call().
//
// What the check covers: the call struct's size, the operand counts and
// arrays, and per descriptor its size, dtype and rank. It does not look at
// buffers, shapes or strides (only the plugin knows its memory) nor at
// attributes (plugin::attr_of_kind checks a kind where a kernel reads one).
// The typed check folds every operand into one branch; messages are
// formatted on the failure path only.
#pragma once

#include <strata/plugin/strata_plugin.hpp>

#include <array>
#include <complex>
#include <cstdint>
#include <string>
#include <utility>

namespace strata::plugin {

/// The dtype of a storage type. Name a backend's own types with
/// STRATA_PLUGIN_DTYPE (at namespace scope, outside any namespace).
template <class T>
struct DTypeOf;

}  // namespace strata::plugin

/// Declares that storage type T holds dtype D (a strata_dtype) in kernel
/// signatures: STRATA_PLUGIN_DTYPE(my_half, STRATA_F16);
#define STRATA_PLUGIN_DTYPE(T, D)                \
  template <>                                    \
  struct strata::plugin::DTypeOf<T> {            \
    static constexpr strata_dtype value = (D);   \
  }

STRATA_PLUGIN_DTYPE(float, STRATA_F32);
STRATA_PLUGIN_DTYPE(double, STRATA_F64);
STRATA_PLUGIN_DTYPE(int32_t, STRATA_I32);
STRATA_PLUGIN_DTYPE(int64_t, STRATA_I64);
STRATA_PLUGIN_DTYPE(bool, STRATA_BOOL);
STRATA_PLUGIN_DTYPE(std::complex<float>, STRATA_C64);
STRATA_PLUGIN_DTYPE(std::complex<double>, STRATA_C128);

namespace strata::plugin {

template <class T>
inline constexpr strata_dtype dtype_v = DTypeOf<T>::value;

/// The fields of a descriptor a kernel relies on: the 2.0 size at least,
/// dtype `dtype`, a rank in [0, STRATA_MAX_RANK]. No branches (the typed
/// check combines all operands and tests once).
inline bool descriptor_ok(const strata_tensor* t, strata_dtype dtype) {
  return (static_cast<unsigned>(t->struct_size >= STRATA_TENSOR_MIN_SIZE) &
          static_cast<unsigned>(t->dtype == dtype) & static_cast<unsigned>(static_cast<uint32_t>(t->rank) <= STRATA_MAX_RANK)) !=
         0u;
}

/// A descriptor a kernel may read: present and descriptor_ok.
inline bool operand_ok(const strata_tensor* t, strata_dtype dtype) { return t != nullptr && descriptor_ok(t, dtype); }

/// Run-time form: whether `call` (a struct of the 2.0 size at least) has
/// n_in inputs and n_out outputs, present and descriptor_ok for the listed
/// dtypes.
inline bool operands_match(const strata_kernel_call& call, const strata_dtype* in, int n_in, const strata_dtype* out,
                           int n_out) noexcept {
  if (call.n_inputs != n_in || call.n_outputs != n_out || (n_in > 0 && call.inputs == nullptr) ||
      call.outputs == nullptr) {
    return false;
  }
  for (int k = 0; k < n_in; ++k) {
    if (!operand_ok(call.inputs[k], in[k])) return false;
  }
  for (int k = 0; k < n_out; ++k) {
    if (!operand_ok(call.outputs[k], out[k])) return false;
  }
  return true;
}

/// The refusal of a call a check refused: a struct below the minimum
/// (refuse_small_call) or operands that do not fit (refuse_operands), both
/// naming the op and what is wrong. INVALID_ARGUMENT.
[[gnu::cold, gnu::noinline]] inline strata_status refuse_call(const strata_kernel_call* call, const char* op,
                                                             const strata_dtype* in, int n_in, const strata_dtype* out,
                                                             int n_out) noexcept {
  if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return refuse_small_call(call, op);
  return refuse_operands(*call, op, in, n_in, out, n_out);
}

/// The operands of a kernel: storage types of its inputs and outputs.
template <class Ins, class Outs>
struct Signature;

template <class... Ins, class... Outs>
struct Signature<TypeList<Ins...>, TypeList<Outs...>> {
  static constexpr int n_in = sizeof...(Ins);
  static constexpr int n_out = sizeof...(Outs);
  /// Inputs then outputs (one spare entry: never a zero-length array).
  static constexpr std::array<strata_dtype, n_in + n_out + 1> dtypes = {dtype_v<Ins>..., dtype_v<Outs>...,
                                                                        STRATA_F32};

  /// "f32,f32->bool": the signature the kernel table carries.
  static std::string text() {
    std::string s;
    ((s += s.empty() ? "" : ",", s += dtype_name(dtype_v<Ins>)), ...);
    s += "->";
    bool first = true;
    ((s += first ? "" : ",", s += dtype_name(dtype_v<Outs>), first = false), ...);
    return s;
  }

  /// Whether `call` fits: struct size, counts, arrays, every descriptor
  /// present, and its size, dtype and rank (those three folded into one
  /// test per call).
  static bool accepts(const strata_kernel_call* call) noexcept {
    if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) [[unlikely]] {
      return false;
    }
    if ((static_cast<unsigned>(call->n_inputs != n_in) | static_cast<unsigned>(call->n_outputs != n_out) |
         static_cast<unsigned>(n_in > 0 && call->inputs == nullptr) | static_cast<unsigned>(call->outputs == nullptr)) !=
        0u) [[unlikely]] {
      return false;
    }
    return fits(*call, std::index_sequence_for<Ins...>{}, std::index_sequence_for<Outs...>{});
  }

  /// The refusal of a call accepts() refused, naming op and operand.
  [[gnu::cold]] static strata_status refuse(const strata_kernel_call* call, const char* op) noexcept {
    return refuse_call(call, op, dtypes.data(), n_in, dtypes.data() + n_in, n_out);
  }

 private:
  template <size_t... I, size_t... O>
  static bool fits(const strata_kernel_call& c, std::index_sequence<I...>, std::index_sequence<O...>) {
    if (((c.inputs[I] == nullptr) || ... || false) || ((c.outputs[O] == nullptr) || ... || false)) [[unlikely]] {
      return false;
    }
    return ((static_cast<unsigned>(descriptor_ok(c.inputs[I], dtypes[I])) & ... & 1u) &
            (static_cast<unsigned>(descriptor_ok(c.outputs[O], dtypes[n_in + O])) & ... & 1u)) != 0u;
  }
};

/// One output, as a function type: SignatureOf<bool(float, float)> is
/// "f32,f32->bool".
template <class F>
struct SignatureOf;
template <class Out, class... Ins>
struct SignatureOf<Out(Ins...)> : Signature<TypeList<Ins...>, TypeList<Out>> {};

/// The op a call names, for messages ("kernel" when the host gave none).
inline const char* call_op(const strata_kernel_call* call) {
  return call != nullptr && call->struct_size >= STRATA_KERNEL_CALL_MIN_SIZE && call->op != nullptr ? call->op
                                                                                                    : "kernel";
}

/// `Body(const strata_kernel_call&)` as a strata_kernel_fn: Sig's check in
/// front, exceptions turned into statuses (guarded()) behind.
template <class Sig, auto Body>
strata_status checked_kernel(const strata_kernel_call* call) noexcept {
  if (!Sig::accepts(call)) [[unlikely]] {
    return Sig::refuse(call, call_op(call));
  }
  return guarded(call->error, call_op(call), [call] { return Body(*call); });
}

/// Registers `Body` for `op` under Sig's signature text, checked
/// (checked_kernel). `flags`: STRATA_KERNEL_* (a body that walks any
/// strides takes STRATA_KERNEL_STRIDED_INPUTS, the default).
template <class Sig, auto Body>
void add_kernel(KernelTable& table, const char* op, uint32_t flags = STRATA_KERNEL_STRIDED_INPUTS,
                void* user_data = nullptr) {
  table.add(op, Sig::text(), &checked_kernel<Sig, Body>, flags, user_data, STRATA_OP_VERSION);
}

}  // namespace strata::plugin
