// kernel_table.cpp — the device's kernel table, assembled from every kernel
// source file's registration function, and the out-of-line failure paths of
// entry<Impl> (kernel.hpp).
#include "kernel.hpp"

#include <cstdio>
#include <cstring>

namespace strata::cpu {

const plugin::KernelTable& kernel_table() {
  // Built once (thread-safe static initialisation) and leaked on purpose: the
  // ABI promises the array stays valid until the process exits, which static
  // destruction of this library would break.
  static const plugin::KernelTable* const table = [] {
    auto* t = new plugin::KernelTable;
    register_data_kernels(*t);
    register_unary_kernels(*t);
    register_binary_kernels(*t);
    register_reduce_kernels(*t);
    register_matmul_kernels(*t);
    register_index_kernels(*t);
    register_nn_kernels(*t);
    register_amp_kernels(*t);
    register_optim_kernels(*t);
    register_random_kernels(*t);
    register_complex_kernels(*t);
    return t;
  }();
  return *table;
}

strata_status refuse_small_call(const strata_kernel_call* call, const char* op) noexcept {
  if (call == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;  // nowhere to write a message
  // `error` is the struct's last required field, so a struct this small does
  // not officially carry it; a host that got struct_size wrong still almost
  // always passed a whole struct, and the message is worth the attempt.
  return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: kernel call struct_size %zu is below the ABI %d.%d minimum of %zu bytes", op, call->struct_size,
              STRATA_ABI_MAJOR, STRATA_ABI_MINOR, static_cast<size_t>(STRATA_KERNEL_CALL_MIN_SIZE));
}

namespace {

/// What is wrong with one descriptor, into `out` ("" when nothing).
void describe_problem(const strata_tensor* t, strata_dtype wanted, char* out, size_t size) {
  if (t == nullptr) {
    std::snprintf(out, size, "is NULL");
  } else if (t->struct_size < STRATA_TENSOR_MIN_SIZE) {
    std::snprintf(out, size, "has descriptor struct_size %zu, below the minimum %zu", t->struct_size,
                  static_cast<size_t>(STRATA_TENSOR_MIN_SIZE));
  } else if (static_cast<uint32_t>(t->rank) > STRATA_MAX_RANK) {
    std::snprintf(out, size, "has rank %d, outside [0, %d]", t->rank, STRATA_MAX_RANK);
  } else if (t->dtype != wanted) {
    std::snprintf(out, size, "is %s, the kernel takes %s", plugin::dtype_name(t->dtype), plugin::dtype_name(wanted));
  } else {
    out[0] = '\0';
  }
}

}  // namespace

strata_status refuse_operands(const strata_kernel_call& call, const char* op, const strata_dtype* in_dtypes, int n_in,
                              const strata_dtype* out_dtypes, int n_out) noexcept {
  char sig[160] = "";
  size_t used = 0;
  const auto append = [&](const char* s) {
    if (used < sizeof(sig)) used += static_cast<size_t>(std::snprintf(sig + used, sizeof(sig) - used, "%s", s));
  };
  for (int k = 0; k < n_in; ++k) {
    if (k > 0) append(",");
    append(plugin::dtype_name(in_dtypes[k]));
  }
  append("->");
  for (int k = 0; k < n_out; ++k) {
    if (k > 0) append(",");
    append(plugin::dtype_name(out_dtypes[k]));
  }
  strata_error* error = call.error;
  if (call.n_inputs != n_in || call.n_outputs != n_out) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): expected %d inputs and %d outputs, got %d and %d", op,
                sig, n_in, n_out, call.n_inputs, call.n_outputs);
  }
  if ((n_in > 0 && call.inputs == nullptr) || call.outputs == nullptr) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): the %s array is NULL", op, sig,
                call.outputs == nullptr ? "outputs" : "inputs");
  }
  char problem[128];
  for (int k = 0; k < n_in + n_out; ++k) {
    const bool input = k < n_in;
    const int index = input ? k : k - n_in;
    describe_problem(input ? call.inputs[index] : call.outputs[index], input ? in_dtypes[index] : out_dtypes[index],
                     problem, sizeof(problem));
    if (problem[0] != '\0') {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d %s", op, sig, input ? "input" : "output", index,
                  problem);
    }
  }
  return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): operands do not match the kernel signature", op, sig);
}

strata_status exception_status(strata_error* error, const char* op) noexcept {
  // Rethrows the exception the caller's handler holds, inside guarded(), with
  // invalid_argument caught first.
  return plugin::guarded(error, op, [&]() -> strata_status {
    try {
      throw;
    } catch (const std::invalid_argument& e) {
      const char* what = e.what();
      if (std::strncmp(what, op, std::strlen(op)) == 0) return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s", what);
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s", op, what);
    }
  });
}

}  // namespace strata::cpu
