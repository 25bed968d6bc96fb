// kernel_common.cu — the kernel table and the out-of-line parts of
// kernel_common.cuh: launch errors, workspace requests, refused calls.

#include "kernel_common.cuh"
#include "kernels.hpp"

namespace strata::gpu {

const plugin::KernelTable& kernel_table() {
  return plugin::static_kernel_table<register_data_kernels, register_unary_kernels, register_binary_kernels,
                                     register_activation_kernels, register_reduce_kernels, register_softmax_kernels,
                                     register_index_kernels, register_matmul_kernels, register_random_kernels,
                                     register_fused_kernels>();
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

}  // namespace strata::gpu
