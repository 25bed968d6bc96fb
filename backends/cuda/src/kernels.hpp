// kernels.hpp — the kernel table: every kernel file's registration function.
// One table serves every device of the plugin (all devices of one build run
// the same kernels).
#pragma once

#include <strata/plugin/strata_plugin.hpp>

namespace strata::gpu {

/// Built once, kept until the process exits (the ABI promises the array stays valid).
const plugin::KernelTable& kernel_table();

void register_data_kernels(plugin::KernelTable& t);        // data.cu
void register_unary_kernels(plugin::KernelTable& t);       // unary.cu
void register_binary_kernels(plugin::KernelTable& t);      // binary.cu
void register_activation_kernels(plugin::KernelTable& t);  // activation.cu
void register_reduce_kernels(plugin::KernelTable& t);      // reduce.cu
void register_softmax_kernels(plugin::KernelTable& t);     // softmax.cu
void register_index_kernels(plugin::KernelTable& t);       // index.cu
void register_matmul_kernels(plugin::KernelTable& t);      // matmul.cu
void register_random_kernels(plugin::KernelTable& t);      // random.cu
void register_fused_kernels(plugin::KernelTable& t);       // fused.cu

}  // namespace strata::gpu
