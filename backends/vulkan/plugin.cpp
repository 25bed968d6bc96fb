// plugin.cpp — the Vulkan plugin's entry symbol and table (ABI 2.0): probe,
// init (options, loader, instance, devices), device properties, memory and
// copies, streams and events, and the strata.native_handles extension.
//
// Options (a JSON object; any other key is an error) are documented in
// README.md: loader, block_size_mb, batch_size, pipeline_cache, validation,
// software_devices, unified_copies, threads (accepted, unused).
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "device.hpp"
#include "kernels.hpp"

namespace strata::vulkan {
namespace {

using plugin::fail;

constexpr uint32_t kMinApi = VK_MAKE_API_VERSION(0, 1, 2, 0);

/// An event: the timeline value of the submission that recorded it (0: not
/// recorded yet, or recorded when nothing was pending — complete). Written by
/// event_record (serialised per stream), read by event_query/_synchronize
/// from any thread.
struct Event {
  Device* device = nullptr;
  std::atomic<uint64_t> seq{0};
};

/// The loader probe and init open: $STRATA_VULKAN_LOADER, else the soname.
std::string default_loader() {
  if (const char* env = std::getenv("STRATA_VULKAN_LOADER"); env != nullptr && *env != '\0') return env;
  return "libvulkan.so.1";
}

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/strata";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/strata";
  }
  return {};
}

strata_status parse_options(const char* json, Options& o, strata_error* error) {
  const nlohmann::json options = nlohmann::json::parse(json != nullptr ? json : "{}");
  if (!options.is_object()) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: options must be a JSON object, got %s",
                options.type_name());
  }
  o.loader = default_loader();
  o.pipeline_cache_dir = default_cache_dir();
  auto integer = [&](const std::string& key, const nlohmann::json& v, int64_t lo, int64_t hi, int64_t* out) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                  "vulkan: option \"%s\" must be an integer in [%lld, %lld], got %s", key.c_str(),
                  static_cast<long long>(lo), static_cast<long long>(hi), v.dump().c_str());
    }
    *out = v.get<int64_t>();
    return STRATA_OK;
  };
  auto boolean = [&](const std::string& key, const nlohmann::json& v, bool* out) {
    if (!v.is_boolean()) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: option \"%s\" must be true or false, got %s",
                  key.c_str(), v.dump().c_str());
    }
    *out = v.get<bool>();
    return STRATA_OK;
  };
  for (const auto& [key, value] : options.items()) {
    strata_status s = STRATA_OK;
    int64_t n = 0;
    if (key == "loader") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                    "vulkan: option \"loader\" must be a non-empty string (the Vulkan loader library), got %s",
                    value.dump().c_str());
      }
      o.loader = value.get<std::string>();
    } else if (key == "block_size_mb") {
      if ((s = integer(key, value, 1, 4096, &n)) == STRATA_OK) o.block_bytes = static_cast<uint64_t>(n) << 20;
    } else if (key == "batch_size") {
      if ((s = integer(key, value, 1, 65536, &n)) == STRATA_OK) o.batch_dispatches = static_cast<uint32_t>(n);
    } else if (key == "pipeline_cache") {
      if (value.is_boolean()) {
        if (!value.get<bool>()) o.pipeline_cache_dir.clear();
      } else if (value.is_string() && !value.get<std::string>().empty()) {
        o.pipeline_cache_dir = value.get<std::string>();
      } else {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                    "vulkan: option \"pipeline_cache\" must be true, false or a directory, got %s",
                    value.dump().c_str());
      }
    } else if (key == "validation") {
      s = boolean(key, value, &o.validation);
    } else if (key == "software_devices") {
      s = boolean(key, value, &o.allow_software);
    } else if (key == "unified_copies") {
      s = boolean(key, value, &o.unified_copies);
    } else if (key == "threads") {
      s = integer(key, value, 0, 1024, &n);  // forwarded by the core; the driver schedules its own threads
    } else if (key == "test_fail_pipeline") {
      const std::string v = value.is_string() ? value.get<std::string>() : std::string();
      const size_t slash = v.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == v.size()) {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                    "vulkan: option \"test_fail_pipeline\" must be \"<shader variant>/<kernel>\", e.g. "
                    "\"unary_f32_f32/exp\", got %s",
                    value.dump().c_str());
      }
      o.fail_pipeline = v;
    } else {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                  "vulkan: unknown option \"%s\" (known: loader, block_size_mb, batch_size, pipeline_cache, "
                  "validation, software_devices, unified_copies, threads, test_fail_pipeline)",
                  key.c_str());
    }
    if (s != STRATA_OK) return s;
  }
  return STRATA_OK;
}

