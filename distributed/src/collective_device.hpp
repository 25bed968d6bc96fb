// collective_device.hpp — where a collective of a device's tensors runs,
// shared by DDP (ddp.cpp) and ShardedOptimizer (zero.cpp).
#pragma once

#include <strata/device.hpp>

namespace strata::nn::detail {

/// Where the process group reduces or broadcasts a buffer of `device`: on
/// the device itself when that is cpu:0 or its plugin brings
/// strata.collectives (no copy through the host), else on cpu:0 over Gloo.
Device collective_device(const Device& device);

}  // namespace strata::nn::detail
