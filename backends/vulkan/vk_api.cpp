// vk_api.cpp — dlopen of the Vulkan loader and function-pointer resolution.
#include "vk_api.hpp"

#include <dlfcn.h>

namespace strata::vulkan {

bool open_loader(const std::string& path, InstanceApi& api, std::string* why) {
  // RTLD_LOCAL: the loader's symbols stay out of the global namespace.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    *why = "cannot load the Vulkan loader \"" + path + "\": " + (reason != nullptr ? reason : "unknown dlopen error");
    return false;
  }
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library, "vkGetInstanceProcAddr"));
  if (gipa == nullptr) {
    *why = "\"" + path + "\" has no vkGetInstanceProcAddr: not a Vulkan loader";
    return false;
  }
  api.library = library;
  api.vkGetInstanceProcAddr = gipa;
#define STRATA_VK_LOAD_GLOBAL(name) api.name = reinterpret_cast<PFN_##name>(gipa(nullptr, #name));
  STRATA_VK_GLOBAL_FUNCTIONS(STRATA_VK_LOAD_GLOBAL)
#undef STRATA_VK_LOAD_GLOBAL
  if (api.vkCreateInstance == nullptr) {
    *why = "the Vulkan loader \"" + path + "\" does not provide vkCreateInstance";
    return false;
  }
  return true;
}

bool load_instance_functions(VkInstance instance, InstanceApi& api, std::string* why) {
#define STRATA_VK_LOAD_INSTANCE(name)                                                          \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(instance, #name));         \
  if (api.name == nullptr) {                                                                   \
    *why = "the Vulkan loader does not provide " #name " (a Vulkan 1.2 instance is required)"; \
    return false;                                                                              \
  }
  STRATA_VK_INSTANCE_FUNCTIONS(STRATA_VK_LOAD_INSTANCE)
#undef STRATA_VK_LOAD_INSTANCE
  return true;
}

bool load_device_functions(const InstanceApi& instance_api, VkDevice device, DeviceApi& api, std::string* why) {
#define STRATA_VK_LOAD_DEVICE(name)                                                          \
  api.name = reinterpret_cast<PFN_##name>(instance_api.vkGetDeviceProcAddr(device, #name));  \
  if (api.name == nullptr) {                                                                 \
    *why = "the Vulkan driver does not provide " #name " (a Vulkan 1.2 device is required)"; \
    return false;                                                                            \
  }
  STRATA_VK_DEVICE_FUNCTIONS(STRATA_VK_LOAD_DEVICE)
#undef STRATA_VK_LOAD_DEVICE
  return true;
}

const char* result_name(VkResult result) {
  switch (result) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV:
      return "VK_ERROR_INVALID_SHADER_NV";
    case VK_ERROR_UNKNOWN:
      return "VK_ERROR_UNKNOWN";
    case VK_ERROR_FRAGMENTATION:
      return "VK_ERROR_FRAGMENTATION";
    case VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS:
      return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
    case VK_PIPELINE_COMPILE_REQUIRED:
      return "VK_PIPELINE_COMPILE_REQUIRED";
    default:
      return "VkResult error";
  }
}

}  // namespace strata::vulkan