bool has_layer(const InstanceApi& api, const char* name) {
  if (api.vkEnumerateInstanceLayerProperties == nullptr) return false;
  uint32_t n = 0;
  if (api.vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (api.vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
  return std::any_of(layers.begin(), layers.end(),
                     [&](const VkLayerProperties& l) { return std::strcmp(l.layerName, name) == 0; });
}

strata_status create_instance(State& st, strata_error* error) {
  uint32_t loader_version = VK_MAKE_API_VERSION(0, 1, 0, 0);
  if (st.api.vkEnumerateInstanceVersion != nullptr) st.api.vkEnumerateInstanceVersion(&loader_version);
  if (loader_version < kMinApi) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: the loader supports Vulkan %u.%u; 1.2 is required",
                VK_API_VERSION_MAJOR(loader_version), VK_API_VERSION_MINOR(loader_version));
  }
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "strata";
  app.pEngineName = "strata";
  app.apiVersion = std::min<uint32_t>(loader_version, VK_MAKE_API_VERSION(0, 1, 3, 0));
  VkInstanceCreateInfo ici{};
  ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ici.pApplicationInfo = &app;
  const char* validation = "VK_LAYER_KHRONOS_validation";
  if (st.options.validation) {
    if (has_layer(st.api, validation)) {
      ici.enabledLayerCount = 1;
      ici.ppEnabledLayerNames = &validation;
    } else {
      st.log(STRATA_LOG_WARN, "option \"validation\": VK_LAYER_KHRONOS_validation is not installed; running without");
    }
  }
  const VkResult r = st.api.vkCreateInstance(&ici, nullptr, &st.instance);
  if (r != VK_SUCCESS) {
    st.instance = VK_NULL_HANDLE;
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: vkCreateInstance failed: %s%s", result_name(r),
                r == VK_ERROR_INCOMPATIBLE_DRIVER ? " (no Vulkan driver is installed)" : "");
  }
  std::string why;
  if (!load_instance_functions(st.instance, st.api, &why))
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", why.c_str());
  return STRATA_OK;
}

/// Index of the first memory type with all of `required` (preferring ones
/// that also have `preferred` and none of `avoided`), or -1.
int find_memory_type(const VkPhysicalDeviceMemoryProperties& mp, VkMemoryPropertyFlags required,
                     VkMemoryPropertyFlags preferred, VkMemoryPropertyFlags avoided) {
  int best = -1;
  int best_rank = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    const int rank = ((f & preferred) == preferred ? 2 : 0) + ((f & avoided) == 0 ? 1 : 0);
    if (rank > best_rank) {
      best = static_cast<int>(i);
      best_rank = rank;
    }
  }
  return best;
}

