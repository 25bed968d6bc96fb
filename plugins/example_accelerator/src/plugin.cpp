// plugin.cpp — the entry point and the manifest, probe/init/shutdown with the
// plugin's JSON options, device properties and the kernel table.
//
// Demonstrates (strata_plugin.h sections 1, 3, 7): the C table built by the
// SDK from one class (strata/plugin/backend.hpp: struct-size checks, device
// lookup, exceptions to statuses, deferred errors, all once), a probe that
// touches nothing, options read with the SDK's Options (no JSON library;
// unknown keys and bad values refused by name), and a shutdown (the state's destructor) that joins every
// worker thread (plugins are never unloaded, so nothing is left to static
// destructors).
#include "kernel_launch.hpp"
#include "runtime.hpp"

#include <strata/plugin/options.hpp>

#include <string>

namespace example {
namespace {

constexpr int64_t kDefaultArenaMb = 256;
constexpr int64_t kMaxArenaMb = 65536;
constexpr int64_t kMaxDevices = 8;

}  // namespace

strata_status PluginState::probe(strata_probe_args& a) {
  // Nothing to look for: the device is simulated in host memory. A software
  // device scores 10 (the in-tree convention).
  a.score = 10;
  return STRATA_OK;
}

std::unique_ptr<PluginState> PluginState::init(strata_init_args& a) {
  // "threads" (which the host adds from the device config) is accepted and
  // unused: each stream runs on its own single worker. Any other key, or a
  // value out of range, is an error naming it.
  const strata::plugin::Options options(a.options_json, {"arena_mb", "devices", "threads"});
  const int64_t arena_mb = options.integer("arena_mb", kDefaultArenaMb, 1, kMaxArenaMb);
  const int64_t devices = options.integer("devices", 1, 1, kMaxDevices);
  auto state = std::make_unique<PluginState>();
  state->host = a.host;
  const size_t arena_bytes = static_cast<size_t>(arena_mb) << 20;
  for (int64_t d = 0; d < devices; ++d) {
    try {
      state->devices.push_back(std::make_unique<Device>(static_cast<int>(d), arena_bytes));
    } catch (const std::bad_alloc&) {
      throw strata::plugin::Refusal(STRATA_ERROR_NO_DEVICE, "could not map the " + std::to_string(arena_mb) +
                                                                " MiB arena of " + device_name(static_cast<int>(d)));
    }
  }
  std::string message = "example: " + std::to_string(devices) + " simulated device(s), " +
                        std::to_string(arena_mb) + " MiB arena each";
  strata::plugin::log(a.host, STRATA_LOG_DEBUG, kPluginName, message.c_str());
  // The SDK reports device_count() and keeps the state until shutdown
  // deletes it (~PluginState drains and joins the workers).
  return state;
}

strata_device_props PluginState::props(Device& d) const {
  strata_device_props p{};
  p.struct_size = sizeof(p);
  std::snprintf(p.name, sizeof(p.name), "Example Accelerator (simulated)");
  p.type = STRATA_DEVICE_ACCELERATOR;
  // Streams and events are real (worker threads); large host copies are
  // staged through pinned blocks and completed asynchronously by a worker.
  p.flags = STRATA_DEVICE_HAS_STREAMS | STRATA_DEVICE_STAGE_PINNED;
  p.memory_bytes = d.arena.size();
  p.dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_I32) |
                 STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL);
  p.compute_dtype_mask = p.dtype_mask;
  std::snprintf(p.compute_capability, sizeof(p.compute_capability), "simulated-1");
  // No uuid / PCI id: the device is not a piece of hardware.
  return p;  // the SDK copies no more than the host's capacity
}

const strata::plugin::KernelTable& PluginState::kernels(Device&) const { return kernel_table(); }

// Nothing in the environment decides what probe and init do (ABI 2.1,
// strata_plugin.h section 10; a plugin whose driver reads variables lists
// them here, and the host probes it again whenever one changes).
const char* const PluginState::kProbeEnvironment[] = {nullptr};

}  // namespace example

/// The plugin's one exported symbol (strata_plugin.h): the C table that
/// make_api<PluginState>() builds from the class's members.
STRATA_PLUGIN_BACKEND(example::PluginState)
