// entry_points.hpp — what the State members outside plugin.cpp share:
// recording a copy's `done` event (streams.cpp) and the cuBLAS handle's
// lifetime (blas.cpp). The table itself is make_api<State>() (plugin.cpp).
#pragma once

#include <strata/plugin/strata_plugin.h>

#include "state.hpp"

namespace strata::gpu {

/// Records `done` (an Event*, may be NULL) on `stream` of `d`.
strata_status record_done(Device& d, cudaStream_t stream, strata_event done, strata_error* error);

// blas.cpp
void destroy_blas(Device& d);

}  // namespace strata::gpu