/// Fills `d` from its physical device; returns an empty string, or why it is unusable.
std::string describe_device(State& st, Device& d) {
  const InstanceApi& api = st.api;
  api.vkGetPhysicalDeviceProperties(d.physical, &d.properties);
  const VkPhysicalDeviceProperties& p = d.properties;
  const std::string name = p.deviceName;
  if (p.apiVersion < kMinApi) {
    return name + ": supports Vulkan " + std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." +
           std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) + ", 1.2 is required";
  }
  if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && !st.options.allow_software) {
    return name + ": a software device, hidden by option \"software_devices\": false";
  }
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  api.vkGetPhysicalDeviceFeatures2(d.physical, &features);
  // The shaders' fixed work-group sizes (256 invocations, 256 along x, 16 x 16
  // for matmul) exceed Vulkan's guaranteed minimum of 128.
  const auto& limits = p.limits;
  if (limits.maxComputeWorkGroupInvocations < 256 || limits.maxComputeWorkGroupSize[0] < 256 ||
      limits.maxComputeWorkGroupSize[1] < 16) {
    return name + ": compute work groups are limited to " + std::to_string(limits.maxComputeWorkGroupInvocations) +
           " invocations (" + std::to_string(limits.maxComputeWorkGroupSize[0]) + " x " +
           std::to_string(limits.maxComputeWorkGroupSize[1]) + "); the kernels need 256 (256 x 16)";
  }
  if (!f12.bufferDeviceAddress) return name + ": lacks bufferDeviceAddress (required)";
  if (!f12.timelineSemaphore) return name + ": lacks timelineSemaphore (required)";
  d.has_int64 = features.features.shaderInt64 != 0;
  d.has_storage8 = f12.storageBuffer8BitAccess != 0;
  d.has_storage16 = f11.storageBuffer16BitAccess != 0;
  d.has_float16 = f12.shaderFloat16 != 0;

  uint32_t nq = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> families(nq);
  api.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &nq, families.data());
  int family = -1;
  for (uint32_t i = 0; i < nq; ++i) {
    if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0 && families[i].queueCount > 0) {
      family = static_cast<int>(i);
      break;
    }
  }
  if (family < 0) return name + ": has no compute queue";
  d.queue_family = static_cast<uint32_t>(family);

  api.vkGetPhysicalDeviceMemoryProperties(d.physical, &d.memory_properties);
  const auto& mp = d.memory_properties;
  constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const bool discrete = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  // Unified memory (CPU devices, integrated GPUs): tensors live in
  // host-visible device-local memory and copies are plain memcpy.
  const int unified =
      discrete || !st.options.unified_copies
          ? -1
          : find_memory_type(mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | kHost, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
  if (unified >= 0) {
    d.direct = true;
    d.memory_type = static_cast<uint32_t>(unified);
    d.staging_type = d.memory_type;
  } else {
    const int local = find_memory_type(mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    const int host = find_memory_type(mp, kHost, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
    if (host < 0) return name + ": has no host-visible coherent memory type";
    d.memory_type = static_cast<uint32_t>(local >= 0 ? local : host);
    d.staging_type = static_cast<uint32_t>(host);
    d.direct = local < 0;
  }

  strata_device_props& props = d.props;
  props.struct_size = sizeof(props);
  std::snprintf(props.name, sizeof(props.name), "%.127s", p.deviceName);
  switch (p.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      props.type = STRATA_DEVICE_GPU;
      d.score = 200;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      props.type = STRATA_DEVICE_IGPU;
      d.score = 100;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      props.type = STRATA_DEVICE_CPU;  // lavapipe/llvmpipe: must never beat a real device
      d.score = 10;
      break;
    default:
      props.type = STRATA_DEVICE_ACCELERATOR;
      d.score = 50;
      break;
  }
  props.memory_bytes = mp.memoryHeaps[mp.memoryTypes[d.memory_type].heapIndex].size;
  uint64_t mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I32);
  if (d.has_int64) mask |= STRATA_DTYPE_BIT(STRATA_I64);
  if (d.has_storage8) mask |= STRATA_DTYPE_BIT(STRATA_BOOL);
  props.compute_dtype_mask = mask;
  if (d.has_storage16) mask |= STRATA_DTYPE_BIT(STRATA_F16);  // stored natively, computed in f32
  if (d.has_storage16 && d.has_float16) props.compute_dtype_mask |= STRATA_DTYPE_BIT(STRATA_F16);
  props.dtype_mask = mask;
  std::snprintf(props.compute_capability, sizeof(props.compute_capability), "vulkan %u.%u",
                VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
  props.flags =
      STRATA_DEVICE_HAS_STREAMS | STRATA_DEVICE_CACHES_MEMORY | (d.direct ? STRATA_DEVICE_UNIFIED_MEMORY : 0u);

  // Identity: the UUID (Vulkan 1.1 core) and, where the driver has
  // VK_EXT_pci_bus_info, the PCI address, so that one GPU seen through two
  // plugins (CUDA and Vulkan) is recognised as one.
  uint32_t n_ext = 0;
  std::vector<VkExtensionProperties> extensions;
  if (api.vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n_ext, nullptr) == VK_SUCCESS) {
    extensions.resize(n_ext);
    if (api.vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n_ext, extensions.data()) != VK_SUCCESS) {
      n_ext = 0;
    }
    extensions.resize(n_ext);
  }
  auto has_extension = [&](const char* wanted) {
    return std::any_of(extensions.begin(), extensions.end(),
                       [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, wanted) == 0; });
  };
  d.has_memory_budget = has_extension(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  const bool has_pci = has_extension(VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
  VkPhysicalDevicePCIBusInfoPropertiesEXT pci{};
  pci.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT;
  VkPhysicalDeviceIDProperties ids{};
  ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
  ids.pNext = has_pci ? &pci : nullptr;
  VkPhysicalDeviceProperties2 p2{};
  p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  p2.pNext = &ids;
  api.vkGetPhysicalDeviceProperties2(d.physical, &p2);
  static_assert(sizeof(props.uuid) == VK_UUID_SIZE);
  std::memcpy(props.uuid, ids.deviceUUID, VK_UUID_SIZE);
  props.flags |= STRATA_DEVICE_HAS_UUID;
  if (has_pci) {
    std::snprintf(props.pci_bus_id, sizeof(props.pci_bus_id), "%04x:%02x:%02x.%x", pci.pciDomain, pci.pciBus,
                  pci.pciDevice, pci.pciFunction);
  }
  return {};
}

void destroy_state(State* st) {
  if (st == nullptr) return;
  for (auto& d : st->devices) close_device(*d);
  st->devices.clear();
  if (st->instance != VK_NULL_HANDLE && st->api.vkDestroyInstance != nullptr) {
    st->api.vkDestroyInstance(st->instance, nullptr);
  }
  delete st;  // the loader library stays mapped: plugins are never unloaded
}

// ---- The table's functions ---------------------------------------------------
//
// Every entry point checks its argument struct against the 2.0 minimum size
// and runs under plugin::guarded (nothing throws across the ABI). Locking is
// described in README.md ("Threading").

/// An enum field of a host struct as its integer: a newer host may send a
/// value this build does not know, which C++ must not load as the enum.
template <class E>
auto raw(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof(v));
  return v;
}

