// plugin.cpp — the Vulkan plugin's entry symbol and table (ABI 2.0): probe,
// init (options, loader, instance, devices) and shutdown, device properties,
// the kernel table and the strata.native_handles extension. The other entry
// points are in entry_memory.cpp, entry_copies.cpp and entry_streams.cpp.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <type_traits>

#include "device.hpp"
#include "entry_points.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "options.hpp"

namespace strata::vulkan {
namespace {

using plugin::fail;

// ---- Probe, init, shutdown, device properties, kernels ---------------------------

strata_status probe(strata_probe_args* args) noexcept {
  if (!plugin::large_enough(args, STRATA_PROBE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  // Touches no driver: only whether the loader library can be opened (the
  // loader reads no driver manifest before an instance is created). The
  // library stays loaded, as init opens it again.
  const std::string loader = default_loader();
  if (dlopen(loader.c_str(), RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    args->score = 0;
    fail(args->error, STRATA_OK, "cannot load the Vulkan loader \"%s\": %s", loader.c_str(),
         why != nullptr ? why : "unknown dlopen error");
    return STRATA_OK;
  }
  args->score = 100;  // init lowers it to its best device's (a software device: 10)
  return STRATA_OK;
}

strata_status init(strata_init_args* args) noexcept {
  if (!plugin::large_enough(args, STRATA_INIT_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  strata_error* error = args->error;
  State* st = nullptr;
  try {
    st = new State;
    st->host = args->host;
    if (strata_status s = parse_options(args->options_json, st->options, error); s != STRATA_OK) {
      delete st;
      return s;
    }
    if (!st->options.fail_pipeline.empty()) {
      st->log(STRATA_LOG_WARN, "test hook active: the pipeline \"" + st->options.fail_pipeline +
                                   "\" will fail to build (option \"test_fail_pipeline\")");
    }
    std::string why;
    if (!open_loader(st->options.loader, st->api, &why)) {
      delete st;
      return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", why.c_str());
    }
    if (strata_status s = create_instance(*st, error); s != STRATA_OK) {
      destroy_state(st);
      return s;
    }
    if (strata_status s = open_devices(*st, error); s != STRATA_OK) {
      destroy_state(st);
      return s;
    }
    // The probe could not see the devices; now the best one decides, so a
    // software device (lavapipe) never outranks another build on real hardware.
    int32_t best = 0;
    for (const auto& d : st->devices) best = std::max(best, d->score);
    args->score = args->score > 0 ? std::min(args->score, best) : best;
    args->device_count = static_cast<int32_t>(st->devices.size());
    args->state = reinterpret_cast<strata_plugin_state>(st);
    return STRATA_OK;
  } catch (const nlohmann::json::exception& e) {
    delete st;
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: bad options: %s", e.what());
  } catch (const std::exception& e) {
    destroy_state(st);
    return fail(error, STRATA_ERROR_INTERNAL, "vulkan: init failed: %s", e.what());
  }
}

void shutdown(strata_plugin_state state) noexcept { destroy_state(as_state(state)); }

strata_status device_props(strata_device_args* a) noexcept {
  return plugin::on_device<device_of>(a, "vulkan: device_props", [&](Device* d) -> strata_status {
    return plugin::publish_props(a, d->props);
  });
}

strata_status get_kernels(strata_device_args* a) noexcept {
  return plugin::on_device<device_of>(a, "vulkan: get_kernels", [&](Device* d) -> strata_status {
    return kernel_table(*d).publish(a);
  });
}

// ---- strata.native_handles v1 ----------------------------------------------------

/// The buffer's device address (VkDeviceAddress of its first byte, from
/// vkGetBufferDeviceAddress plus the range's offset): usable in any shader
/// through GL_EXT_buffer_reference on the same VkDevice.
strata_status buffer_pointer(strata_native_args* a) noexcept {
  return plugin::on_device<device_of>(a, "vulkan: buffer_pointer", [&](Device* d) -> strata_status {
    Buffer* b = checked(a->buffer, 0, 0, *d, "buffer_pointer", a->error);
    if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    a->handle = reinterpret_cast<void*>(static_cast<uintptr_t>(b->address()));
    a->api = "vulkan";
    return STRATA_OK;
  });
}

/// The VkQueue every stream of the device submits to.
strata_status stream_handle(strata_native_args* a) noexcept {
  return plugin::on_device<device_of>(a, "vulkan: stream_handle", [&](Device* d) -> strata_status {
    a->handle = static_cast<void*>(d->queue);
    a->api = "vulkan";
    return STRATA_OK;
  });
}

const strata_ext_native_handles kNativeHandles = {
    .base = {.struct_size = sizeof(strata_ext_native_handles),
             .name = STRATA_EXT_NATIVE_HANDLES,
             .version = STRATA_EXT_NATIVE_HANDLES_VERSION,
             .next = nullptr},
    .buffer_pointer = buffer_pointer,
    .stream_handle = stream_handle,
};

/// What decides probe and init here (ABI 2.1, section 10): which loader and
/// drivers load (the Vulkan loader's VK_* variables, Mesa's), the loader
/// path the plugin takes, and where its pipeline cache lives.
constexpr const char* kProbeEnvironment[] = {"STRATA_VULKAN_*", "VK_*", "MESA_*", "LP_*", "GALLIUM_*",
                                             "XDG_CACHE_HOME", "HOME", nullptr};

const strata_plugin_api kApi = {
    .struct_size = sizeof(strata_plugin_api),
    .abi_major = STRATA_ABI_MAJOR,
    .abi_minor = STRATA_ABI_MINOR,
    .min_host_minor = 0,
    .name = kPluginName,
    .vendor = "Strata project",
    .version = "0.2.0",
    .probe = probe,
    .init = init,
    .shutdown = shutdown,
    .device_props = device_props,
    .get_kernels = get_kernels,
    .alloc = alloc,
    .free = free_buffer,
    .copy = copy,
    .memory_info = memory_info,
    .memory_trim = memory_trim,
    .memory_stats = memory_stats,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .stream_wait_event = stream_wait_event,
    .event_synchronize = event_synchronize,
    .event_query = event_query,
    .event_elapsed = event_elapsed,
    .extensions = &kNativeHandles.base,
    .probe_environment = kProbeEnvironment,
};

}  // namespace
}  // namespace strata::vulkan

/// The plugin's one exported symbol (strata_plugin.h).
STRATA_PLUGIN_DEFINE_ENTRY(&strata::vulkan::kApi)
