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
// against the signature (the SDK's plugin::Signature: struct size, operand
// counts, descriptors and dtypes), resolves the thread count and turns every
// exception into a status, so nothing ever throws across the ABI.
// `add<Impl>(table)` registers it.
//
// Per-call cost matters (a 1-element add is dominated by it): the checks are a
// handful of compares on fields the kernel reads anyway, nothing is copied (a
// KernelCall refers to the host's descriptors in place), messages are only
// formatted on the failure paths, which live out of line in kernel_table.cpp.
#pragma once

#include "dtype.hpp"
#include "state.hpp"

#include <strata/plugin/kernel.hpp>
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

using plugin::operand_ok;

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

/// Dtype signature of a kernel, as a function type Out(Ins...) over the
/// storage types of dtype.hpp (the SDK's typed spec, strata/plugin/kernel.hpp).
template <class F>
using SignatureOf = plugin::SignatureOf<F>;

/// `Sig`: Impl's operands; by default its one-output function type.
template <class Impl, class Sig = SignatureOf<typename Impl::signature>>
strata_status entry(const strata_kernel_call* call) noexcept {
  if (!Sig::accepts(call)) [[unlikely]] {
    return Sig::refuse(call, Impl::name);
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
void register_fused_kernels(plugin::KernelTable& table);
void register_optim_kernels(plugin::KernelTable& table);
void register_random_kernels(plugin::KernelTable& table);
/// c64 and c128 arithmetic, parts, reductions and matmul (complex.cpp; their
/// copy, fill and casts are in data.cpp with the other dtypes').
void register_complex_kernels(plugin::KernelTable& table);

/// The device's table, built once on first use and kept until the process
/// exits.
const plugin::KernelTable& kernel_table();

}  // namespace strata::cpu