/// The device an argument struct names, or nullptr with its error set.
template <class Args>
Device* device_for(const Args* a) {
  return device_of(a->state, a->device, a->error);
}

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
    uint32_t n = 0;
    VkResult r = st->api.vkEnumeratePhysicalDevices(st->instance, &n, nullptr);
    std::vector<VkPhysicalDevice> physical(n);
    if (r == VK_SUCCESS && n > 0) r = st->api.vkEnumeratePhysicalDevices(st->instance, &n, physical.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
      destroy_state(st);
      return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: vkEnumeratePhysicalDevices failed: %s", result_name(r));
    }
    physical.resize(n);
    std::string skipped;
    for (VkPhysicalDevice pd : physical) {
      auto d = std::make_unique<Device>();
      d->state = st;
      d->physical = pd;
      d->index = static_cast<int32_t>(st->devices.size());
      d->name = std::string(kPluginName) + ":" + std::to_string(d->index);
      std::string reason = describe_device(*st, *d);
      if (reason.empty()) {
        strata_error open_error{sizeof(strata_error), {}};
        if (open_device(*d, &open_error) != STRATA_OK) {
          reason = open_error.message;
          close_device(*d);
        }
      }
      if (!reason.empty()) {
        st->log(STRATA_LOG_INFO, "skipping " + reason);
        skipped += (skipped.empty() ? "" : "; ") + reason;
        continue;
      }
      st->log(STRATA_LOG_INFO, d->id() + ": " + d->props.name + " (" + d->props.compute_capability + ", " +
                                   (d->direct ? "unified memory" : "device memory + staging") + ")");
      st->devices.push_back(std::move(d));
    }
    if (st->devices.empty()) {
      const std::string reason =
          physical.empty() ? std::string("the Vulkan loader found no physical device (no driver/ICD installed?)")
                           : "no usable Vulkan device: " + skipped;
      destroy_state(st);
      return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", reason.c_str());
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
  if (!plugin::large_enough(a, STRATA_DEVICE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::publish_props(a, d->props);
}

strata_status get_kernels(strata_device_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_DEVICE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: get_kernels", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    return kernel_table(*d).publish(a);
  });
}

