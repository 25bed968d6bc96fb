// collectives.hpp — the strata.collectives v1 extension on NCCL (CUDA build
// only; STRATA_GPU_HAS_NCCL, see gpu_runtime.hpp and hip_compat.hpp).
//
// The plugin does not link NCCL: libnccl.so.2 (then libnccl.so) is dlopen()ed
// on the first collective call, so the plugin loads and computes on a machine
// without NCCL, and every collective then returns STRATA_ERROR_UNSUPPORTED
// with a message that starts "cannot load NCCL: " and gives dlopen's reason.
// STRATA_NCCL_LIBRARY=<path or soname> names the library to open instead
// (read on every call; each distinct value is opened once and kept open).
//
// A strata_comm is a Comm* (collectives.cpp): the ncclComm_t and the device it
// was created on; every call checks that it names that device. Buffers are
// device pointers (state.hpp); the calls are enqueued on the native stream of
// args->stream and are asynchronous like kernels.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include "gpu_runtime.hpp"

namespace strata::gpu {

#if STRATA_GPU_HAS_NCCL
/// Chained after strata.native_handles in the plugin's table (plugin.cpp).
extern const strata_ext_collectives kCollectives;
#endif

}  // namespace strata::gpu
