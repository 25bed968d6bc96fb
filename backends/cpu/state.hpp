// state.hpp — the plugin state behind strata_plugin_state.
#pragma once

#include <strata/plugin/strata_plugin.h>

namespace strata::cpu {

struct CpuState {
  const strata_host_api* host = nullptr;
  int threads = 1;                 // OpenMP team size for kernels, >= 1
  strata_device_props props = {};  // filled once at init
};

inline CpuState* as_state(strata_plugin_state state) { return reinterpret_cast<CpuState*>(state); }

}  // namespace strata::cpu
