// entry_points.hpp — the table's entry points defined outside plugin.cpp:
// memory and copies (memory.cpp), streams and events (streams.cpp), and the
// cuBLAS handle's lifetime (blas.cpp). Every entry point checks its argument
// struct against the ABI 2.0 minimum size and never throws.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include "state.hpp"

namespace strata::gpu {

// memory.cpp
strata_status alloc(strata_alloc_args* a) noexcept;
void free_buffer(strata_alloc_args* a) noexcept;
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

/// Records `done` (an Event*, may be NULL) on `stream` of `d`.
strata_status record_done(Device& d, cudaStream_t stream, strata_event done, strata_error* error);

// blas.cpp
void destroy_blas(Device& d);

}  // namespace strata::gpu
