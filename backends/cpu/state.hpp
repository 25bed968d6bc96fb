// state.hpp — the plugin state behind strata_plugin_state: the backend class
// make_api<CpuState>() turns into the plugin table (strata/plugin/backend.hpp;
// members defined in plugin.cpp).
#pragma once

#include <strata/plugin/backend.hpp>

#include <cstdint>
#include <memory>

namespace strata::cpu {

struct CpuState {
  static constexpr const char* kName = "cpu";
  static constexpr const char* kVendor = "Strata project";
  static constexpr const char* kVersion = "0.1.0";
  static const char* const kProbeEnvironment[];
  static const strata_extension* extensions();

  /// The one device, cpu:0 (its properties are the state's).
  struct Device {};

  const strata_host_api* host = nullptr;
  int threads = 1;                 // OpenMP team size for kernels, >= 1
  strata_device_props properties = {};  // filled once at init
  Device cpu0;

  CpuState() = default;
  CpuState(const CpuState&) = delete;
  CpuState& operator=(const CpuState&) = delete;
  ~CpuState();

  STRATA_BACKEND_MEMBERS(CpuState, Device);
  int32_t device_count() const { return 1; }
  Device& device(int32_t) { return cpu0; }
  const strata_device_props& props(Device&) const { return properties; }
  STRATA_BACKEND_MEMORY_MEMBERS(Device);
  strata_status buffer_pointer(Device&, strata_native_args& a);
  strata_status stream_handle(Device&, strata_native_args& a);
  strata_status create_view(Device&, strata_view_args& a);
  strata_status destroy_view(Device&, strata_view_args& a);
};

inline CpuState* as_state(strata_plugin_state state) { return reinterpret_cast<CpuState*>(state); }

}  // namespace strata::cpu
