// kernel_table.cpp — the device's kernel table, assembled from every kernel
// source file's registration function, and the exception path of
// entry<Impl> (kernel.hpp).
#include "kernel.hpp"

#include <cstring>

namespace strata::cpu {

const plugin::KernelTable& kernel_table() {
  return plugin::static_kernel_table<register_data_kernels, register_unary_kernels, register_binary_kernels,
                                     register_reduce_kernels, register_matmul_kernels, register_index_kernels,
                                     register_nn_kernels, register_amp_kernels, register_optim_kernels,
                                     register_random_kernels, register_complex_kernels, register_fused_kernels>();
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
