// instance.cpp — the Vulkan instance, and the physical devices: enumeration, description (features, memory
// types, properties, identity) and opening the usable ones (see instance.hpp).
#include "instance.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <vector>

namespace strata::vulkan {

using plugin::fail;

namespace {

constexpr uint32_t kMinApi = VK_MAKE_API_VERSION(0, 1, 2, 0);

/// Whether the loader offers the instance layer `name`.
bool has_layer(const InstanceApi& api, const char* name) {
  if (api.vkEnumerateInstanceLayerProperties == nullptr) return false;
  uint32_t n = 0;
  if (api.vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (api.vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
  return std::any_of(layers.begin(), layers.end(),
                     [&](const VkLayerProperties& l) { return std::strcmp(l.layerName, name) == 0; });
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
  // Timestamps (event_elapsed) where the queue writes them; the period is in
  // nanoseconds per tick.
  d.timestamp_bits = st.options.no_timestamps ? 0 : families[d.queue_family].timestampValidBits;
  d.timestamp_period = p.limits.timestampPeriod;

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

}  // namespace

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

strata_status open_devices(State& st, strata_error* error) {
  uint32_t n = 0;
  VkResult r = st.api.vkEnumeratePhysicalDevices(st.instance, &n, nullptr);
  std::vector<VkPhysicalDevice> physical(n);
  if (r == VK_SUCCESS && n > 0) r = st.api.vkEnumeratePhysicalDevices(st.instance, &n, physical.data());
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: vkEnumeratePhysicalDevices failed: %s", result_name(r));
  }
  physical.resize(n);
  std::string skipped;
  for (VkPhysicalDevice pd : physical) {
    auto d = std::make_unique<Device>();
    d->state = &st;
    d->physical = pd;
    d->index = static_cast<int32_t>(st.devices.size());
    d->name = std::string(kPluginName) + ":" + std::to_string(d->index);
    std::string reason = describe_device(st, *d);
    if (reason.empty()) {
      strata_error open_error{sizeof(strata_error), {}};
      if (open_device(*d, &open_error) != STRATA_OK) {
        reason = open_error.message;
        close_device(*d);
      }
    }
    if (!reason.empty()) {
      st.log(STRATA_LOG_INFO, "skipping " + reason);
      skipped += (skipped.empty() ? "" : "; ") + reason;
      continue;
    }
    st.log(STRATA_LOG_INFO, d->id() + ": " + d->props.name + " (" + d->props.compute_capability + ", " +
                                (d->direct ? "unified memory" : "device memory + staging") + ")");
    st.devices.push_back(std::move(d));
  }
  if (st.devices.empty()) {
    const std::string reason =
        physical.empty() ? std::string("the Vulkan loader found no physical device (no driver/ICD installed?)")
                         : "no usable Vulkan device: " + skipped;
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", reason.c_str());
  }
  return STRATA_OK;
}

State::~State() {
  for (auto& d : devices) close_device(*d);
  devices.clear();
  if (instance != VK_NULL_HANDLE && api.vkDestroyInstance != nullptr) api.vkDestroyInstance(instance, nullptr);
  // The loader library stays mapped: plugins are never unloaded.
}

}  // namespace strata::vulkan
