// kernel.hpp — how a kernel implementation becomes a strata_kernel_fn.
//
// A kernel is written as an "Impl" struct:
//
//   struct MyKernel {
//     static constexpr const char* name = STRATA_OP_ADD;  // op name (strata_ops.h)
//     using signature = float(float, float);              // "f32,f32->f32"
//     static constexpr uint32_t flags = kStrided;         // STRATA_KERNEL_*
//     static strata_status run(const KernelCall& call);   // the work
//   };
//
// `entry<Impl>` is the function handed to the host: it checks the call
// struct's size, operand counts, descriptors and dtypes against the signature,
// resolves the thread count and turns every exception into a status, so
// nothing ever throws across the ABI. `add<Impl>(table)` registers it.
//
// Per-call cost matters (a 1-element add is dominated by it): the checks are a
// handful of compares on fields the kernel reads anyway, nothing is copied (a
// KernelCall refers to the host's descriptors in place), messages are only
// formatted on the failure paths, which live out of line in kernel_table.cpp.
#pragma once

#include "dtype.hpp"
#include "state.hpp"

#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.hpp>

#include <omp.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata::cpu {

using plugin::fail;

inline constexpr uint32_t kStrided = STRATA_KERNEL_STRIDED_INPUTS;

/// What a kernel body receives: the host's call (descriptors, attributes),
/// where to put a message, and the resolved team size. Operands are read in
/// place through the host's pointer arrays.
struct KernelCall {
  const strata_kernel_call& abi;
  strata_error* error;
  int threads;

  int n_in() const { return abi.n_inputs; }
  const strata_tensor& in(int k) const { return *abi.inputs[k]; }
  const strata_tensor& out(int k = 0) const { return *abi.outputs[k]; }
  /// The input descriptors as the pointer array the elementwise loop takes.
  const strata_tensor* const* inputs() const { return abi.inputs; }
};

/// The fields of a (non-NULL) descriptor a kernel relies on: a 2.0 size at
/// least, dtype `dtype`, a rank the strided walkers handle. No branches: the
/// checks of all operands are combined and tested once.
inline bool fields_ok(const strata_tensor* t, strata_dtype dtype) {
  return (t->struct_size >= STRATA_TENSOR_MIN_SIZE) & (t->dtype == dtype) &
         (static_cast<uint32_t>(t->rank) <= STRATA_MAX_RANK);
}

/// A descriptor a kernel may read: present and fields_ok.
inline bool operand_ok(const strata_tensor* t, strata_dtype dtype) { return t != nullptr && fields_ok(t, dtype); }

// ---- Failure paths ------------------------------------------------------------------

// A call struct below STRATA_KERNEL_CALL_MIN_SIZE, operand counts, or a
// descriptor operand_ok refuses: messages naming the op, the operand and what
// is wrong with it (the SDK's cold paths, strata_plugin.hpp).
using plugin::refuse_operands;
using plugin::refuse_small_call;

/// The status of the exception being handled (call it from a catch block
/// only): invalid_argument (an attribute of the wrong kind, from
/// plugin::attr_of_kind) becomes INVALID_ARGUMENT with its message, prefixed
/// by the op unless it already names it; everything else is mapped by
/// plugin::guarded (bad_alloc: OUT_OF_MEMORY, the rest: INTERNAL).
[[gnu::cold]] strata_status exception_status(strata_error* error, const char* op) noexcept;

/// Runs `body` with every exception turned into a status (exception_status).
/// Costs nothing when nothing throws.
template <class Body>
strata_status run_guarded(strata_error* error, const char* op, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return exception_status(error, op);
  }
}

/// Team size for a call: the state's "threads" option.
inline int kernel_threads(const strata_kernel_call& call) {
  return call.state != nullptr ? as_state(call.state)->threads : omp_get_max_threads();
}

/// Dtype signature of a kernel, as a function type Out(Ins...).
template <class Sig>
struct SignatureOf;

template <class Out, class... Ins>
struct SignatureOf<Out(Ins...)> {
  static constexpr int arity = sizeof...(Ins);
  static constexpr std::array<strata_dtype, sizeof...(Ins) + 1> dtypes = {Scalar<Ins>::dtype..., Scalar<Out>::dtype};