// ---- Memory ----------------------------------------------------------------------

/// Submits what other streams of `d` have recorded (their freed buffers then
/// become available); streams busy in another thread are skipped.
bool flush_other_streams(Device& d, const Stream& mine) {
  bool flushed = false;
  std::lock_guard lock(d.streams_mutex);
  for (Stream* s : d.streams) {
    if (s == &mine) continue;
    std::unique_lock stream_lock(s->mutex(), std::try_to_lock);
    if (!stream_lock.owns_lock() || !s->has_recorded()) continue;
    strata_error ignored{sizeof(strata_error), {}};
    flushed |= s->flush(&ignored) == STRATA_OK;
  }
  return flushed;
}

strata_status alloc(strata_alloc_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_ALLOC_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: alloc", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    if (strata_status s = d->check_lost(a->error); s != STRATA_OK) return s;
    a->buffer = nullptr;
    a->host_pointer = nullptr;
    Buffer* b = nullptr;
    const auto kind = raw(a->kind);
    if (kind == STRATA_MEMORY_PINNED_HOST) {
      // Host-visible, coherent, persistently mapped staging memory.
      if (strata_status s = d->staging->allocate(a->bytes, &b, a->error); s != STRATA_OK) return s;
      a->buffer = reinterpret_cast<strata_buffer>(b);
      a->host_pointer = b->host();
      return STRATA_OK;
    }
    if (kind != STRATA_MEMORY_DEVICE) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: alloc: unknown memory kind %d", d->id().c_str(),
                  static_cast<int>(kind));
    }
    Stream& s = stream_of(*d, a->stream);
    std::lock_guard lock(s.mutex());
    b = s.take_freed(a->bytes);
    if (b == nullptr) {
      strata_status st = d->memory->allocate(a->bytes, &b, a->error);
      if (st == STRATA_ERROR_OUT_OF_MEMORY) {
        // Buffers freed while a batch was recording wait for its submission:
        // submit this stream's batch, then the other streams', and retry.
        strata_error ignored{sizeof(strata_error), {}};
        if (s.has_recorded() && s.flush(&ignored) == STRATA_OK) st = d->memory->allocate(a->bytes, &b, a->error);
        if (st == STRATA_ERROR_OUT_OF_MEMORY && flush_other_streams(*d, s))
          st = d->memory->allocate(a->bytes, &b, a->error);
      }
      if (st != STRATA_OK) return st;
    }
    d->count_alloc(b->reserved);
    a->buffer = reinterpret_cast<strata_buffer>(b);
    return STRATA_OK;
  });
}

void free_buffer(strata_alloc_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_ALLOC_ARGS_MIN_SIZE)) return;
  try {
    Device* d = device_for(a);
    auto* b = reinterpret_cast<Buffer*>(a->buffer);
    if (d == nullptr || b == nullptr || b->magic != Buffer::kMagic) return;
    if (b->pool == d->memory.get()) d->live_bytes.fetch_sub(b->reserved, std::memory_order_relaxed);
    if (d->is_lost.load()) {
      b->pool->release(b);  // nothing will run any more
      return;
    }
    Stream& s = stream_of(*d, a->stream);
    std::lock_guard lock(s.mutex());
    s.free_buffer(b);
  } catch (...) {
    // Out of host memory while queueing the free: the range is leaked.
  }
}

/// The Buffer behind a handle, checked to hold [offset, offset + bytes).
Buffer* checked(strata_buffer handle, size_t offset, size_t bytes, const Device& d, const char* what,
                strata_error* error) {
  Buffer* b = reinterpret_cast<Buffer*>(handle);
  if (b == nullptr || b->magic != Buffer::kMagic) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: not a buffer of this plugin", d.id().c_str(), what);
    return nullptr;
  }
  if (offset > b->size || bytes > b->size - offset) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s of %zu bytes at offset %zu exceeds the buffer (%llu bytes)",
         d.id().c_str(), what, bytes, offset, static_cast<unsigned long long>(b->size));
    return nullptr;
  }
  return b;
}

