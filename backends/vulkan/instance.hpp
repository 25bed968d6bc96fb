// instance.hpp — creating the Vulkan instance and the plugin's devices, and tearing them down.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include "device.hpp"

namespace strata::vulkan {

/// Creates st.instance (Vulkan 1.2 or newer, with the validation layer when the options ask for it and it is
/// installed) and loads the instance functions.
strata_status create_instance(State& st, strata_error* error);
/// Enumerates the physical devices, describes each (skipping, with a log line, those unusable or failing to open)
/// and opens the rest into st.devices; NO_DEVICE when none is left.
strata_status open_devices(State& st, strata_error* error);

}  // namespace strata::vulkan