  /// "f32,f32->bool"
  static std::string text() {
    std::string s;
    ((s += s.empty() ? "" : ",", s += Scalar<Ins>::name()), ...);
    return s + "->" + Scalar<Out>::name();
  }

  /// Every operand of the signature's dtype and well formed, tested with one
  /// branch. The descriptor pointers themselves are not tested for NULL (a
  /// host passing NULL in an operand array faults at once, in plain sight);
  /// what is tested is what would otherwise go wrong silently.
  static bool matches(const strata_tensor* const* in, const strata_tensor* out) {
    return matches(in, out, std::index_sequence_for<Ins...>{});
  }

 private:
  template <size_t... I>
  static bool matches(const strata_tensor* const* in, const strata_tensor* out, std::index_sequence<I...>) {
    // Bitwise on purpose (no short-circuit branches), on unsigned so that
    // clang's -Wbitwise-instead-of-logical has nothing to say.
    return ((static_cast<unsigned>(fields_ok(in[I], Scalar<Ins>::dtype)) & ... &
             static_cast<unsigned>(fields_ok(out, Scalar<Out>::dtype)))) != 0u;
  }
};

template <class Impl>
strata_status entry(const strata_kernel_call* call) noexcept {
  using Sig = SignatureOf<typename Impl::signature>;
  if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) [[unlikely]] {
    return refuse_small_call(call, Impl::name);
  }
  if ((call->n_inputs != Sig::arity) | (call->n_outputs != 1) | (Sig::arity > 0 && call->inputs == nullptr) |
      (call->outputs == nullptr)) [[unlikely]] {
    return refuse_operands(*call, Impl::name, Sig::dtypes.data(), Sig::arity, Sig::dtypes.data() + Sig::arity, 1);
  }
  if (!Sig::matches(call->inputs, call->outputs[0])) [[unlikely]] {
    return refuse_operands(*call, Impl::name, Sig::dtypes.data(), Sig::arity, Sig::dtypes.data() + Sig::arity, 1);
  }
  // No lambda layers here: the body must inline into this function (a tiny
  // add is dominated by what happens around its one-element loop).
  strata_error* const error = call->error;
  try {
    return Impl::run(KernelCall{*call, error, kernel_threads(*call)});
  } catch (...) {
    return exception_status(error, Impl::name);
  }
}

template <class Impl>
void add(plugin::KernelTable& table) {
  table.add(Impl::name, SignatureOf<typename Impl::signature>::text(), &entry<Impl>, Impl::flags, nullptr,
            STRATA_OP_VERSION);
}

/// The attribute "dim" resolved against `rank` (negative counts from the
/// end); -1 when absent or out of range. An attribute of another kind than
/// INT (or a compatible one) throws std::invalid_argument.
inline int dim_attr(const KernelCall& call, int rank) {
  constexpr int64_t kAbsent = INT64_MIN;
  const int64_t raw = plugin::attr_int(call.abi, "dim", kAbsent);
  if (raw == kAbsent) return -1;
  const int64_t dim = raw < 0 ? raw + rank : raw;
  return dim >= 0 && dim < rank ? static_cast<int>(dim) : -1;
}

// One registration function per source file; kernel_table.cpp calls them all.
void register_data_kernels(plugin::KernelTable& table);
void register_unary_kernels(plugin::KernelTable& table);
void register_binary_kernels(plugin::KernelTable& table);
void register_reduce_kernels(plugin::KernelTable& table);
void register_matmul_kernels(plugin::KernelTable& table);
void register_index_kernels(plugin::KernelTable& table);
void register_nn_kernels(plugin::KernelTable& table);
void register_amp_kernels(plugin::KernelTable& table);
void register_optim_kernels(plugin::KernelTable& table);
void register_random_kernels(plugin::KernelTable& table);
/// c64 and c128 arithmetic, parts, reductions and matmul (complex.cpp; their
/// copy, fill and casts are in data.cpp with the other dtypes').
void register_complex_kernels(plugin::KernelTable& table);

/// The device's table, built once on first use and kept until the process
/// exits.
const plugin::KernelTable& kernel_table();

}  // namespace strata::cpu