/// Records `done`, if any, at the stream's current end (submitting what is
/// recorded). Requires the stream's mutex.
strata_status record_done(Stream& s, strata_event done, strata_error* error) {
  if (done == nullptr) return STRATA_OK;
  uint64_t seq = 0;
  if (strata_status st = s.flush(error, &seq); st != STRATA_OK) return st;
  reinterpret_cast<Event*>(done)->seq.store(seq, std::memory_order_release);
  return STRATA_OK;
}

strata_status copy_to_device(Device& d, Stream& s, const strata_copy_args& a) {
  Buffer* b = checked(a.dst, a.dst_offset, a.bytes, d, "copy to device", a.error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (a.bytes > 0 && a.src_host == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy to device: no host source", d.id().c_str());
  }
  std::lock_guard lock(s.mutex());
  if (a.bytes == 0) return record_done(s, a.done, a.error);
  if (d.direct && s.idle() && d.poll() >= d.last_submitted.load(std::memory_order_acquire)) {
    // Nothing anywhere on the device can still touch the range: complete at once.
    std::memcpy(b->host() + a.dst_offset, a.src_host, a.bytes);
    if (a.done != nullptr) reinterpret_cast<Event*>(a.done)->seq.store(0, std::memory_order_release);
    return STRATA_OK;
  }
  // Queued behind earlier work through a staging range: the host bytes are
  // consumed on return, the write is ordered like any work on the stream.
  if (strata_status st = s.upload(a.src_host, a.bytes, *b, a.dst_offset, a.error); st != STRATA_OK) return st;
  return record_done(s, a.done, a.error);
}

strata_status copy_to_host(Device& d, Stream& s, const strata_copy_args& a) {
  Buffer* b = checked(a.src, a.src_offset, a.bytes, d, "copy to host", a.error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (a.bytes > 0 && a.dst_host == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy to host: no host destination", d.id().c_str());
  }
  {
    // Always synchronous (STRATA_COPY_ASYNC too): the bytes are on the host
    // when this returns, and it is a synchronisation point.
    std::lock_guard lock(s.mutex());
    strata_status st = STRATA_OK;
    if (d.direct || a.bytes == 0) {
      st = s.synchronize(a.error);
      if (st == STRATA_OK && a.bytes > 0) std::memcpy(a.dst_host, b->host() + a.src_offset, a.bytes);
    } else {
      Buffer* staging = nullptr;
      if (st = d.staging->allocate(a.bytes, &staging, a.error); st != STRATA_OK) return st;
      st = s.copy(b->vk_buffer(), b->offset + a.src_offset, staging->vk_buffer(), staging->offset, a.bytes, a.error);
      if (st == STRATA_OK) st = s.synchronize(a.error);
      if (st == STRATA_OK) {
        std::memcpy(a.dst_host, staging->host(), a.bytes);
        d.staging->release(staging);
      } else {
        s.retire_with_batch(staging);
      }
    }
    if (st != STRATA_OK) return st;
    if (a.done != nullptr) reinterpret_cast<Event*>(a.done)->seq.store(s.last_seq(), std::memory_order_release);
  }
  return d.report_deferred(a.error);
}

strata_status copy_on_device(Device& d, Stream& s, const strata_copy_args& a) {
  Buffer* to = checked(a.dst, a.dst_offset, a.bytes, d, "device copy (destination)", a.error);
  if (to == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* from = checked(a.src, a.src_offset, a.bytes, d, "device copy (source)", a.error);
  if (from == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::lock_guard lock(s.mutex());
  if (a.bytes == 0) return record_done(s, a.done, a.error);
  const VkDeviceSize dst = to->offset + a.dst_offset;
  const VkDeviceSize src = from->offset + a.src_offset;
  strata_status st = STRATA_OK;
  if (to->block == from->block && dst < src + a.bytes && src < dst + a.bytes) {
    // Overlapping ranges of one VkBuffer (vkCmdCopyBuffer forbids that): through a temporary.
    Buffer* tmp = nullptr;
    if (st = d.staging->allocate(a.bytes, &tmp, a.error); st != STRATA_OK) return st;
    st = s.copy(from->vk_buffer(), src, tmp->vk_buffer(), tmp->offset, a.bytes, a.error);
    if (st == STRATA_OK) st = s.copy(tmp->vk_buffer(), tmp->offset, to->vk_buffer(), dst, a.bytes, a.error);
    s.retire_with_batch(tmp);
  } else {
    st = s.copy(from->vk_buffer(), src, to->vk_buffer(), dst, a.bytes, a.error);
  }
  if (st != STRATA_OK) return st;
  return record_done(s, a.done, a.error);
}

strata_status copy(strata_copy_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_COPY_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: copy", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    if (strata_status s = d->check_lost(a->error); s != STRATA_OK) return s;
    Stream& s = stream_of(*d, a->stream);
    const auto kind = raw(a->kind);
    switch (kind) {
      case STRATA_COPY_HOST_TO_DEVICE:
        return copy_to_device(*d, s, *a);
      case STRATA_COPY_DEVICE_TO_HOST:
        return copy_to_host(*d, s, *a);
      case STRATA_COPY_DEVICE_TO_DEVICE:
        return copy_on_device(*d, s, *a);
      default:
        return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy: unknown copy kind %d", d->id().c_str(),
                    static_cast<int>(kind));
    }
  });
}

strata_status memory_info(strata_memory_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_MEMORY_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: memory_info", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    const uint32_t heap = d->memory_properties.memoryTypes[d->memory_type].heapIndex;
    const uint64_t total = d->memory_properties.memoryHeaps[heap].size;
    a->total_bytes = total;
    if (d->has_memory_budget) {
      // VK_EXT_memory_budget: the driver's estimate for this process,
      // everything else on the device included.
      VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
      budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
      VkPhysicalDeviceMemoryProperties2 mp{};
      mp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
      mp.pNext = &budget;
      d->state->api.vkGetPhysicalDeviceMemoryProperties2(d->physical, &mp);
      const uint64_t limit = std::min<uint64_t>(budget.heapBudget[heap], total);
      a->free_bytes = limit > budget.heapUsage[heap] ? limit - budget.heapUsage[heap] : 0;
      return STRATA_OK;
    }
    // The heap less what this plugin holds from it.
    uint64_t held = d->memory->stats().held;
    if (d->memory_properties.memoryTypes[d->staging_type].heapIndex == heap) held += d->staging->stats().held;
    a->free_bytes = total > held ? total - held : 0;
    return STRATA_OK;
  });
}

