// plugin.cpp — the Vulkan plugin's entry symbol, its table built by
// make_api<State>() (strata/plugin/backend.hpp), and the members behind probe,
// init (options, loader, instance, devices), the kernel table and the
// strata.native_handles extension. The other members are in entry_memory.cpp,
// entry_copies.cpp and entry_streams.cpp; shutdown is ~State (instance.cpp).
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <strata/plugin/backend.hpp>
#include <string>
#include <type_traits>

#include "device.hpp"
#include "entry_points.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "options.hpp"

namespace strata::vulkan {

using plugin::fail;

// ---- Probe, init, shutdown, device properties, kernels ---------------------------

strata_status State::probe(strata_probe_args& args) {
  // Touches no driver: only whether the loader library can be opened (the
  // loader reads no driver manifest before an instance is created). The
  // library stays loaded, as init opens it again.
  const std::string loader = default_loader();
  if (dlopen(loader.c_str(), RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    args.score = 0;
    fail(args.error, STRATA_OK, "cannot load the Vulkan loader \"%s\": %s", loader.c_str(),
         why != nullptr ? why : "unknown dlopen error");
    return STRATA_OK;
  }
  args.score = 100;  // init lowers it to its best device's (a software device: 10)
  return STRATA_OK;
}

std::unique_ptr<State> State::init(strata_init_args& args) {
  auto st = std::make_unique<State>();  // on a throw, ~State closes what was opened
  st->host = args.host;
  try {
    plugin::check(parse_options(args.options_json, st->options, args.error));
  } catch (const nlohmann::json::exception& e) {
    throw plugin::Refusal(STRATA_ERROR_INVALID_ARGUMENT, std::string("bad options: ") + e.what());
  }
  if (!st->options.fail_pipeline.empty()) {
    st->log(STRATA_LOG_WARN, "test hook active: the pipeline \"" + st->options.fail_pipeline +
                                 "\" will fail to build (option \"test_fail_pipeline\")");
  }
  std::string why;
  if (!open_loader(st->options.loader, st->api, &why)) {
    plugin::check(fail(args.error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", why.c_str()));
  }
  plugin::check(create_instance(*st, args.error));
  plugin::check(open_devices(*st, args.error));
  // The probe could not see the devices; now the best one decides, so a
  // software device (lavapipe) never outranks another build on real hardware.
  int32_t best = 0;
  for (const auto& d : st->devices) best = std::max(best, d->score);
  args.score = args.score > 0 ? std::min(args.score, best) : best;
  return st;
}

const plugin::KernelTable& State::kernels(Device& d) const { return kernel_table(d); }

// ---- strata.native_handles v1 ----------------------------------------------------

/// The buffer's device address (VkDeviceAddress of its first byte, from
/// vkGetBufferDeviceAddress plus the range's offset): usable in any shader
/// through GL_EXT_buffer_reference on the same VkDevice.
strata_status State::buffer_pointer(Device& d, strata_native_args& a) {
  Buffer* b = checked(a.buffer, 0, 0, d, "buffer_pointer", a.error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  a.handle = reinterpret_cast<void*>(static_cast<uintptr_t>(b->address()));
  a.api = "vulkan";
  return STRATA_OK;
}

/// The VkQueue every stream of the device submits to.
strata_status State::stream_handle(Device& d, strata_native_args& a) {
  a.handle = static_cast<void*>(d.queue);
  a.api = "vulkan";
  return STRATA_OK;
}

const strata_extension* State::extensions() { return plugin::native_handles<State>(); }

/// What decides probe and init here (ABI 2.1, section 10): which loader and
/// drivers load (the Vulkan loader's VK_* variables, Mesa's), the loader
/// path the plugin takes, and where its pipeline cache lives.
const char* const State::kProbeEnvironment[] = {"STRATA_VULKAN_*", "VK_*", "MESA_*", "LP_*", "GALLIUM_*",
                                               "XDG_CACHE_HOME",  "HOME", nullptr};

}  // namespace strata::vulkan

/// The plugin's one exported symbol (strata_plugin.h): the table
/// make_api<State>() builds from the class's members.
STRATA_PLUGIN_BACKEND(strata::vulkan::State)
