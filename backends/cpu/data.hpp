// data.hpp — data movement shared by several kernels (defined in data.cpp).
#pragma once

#include <strata/plugin/strata_plugin.h>

namespace strata::cpu {

/// dst[p] = src[p] for two descriptors of one dtype and shape, any strides.
void copy_tensor(const strata_tensor& dst, const strata_tensor& src, int threads);

/// A compact row-major descriptor over host memory `ptr`.
strata_tensor compact_tensor(void* ptr, strata_dtype dtype, int rank, const int64_t* shape);

}  // namespace strata::cpu
