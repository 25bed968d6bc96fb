// kernel_common.cu — the kernel table and the out-of-line parts of
// kernel_common.cuh: launch errors, workspace requests, refused calls.
#include <cstdio>

#include "kernel_common.cuh"
#include "kernels.hpp"

namespace strata::gpu {

const plugin::KernelTable& kernel_table() {
  // Leaked on purpose: static destruction would break the ABI's promise.
  static const plugin::KernelTable* const table = [] {
    auto* t = new plugin::KernelTable;
    register_data_kernels(*t);
    register_unary_kernels(*t);
    register_binary_kernels(*t);
    register_activation_kernels(*t);
    register_reduce_kernels(*t);
    register_softmax_kernels(*t);
    register_index_kernels(*t);
    register_matmul_kernels(*t);
    register_random_kernels(*t);
    return t;
  }();
  return *table;
}

strata_status launch_result(const Launch& l, const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return STRATA_OK;
  const std::string what = std::string(l.call.op != nullptr ? l.call.op : "?") + ": kernel " + kernel + " launch";
  return runtime_failure(e, &l.device, what.c_str(), l.error);
}

strata_status workspace(const Launch& l, size_t bytes, void** out) {
  const strata_kernel_call& c = l.call;
  if (c.workspace == nullptr) {
    return fail(l.error, STRATA_ERROR_UNSUPPORTED, "%s on %s: needs %zu bytes of workspace and the host offers none",
                c.op, l.device.id.c_str(), bytes);
  }
  strata_workspace_args w{};
  w.struct_size = sizeof(w);
  w.call = &c;
  w.bytes = bytes;
  w.error = l.error;
  if (strata_status s = c.workspace(&w); s != STRATA_OK) return s;
  *out = reinterpret_cast<void*>(w.buffer);
  return STRATA_OK;
}

strata_status refuse_call(const strata_kernel_call* call, const char* op, const strata_dtype* in, int n_in,
                          const strata_dtype* out, int n_out) noexcept {
  if (call == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) {
    return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s: kernel call struct_size %zu is below the ABI %d.%d minimum of %zu bytes", op, call->struct_size,
                STRATA_ABI_MAJOR, STRATA_ABI_MINOR, static_cast<size_t>(STRATA_KERNEL_CALL_MIN_SIZE));
  }
  char sig[160] = "";
  size_t used = 0;
  for (int k = 0; k < n_in + n_out && used < sizeof(sig); ++k) {
    const char* sep = k == n_in ? "->" : (k == 0 ? "" : ",");
    used += static_cast<size_t>(std::snprintf(sig + used, sizeof(sig) - used, "%s%s", sep,
                                              plugin::dtype_name(k < n_in ? in[k] : out[k - n_in])));
  }
  if (call->n_inputs != n_in || call->n_outputs != n_out) {
    return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): expected %d inputs and %d outputs, got %d and %d",
                op, sig, n_in, n_out, call->n_inputs, call->n_outputs);
  }
  for (int k = 0; k < n_in + n_out; ++k) {
    const bool input = k < n_in;
    const int index = input ? k : k - n_in;
    const strata_tensor* const* list = input ? call->inputs : call->outputs;
    const strata_tensor* t = list != nullptr ? list[index] : nullptr;
    const strata_dtype want = input ? in[index] : out[index];
    const char* role = input ? "input" : "output";
    if (t == nullptr) return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d is NULL", op, sig, role, index);
    if (t->struct_size < STRATA_TENSOR_MIN_SIZE) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d has descriptor struct_size %zu", op, sig,
                  role, index, t->struct_size);
    }
    if (static_cast<uint32_t>(t->rank) > STRATA_MAX_RANK) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d has rank %d, outside [0, %d]", op, sig,
                  role, index, t->rank, STRATA_MAX_RANK);
    }
    if (t->dtype != want) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d is %s", op, sig, role, index,
                  plugin::dtype_name(t->dtype));
    }
  }
  return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): operands do not match the kernel", op, sig);
}

}  // namespace strata::gpu
