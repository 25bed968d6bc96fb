// kernel_table.cpp — the device's kernel table, assembled from every kernel
// source file's registration function.
#include "kernel.hpp"

namespace strata::cpu {

const std::vector<strata_kernel_entry>& kernel_table() {
  // Built once (thread-safe static initialisation) and leaked on purpose: the
  // ABI promises the array stays valid until the process exits, which static
  // destruction of this library would break.
  static const KernelTable* const table = [] {
    auto* t = new KernelTable;
    register_data_kernels(*t);
    register_unary_kernels(*t);
    register_binary_kernels(*t);
    register_reduce_kernels(*t);
    register_matmul_kernels(*t);
    register_index_kernels(*t);
    register_nn_kernels(*t);
    register_amp_kernels(*t);
    return t;
  }();
  return table->entries();
}

}  // namespace strata::cpu
