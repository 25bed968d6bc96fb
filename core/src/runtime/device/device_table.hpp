// device_table.hpp — the open devices and the fallback settings, as the code
// below the device manager sees them: tensors, dispatch and plugin services
// call these; runtime/runtime.cpp (the device manager, the top of the runtime
// layer) defines them, loading plugins on first use.
#pragma once

#include "runtime/device/device_record.hpp"

#include <strata/config.hpp>

namespace strata::detail {

/// Fallback policy for an op on the current configuration (cheap).
FallbackPolicy fallback_policy(int op_id);
/// The CPU plugin's first device, or nullptr when it is not loaded.
DeviceRecord* cpu_device();
/// Counts one fallback of (device, op, signature); logs the first of each.
void record_fallback(const DeviceRecord& device, std::string_view op, const std::string& signature,
                     const std::string& reason);
/// Counts one call a kernel of `device` declined and the core decomposed;
/// logs the first of each (device, op, signature) with the kernel's reason.
void record_declined(const DeviceRecord& device, std::string_view op, const std::string& signature,
                     const std::string& reason);
/// True once the process is exiting and plugins were shut down.
bool shutting_down();
/// The default device's record (loads the runtime on first use).
DeviceRecord& default_device_record();
/// Every open device, in slot order.
std::vector<DeviceRecord*> all_device_records();
/// The active plugin named `name`, or nullptr.
const LoadedPlugin* find_active_plugin(std::string_view name);

}  // namespace strata::detail