strata_status memory_trim(strata_memory_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_MEMORY_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: memory_trim", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    // Empty blocks go back to the driver once the work submitted before
    // now has completed (at once when it has, else at a later call).
    d->memory->trim();
    d->staging->trim();
    return STRATA_OK;
  });
}

strata_status memory_stats(strata_memory_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_MEMORY_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: memory_stats", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    const BlockAllocator::Stats st = d->memory->stats();
    a->bytes_in_use = d->live_bytes.load(std::memory_order_relaxed);
    a->peak_bytes_in_use = d->peak_bytes.load(std::memory_order_relaxed);
    a->bytes_reserved = st.held;
    a->allocations = st.allocations;
    return STRATA_OK;
  });
}

// ---- Streams and events ----------------------------------------------------------

strata_status stream_create(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: stream_create", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    auto s = std::make_unique<Stream>(*d);
    std::lock_guard lock(d->streams_mutex);
    d->streams.push_back(s.get());
    a->stream = reinterpret_cast<strata_stream>(s.release());
    return STRATA_OK;
  });
}

void stream_destroy(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return;
  Device* d = device_for(a);
  if (d == nullptr || a->stream == nullptr) return;
  auto* s = reinterpret_cast<Stream*>(a->stream);
  {
    std::lock_guard lock(d->streams_mutex);
    auto it = std::find(d->streams.begin(), d->streams.end(), s);
    if (it == d->streams.end() || s == d->default_stream.get()) return;
    d->streams.erase(it);
  }
  delete s;  // waits for its work
}

