// entry_points.hpp — the functions of the plugin table, by file:
// plugin.cpp (lifecycle, devices, kernels), memory.cpp (alloc, free, copy,
// memory_*), streams.cpp (streams and events). Every one is noexcept: nothing
// throws across the C ABI.
#pragma once

#include <strata/plugin/strata_plugin.hpp>

namespace example {

// memory.cpp
strata_status alloc(strata_alloc_args* a) noexcept;
void free(strata_alloc_args* a) noexcept;
strata_status copy(strata_copy_args* a) noexcept;
strata_status memory_info(strata_memory_args* a) noexcept;
strata_status memory_trim(strata_memory_args* a) noexcept;
strata_status memory_stats(strata_memory_args* a) noexcept;

// streams.cpp
strata_status stream_create(strata_stream_args* a) noexcept;
void stream_destroy(strata_stream_args* a) noexcept;
strata_status stream_synchronize(strata_stream_args* a) noexcept;
strata_status event_create(strata_stream_args* a) noexcept;
void event_destroy(strata_stream_args* a) noexcept;
strata_status event_record(strata_stream_args* a) noexcept;
strata_status stream_wait_event(strata_stream_args* a) noexcept;
strata_status event_synchronize(strata_stream_args* a) noexcept;
strata_status event_query(strata_stream_args* a) noexcept;
strata_status event_elapsed(strata_stream_args* a) noexcept;

// kernels (kernel_launch.cpp): the kernel table every device shares.
const strata::plugin::KernelTable& kernel_table();

}  // namespace example