strata_status stream_synchronize(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: stream_synchronize", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Stream& s = stream_of(*d, a->stream);
    {
      std::lock_guard lock(s.mutex());
      if (strata_status st = s.synchronize(a->error); st != STRATA_OK) return st;
    }
    return d->report_deferred(a->error);
  });
}

strata_status event_create(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: event_create", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    // STRATA_EVENT_TIMING is accepted; event_elapsed is not offered.
    auto* e = new Event;
    e->device = d;
    a->event = reinterpret_cast<strata_event>(e);
    return STRATA_OK;
  });
}

void event_destroy(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return;
  delete reinterpret_cast<Event*>(a->event);
}

/// The event of an argument struct, or nullptr with INVALID_ARGUMENT set.
Event* event_of(const strata_stream_args* a, const Device& d, const char* what) {
  if (a->event == nullptr) fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: null event", d.id().c_str(), what);
  return reinterpret_cast<Event*>(a->event);
}

strata_status event_record(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: event_record", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Event* e = event_of(a, *d, "event_record");
    if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Stream& s = stream_of(*d, a->stream);
    std::lock_guard lock(s.mutex());
    // Submitting now puts the event's work ahead, in queue order, of anything
    // another stream submits after waiting on it.
    return record_done(s, a->event, a->error);
  });
}

strata_status stream_wait_event(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (event_of(a, *d, "stream_wait_event") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  // The event's submission is already on the one queue, and every batch
  // begins with a barrier on all earlier submissions: whatever the stream
  // records from now on is ordered after it without blocking the host.
  return d->check_lost(a->error);
}

strata_status event_synchronize(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: event_synchronize", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Event* e = event_of(a, *d, "event_synchronize");
    if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    if (strata_status st = d->wait(e->seq.load(std::memory_order_acquire), a->error); st != STRATA_OK) return st;
    return d->report_deferred(a->error);
  });
}

strata_status event_query(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Event* e = event_of(a, *d, "event_query");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (strata_status st = d->check_lost(a->error); st != STRATA_OK) return st;
  // Never blocks, and is no synchronisation point: deferred failures wait
  // for the next one.
  const uint64_t seq = e->seq.load(std::memory_order_acquire);
  a->complete = d->completed.load() >= seq || d->poll() >= seq ? 1 : 0;
  return STRATA_OK;
}

// ---- strata.native_handles v1 ----------------------------------------------------

/// The buffer's device address (VkDeviceAddress of its first byte, from
/// vkGetBufferDeviceAddress plus the range's offset): usable in any shader
/// through GL_EXT_buffer_reference on the same VkDevice.
strata_status buffer_pointer(strata_native_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_NATIVE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* b = checked(a->buffer, 0, 0, *d, "buffer_pointer", a->error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  a->handle = reinterpret_cast<void*>(static_cast<uintptr_t>(b->address()));
  a->api = "vulkan";
  return STRATA_OK;
}

/// The VkQueue every stream of the device submits to.
strata_status stream_handle(strata_native_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_NATIVE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  a->handle = static_cast<void*>(d->queue);
  a->api = "vulkan";
  return STRATA_OK;
}

const strata_ext_native_handles kNativeHandles = {
    .base = {.struct_size = sizeof(strata_ext_native_handles),
             .name = STRATA_EXT_NATIVE_HANDLES,
             .version = STRATA_EXT_NATIVE_HANDLES_VERSION,
             .next = nullptr},
    .buffer_pointer = buffer_pointer,
    .stream_handle = stream_handle,
};

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
    .event_elapsed = nullptr,
    .extensions = &kNativeHandles.base,
};

}  // namespace
}  // namespace strata::vulkan

/// The plugin's one exported symbol. A host with another ABI major still gets
/// the table: the core compares abi_major itself and reports the mismatch.
extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major,
                                                                             uint32_t host_abi_minor) {
  static_cast<void>(host_abi_major);
  static_cast<void>(host_abi_minor);
  return &strata::vulkan::kApi;
}

static_assert(std::is_same_v<decltype(&strata_plugin_entry), strata_plugin_entry_fn>);
